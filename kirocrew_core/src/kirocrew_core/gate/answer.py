"""The gate's side of one ACP permission request: the decision, what the model is told, "allow always".

:func:`decide_call` decides a call with the policy in force plus the workspace's project rules
(both cached by file signature, so a decision costs two ``stat`` calls and the matching).
:func:`refusal_message` is what a refused call's session is told (by steering the running
turn): which rule refused, why, and not to retry. :func:`always_rules` turns the owner's "allow
always" into owner rules, one per part of the call that asked — the command as its words, the
file, the domain, the MCP tool — in the scope the owner chose; never the whole chain, and not
at all where an allow rule could not change the answer (a built-in protection, an ``ask`` rule,
a part kirocrew could not read).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Literal

from kirocrew_core.gate.calls import Context, Subject, ToolCall, subjects
from kirocrew_core.gate.engine import Verdict
from kirocrew_core.gate.rules import Rule

Scope = Literal["everywhere", "workspace", "authority"]
SCOPES: tuple[Scope, ...] = ("workspace", "authority", "everywhere")

_project_lock = threading.Lock()
_project_cache: dict[str, tuple[tuple[int, int, int] | None, list[Rule], dict[str, Any], list[str]]] = {}
_PROJECT_CACHE_MAX = 256


def _project(workspace: str) -> tuple[list[Rule], dict[str, Any], list[str]]:
    from kirocrew_core.gate.policy_file import PROJECT_FILE, project_rules

    path = Path(workspace) / PROJECT_FILE if workspace else None
    try:
        st = os.stat(path) if path is not None else None
        signature = (st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None
    except OSError:
        signature = None
    with _project_lock:
        cached = _project_cache.get(workspace)
        if cached is not None and cached[0] == signature:
            return cached[1], cached[2], cached[3]
    rules, defaults, problems = project_rules(workspace) if signature is not None else ([], {}, [])
    with _project_lock:
        if len(_project_cache) >= _PROJECT_CACHE_MAX:
            _project_cache.clear()
        _project_cache[workspace] = (signature, rules, defaults, problems)
    return rules, defaults, problems


def decide_call(call: ToolCall, ctx: Context, pm: Any = None) -> Verdict:
    """The policy's decision on ``call`` in ``ctx`` (owner policy, project rules and stricter defaults)."""
    from kirocrew_core.gate.policy_file import current_policy

    rules, defaults, _ = _project(ctx.workspace)
    return current_policy(pm).decide(call, ctx, rules, defaults)


def refusal_message(verdict: Verdict) -> str:
    """What the session is told when the gate refused a call (it continues its turn without it)."""
    return (f"[kirocrew] The permission policy refused this tool call ({verdict.subject}): rule {verdict.rule.id} "
            f"— {verdict.rule.reason or verdict.rule.describe()}. Do not retry it or work around it; carry on "
            "without it, or tell the owner what you need and why.")


def always_possible(verdict: Verdict) -> bool:
    """Whether an owner "allow always" can change this ``ask``: every asking part was a default's doing."""
    if verdict.decision != "ask":
        return False
    asked = [p for p in verdict.parts if p.decision == "ask"]
    return bool(asked) and all(p.rule.startswith("default:") and not p.note for p in asked)


def always_rules(call: ToolCall, verdict: Verdict, ctx: Context, scope: Scope) -> list[dict[str, Any]]:
    """The rule fields an owner's "allow always" adds (see the module docstring); empty when it cannot."""
    if not always_possible(verdict):
        return []
    asked = {p.label for p in verdict.parts if p.decision == "ask"}
    where: dict[str, Any] = {}
    if scope == "workspace":
        where["workspace"] = os.path.realpath(ctx.workspace) if ctx.workspace else None
    elif scope == "authority":
        where["authority"] = ctx.authority
    out: list[dict[str, Any]] = []
    for subject in subjects(call, ctx):
        if subject.label not in asked or subject.restrict_only:
            continue
        fields = _rule_for(subject)
        if fields is None:
            return []  # one part cannot be allowed for good: the owner answers this call once
        fields.update({k: v for k, v in where.items() if v is not None})
        fields.setdefault("reason", "allowed always by the owner")
        if fields not in out:
            out.append(fields)
    return out


def _rule_for(subject: Subject) -> dict[str, Any] | None:
    if subject.unknown:
        return None
    if subject.kind == "command":
        words = [w.value for w in subject.command.argv] if subject.command is not None else []
        if not words or any(w is None for w in words):
            return None
        return {"decision": "allow", "tool": "shell", "command": [" ".join(w for w in words if w)]}
    if subject.kind == "path":
        path = subject.path.literal if subject.path is not None else None
        if path is None:
            return None
        tool = f"@{subject.server}/{subject.tool}" if subject.server else subject.tool
        return {"decision": "allow", "tool": tool, "path": [path]}
    if subject.kind == "domain":
        return {"decision": "allow", "tool": subject.tool, "domain": [subject.host]} if subject.host else None
    return {"decision": "allow", "tool": subject.ref}
