"""Core builtin plugin: the notification center (``send_notification``, its JSON routes, the feed page).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.contributions import DashboardPage
from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from kirocrew_core.contributions import CoreMcpTool


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.notifications.tools import notification_tools

    return notification_tools()


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from kirocrew_core.notifications.api import routes

    return routes()


async def _feed(request: Request) -> Response:
    from kirocrew_core.notifications.page import feed_page

    return await feed_page(request)


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    return [DashboardPage("/notifications", "Notifications", _feed,
                          "What crew sessions published with send_notification: newest first, with links and actions.",
                          package="kirocrew_core.notifications")]
