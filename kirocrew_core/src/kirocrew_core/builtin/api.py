"""Core gateway routes (``/api/health``, ``/api/plugins``), registered like any plugin's.

Starlette is imported inside the hook, not here: this module is loaded by
every ``kirocrew`` invocation (``--help`` included) as a default plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import BaseRoute


async def health(request: Request) -> JSONResponse:
    """``GET /api/health``: the gateway answers, and which version it runs."""
    from starlette.responses import JSONResponse

    from kirocrew_core import __version__

    return JSONResponse({"ok": True, "version": __version__})


async def plugins(request: Request) -> JSONResponse:
    """``GET /api/plugins``: the rows ``kirocrew plugins --all`` prints."""
    from starlette.responses import JSONResponse

    pm = request.app.state.kirocrew.pm
    return JSONResponse([record.as_dict() for record in pm.loaded_records()])


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/api/health", health, methods=["GET"], name="health"),
        Route("/api/plugins", plugins, methods=["GET"], name="plugins"),
    ]
