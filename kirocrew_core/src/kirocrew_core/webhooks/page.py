"""``GET /hooks``: the inbound webhooks sessions registered, rendered on the server.

Each row: the hook and its URL, the conversation it feeds (a link to its page), the context its
session left, when it was made, its last delivery and how many were accepted, and **Revoke**.
``static/hooks.js`` calls ``DELETE /api/hooks/{id}`` (:mod:`.api`) and swaps in the fresh table.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_core.webhooks"


def _stamp(at: float | None) -> str:
    from datetime import datetime, timezone

    return "never" if at is None else datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


async def hooks_page(request: Request) -> Response:
    from kirocrew_core.gateway.shell import render_page
    from kirocrew_core.webhooks.api import hooks_view

    hooks: list[dict[str, Any]] = []
    problem = None
    try:
        hooks = await asyncio.to_thread(hooks_view)
    except KirocrewError as exc:
        problem = exc
    return render_page(request, f"{PACKAGE}/hooks.html", title="Hooks", status_code=503 if problem else 200,
                       hooks=hooks, problem=problem, stamp=_stamp)
