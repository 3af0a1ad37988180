"""kirocrew-cron hook implementations (entry point ``cron``).

``kirocrew --help`` imports this module, so it stays cheap: commands are registered by
import path, and the store, the scheduler, the tools and the routes are imported by the
functions that build them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core import hookimpl
from kirocrew_core.contributions import HostService

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


# The parts that follow are added by the modules that build them: managed_mcp_servers and
# host_mcp_servers (server.py), host_services (service.py), gateway_routes and dashboard_pages (api.py, page.py).


@hookimpl
def host_services() -> list[HostService]:
    from kirocrew_cron.service import host_service

    return [host_service()]
