"""Store records → the tools' structured output, redacted.

Nothing here reads kiro's session id, prompt text, tool titles (they hold
command arguments) or absolute paths: a client sees settings, statuses,
workspace labels and fingerprints, tool names and workspace-relative locations.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kirocrew_conversations import limits
from kirocrew_conversations.errors import CATALOGUE, NOT_KIROCREW_AGENT, conversation_error
from kirocrew_conversations.redact import redact_text, workspace_label
from kirocrew_conversations.store import Conversation, Event, FollowUps, Monitor, PermissionRequest, Run
from kirocrew_conversations.vocabulary import DEFAULT_AGENT, EFFORTS, FAILURE_STATUSES, OWNER_DECISIONS

if TYPE_CHECKING:
    from kirocrew_conversations.questions import PendingQuestion


def workspace_identity(conversation: Conversation) -> dict[str, Any]:
    ws = conversation.workspace
    worktree = ws.strategy == "worktree"
    return {"mode": ws.strategy, "fingerprint": ws.fingerprint, "label": workspace_label(ws.path),
            "branch": ws.worktree_branch, "baseRef": ws.worktree_base_ref if worktree else None,
            "baseCommit": ws.worktree_base_commit if worktree else None}


def conversation_settings(conversation: Conversation) -> dict[str, Any]:
    return {"model": conversation.model, "effort": conversation.effort, "mode": conversation.mode,
            "authority": conversation.authority, "workspace": workspace_identity(conversation),
            "allowedSlashCommands": [f"/{name}" for name in conversation.allowed_commands]}


def run_settings(run: Run, conversation: Conversation) -> dict[str, Any]:
    return {"model": run.model, "effort": run.effort, "mode": run.mode, "authority": run.authority,
            "workspace": workspace_identity(conversation)}


def run_warnings(run: Run) -> list[dict[str, str]]:
    """What the caller should know about how the run runs that is not an error: its agent is not kirocrew's."""
    if run.mode is None or run.mode == DEFAULT_AGENT:
        return []
    return [{"code": NOT_KIROCREW_AGENT, "message": (
        f"This run runs as the agent {run.mode!r}, not kirocrew's rendered agent {DEFAULT_AGENT!r}: kirocrew's MCP "
        "servers (kirocrew-core, kirocrew-conversations, kirocrew-cron, ...) are mounted only if that agent declares "
        f"them. Leave the mode unset to run as {DEFAULT_AGENT}.")}]


def error_of(run: Run) -> dict[str, str] | None:
    if run.error_code is None:
        return None
    message = redact_text(run.error_detail) if run.error_detail else CATALOGUE.get(run.error_code, run.error_code)
    return {"code": run.error_code, "message": message[: limits.TEXT_MAX_CHARS]}


def attention_of(run: Run, permissions: list[PermissionRequest],
                 questions: Sequence[PendingQuestion] = ()) -> dict[str, Any] | None:
    """The run's open request: its newest permission request, else its oldest question card."""
    if run.status != "needs_attention":
        return None
    pending = [p for p in permissions if p.state == "pending"]
    if pending:
        request = pending[-1]
        tool = request.tool_name
        return {
            "kind": "permission",
            "permissionRequestId": request.id,
            "toolName": tool,
            "title": f"Kiro asks to use {tool}" if tool else "Kiro asks to use a tool",
            "options": [o for o in request.options if o in OWNER_DECISIONS],
            "requestedAt": request.created_at,
            "question": None,
            "rule": rule_view(request.rule),
            "subject": request.subject[: limits.TEXT_MAX_CHARS] if request.subject else None,
            "reason": request.reason[: limits.TEXT_MAX_CHARS] if request.reason else None,
        }
    if questions:
        card = questions[0]
        count = len(card.questions)
        return {
            "kind": "question",
            "permissionRequestId": None,
            "toolName": None,
            "title": "Kiro asks you a question" if count == 1 else f"Kiro asks you {count} questions",
            "options": [],
            "requestedAt": card.asked_at,
            "question": card.view(),
            "rule": None,
            "subject": None,
            "reason": None,
        }
    return None


_RULE_TIERS = ("builtin", "owner", "project", "default")


def rule_view(rule: object) -> dict[str, Any] | None:
    """A stored permission-policy rule as the schema shows it; None for anything that is not one."""
    if not isinstance(rule, dict) or rule.get("tier") not in _RULE_TIERS or rule.get("decision") not in (
            "allow", "ask", "deny"):
        return None
    return {"id": str(rule.get("id") or "")[:64] or "unknown", "tier": rule["tier"], "decision": rule["decision"],
            "description": str(rule.get("description") or rule.get("id") or "")[: limits.TEXT_MAX_CHARS] or "rule",
            "reason": str(rule.get("reason") or "")[: limits.TEXT_MAX_CHARS]}


def run_view(run: Run, conversation: Conversation, permissions: list[PermissionRequest],
             questions: Sequence[PendingQuestion] = ()) -> dict[str, Any]:
    reply = None
    if run.reply_text is not None:
        reply = {"text": run.reply_text, "truncated": run.reply_truncated,
                 "originalBytes": run.reply_total_bytes or len(run.reply_text.encode("utf-8"))}
    return {
        "conversationId": run.conversation_id,
        "runId": run.id,
        "status": run.status,
        "settings": run_settings(run, conversation),
        "reply": reply,
        "error": error_of(run),
        "attention": attention_of(run, permissions, questions),
        "warnings": run_warnings(run),
        "createdAt": run.created_at,
        "startedAt": run.started_at,
        "endedAt": run.ended_at,
    }


def followups_view(card: FollowUps | None) -> dict[str, Any] | None:
    """The conversation's follow-up card (a ``suggest_followup`` directive), for kiro_result and the page."""
    if card is None:
        return None
    return {"runId": card.run_id, "createdAt": card.created_at,
            "items": [{"title": i["title"], "description": i["description"], "prompt": i["prompt"],
                       "branch": i.get("branch")} for i in card.items]}


def monitor_view(monitor: Monitor | None) -> dict[str, Any] | None:
    """The conversation's monitor loop (the ``monitor_*`` directives); its message is the model's own."""
    if monitor is None:
        return None
    return {"monitorId": monitor.id, "active": monitor.active, "message": monitor.message,
            "intervalSecs": monitor.interval_secs, "cycles": monitor.cycles, "maxCycles": monitor.max_cycles,
            "stoppedReason": monitor.stopped_reason, "lastFiredAt": monitor.last_fired_at}


def session_view(conversation: Conversation, card: FollowUps | None, monitor: Monitor | None) -> dict[str, Any]:
    """What session directives left on a conversation: follow-ups, monitor loop, project (label only)."""
    return {"followUps": followups_view(card), "monitor": monitor_view(monitor),
            "project": workspace_label(conversation.project) if conversation.project else None}


# -- events -------------------------------------------------------------------------------------


def event_view(event: Event) -> dict[str, Any] | None:
    """One stored event as the client sees it; None for kinds that are not shown."""
    p = event.payload
    out: dict[str, Any] = {"seq": event.cursor, "at": event.created_at}
    kind = event.kind
    if kind == "run_queued":
        out |= {"kind": "phase", "summary": "queued" + (f" with {p['images']} image(s)" if p.get("images") else "")}
    elif kind == "run_status":
        to, code = p.get("to"), p.get("errorCode")
        out |= {"kind": "error" if to in FAILURE_STATUSES else "phase",
                "summary": f"{p.get('from')} -> {to}" + (f" ({code})" if code else "")}
    elif kind == "run_started":
        out |= {"kind": "phase", "summary": "resumed the saved Kiro session" if p.get("resumed")
                else "started a Kiro session"}
    elif kind == "session_reset":
        out |= {"kind": "phase", "summary": "kiro could not load the saved session; started a new one "
                                            "without the earlier context"}
    elif kind in ("tool_call", "tool_call_update"):
        out |= {"kind": "tool", "summary": "tool call" if kind == "tool_call" else "tool call update"}
        if p.get("toolName"):
            out["toolName"] = str(p["toolName"])[:128]
        if p.get("status"):
            out["toolStatus"] = str(p["status"])[:32]
        if p.get("locations"):
            out["locations"] = [str(loc) for loc in p["locations"]][:16]
    elif kind == "plan":
        out |= {"kind": "plan", "summary": f"plan with {int(p.get('entries', 0))} entries"}
    elif kind == "permission_requested":
        rule = rule_view(p.get("rule"))
        out |= {"kind": "permission", "summary": "permission requested" + (
                    f" (policy rule {rule['id']}: {rule['description']})" if rule else ""),
                "permissionRequestId": p["permissionId"],
                "options": [o for o in p.get("options", []) if o in OWNER_DECISIONS]}
        if rule:
            out["rule"] = rule
        if p.get("toolName"):
            out["toolName"] = str(p["toolName"])[:128]
    elif kind == "permission_decided":
        added = [str(r) for r in p.get("rulesAdded", [])][:8]
        out |= {"kind": "permission", "summary": f"decided {p.get('decision')}" + (
                    f"; added policy rule{'s' if len(added) != 1 else ''} {', '.join(added)}" if added else ""),
                "permissionRequestId": p["permissionId"]}
    elif kind == "permission_denied":
        rule = rule_view(p.get("rule"))
        out |= {"kind": "permission", "summary": redact_text(
            f"the permission policy refused {p.get('subject') or 'a call'}"
            + (f": rule {rule['id']} ({rule['description']}): {rule['reason']}" if rule else ""))}
        if rule:
            out["rule"] = rule
        if p.get("toolName"):
            out["toolName"] = str(p["toolName"])[:128]
    elif kind == "question_asked":
        count = int(p.get("questions", 0))
        out |= {"kind": "question", "summary": f"asked {count} question{'s' if count != 1 else ''} on a card",
                "askId": str(p.get("askId"))}
    elif kind in QUESTION_ENDINGS:
        out |= {"kind": "question", "summary": QUESTION_ENDINGS[kind], "askId": str(p.get("askId"))}
    elif kind == "question_exchange":
        pairs = [f"{json.dumps(str(x.get('question')), ensure_ascii=False)} -> "
                 f"{json.dumps(x.get('answer'), ensure_ascii=False)}" for x in p.get("exchange", [])]
        out |= {"kind": "question", "summary": redact_text("; ".join(pairs) or "no questions"),
                "askId": str(p.get("askId"))}
    elif kind == "slash_command":
        out |= {"kind": "config", "summary": f"slash command /{p.get('command')}"}
    elif kind == "permission_expired":
        out |= {"kind": "permission", "summary": "permission request expired unanswered; answered cancelled",
                "permissionRequestId": p["permissionId"]}
    elif kind == "mode_changed":
        out |= {"kind": "config", "summary": f"mode -> {p.get('mode')}"}
    elif kind == "settings_applied":
        shown = {"model": _setting(p.get("model"), limits.MODEL_MAX_CHARS),
                 "mode": _setting(p.get("mode"), limits.AGENT_MODE_MAX_CHARS),
                 "effort": p.get("effort") if p.get("effort") in EFFORTS else None}
        changed = [name for name in p.get("changed", []) if name in shown]
        out |= {"kind": "config", "settings": shown,
                "summary": "running on " + " ".join(f"{k}={v or 'default'}" for k, v in shown.items())
                + (f" (set {', '.join(changed)})" if changed else "")}
    elif kind == "settings_refused":
        setting = p.get("setting") if p.get("setting") in ("model", "mode", "effort") else "setting"
        out |= {"kind": "config", "summary": f"kiro-cli did not apply {setting}="
                                            f"{_setting(p.get('value'), limits.MODEL_MAX_CHARS)}; nothing was prompted"}
    elif kind == "usage":
        usage = {key: p[key] for key in ("contextPercent", "credits", "turnDurationMs")
                 if isinstance(p.get(key), (int, float)) and not isinstance(p.get(key), bool)}
        parts = [f"context {usage['contextPercent']}% used" if "contextPercent" in usage else "",
                 f"{usage['credits']:g} credits" if "credits" in usage else "",
                 f"turn {usage['turnDurationMs']} ms" if "turnDurationMs" in usage else ""]
        out |= {"kind": "usage", "usage": usage, "summary": ", ".join(part for part in parts if part) or "usage"}
    elif kind == "directive":
        out |= {"kind": "config" if p.get("outcome") == "applied" else "error",
                "summary": f"session directive {p.get('directive')} {p.get('outcome')}: {p.get('message', '')}"}
    elif kind == "directive_ignored":
        out |= {"kind": "error", "summary": f"ignored a session-directive marker: {p.get('reason', '')}"}
        if p.get("toolName"):
            out["toolName"] = str(p["toolName"])[:128]
    elif kind == "monitor_cycle":
        out |= {"kind": "phase", "summary": f"monitor cycle {int(p.get('cycle', 0))}/{int(p.get('maxCycles', 0))}"
                                            " queued by the conversation's monitor loop"}
    elif kind == "monitor_stopped":
        out |= {"kind": "phase", "summary": f"monitor loop stopped ({p.get('reason')}) after "
                                            f"{int(p.get('cycles', 0))} cycle(s)"}
    elif kind == "reply_recorded":
        out |= {"kind": "message", "summary": f"final reply of {int(p.get('bytes', 0))} bytes"
                + (" (truncated)" if p.get("truncated") else "")}
    else:
        return None
    out["summary"] = out["summary"][: limits.TEXT_MAX_CHARS]
    return out


#: How a question card ended, as its event says it.
QUESTION_ENDINGS = {
    "question_answered": "question card answered",
    "question_dismissed": "question card dismissed without an answer",
    "question_expired": "question card expired unanswered and was withdrawn",
    "question_withdrawn": "question card withdrawn (the run ended, the host stopped, or the call was cancelled)",
}


def _setting(value: Any, limit: int) -> str | None:
    return str(value)[:limit] if isinstance(value, str) and value else None


# -- cursors ------------------------------------------------------------------------------------


def encode_cursor(kind: str, scope: str, position: str | int) -> str:
    """An opaque cursor bound to its listing (``scope``), so it cannot be replayed elsewhere."""
    tag = hashlib.sha256(scope.encode()).hexdigest()[:12]
    raw = json.dumps([kind, tag, position], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str, scope: str) -> Any:
    """The position inside ``cursor``; ``bad_cursor`` when it is malformed or from another listing."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        got_kind, tag, position = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise conversation_error("bad_cursor", "the cursor is malformed") from None
    if got_kind != kind or tag != hashlib.sha256(scope.encode()).hexdigest()[:12]:
        raise conversation_error("bad_cursor", "the cursor belongs to another listing")
    return position
