"""``GET /api/connections/status``: every card's authorization state, from local facts only.

The gateway imports this module per request; it must never import the mint
engine (a subprocess test pins that), so the mint state is read only when the
engine is already loaded (:func:`kirocrew_connections.status.current_mint_state`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response


async def get_status(request: Request) -> Response:
    """``{"schema_version": 1, "connections": [row, ...]}``, one row per listed provider.

    The registry load and every stat run off the event loop (a cache dir on a
    stalled mount must not stall the gateway); the mint state is read on the
    loop, where the engine lives. No HTTP request is made.
    """
    from starlette.responses import JSONResponse

    from kirocrew_connections import status
    from kirocrew_connections.registry import routed_registry

    import sys

    pm = request.app.state.kirocrew.pm
    warm = sys.modules.get("kirocrew_connections.warm")
    if warm is not None:  # a warm URL whose process or session died is withdrawn before it is reported
        await warm.expire_dead_mints()
    registry = await asyncio.to_thread(routed_registry, pm)
    providers = status.status_providers(registry)
    mint_states = status.current_mint_states(providers)
    rows = await asyncio.to_thread(status.collect_statuses, providers, mint_states)
    return JSONResponse({
        "schema_version": status.SCHEMA_VERSION,
        "connections": [row.as_dict() for row in rows],
    })
