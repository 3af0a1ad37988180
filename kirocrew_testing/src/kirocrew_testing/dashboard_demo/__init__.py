"""A small third-party dashboard page the browser tests install (the plugin guide's worked example is another:
docs/plugins/worked-example.md, what ``kirocrew plugin new`` writes).

It is a real plugin: an entry point naming this module adds the page ``/demo/echo``
(its template and script ship in this package's ``templates/`` and ``static/``) and the
JSON route it calls. The browser tests install it into a real ``kirocrew serve`` to
drive a plugin page, the shared ``shell.js`` helpers and the CSP end to end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core import hookimpl
from kirocrew_core.contributions import DashboardPage

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

#: Longest message the echo route accepts.
MAX_MESSAGE = 200


async def echo_page(request: Request) -> Response:
    """``GET /demo/echo``: the page, rendered inside the shell's layout."""
    from kirocrew_core.gateway.shell import render_page

    return render_page(request, "kirocrew_testing.dashboard_demo/echo.html", title="Echo",
                       limit=MAX_MESSAGE)


async def echo(request: Request) -> Response:
    """``POST /api/dashboard-demo/echo {"message"}``: the message back, refused when empty or too long."""
    from starlette.responses import JSONResponse

    from kirocrew_core.errors import BadInputError
    from kirocrew_core.gateway.body import read_json_object

    body = await read_json_object(request)
    message = body.get("message")
    if not isinstance(message, str) or not message.strip():
        raise BadInputError("type a message to echo", code="bad_request")
    if len(message) > MAX_MESSAGE:
        raise BadInputError(f"a message is at most {MAX_MESSAGE} characters", code="bad_request")
    return JSONResponse({"echo": message})


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    return [DashboardPage("/demo/echo", "Echo", echo_page, "Send a message and read it back",
                          package="kirocrew_testing.dashboard_demo")]


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [Route("/api/dashboard-demo/echo", echo, methods=["POST"])]
