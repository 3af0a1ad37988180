"""kirocrew-cron hook implementations (entry point ``cron``).

Every ``kirocrew`` run that loads plugins imports this module, so it stays cheap: commands are registered by
import path, and the store, the scheduler, the tools and the routes are imported by the
functions that build them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core import hookimpl
from kirocrew_core.contributions import DashboardPage, HostedMcpServer, HostService, ManagedMcpServer

from kirocrew_cron import settings  # noqa: F401 - declares the cron.* config keys when the plugin loads

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CronJobRef

SERVER_NAME = "kirocrew-cron"
SERVER_COMMAND = "mcp-cron"
DESCRIPTION = "Scheduled Kiro work: a session's own cron jobs (add, list, update, pause, trigger…)."


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command(SERVER_COMMAND, "kirocrew_cron.command:mcp_cron",
                         "The kirocrew-cron MCP server on stdio (for kiro-cli sessions): a relay to the host.")
    cli.add_lazy_command("cron", "kirocrew_cron.cli:cron",
                         "Scheduled Kiro work: add, list, pause, trigger cron jobs and see their history.")


# A second host_mcp_servers implementation (specname): the admin server is the CLI part's, the eight
# tools' server is server.py's; one function each keeps their owners apart.
@hookimpl(specname="host_mcp_servers")
def cron_admin_server() -> list[HostedMcpServer]:
    from kirocrew_cron.admin import hosted_server

    return [hosted_server()]


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
def conversation_origin(conversation_id: str) -> str | None:
    """``cron`` for a conversation a job's agent run uses or used (an artifact it saves is recorded as cron's)."""
    from kirocrew_core.coretools.contract import ToolRefused

    from kirocrew_cron.service import cron_host

    try:
        host = cron_host()
    except ToolRefused:  # no host here, or its cron service has not started: no job runs in this process
        return None
    return "cron" if host.job_of_conversation(conversation_id) else None


@hookimpl
def conversation_cron_job(conversation_id: str) -> CronJobRef | None:
    """The job a conversation is a run of, and the conversation that made it (a message's attribution and
    ``send_message(session="origin")``)."""
    from kirocrew_core.contributions import CronJobRef
    from kirocrew_core.coretools.contract import ToolRefused

    from kirocrew_cron.service import cron_host

    try:
        host = cron_host()
    except ToolRefused:  # no host here, or its cron service has not started: no job runs in this process
        return None
    job_id = host.job_of_conversation(conversation_id)
    job = host.store.get(job_id) if job_id else None
    if job is None:
        return None
    kind, _, owner = job.owner.partition(":")
    return CronJobRef(job.id, job.name, owner if kind == "conversation" and owner else None)


@hookimpl
def host_services() -> list[HostService]:
    from kirocrew_cron.service import host_service

    return [host_service()]


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
