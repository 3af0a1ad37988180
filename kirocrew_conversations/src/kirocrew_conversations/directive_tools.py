"""The session-directive tools kirocrew-conversations adds to ``kirocrew-core``.

``suggest_followup``, ``monitor_start``, ``monitor_update``, ``autonudge_stop`` and
``set_project`` change nothing themselves: each validates its arguments and returns a
non-committal confirmation plus the directive marker (:mod:`kirocrew_core.coretools.directives`).
The conversations worker running the calling session applies it to its own conversation
(:mod:`kirocrew_conversations.directives`), and only when kiro-cli's ``_meta`` recorded the call
as this server's. Imported by the ``core_mcp_tools`` hook, so it stays light.
"""

from __future__ import annotations

import re
from typing import Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.coretools.contract import Identity, ToolCall, ToolRefused
from kirocrew_core.coretools.directives import encode

# The reference's limits (mid era): a model may not ask for a faster loop than 15 s or an endless one.
MONITOR_MESSAGE_MAX = 8000
INTERVAL_MIN, INTERVAL_MAX, INTERVAL_DEFAULT = 15, 86400, 300
CYCLES_MIN, CYCLES_MAX, CYCLES_DEFAULT = 1, 1000, 24  # 24 cycles ≈ 2 h at the default interval
REASON_MAX = 500
PROJECT_PATH_MAX = 4096
FOLLOWUPS_MAX = 3
FOLLOWUP_TITLE_MAX, FOLLOWUP_DESCRIPTION_MAX, FOLLOWUP_PROMPT_MAX, FOLLOWUP_BRANCH_MAX = 120, 600, 8000, 80
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(?:/[A-Za-z0-9][A-Za-z0-9._-]*)*\Z")
_WINDOWS_DEVICES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
                              *(f"lpt{i}" for i in range(1, 10))})
_APPLIES = "it applies to this session when the run's worker honours it; do not assume it has landed"


def _string(max_length: int, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, "description": description, **extra}


def _integer(low: int, high: int, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high, "description": description, **extra}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_MESSAGE = _string(MONITOR_MESSAGE_MAX, "What the conversation is re-prompted with on each cycle.")
_INTERVAL = _integer(INTERVAL_MIN, INTERVAL_MAX, "Idle seconds after a run ends before the next cycle.")
_CYCLES = _integer(CYCLES_MIN, CYCLES_MAX, "How many cycles the loop may run before it stops (cycle_cap).")

SUGGEST_FOLLOWUP_SCHEMA = _object({"items": {
    "type": "array", "minItems": 1, "maxItems": FOLLOWUPS_MAX, "description": "One to three follow-ups.",
    "items": _object({
        "title": _string(FOLLOWUP_TITLE_MAX, "Short button label.", minLength=1),
        "description": _string(FOLLOWUP_DESCRIPTION_MAX, "One or two sentences on what it would do.", minLength=1),
        "prompt": _string(FOLLOWUP_PROMPT_MAX, "The message sent to this conversation if the person picks it.",
                          minLength=1),
        "branch": _string(FOLLOWUP_BRANCH_MAX, "A git branch name the follow-up would work on (optional)."),
    }, ("title", "description", "prompt")),
}}, ("items",))
MONITOR_START_SCHEMA = _object({"message": _MESSAGE, "interval_secs": {**_INTERVAL, "default": INTERVAL_DEFAULT},
                                "max_cycles": {**_CYCLES, "default": CYCLES_DEFAULT}}, ("message",))
MONITOR_UPDATE_SCHEMA = _object({"message": _MESSAGE, "interval_secs": _INTERVAL, "max_cycles": _CYCLES})
AUTONUDGE_STOP_SCHEMA = _object({"reason": _string(REASON_MAX, "Why the loop stops (shown on its events).")})
SET_PROJECT_SCHEMA = _object({
    "path": _string(PROJECT_PATH_MAX, "Absolute path of the project directory.", pattern="^/"),
    "clear": {"type": "boolean", "default": False, "description": "Unbind the project instead."},
})


def _branch_ok(branch: str) -> bool:
    if not _BRANCH.match(branch) or ".." in branch or branch == "HEAD":
        return False
    for part in branch.split("/"):
        if part.endswith((".", ".lock")) or part.split(".")[0].lower() in _WINDOWS_DEVICES:
            return False
    return True


def suggest_followup(args: dict[str, Any], call: ToolCall) -> str:
    items = []
    for number, item in enumerate(args["items"], 1):
        for name in ("title", "description", "prompt"):
            if not item[name].strip():
                raise ToolRefused(f"suggest_followup: items[{number}].{name} must not be blank",
                                  code="invalid_arguments")
        kept = {name: item[name] for name in ("title", "description", "prompt")}
        branch = item.get("branch", "").strip()
        if branch:
            if not _branch_ok(branch):
                raise ToolRefused(f"suggest_followup: items[{number}].branch is not a valid git branch name",
                                  code="invalid_arguments")
            kept["branch"] = branch
        items.append(kept)
    human = (f"Follow-up card with {len(items)} suggestion(s) requested; {_APPLIES}. If the person may not see the "
             "page, restate the follow-ups in your reply.")
    return encode("suggest_followup", {"items": items}, human)


def monitor_start(args: dict[str, Any], call: ToolCall) -> str:
    message = args["message"].strip()
    if not message:
        raise ToolRefused("monitor_start: message must not be empty.", code="invalid_arguments")
    interval = args.get("interval_secs", INTERVAL_DEFAULT)
    cycles = args.get("max_cycles", CYCLES_DEFAULT)
    human = (f"Monitor loop requested: re-prompt this conversation {interval}s after each run ends, at most "
             f"{cycles} cycle(s); {_APPLIES}.")
    return encode("monitor_start", {"message": message, "idle_secs": interval, "max_cycles": cycles}, human)


def monitor_update(args: dict[str, Any], call: ToolCall) -> str:
    patch: dict[str, Any] = {}
    if "message" in args:
        if not args["message"].strip():
            raise ToolRefused("monitor_update: message must not be empty.", code="invalid_arguments")
        patch["message"] = args["message"].strip()
    if "interval_secs" in args:
        patch["idle_secs"] = args["interval_secs"]
    if "max_cycles" in args:
        patch["max_cycles"] = args["max_cycles"]
    if not patch:
        raise ToolRefused("monitor_update: nothing to change — pass at least one of message, interval_secs, "
                          "max_cycles.", code="invalid_arguments")
    return encode("monitor_update", {"patch": patch},
                  f"Monitor loop update requested ({', '.join(sorted(patch))}); {_APPLIES}.")


def autonudge_stop(args: dict[str, Any], call: ToolCall) -> str:
    reason = args.get("reason", "").strip()[:REASON_MAX]
    return encode("autonudge_stop", {"reason": reason}, f"Stopping this session's monitor loop requested; {_APPLIES}.")


def set_project(args: dict[str, Any], call: ToolCall) -> str:
    path, clear = args.get("path", ""), bool(args.get("clear", False))
    if clear and path:
        raise ToolRefused("set_project: path must be empty when clear=true", code="invalid_arguments")
    if not clear and not path:
        raise ToolRefused("set_project: path is required (use clear=true to unset the project)",
                          code="invalid_arguments")
    human = ("Unbinding this conversation's project requested" if clear
             else f"Binding this conversation to project {path} requested")
    return encode("set_project", {"project": "" if clear else path, "clear": clear},
                  f"{human}; {_APPLIES}. It takes effect at the next run, which starts a new Kiro session there.")


def tools() -> list[CoreMcpTool]:
    """The five directive tools (``ask_question`` is contributed with the questions)."""
    strict: Identity = "strict"
    return [
        CoreMcpTool("suggest_followup", "Offer the person one to three one-click follow-ups for this conversation, "
                    "shown on its page and in kiro_result. Nothing runs unless the person picks one.",
                    SUGGEST_FOLLOWUP_SCHEMA, suggest_followup, identity="lenient"),
        CoreMcpTool("monitor_start", "Arm (or replace) this conversation's monitor loop: after each run ends and "
                    f"the conversation stays idle interval_secs, it is re-prompted with message, up to max_cycles "
                    f"times (default {CYCLES_DEFAULT}). Stop it with autonudge_stop.",
                    MONITOR_START_SCHEMA, monitor_start, identity=strict),
        CoreMcpTool("monitor_update", "Change this conversation's monitor loop (message, interval_secs, max_cycles). "
                    "Raising max_cycles above the cycles done revives a loop stopped at its cap.",
                    MONITOR_UPDATE_SCHEMA, monitor_update, identity=strict),
        CoreMcpTool("autonudge_stop", "Stop this conversation's monitor loop; no further cycles run.",
                    AUTONUDGE_STOP_SCHEMA, autonudge_stop, identity=strict),
        CoreMcpTool("set_project", "Bind this conversation to a project directory (absolute path) for its next run, "
                    "which starts a new Kiro session there; clear=true unbinds it.",
                    SET_PROJECT_SCHEMA, set_project, identity=strict),
    ]
