"""kirocrew-computer hook implementations (entry point ``computer``).

Every ``kirocrew`` run that loads plugins imports this module, so it stays cheap: commands are
registered by import path and the routes import starlette only when built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kirocrew_core import hookimpl
from kirocrew_core.contributions import DashboardPage, HostedMcpServer, HostService, ManagedMcpServer

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.plugins import KirocrewPluginManager

SERVER_NAME = "kirocrew-computer"
SERVER_COMMAND = "mcp-computer"
DESCRIPTION = "Gated computer use: desktop apps through their accessibility tree."


@hookimpl
def addhooks(pluginmanager: KirocrewPluginManager) -> None:
    from kirocrew_computer import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command(SERVER_COMMAND, "kirocrew_computer.server_command:mcp_computer",
                         "The kirocrew-computer MCP server on stdio (a relay to the host; --standalone: in process).")
    cli.add_lazy_command("computer", "kirocrew_computer.cli:computer",
                         "Computer use: keystone, doctor, and the gated tool harness.")


@hookimpl
def managed_mcp_servers() -> list[ManagedMcpServer]:
    # Never auto-approved: an auto-approved mutating tool would act on the desktop with no prompt at all.
    return [ManagedMcpServer(SERVER_NAME, (SERVER_COMMAND,), may_auto_approve=False, description=DESCRIPTION)]


@hookimpl
def host_services() -> list[HostService]:
    """The host's one chokepoint (its desktop driver starts on the first call), closed when the host stops."""
    from kirocrew_computer.hosted import hosted

    return [hosted().service()]


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    from kirocrew_computer.hosted import hosted

    return [hosted().hosted_server()]


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from kirocrew_computer.api import routes

    return routes()


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    from kirocrew_computer.page import PACKAGE, computer_page

    return [DashboardPage("/computer", "Computer use", computer_page,
                          "The keystone, allowed and denied apps, the doctor and the recent audited calls",
                          package=PACKAGE)]


@hookimpl
def governance_ceiling() -> list[str]:
    # Belt and braces with may_auto_approve=False: no allowedTools/autoApprove writer may grant any of its tools.
    return [f"@{SERVER_NAME}"]


@hookimpl
def computer_backends() -> list[Any]:
    """The Linux X11 driver (AT-SPI + XTEST through a system-Python helper); other platforms get none yet."""
    from kirocrew_computer.x11.backend import BACKEND_SPEC

    return [BACKEND_SPEC]
