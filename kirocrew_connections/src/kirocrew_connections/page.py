"""The dashboard's Connections page (``/connections``) and ``POST /api/connections/install``.

The page is rendered on the server from the functions the JSON routes answer
with (:mod:`kirocrew_connections.cards`); its one script,
``static/connections.js``, drives Connect, Cancel, Test and Disconnect through
the owner-authenticated routes and refreshes a card by fetching this page again
and swapping that card's server-rendered HTML, so the fold lives in Python only.
Starlette is imported inside functions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_connections"
#: The page's cadences (reference §2.5), handed to the script through data attributes.
STATUS_POLL_MS = 30_000
MINT_POLL_MS = 2_000


async def connections_page(request: Request) -> Response:
    """``GET /connections``: a card per offered provider (status, Connect, Test, Disconnect), gated ones hidden."""
    from kirocrew_core.gateway.shell import render_page

    from kirocrew_connections import status
    from kirocrew_connections.cards import build_gallery, gallery_inputs, mint_views

    pm = request.app.state.kirocrew.pm
    registry, rows, unreadable = await asyncio.to_thread(gallery_inputs, pm)
    providers = status.status_providers(registry)
    statuses = await asyncio.to_thread(status.collect_statuses, providers, status.current_mint_states(providers))
    gallery = build_gallery(registry, rows, statuses, mint_views([p.slug for p in providers]), unreadable)
    return render_page(request, f"{PACKAGE}/connections.html", title="Connections", gallery=gallery,
                       status_poll_ms=STATUS_POLL_MS, mint_poll_ms=MINT_POLL_MS)


async def post_install(request: Request) -> Response:
    """``POST /api/connections/install`` ``{slug}``: the provider's MCP entry present and enabled (Connect's step 1).

    Answers ``{ok, slug, name, created, changed}``; ``created`` tells the card a
    Cancel may uninstall the entry. 400 for a bad body or an unknown provider, 409
    ``provider_not_offered`` for one that is not visible (nothing written), 500
    ``crew_store_unusable`` when the crew store cannot be read (left untouched).
    """
    from starlette.responses import JSONResponse

    from kirocrew_connections.install import install_provider
    from kirocrew_connections.liveness_api import read_provider_request
    from kirocrew_connections.mint_api import require_offered

    _, provider = await read_provider_request(request)
    require_offered(provider)
    result = await install_provider(provider, pm=request.app.state.kirocrew.pm)
    return JSONResponse(result.as_dict())
