"""``POST /api/connections/test``: the card's opt-in liveness check.

Always HTTP 200 with ``{schema_version, slug, verdict, code, toolCount}`` once
the request names a provider (``failed``/``grant_refused`` when the provider
refused the stored grant: the card then offers Reconnect); a bad body or unknown slug is a 400, and a
second Test while one runs (any slug) is a 409 ``test_in_flight`` naming the
running slug, because each Test spawns a kiro-cli and two at once would only
double the cost of the same answer. Importing this module never imports the
mint engine.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_connections.registry import Provider

SCHEMA_VERSION = 1
MAX_BODY_BYTES = 64 * 1024

_guard = threading.Lock()
_running: str | None = None
# Providers whose last Test found the stored grant refused (kiro-cli deleted it and asked for a consent).
_refused: set[str] = set()


def grant_refused_at_last_test(slug: str) -> bool:
    """Whether ``slug``'s last Test in this gateway found its grant refused by the provider.

    kiro-cli deletes a refused token itself, so afterwards the card would read
    "Not verified" with nothing to say why; the card shows the refusal and
    Reconnect instead, until a grant is back (:func:`forget_refusal`).
    """
    with _guard:
        return slug in _refused


def forget_refusal(slug: str) -> None:
    """The grant is back (or a Test passed): the card goes back to reading the grant alone."""
    with _guard:
        _refused.discard(slug)


def _remember(slug: str, code: str) -> None:
    from kirocrew_connections.liveness import GRANT_REFUSED

    with _guard:
        if code == GRANT_REFUSED:
            _refused.add(slug)
        else:
            _refused.discard(slug)


async def read_provider_request(request: Request) -> tuple[dict[str, Any], Provider]:
    """The JSON object body and the registry provider its ``slug`` names; 400 with a stable code otherwise."""
    from kirocrew_core.gateway.body import read_json_object

    from kirocrew_connections.mint_api import read_provider

    body = await read_json_object(request, limit=MAX_BODY_BYTES)
    return body, await read_provider(request, body.get("slug"))


def _claim(slug: str) -> str | None:
    """Take the single Test slot for ``slug``; the slug already running when it is taken."""
    global _running
    with _guard:
        if _running is not None:
            return _running
        _running = slug
        return None


def _release() -> None:
    global _running
    with _guard:
        _running = None


async def post_test(request: Request) -> Response:
    """Run the Test session for the body's ``slug`` and answer its verdict."""
    from starlette.responses import JSONResponse

    from kirocrew_core.errors import ConflictError
    from kirocrew_core.gateway.errors import error_response

    from kirocrew_mcp.public import mcp_server_alias

    from kirocrew_connections.liveness import run_connection_test

    _, provider = await read_provider_request(request)
    running = _claim(provider.slug)
    if running is not None:
        refused = ConflictError(f"a connection test for {running!r} is already running", code="test_in_flight")
        return error_response(refused, extra={"slug": running})
    try:
        verdict = await run_connection_test(mcp_server_alias(provider.slug), grant_url=provider.mcp_url)
    finally:
        _release()
    _remember(provider.slug, verdict.code)
    return JSONResponse({"schema_version": SCHEMA_VERSION, "slug": provider.slug, **verdict.as_dict()})
