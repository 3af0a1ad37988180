"""Core builtin plugin: inbound webhooks (``register_hook``, ``POST /webhooks/{hook_id}``, ``kirocrew hooks``,
the Hooks page and its routes).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation. The webhook route
is the one gateway path the owner check lets through unauthenticated
(:data:`kirocrew_core.gateway.auth.WEBHOOK_PATH_PREFIX`); only this plugin may route there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.contributions import DashboardPage
from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer, HostService, ProtectedPath


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("hooks", "kirocrew_core.webhooks.cli:hooks",
                         "List, show and revoke the inbound webhooks sessions registered.")


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.webhooks.tools import hook_tools

    return hook_tools()


@hookimpl
def host_services() -> list[HostService]:
    """``webhooks``: busy while hooks are registered, so a host started on demand stays up to receive them."""
    from kirocrew_core.contributions import HostService
    from kirocrew_core.webhooks import service

    return [HostService("webhooks", service.start, service.stop, service.busy)]


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    """``kirocrew-hooks-admin``: the owner's list, show and revoke, which ``kirocrew hooks`` calls."""
    from kirocrew_core.webhooks.admin import hosted_server

    return [hosted_server()]


@hookimpl
def protected_paths() -> list[ProtectedPath]:
    """The hooks store: sessions never write it (the crew home's rule), and read it only with the owner's say-so:
    it holds every conversation's context summaries, not only the reader's."""
    from kirocrew_core.contributions import ProtectedPath
    from kirocrew_core.webhooks.store import store_file

    return [ProtectedPath(store_file().parent, secret=True, label="the inbound webhooks store")]


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from starlette.routing import Route

    from kirocrew_core.gateway.auth import WEBHOOK_PATH_PREFIX
    from kirocrew_core.webhooks.api import routes
    from kirocrew_core.webhooks.inbound import receive

    return [Route(WEBHOOK_PATH_PREFIX + "{hook_id}", receive, methods=["POST"], name="webhook_receive"), *routes()]


async def _page(request: Request) -> Response:
    from kirocrew_core.webhooks.page import hooks_page

    return await hooks_page(request)


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    return [DashboardPage("/hooks", "Hooks", _page,
                          "The inbound webhooks sessions registered: whose, why, deliveries; revoke one.",
                          package="kirocrew_core.webhooks")]
