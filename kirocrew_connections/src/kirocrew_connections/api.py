"""The connections HTTP API (owner-authenticated by the gateway).

=====================================  ============================================
``GET /api/connections/status``        every provider card's authorization state
``POST /api/connections/premint``      warm every card's approval URL (the page, once per mount)
``POST /api/connections/mint``         adopt the premint, or start a cold consent, for a provider
``GET /api/connections/mint?slug=``    one mint's state
``POST /api/connections/cancel``       dispose a mint (token-fenced, idempotent)
``POST /api/connections/test``         a promptless session: does the connection answer?
``POST /api/connections/disconnect``   remove the entry and, when nobody shares it, the grant
``POST /api/connections/install``      Connect's first step: the provider's MCP entry, enabled
``POST /api/connections/relay``        a remote browser's return address, delivered to kiro-cli's listener
=====================================  ============================================

Handlers are imported when a request arrives, so building the gateway (and the
status card) never imports the mint engine.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", "/api/connections/status", "kirocrew_connections.status_api:get_status"),
    ("POST", "/api/connections/premint", "kirocrew_connections.premint_api:post_premint"),
    ("POST", "/api/connections/mint", "kirocrew_connections.mint_api:post_mint"),
    ("GET", "/api/connections/mint", "kirocrew_connections.mint_api:get_mint"),
    ("POST", "/api/connections/cancel", "kirocrew_connections.mint_api:post_cancel"),
    ("POST", "/api/connections/test", "kirocrew_connections.liveness_api:post_test"),
    ("POST", "/api/connections/disconnect", "kirocrew_connections.disconnect_api:post_disconnect"),
    ("POST", "/api/connections/install", "kirocrew_connections.page:post_install"),
    ("POST", "/api/connections/relay", "kirocrew_connections.relay:post_relay"),
)


def _lazy(target: str) -> Any:
    module, _, attribute = target.partition(":")

    async def endpoint(request: Request) -> Response:
        handler = getattr(import_module(module), attribute)
        return await handler(request)

    endpoint.__name__ = attribute
    return endpoint


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    by_path: dict[str, dict[str, str]] = {}
    for method, path, target in ROUTES:
        by_path.setdefault(path, {})[method] = target
    out: list[BaseRoute] = []
    for path, methods in by_path.items():
        if len(methods) == 1:
            ((method, target),) = methods.items()
            out.append(Route(path, _lazy(target), methods=[method]))
        else:
            handlers = {m: _lazy(t) for m, t in methods.items()}

            async def dispatch(request: Request, handlers: dict[str, Any] = handlers) -> Response:
                return await handlers[request.method](request)

            out.append(Route(path, dispatch, methods=sorted(methods)))
    return out
