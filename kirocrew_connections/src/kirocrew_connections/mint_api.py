"""``POST/GET /api/connections/mint`` and ``POST /api/connections/cancel``: the card's mint surface.

The gateway has already authenticated the owner. Bodies are JSON objects of at
most 64 KiB; a malformed body or an unknown provider is a 400 with a stable
code (the gateway's JSON errors, :mod:`kirocrew_core.gateway.errors`) and
changes nothing. The engine is imported inside the handlers, so
importing this module costs nothing at gateway boot.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

from kirocrew_core.errors import BadInputError, ConflictError
from kirocrew_core.gateway.body import read_json_object

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_connections.registry import Provider

MAX_BODY_BYTES = 64 * 1024
MAX_SLUG_CHARS = 64
_SLUG_RE = re.compile(r"\A[a-z0-9]+(?:-[a-z0-9]+)*\Z")


async def read_provider(request: Request, raw: object) -> Provider:
    """The registry provider named by ``raw`` (trimmed, lowercased); 400 ``unknown_provider`` otherwise.

    A caller can only ever point the connections endpoints at a provider we ship.
    """
    from kirocrew_connections.registry import routed_registry

    slug = raw.strip().lower() if isinstance(raw, str) else ""
    if not slug or len(slug) > MAX_SLUG_CHARS or not _SLUG_RE.match(slug):
        raise BadInputError("unknown provider", code="unknown_provider")
    registry = await asyncio.to_thread(routed_registry, request.app.state.kirocrew.pm)
    return registry.get(slug)


def require_offered(provider: Provider) -> Provider:
    """``provider`` when its card offers Connect; 409 ``provider_not_offered`` when it is gated or hidden.

    A Connect starts a consent (and installs an entry) for a provider; one we do
    not offer (a launch gate not passed, a pre-registered client not configured,
    a vendor that has not admitted us) would only fail at the provider, or
    worse, work without the checks its gate stands for. Test, Disconnect,
    Cancel and the mint's state stay open for it: a connection made while it
    was offered must still be checked and removed.
    """
    if provider.visibility != "visible":
        raise ConflictError(f"{provider.name} is not offered for Connect ({provider.visibility})",
                            code="provider_not_offered")
    return provider


async def post_mint(request: Request) -> Response:
    """Adopt the page's premint when one is ready (``state: "waiting"`` at once), else reserve a cold row.

    Either way the answer is ``{ok, slug, state, token}``; a cold attempt runs
    in the background. Adoption is tried only when the warm engine is loaded
    (a premint ran in this gateway), so a plain Connect imports nothing more.
    409 ``provider_not_offered`` (nothing started) for a provider that is not visible.
    """
    import sys

    from starlette.responses import JSONResponse

    from kirocrew_connections.mint import WAITING, mint_engine

    body = await read_json_object(request, limit=MAX_BODY_BYTES)
    provider = require_offered(await read_provider(request, body.get("slug")))
    engine = mint_engine()
    warm = sys.modules.get("kirocrew_connections.warm")
    token = await warm.adopt_shared_mint(provider.slug, provider.mcp_url) if warm is not None else None
    adopted = engine.row(provider.slug) if token is not None else None
    if adopted is not None and adopted.token == token:
        engine.audit_soon(adopted, provider, reason="adopted_warm_mint", url_minted=True)
        return JSONResponse({"ok": True, "slug": provider.slug, "state": WAITING, "token": token})
    row = engine.start(provider)
    return JSONResponse({"ok": True, "slug": row.slug, "state": row.state, "token": row.token})


async def get_mint(request: Request) -> Response:
    """``{slug, state:"idle"}`` without a row, else ``{slug, state, token, oauth_url?, reason?}``."""
    from starlette.responses import JSONResponse

    from kirocrew_connections.mint import mint_engine

    provider = await read_provider(request, request.query_params.get("slug"))
    return JSONResponse(mint_engine().view(provider.slug))


async def post_cancel(request: Request) -> Response:
    """Dispose the slug's mint if ``token`` still owns it (any when absent/null); ``{ok, slug, dropped}``.

    Idempotent, and it never touches MCP config: whether a cancelled connect
    uninstalls its entry is the card's decision, not the engine's.
    """
    from starlette.responses import JSONResponse

    from kirocrew_connections.mint import mint_engine

    body = await read_json_object(request, limit=MAX_BODY_BYTES)
    provider = await read_provider(request, body.get("slug"))
    token = body.get("token")
    if token is not None and (not isinstance(token, str) or not token):
        raise BadInputError("token must be a non-empty string or null", code="invalid_token")
    dropped = await mint_engine().cancel(provider.slug, token)
    return JSONResponse({"ok": True, "slug": provider.slug, "dropped": dropped})
