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
OUTCOMES = ("allow", "ask", "deny", "owner_allow", "owner_allow_always", "owner_reject", "expired", "cancelled")


def record(outcome: str, *, rule: str, tool: str, fingerprint: str, actor: str = "system",
           **context: Any) -> None:
    """Append one decision to the SEL; a log that cannot be written is a warning, never a failed call."""
    from kirocrew_core import audit

    try:
        audit.record(AUDIT_EVENT, actor=actor, outcome=outcome, rule=rule, tool=tool, fingerprint=fingerprint,
                     **{k: v for k, v in context.items() if v is not None})
    except Exception:  # the decision stands whether or not it could be logged
        log.warning("could not record a policy decision in the security event log", exc_info=True)


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
