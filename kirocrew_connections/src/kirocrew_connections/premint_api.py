"""``POST /api/connections/premint``: the Connections page warms every card's approval URL on mount.

No body: an empty one, or ``{}``. A body that is not a JSON object is the gateway's 400
``bad_json`` (over 64 KiB ``body_too_large``), like every JSON route; an object with
any field is 400 ``unexpected_fields`` (a caller that sends a slug expects a choice
this route does not offer), and a refusal starts nothing. The candidate scan
(registry, MCP config, grant presence) runs off the event loop, and the same
list is handed to the warm engine, so the slugs this answers and the rows the
engine claims come from one read. The activation is scheduled, never awaited:
warming costs seconds, and each card's truth stays its own mint feed (a listed slug may still end without a URL).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from kirocrew_core.errors import BadInputError
from kirocrew_core.gateway.body import read_json_object

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PREMINT_EVENT = "connections_premint"
#: ``off`` (or 0/false/no) turns warming off: premint answers an empty list and every Connect is cold.
PREMINT_SWITCH = "KIROCREW_CONNECTIONS_PREMINT"
_OFF = frozenset({"0", "off", "false", "no"})


def premint_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether the gateway warms approval URLs (on unless :data:`PREMINT_SWITCH` says off)."""
    environ = os.environ if env is None else env
    return environ.get(PREMINT_SWITCH, "").strip().lower() not in _OFF


async def post_premint(request: Request) -> Response:
    """``{ok: true, preminting: [slug, ...]}``; an empty list starts nothing (as does the switch set off)."""
    from starlette.responses import JSONResponse

    from kirocrew_connections.mint_api import MAX_BODY_BYTES

    body = await read_json_object(request, limit=MAX_BODY_BYTES, default={})
    if body:
        shown = ", ".join(sorted(repr(key)[:40] for key in body)[:5])
        raise BadInputError(f"premint takes no body (got {shown})", code="unexpected_fields")
    if not premint_enabled():
        return JSONResponse({"ok": True, "preminting": []})
    from kirocrew_connections import warm
    from kirocrew_connections.warm_runtime import audit_event

    table = warm.warm_table(request.app.state.kirocrew.pm)
    candidates = await asyncio.to_thread(table.candidates)
    slugs = [provider.slug for provider in candidates]
    if candidates:
        table.start_premint(candidates)
        await asyncio.to_thread(audit_event, PREMINT_EVENT, "started", providers=len(slugs))
    return JSONResponse({"ok": True, "preminting": slugs})
