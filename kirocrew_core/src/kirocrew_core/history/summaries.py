"""Summaries of past sessions written by a model, for ``list_sessions`` with ``summarize``.

Core runs no model: a plugin does, through ``history_summarizers()`` (kirocrew-conversations
runs kiro-cli with an agent that has no tools). Core decides what is asked and keeps what comes
back:

* a summary is cached in the index with the message count and last update it was written for,
  so an unchanged session is never summarized twice and a changed one is summarized again;
* each call asks for at most :data:`PER_CALL` sessions (the newest listed that need one), each
  with a transcript of its newest messages up to :data:`TRANSCRIPT_CHARS`, redacted first;
* the call waits at most :data:`BUDGET_SECS` for them (the reference's 120 s), then keeps what
  arrived. It is best effort: every failure becomes one :class:`Outcome` note with a stable
  wording, never an exception, and the list is shown either way.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kirocrew_core.contributions import HistorySummarizer, SummaryRequest
from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from kirocrew_core.history.index import HistoryIndex, SessionRow

log = logging.getLogger(__name__)

#: Sessions summarized in one call at most; the others get theirs on a later call.
PER_CALL = 10
#: The whole wait for the model in one call, in seconds (the reference's timeout).
BUDGET_SECS = 120.0
#: A transcript handed to the model holds the newest messages up to this many characters.
TRANSCRIPT_CHARS = 12_000
#: One message in a transcript is cut to this many characters.
MESSAGE_CHARS = 3_000
#: A summary is kept to this many characters (whitespace folded).
SUMMARY_CHARS = 500

NO_SUMMARIZER = "no installed plugin writes them (kirocrew-conversations does)"


@dataclass
class Outcome:
    """The summaries one call has (cached or new) and what it could not get, as notes to show."""

    texts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def transcript(index: HistoryIndex, row: SessionRow) -> str:
    """The session's newest messages, oldest first, redacted, within :data:`TRANSCRIPT_CHARS`."""
    from kirocrew_core.history import text

    lines: list[str] = []
    used = 0
    for message in index.messages(row.key, limit=200):
        body = text.shown(message.text.strip())
        if len(body) > MESSAGE_CHARS:
            body = body[:MESSAGE_CHARS] + " …[cut]"
        line = f"{message.role.capitalize()}: {body}"
        if lines and used + len(line) > TRANSCRIPT_CHARS:
            break
        lines.append(line[:TRANSCRIPT_CHARS])
        used += len(line)
    return "\n".join(reversed(lines))


def clean(summary: str) -> str:
    """A model's answer as one line of at most :data:`SUMMARY_CHARS` characters."""
    flat = re.sub(r"\s+", " ", summary).strip()
    return flat if len(flat) <= SUMMARY_CHARS else flat[:SUMMARY_CHARS - 1].rstrip() + "…"


def summarizer() -> HistorySummarizer | None:
    """The first plugin's summarizer in call order, or None when no plugin offers one."""
    from kirocrew_core.contributions import flatten
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    call = call_hook(get_plugin_manager(), "history_summarizers", on_error="skip")
    for contribution in flatten(call.contributions):
        if isinstance(contribution.value, HistorySummarizer):
            return contribution.value
        log.error("plugin %r returned an unusable history summarizer: %r", contribution.plugin, contribution.value)
    return None


def cached(index: HistoryIndex, rows: Sequence[SessionRow]) -> tuple[Outcome, list[SessionRow]]:
    """What the cache holds for ``rows``, and the rows (with messages) still needing a summary, newest first."""
    outcome = Outcome(texts=index.summaries([row.key for row in rows]))
    return outcome, [row for row in rows if row.key not in outcome.texts and row.messages > 0]


def requests_for(index: HistoryIndex, wanted: Sequence[SessionRow]) -> list[SummaryRequest]:
    from kirocrew_core.history import text

    return [SummaryRequest(row.key, text.shown(row.title), transcript(index, row)) for row in wanted[:PER_CALL]]


async def write(index: HistoryIndex, wanted: Sequence[SessionRow], outcome: Outcome, *,
                budget: float = BUDGET_SECS) -> None:
    """Ask the summarizer for ``wanted`` (at most :data:`PER_CALL`), cache and add what it wrote, note the rest.

    One call writes at a time in a process (the others wait, within their budget), and each looks
    at the cache again once its turn comes: two calls for the same sessions run the model once.
    """
    if not wanted:
        return
    asked = list(wanted[:PER_CALL])
    if len(wanted) > len(asked):
        outcome.notes.append(f"Summaries not written yet for {_sessions(len(wanted) - len(asked), 'more ')}: at most "
                             f"{PER_CALL} are written per call; ask again for the rest.")
    found = summarizer()
    if found is None:
        outcome.notes.append(f"Summaries not available for {_sessions(len(asked))}: {NO_SUMMARIZER}.")
        return
    got: dict[str, str] = {}
    problem = ""
    try:
        async with asyncio.timeout(budget), _one_at_a_time():
            got.update(await asyncio.to_thread(index.summaries, [row.key for row in asked]))
            await _ask(index, found, [row for row in asked if row.key not in got], got)
    except TimeoutError:
        problem = f"the model did not answer within {budget:g} s"
    except KirocrewError as exc:
        problem = f"the model could not be run ({exc.code})"
    except Exception as exc:  # best effort: a plugin's failure is a note, never the tool's
        log.exception("history summarizer %r failed", found.name)
        problem = f"the model could not be run ({type(exc).__name__})"
    outcome.texts.update(got)
    missing = len(asked) - len(got)
    if missing:
        outcome.notes.append(f"Summaries not available for {_sessions(missing)}: "
                             f"{problem or 'the model gave no answer for them'}.")


async def _ask(index: HistoryIndex, found: HistorySummarizer, rows: Sequence[SessionRow], got: dict[str, str]) -> None:
    """Run ``found`` on ``rows``, caching and adding each summary to ``got`` as it arrives."""
    if not rows:
        return
    by_key = {row.key: row for row in rows}
    stream = found.summarize(await asyncio.to_thread(requests_for, index, rows))
    try:
        async for key, answer in stream:
            summary = clean(answer) if isinstance(answer, str) else ""
            if key in by_key and summary and key not in got:
                got[key] = summary
                await asyncio.to_thread(index.store_summary, by_key[key], summary)
    finally:
        await stream.aclose()


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _one_at_a_time() -> asyncio.Lock:
    """This event loop's lock for writing summaries (the host has one loop; a test or a command its own)."""
    loop = asyncio.get_running_loop()
    lock = _turns.get(loop)
    if lock is None:
        lock = _turns[loop] = asyncio.Lock()
    return lock


def _sessions(count: int, more: str = "") -> str:
    return f"{count} {more}session" + ("" if count == 1 else "s")
