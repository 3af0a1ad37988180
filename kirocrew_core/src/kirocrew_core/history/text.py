"""What the history shows: redacted titles and messages, match snippets, dates, and the tools' texts.

Every text leaves through :func:`shown` (the secrets redactor) before anything is added to it,
so a ``<<<…>>>`` marker can never straddle or reveal a redacted value: a match that only a
secret held disappears with it.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone

from kirocrew_core.errors import BadInputError

SNIPPET_RADIUS = 120
SNIPPET_MAX = 320
MARK_OPEN, MARK_CLOSE = "<<<", ">>>"
ELLIPSIS = "…"


def shown(text: str) -> str:
    """``text`` with every known secret redacted (the one redactor: :mod:`kirocrew_core.redaction`)."""
    from kirocrew_core.redaction import redact_secrets

    return redact_secrets(text)


def snippet(text: str, words: list[str]) -> str | None:
    """±:data:`SNIPPET_RADIUS` characters around the first of ``words`` in redacted ``text``, the match marked.

    Whitespace runs become one space; the whole is at most :data:`SNIPPET_MAX` characters plus the
    markers and ellipses. None when no word is left after redaction.
    """
    flat = re.sub(r"\s+", " ", shown(text)).strip()
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(w) for w in words) + r")(?!\w)", re.IGNORECASE)
    found = pattern.search(flat)
    if found is None:
        return None
    start, end = found.span()
    left = max(0, start - SNIPPET_RADIUS)
    right = min(len(flat), end + SNIPPET_RADIUS)
    if right - left > SNIPPET_MAX:  # a long match: keep it, trim the sides evenly
        spare = max(0, SNIPPET_MAX - (end - start))
        left = max(0, start - spare // 2)
        right = min(len(flat), max(end, left + SNIPPET_MAX))
    return ((ELLIPSIS if left > 0 else "") + flat[left:start] + MARK_OPEN + flat[start:end] + MARK_CLOSE
            + flat[end:right] + (ELLIPSIS if right < len(flat) else ""))


def day_bound(value: str | None, field: str) -> str:
    """A ``YYYY-MM-DD`` argument as the ISO time of that day's UTC midnight; ``""`` when not given."""
    if not value:
        return ""
    try:
        day = date.fromisoformat(value) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) else None
    except ValueError:
        day = None
    if day is None:
        raise BadInputError(f"Invalid '{field}' date — use a real calendar date (YYYY-MM-DD).", code="invalid_date")
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc).isoformat(timespec="seconds")


def short_time(stamp: str) -> str:
    """An ISO time as ``YYYY-MM-DD HH:MM`` (``unknown`` when there is none)."""
    return stamp[:16].replace("T", " ") if stamp else "unknown"


def markdown(title: str, source: str, workspace: str, created: str, updated: str,
             messages: list[tuple[str, str, str]]) -> str:
    """A session as a Markdown document (redacted): a heading, what it is, then each ``(role, at, text)``."""
    lines = [f"# {shown(title) or 'Untitled session'}", "",
             f"- Source: {source}", f"- Workspace: {shown(workspace) or 'none'}",
             f"- Created: {short_time(created)}", f"- Last active: {short_time(updated)}",
             f"- Messages: {len(messages)}", ""]
    for role, at, body in messages:
        lines += [f"## {role.capitalize()}" + (f" · {short_time(at)}" if at else ""), "", shown(body), ""]
    return "\n".join(lines)
