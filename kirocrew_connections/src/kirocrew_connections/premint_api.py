"""``POST /api/connections/premint``: the Connections page warms every card's approval URL on mount.

No body. The candidate scan (registry, MCP config, grant presence) runs off the
event loop, and the same list is handed to the warm engine, so the slugs this
answers and the rows the engine claims come from one read. The activation is
scheduled, never awaited: warming costs seconds, and each card's truth stays
its own mint feed (a listed slug may still end without a URL).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PREMINT_EVENT = "connections_premint"


async def post_premint(request: Request) -> Response:
    """``{ok: true, preminting: [slug, ...]}``; an empty list starts nothing."""
    from starlette.responses import JSONResponse

    from kirocrew_connections import warm
    from kirocrew_connections.warm_runtime import audit_event

    table = warm.warm_table(request.app.state.kirocrew.pm)
    candidates = await asyncio.to_thread(table.candidates)
    slugs = [provider.slug for provider in candidates]
    if candidates:
        table.start_premint(candidates)
        await asyncio.to_thread(audit_event, PREMINT_EVENT, "started", providers=len(slugs))
    return JSONResponse({"ok": True, "preminting": slugs})
