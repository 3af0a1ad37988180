"""kirocrew-cron hook implementations (entry point ``cron``).

``kirocrew --help`` imports this module, so it stays cheap: commands are registered by
import path, and the store, the scheduler, the tools and the routes are imported by the
functions that build them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core import hookimpl
from kirocrew_core.contributions import HostedMcpServer, HostService, ManagedMcpServer

from kirocrew_cron import settings  # noqa: F401 - declares the cron.* config keys when the plugin loads

if TYPE_CHECKING:
    from kirocrew_core.cli import KirocrewCLI

SERVER_NAME = "kirocrew-cron"
SERVER_COMMAND = "mcp-cron"
DESCRIPTION = "Scheduled Kiro work: a session's own cron jobs (add, list, update, pause, trigger…)."


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command(SERVER_COMMAND, "kirocrew_cron.command:mcp_cron",
                         "The kirocrew-cron MCP server on stdio (for kiro-cli sessions): a relay to the host.")


@hookimpl
def managed_mcp_servers() -> list[ManagedMcpServer]:
    # Auto-approve may be granted (the governance ceiling still decides): a session acts only on its own jobs
    # (strict identity), each job runs with no more authority than the session that made it, commands are
    # vetted when stored and again when fired, and governance.cron can switch scheduling off.
    return [ManagedMcpServer(SERVER_NAME, (SERVER_COMMAND,), may_auto_approve=True, description=DESCRIPTION)]


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    return [HostedMcpServer(SERVER_NAME, SERVER_COMMAND, _hosted_server, DESCRIPTION)]


async def _hosted_server() -> object:
    from kirocrew_cron.server import hosted_server

    return await hosted_server()


@hookimpl
def host_services() -> list[HostService]:
    from kirocrew_cron.service import host_service

    return [host_service()]


# The parts that follow are added by the modules that build them: gateway_routes and dashboard_pages
# (api.py, page.py).
