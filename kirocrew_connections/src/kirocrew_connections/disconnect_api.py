"""``POST /api/connections/disconnect`` ``{slug}``: the card's Disconnect.

Answers the :class:`~kirocrew_connections.disconnect.DisconnectResult` fields
plus ``revokePageUrl``: this machine's grant can be removed here, the
provider's record of it only on that page, so the card keeps offering it.
Importing this module never imports the mint engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_connections.disconnect import DisconnectResult


def rearm_after_disconnect(slug: str, result: DisconnectResult) -> None:
    """No grant of ours survived: warm that provider's URL again (scheduled, never awaited).

    Only when the warm engine is loaded (the page premints in this gateway);
    the engine's own scan still vetoes a grant present, unreadable or shared.
    """
    import sys

    warm = sys.modules.get("kirocrew_connections.warm")
    if warm is not None and not result.grant_surviving:
        warm.rearm_invalidated_provider(slug)


async def post_disconnect(request: Request) -> Response:
    """Disconnect the body's ``slug`` (400 for a bad body or unknown provider, else 200)."""
    from starlette.responses import JSONResponse

    from kirocrew_connections.disconnect import disconnect_provider
    from kirocrew_connections.liveness_api import read_provider_request

    _, provider = await read_provider_request(request)
    result = await disconnect_provider(provider, pm=request.app.state.kirocrew.pm)
    rearm_after_disconnect(provider.slug, result)
    return JSONResponse({**result.as_dict(), "revokePageUrl": provider.revoke_page_url})
