"""The permission policy's JSON routes, the same ones the Policy page's forms and buttons use.

The twins of ``kirocrew policy`` (:mod:`.cli`), on the same file and with the same checks:

- ``GET /api/policy[?workspace=DIR]``: every rule in precedence order (built-in, the owner's,
  the project's when ``workspace`` is given, then the defaults), the owner's file (its path,
  its state ``absent``/``ok``/``malformed``/``unreadable`` and its problems), which fallback
  is in force when the file cannot be used, every problem, and the default per authority;
- ``POST /api/policy/rules``: the rule's fields (``kirocrew policy add``'s) → ``{"rule"}``;
- ``DELETE /api/policy/rules/{id}``: removes one of the owner's rules → ``{"removed"}``;
- ``POST /api/policy/check`` ``{tool, input, authority?, agent?, workspace?}`` → the verdict,
  exactly what ``kirocrew policy check`` prints (nothing is recorded: nothing ran);
- ``GET /api/policy/decisions?limit=N``: the newest decisions from the security event log.

Refusals are ``{"error", "code", "field"?}`` with ``field`` naming the request field at fault:
400 ``bad_json`` / ``body_too_large`` / ``bad_request`` / ``bad_tool`` / ``policy_invalid``
(a rule that does not check) / ``policy_rule_not_found`` / ``policy_file_malformed`` (the
owner's file cannot be used, so it is never rewritten: 500 when it cannot even be read).
Adding and removing record ``policy_rule_added`` / ``policy_rule_removed`` in the security
event log (:func:`.policy_file.add_rule`). File work runs in a worker thread; Starlette is
imported inside the functions.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError
from kirocrew_core.gateway.fields import FieldError, answers

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import BaseRoute

    from kirocrew_core.gate.rules import Rule

#: A rule's fields are short (64 items of 500 characters at most per input field).
RULE_BODY_LIMIT = 256 * 1024
#: A call's input can carry a whole file (``write``), so a check takes up to 1 MiB.
CHECK_BODY_LIMIT = 1024 * 1024
DECISIONS_DEFAULT = 50
DECISIONS_MAX = 500
CHECK_FIELDS = ("tool", "input", "authority", "agent", "workspace")
#: The fields ``kirocrew policy add`` takes (its ``id`` is always a fresh one).
RULE_FIELDS = ("decision", "tool", "command", "path", "domain", "authority", "agent", "workspace", "reason")


_answers_fields = answers()


def absolute_workspace(value: Any, *, field: str = "workspace") -> str | None:
    """``value`` as an absolute, normalised directory (``~`` expanded); None when absent or empty."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or "\x00" in value or len(value) > 4096:
        raise FieldError(f"{field} must be an absolute path", field=field)
    expanded = os.path.expanduser(value.strip())
    if not os.path.isabs(expanded):
        raise FieldError(f"{field} must be an absolute path, got {value!r}", field=field)
    return os.path.normpath(expanded)


def rule_view(rule: Rule, *, removable: bool) -> dict[str, Any]:
    """A rule as the routes and the page show it: :meth:`Rule.as_dict`, every tool it covers, whether it can go."""
    return {**rule.as_dict(), "tools": list(rule.tools), "removable": removable}


def policy_view(pm: Any = None, workspace: str | None = None) -> dict[str, Any]:
    """What ``GET /api/policy`` answers and the page shows (blocking: call it in a worker thread)."""
    from dataclasses import replace

    from kirocrew_core.gate.policy_file import current_policy, last_good_file, project_rules, read_policy_file
    from kirocrew_core.gate.rules import SEVERITY

    owner_file = read_policy_file()
    policy = current_policy(pm)
    project: list[Rule] = []
    problems = list(policy.problems)
    if workspace:
        project, project_defaults, project_problems = project_rules(workspace)
        problems += project_problems
        # A project may make a default stricter (never looser): what applies there is what is listed.
        stricter = {k: v for k, v in project_defaults.items() if SEVERITY[v] > SEVERITY[policy.defaults.get(k, "ask")]}
        if stricter:
            policy = replace(policy, defaults={**policy.defaults, **stricter})
    fallback = None
    if not owner_file.usable:
        fallback = "last_good" if policy.source == str(last_good_file()) else "ask"
    # The owner's rules can be removed only while they are the file's own (not the last good copy's).
    removable = owner_file.state == "ok"
    rules = [rule_view(r, removable=removable and r.tier == "owner") for r in policy.rules(project)]
    rules += [rule_view(r, removable=False) for r in policy.default_rules()]
    return {"rules": rules,
            "file": {"path": str(owner_file.path), "state": owner_file.state, "problems": owner_file.problems},
            "fallback": fallback, "problems": problems, "defaults": dict(policy.defaults), "workspace": workspace}


def check_call(body: dict[str, Any], pm: Any = None) -> dict[str, Any]:
    """``POST /api/policy/check``'s verdict for ``body`` (blocking: the parser and project files)."""
    from kirocrew_core import home
    from kirocrew_core.gate.answer import decide_call
    from kirocrew_core.gate.calls import Context, ToolCall

    unknown = sorted(str(k) for k in body if k not in CHECK_FIELDS)
    if unknown:
        raise FieldError(f"unknown field(s) {', '.join(unknown)}; a check takes {', '.join(CHECK_FIELDS)}",
                         field=unknown[0])
    tool = body.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        raise FieldError("tool is required: a built-in tool's name (shell, write…) or @server/tool", field="tool",
                         code="bad_tool")
    try:
        call = ToolCall.from_ref(tool, body.get("input", {}))
    except BadInputError as exc:
        raise FieldError(exc.message, field="tool", code=exc.code) from None
    authority = body.get("authority", "unrestricted")
    if not isinstance(authority, str) or not authority.strip():
        raise FieldError("authority must be an authority's name", field="authority")
    agent = body.get("agent", "kirocrew")
    if agent is not None and not isinstance(agent, str):
        raise FieldError("agent must be an agent's name or null", field="agent")
    workspace = absolute_workspace(body.get("workspace"))
    # The gate's own decision: the owner's policy, the workspace's project rules and its stricter defaults.
    context = Context(authority.strip(), agent or None, workspace or "", str(home.user_home()))
    return decide_call(call, context, pm).as_dict()


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return DECISIONS_DEFAULT
    if not raw.isdigit() or not 1 <= int(raw) <= DECISIONS_MAX:
        raise FieldError(f"limit must be a whole number from 1 to {DECISIONS_MAX}, got {raw[:20]!r}", field="limit")
    return int(raw)


def _pm(request: Request) -> Any:
    return request.app.state.kirocrew.pm


@_answers_fields
async def get_policy(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    workspace = absolute_workspace(request.query_params.get("workspace"))
    return JSONResponse(await asyncio.to_thread(policy_view, _pm(request), workspace))


@_answers_fields
async def add_rule(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_core.gate import policy_file
    from kirocrew_core.gate.rules import PolicyError
    from kirocrew_core.gateway.body import read_json_object

    body = await read_json_object(request, limit=RULE_BODY_LIMIT)
    unknown = sorted(str(k) for k in body if k not in RULE_FIELDS)
    if unknown:
        raise PolicyError(f"unknown rule field(s) {', '.join(unknown)}; a new rule has {', '.join(RULE_FIELDS)} "
                          "(kirocrew chooses its id)", field=unknown[0])
    rule = await asyncio.to_thread(policy_file.add_rule, body)
    return JSONResponse({"rule": rule_view(rule, removable=True)})


@_answers_fields
async def remove_rule(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_core.gate import policy_file

    rule = await asyncio.to_thread(policy_file.remove_rule, request.path_params["id"])
    return JSONResponse({"removed": rule_view(rule, removable=False)})


@_answers_fields
async def check(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_core.gateway.body import read_json_object

    body = await read_json_object(request, limit=CHECK_BODY_LIMIT)
    return JSONResponse(await asyncio.to_thread(check_call, body, _pm(request)))


@_answers_fields
async def recent_decisions(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_core.gate.decisions import recent

    limit = _limit(request)
    return JSONResponse({"decisions": await asyncio.to_thread(recent, limit)})


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/api/policy", get_policy, methods=["GET"], name="policy"),
        Route("/api/policy/rules", add_rule, methods=["POST"], name="policy_rule_add"),
        Route("/api/policy/rules/{id}", remove_rule, methods=["DELETE"], name="policy_rule_remove"),
        Route("/api/policy/check", check, methods=["POST"], name="policy_check"),
        Route("/api/policy/decisions", recent_decisions, methods=["GET"], name="policy_decisions"),
    ]
