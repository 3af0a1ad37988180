"""kirocrew-cron hook implementations (entry point ``cron``).

``kirocrew --help`` imports this module, so it stays cheap: commands are registered by
import path, and the store, the scheduler, the tools and the routes are imported by the
functions that build them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core import hookimpl

from kirocrew_cron import settings  # noqa: F401 - declares the cron.* config keys when the plugin loads

from kirocrew_core.contributions import DashboardPage

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

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
def gateway_routes() -> list[BaseRoute]:
    """``/api/cron…``: the Cron page's JSON routes (the person's view of every job)."""
    from kirocrew_cron.api import routes

    return routes()


async def _list_page(request: Request) -> Response:
    from kirocrew_cron.page import list_page

    return await list_page(request)


async def _job_page(request: Request) -> Response:
    from kirocrew_cron.page import job_page

    return await job_page(request)


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    return [DashboardPage("/cron", "Cron", _list_page,
                          "Scheduled Kiro work: every job, its next and last run, pause, run now, add and edit",
                          package="kirocrew_cron"),
            DashboardPage("/cron/{job_id}", "Cron job", _job_page,
                          "One cron job: its history with links to the runs, its actions and its settings",
                          package="kirocrew_cron")]
