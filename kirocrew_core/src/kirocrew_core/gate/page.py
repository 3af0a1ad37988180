"""``GET /policy``: the Policy page, rendered on the server.

It shows what :func:`.api.policy_view` answers (the rules in precedence order, the owner's
file and, when that file cannot be used, a banner saying which policy stays in force), an
add-rule form, a "Would this be allowed?" box and the recent decisions from the security
event log. ``?workspace=DIR`` adds that project's rules. ``static/policy.js`` sends every
change through the ``/api/policy…`` routes and swaps in the page's fresh regions.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from markupsafe import Markup
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_core.gate"
DECISIONS_SHOWN = 50
TIER_LABELS = {"builtin": "built-in", "owner": "yours", "project": "project", "default": "default"}
DECISION_STATUS = {"allow": "ok", "ask": "warn", "deny": "fail", "owner_allow": "ok", "owner_allow_always": "ok",
                   "owner_reject": "fail", "expired": "warn", "cancelled": "warn"}
#: The policy's own note on which fallback is in force: the banner says it in full.
FALLBACK_NOTES = ("the last good policy stays in force", "there is no earlier good policy")
#: How the owner answered an ``ask``, in words (the other outcomes are the decision itself).
OUTCOME_LABELS = {"owner_allow": "you allowed", "owner_allow_always": "you allowed always",
                  "owner_reject": "you refused", "expired": "expired unanswered", "cancelled": "cancelled"}


def home_text(text: str) -> str:
    """``text`` (a problem that names files) with the user's home folder written ``~``, as paths on pages are."""
    from pathlib import Path

    home = str(Path.home()).rstrip("/")
    return text.replace(home + "/", "~/") if home else text


def breakable(text: str) -> Markup:
    """``text`` escaped, with a line-break opportunity after each ``/`` and ``:``: a long path or rule id wraps
    between its parts rather than anywhere (or not at all, which would widen the table)."""
    from markupsafe import Markup, escape

    out = Markup("")
    for part in re.split(r"(?<=[/:])", text):
        out += escape(part) + (Markup("<wbr>") if part.endswith(("/", ":")) else Markup(""))
    return out


def stamp(ts: Any) -> str:
    """An SEL time (RFC 3339 UTC) as ``2026-12-04 22:03:28 UTC``; anything else as given."""
    if not isinstance(ts, str):
        return ""
    try:
        when = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return ts
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _page_data(pm: Any, raw_workspace: str | None) -> dict[str, Any]:
    from kirocrew_core.gate.api import FieldError, absolute_workspace, policy_view
    from kirocrew_core.gate.decisions import recent
    from kirocrew_core.gate.policy_file import known_authorities

    workspace_error = None
    try:
        workspace = absolute_workspace(raw_workspace)
    except FieldError as exc:
        workspace, workspace_error = None, exc.message
    view = policy_view(pm, workspace)
    decisions: list[dict[str, Any]] = []
    decisions_problem = None
    try:
        decisions = recent(DECISIONS_SHOWN)
    except KirocrewError as exc:
        decisions_problem = exc
    return {"view": view, "decisions": decisions, "decisions_problem": decisions_problem,
            "authorities": known_authorities(), "workspace_input": raw_workspace or "",
            "workspace_error": workspace_error,
            "owner_rules": sum(1 for r in view["rules"] if r["tier"] == "owner"),
            "other_problems": [p for p in view["problems"] if p not in view["file"]["problems"]
                               and not (view["fallback"] and p.startswith(FALLBACK_NOTES))]}


async def policy_page(request: Request) -> Response:
    from kirocrew_core.gateway.shell import render_page

    state = request.app.state.kirocrew
    data = await asyncio.to_thread(_page_data, state.pm, request.query_params.get("workspace"))
    conversations = any(item.path == "/conversations" for item in state.shell.nav)
    return render_page(request, f"{PACKAGE}/policy.html", title="Policy", tier_labels=TIER_LABELS,
                       decision_status=DECISION_STATUS, outcome_labels=OUTCOME_LABELS, stamp=stamp,
                       home_text=home_text, breakable=breakable, link_conversations=conversations, **data)
