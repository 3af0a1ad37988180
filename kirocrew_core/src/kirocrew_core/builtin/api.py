"""Core gateway routes (``/api/health``, ``/api/plugins``, ``/api/session-tool-policy``), registered like any plugin's.

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
    """``GET /api/plugins``: the rows ``kirocrew plugins --all`` prints (a tool name clash in the open edition:
    ``tool_name_clash``, as there)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    from kirocrew_core.coretools.tool_names import collect_tools

    pm = request.app.state.kirocrew.pm
    await run_in_threadpool(collect_tools, pm)  # records the tool names a plugin was refused
    return JSONResponse([record.as_dict() for record in pm.loaded_records()])


SESSION_KEY_HEADER = "X-Session-Key"


async def session_tool_policy(request: Request) -> JSONResponse:
    """``GET /api/session-tool-policy``: the exclusions of the session ``X-Session-Key`` names.

    400 ``session_key_required`` / ``invalid_agent_name``, 404 ``session_not_found``: a caller
    that cannot name a live session never gets an empty policy. See
    :mod:`kirocrew_core.coretools.policy`.
    """
    import asyncio

    from starlette.responses import JSONResponse

    from kirocrew_core.coretools.contract import ToolRefused
    from kirocrew_core.coretools.identity import fingerprint
    from kirocrew_core.coretools.policy import policy_for_key

    key = request.headers.get(SESSION_KEY_HEADER, "")
    try:
        _, policy = await asyncio.to_thread(policy_for_key, key)
    except ToolRefused as exc:
        status = 404 if exc.code == "session_not_found" else 400
        await asyncio.to_thread(_audit_policy, "denied", fingerprint(key), code=exc.code)
        return JSONResponse(exc.as_dict(), status_code=status)
    return JSONResponse(policy.as_dict())


def _audit_policy(outcome: str, session: str, **fields: str) -> None:
    import contextlib

    from kirocrew_core import audit
    from kirocrew_core.errors import KirocrewError

    with contextlib.suppress(KirocrewError):  # the answer does not depend on the log
        audit.record("coretools.session_tool_policy", actor=session, outcome=outcome, session=session, **fields)


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/api/health", health, methods=["GET"], name="health"),
        Route("/api/plugins", plugins, methods=["GET"], name="plugins"),
        Route("/api/session-tool-policy", session_tool_policy, methods=["GET"], name="session-tool-policy"),
    ]
