"""The conversations side of the permission gate: what a run does with kiro's permission requests.

kiro-cli runs without ``--trust-all-tools``, so it asks before every call its agent file does
not already allow. The orchestrator hands each request here: the call is rebuilt from what kiro
reported about it out of band (``_meta.kiro.toolName``/``mcpServerName`` and ``rawInput`` of
its ``tool_call`` update — never the title, which the model's arguments fill) and decided by
the owner's policy (:mod:`kirocrew_core.gate`) for the run's authority, agent and workspace:

- ``allow`` answers ``allow_once``;
- ``deny`` answers ``reject_once`` (the tool does not run, the turn goes on) and tells the
  running turn which rule refused and why (kiro's ``_session/steer``), and the conversation's
  events say so;
- ``ask`` leaves the request to the owner: the run goes ``needs_attention`` with the rule that
  asked and the redacted call, and the owner's notification feed gets a card linking to the
  conversation. The owner answers on the conversation page, with ``kirocrew conversations
  decide`` or ``kiro_permission_decide``; "allow always" adds policy rules (:func:`always`).

Every decision is one ``policy_decision`` record in the security event log (rule, tool, a
fingerprint of the input, never the input). Records are written off the answer's path, so a
decision costs kiro only the policy's own time.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from kirocrew_core import home
from kirocrew_core.gate.answer import always_possible, always_rules, decide_call, refusal_message
from kirocrew_core.gate.calls import Context, ToolCall
from kirocrew_core.gate.engine import Verdict

from kirocrew_conversations import limits
from kirocrew_conversations.redact import redact_secrets
from kirocrew_conversations.vocabulary import DEFAULT_AGENT

log = logging.getLogger(__name__)

#: A tool call's input larger than this is not kept for the decision (the call then asks).
RAW_INPUT_MAX_BYTES = 256 * 1024
SUBJECT_MAX_CHARS = 300


@dataclass(frozen=True)
class Decided:
    """The gate's verdict on one request, with what the owner sees of it."""

    verdict: Verdict
    call: ToolCall
    context: Context

    @property
    def subject(self) -> str:
        """The part of the call that decided, secrets redacted (paths kept: the owner must see which file)."""
        return redact_secrets(self.verdict.subject)[:SUBJECT_MAX_CHARS]

    @property
    def reason(self) -> str:
        return redact_secrets(self.verdict.reason)[: limits.TEXT_MAX_CHARS]

    @property
    def always(self) -> bool:
        """Whether the owner may answer "allow always" (an allow rule would change this answer)."""
        return always_possible(self.verdict)

    def rule_view(self) -> dict[str, Any]:
        rule = self.verdict.rule
        return {"id": rule.id, "tier": rule.tier, "decision": rule.decision,
                "description": redact_secrets(rule.describe())[:SUBJECT_MAX_CHARS],
                "reason": redact_secrets(rule.reason)[: limits.TEXT_MAX_CHARS]}


def tool_call(tool: str | None, server: str | None, raw_input: Any) -> ToolCall:
    """The call as kiro reported it; an input too large to keep is dropped (the decision then asks)."""
    try:
        size = len(json.dumps(raw_input, default=str))
    except (TypeError, ValueError, RecursionError):
        size = RAW_INPUT_MAX_BYTES + 1
    return ToolCall(tool or "unknown", server, raw_input if size <= RAW_INPUT_MAX_BYTES else None)


def decide(call: ToolCall, *, authority: str, agent: str | None, workspace: str) -> Decided:
    """The policy's verdict on ``call`` for a run under ``authority`` on ``agent`` in ``workspace``."""
    context = Context(authority, agent or DEFAULT_AGENT, workspace, str(home.user_home()))
    return Decided(decide_call(call, context), call, context)


def always(decided: Decided, scope: str) -> list[str]:
    """Add the owner's "allow always" rules for ``decided`` in ``scope``; their ids (blocking: file work)."""
    from kirocrew_core.gate.policy_file import add_rule

    fields = always_rules(decided.call, decided.verdict, decided.context, scope)  # type: ignore[arg-type]
    return [add_rule(item).id for item in fields]


def steer_text(decided: Decided) -> str:
    return refusal_message(decided.verdict)


class AuditTrail:
    """Every decision in the SEL, written by the gate's own writer thread, never delaying an answer."""

    def __init__(self) -> None:
        from kirocrew_core.gate.decisions import DecisionLog

        self._log = DecisionLog()

    def record(self, outcome: str, decided: Decided | None, *, conversation_id: str, run_id: str,
               actor: str = "system", rule: str | None = None, tool: str | None = None,
               **extra: Any) -> None:
        self._log.submit(outcome, rule=rule or (decided.verdict.rule.id if decided else "unknown"),
                         tool=tool or (decided.verdict.tool if decided else "unknown"),
                         fingerprint=decided.verdict.fingerprint if decided else "", actor=actor,
                         conversation=conversation_id, run=run_id,
                         authority=decided.context.authority if decided else None, **extra)

    async def drain(self) -> None:
        """Write the records still queued (the host stopping)."""
        await asyncio.to_thread(self._log.flush)


def notify_owner(decided: Decided, *, conversation_id: str, conversation_name: str, permission_id: str) -> None:
    """A card in the owner's notification feed for an ``ask`` (blocking: the store is a file)."""
    from kirocrew_core.notifications.store import TITLE_MAX_CHARS, NewNotification, publish

    title = f"Kiro asks to run {decided.verdict.tool} in {conversation_name}"[:TITLE_MAX_CHARS]
    body = f"{decided.subject}\n\n{decided.reason}"
    try:
        publish(NewNotification(title=title, priority="critical", body=body,
                                url=f"/conversations/{conversation_id}", group_key=f"permission:{permission_id}"),
                None)
    except Exception:
        log.warning("could not post the permission request to the notification feed", exc_info=True)
