"""Every decision the gate makes, in the security event log, and the recent ones for the Policy page.

A decision is one SEL record, ``policy_decision``, with its outcome (``allow``, ``ask``,
``deny``, or how the owner answered an ``ask``: ``owner_allow``, ``owner_reject``,
``expired``), the deciding rule, the tool, a fingerprint of the input (a hash: the input
itself never reaches the log, so neither do secrets in it) and the conversation it came
from. The Policy page's "recent decisions" are read back from the log, so they survive a
restart and cannot differ from the audit trail.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

AUDIT_EVENT = "policy_decision"
#: How far back in the SEL the page looks for decisions.
SCAN_RECORDS = 5000
#: How long the writer lets decisions gather before it appends them (they are in the log this much later).
BATCH_WINDOW_SECS = 0.05
OUTCOMES = ("allow", "ask", "deny", "owner_allow", "owner_allow_always", "owner_reject", "expired", "cancelled")


def entry(outcome: str, *, rule: str, tool: str, fingerprint: str, actor: str = "system",
          **context: Any) -> tuple[str, str, str, dict[str, Any]]:
    """One decision as an :func:`kirocrew_core.audit.record_many` entry (``None`` context values left out)."""
    fields = {"rule": rule, "tool": tool, "fingerprint": fingerprint,
              **{k: v for k, v in context.items() if v is not None}}
    return AUDIT_EVENT, actor, outcome, fields


def record(outcome: str, **fields: Any) -> None:
    """Append one decision to the SEL now; a log that cannot be written is a warning, never a failed call."""
    _write([entry(outcome, **fields)])


def _write(entries: list[tuple[str, str, str, dict[str, Any]]]) -> None:
    from kirocrew_core import audit

    try:
        audit.record_many(entries)
    except Exception:
        log.warning("could not record %d policy decision(s) in the security event log", len(entries), exc_info=True)


class DecisionLog:
    """Decisions queued from the event loop and written by one thread of their own, many per sync.

    The gate answers kiro first and records after: a record costs a file lock and an fsync, far
    more than the decision, and a busy session makes many calls. The writer drains whatever is
    queued in one :func:`~kirocrew_core.audit.record_many`, so the log keeps up however fast calls
    come, and it never takes a thread the orchestrator's database calls need.
    """

    def __init__(self) -> None:
        import collections
        from concurrent.futures import ThreadPoolExecutor

        self._queue: collections.deque[tuple[str, str, str, dict[str, Any]]] = collections.deque()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-decisions")
        self._writing: Any = None
        self.window = BATCH_WINDOW_SECS

    def submit(self, outcome: str, **fields: Any) -> None:
        """Queue one decision (see :func:`entry`); a writer runs unless one is already draining the queue."""
        self._queue.append(entry(outcome, **fields))
        if self._writing is None or self._writing.done():
            self._writing = self._executor.submit(self._drain)

    def _drain(self) -> None:
        import time

        while self._queue:
            # A moment's wait gathers the decisions of a burst of calls into one append: each append costs
            # a lock, an fsync and the head anchor's atomic replace, whatever the number of records.
            time.sleep(self.window)
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), 500))]
            _write(batch)

    def flush(self) -> None:
        """Write what is queued and stop the writer (blocking: call it from a thread when stopping)."""
        self.window = 0.0
        self._executor.submit(self._drain).result()
        self._executor.shutdown(wait=True)


def recent(limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` decisions, newest first, as ``{at, outcome, rule, tool, fingerprint, …}``."""
    from kirocrew_core import audit

    found: list[dict[str, Any]] = []
    for entry in reversed(audit.tail(SCAN_RECORDS)):
        if entry.get("event") != AUDIT_EVENT:
            continue
        fields = entry.get("fields") if isinstance(entry.get("fields"), dict) else {}
        found.append({"at": entry.get("ts"), "outcome": entry.get("outcome"), "actor": entry.get("actor"),
                      **{k: v for k, v in fields.items() if isinstance(k, str)}})
        if len(found) >= limit:
            break
    return found
