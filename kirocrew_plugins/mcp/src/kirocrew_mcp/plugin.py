"""kirocrew-mcp hook implementations (entry point ``mcp``).

Every ``kirocrew`` run that loads plugins imports this module, so it stays cheap: the command
groups are registered by import path, and the routes, checks and shutdown
import their modules (and starlette) only when called.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from kirocrew_core import hookimpl
from kirocrew_core.contributions import DashboardPage, DoctorCheck, DoctorResult, DoctorStatus, HostService

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.plugins import KirocrewPluginManager


def check_scope_files() -> DoctorResult:
    """Every MCP scope file and the rendered agent is absent or usable, by the check apply and the API use."""
    from kirocrew_core import home
    from kirocrew_core.jsonfile import ReadState, read_json

    from kirocrew_mcp.scopes import all_scopes, mcp_document_problem, read_scope_servers

    lines: list[str] = []
    worst: DoctorStatus = "ok"
    for scope in all_scopes():
        read = read_scope_servers(scope)
        if read.ok:
            lines.append(f"{scope.label}: {scope.path}: {read.state.value}")
        else:
            lines.append(f"{scope.label}: {read.problem()}")
            worst = "fail"
    agent = read_json(home.rendered_agent_file())
    problem = mcp_document_problem(agent.document) if agent.state is ReadState.DOCUMENT else ""
    where = f"{agent.path}:{agent.line}" if agent.line else str(agent.path)
    if not agent.known:
        lines.append(f"rendered agent: {where}: {agent.state.value}: {agent.error}")
        worst = "fail"
    elif problem:
        lines.append(f"rendered agent: {where}: malformed: {problem}")
        worst = "fail"
    else:
        lines.append(f"rendered agent: {where}: {agent.state.value}")
    summary = "MCP scope files are readable" if worst == "ok" else "an MCP scope file cannot be used"
    return DoctorResult(worst, summary, "\n".join(lines))


def check_agent_file() -> DoctorResult:
    """The rendered agent holds the managed servers, ``includeMcpJson`` is false, the last rebuild was clean."""
    from kirocrew_mcp.health import check_agent_file as check

    return check()


def check_provider_globals() -> DoctorResult:
    """No kirocrew-managed server name sits in the Kiro global or a provider global."""
    from kirocrew_mcp.health import check_provider_globals as check

    return check()


def check_probe_status() -> DoctorResult:
    """Servers whose last probe failed (never starts a server).

    Probe results live in the process that probed: the host's gateway keeps them. So
    this process's own cache is judged when it has results (the dashboard's doctor runs
    in the host), and otherwise a running host is asked for its cached results
    (``GET /api/mcp/probe``, which starts nothing); with neither, the check says so.
    """
    from kirocrew_core.gateway.owner_client import OwnerApiError, call, running_host_url

    from kirocrew_mcp.discovery import discover
    from kirocrew_mcp.probe import STATUS_ERROR, STATUS_NEEDS_AUTH, STATUS_OK, STATUS_OUTDATED

    probed_states = (STATUS_OK, STATUS_OUTDATED, STATUS_ERROR, STATUS_NEEDS_AUTH)
    rows = [row.as_dict() for row in discover().rows if not row.disabled]
    where = "this process"
    if not any(row["status"] in probed_states for row in rows):
        url = running_host_url()
        if url is not None:
            try:
                answer = call("GET", "/api/mcp/probe", url=url, timeout=30)
            except OwnerApiError as exc:
                return DoctorResult("warn", "could not read the running host's MCP probe results",
                                    f"{url}: {exc.code}: {exc.message}")
            rows = [r for r in answer.get("servers", []) if isinstance(r, dict) and not r.get("disabled")]
            where = f"the running host ({url})"
    failing = [row for row in rows if row.get("status") == STATUS_ERROR]
    needs_auth = [row for row in rows if row.get("status") == STATUS_NEEDS_AUTH]
    probed = [row for row in rows if row.get("status") in probed_states]
    lines = [f"{row['name']}: error: {row.get('error')}" for row in failing]
    lines += [f"{row['name']}: needs sign-in (OAuth); authorize it in kiro-cli" for row in needs_auth]
    if failing or needs_auth:
        count = len(failing) + len(needs_auth)
        return DoctorResult("warn", f"{count} of {len(rows)} MCP servers failed their last probe in {where}",
                            "\n".join(lines))
    if not probed:
        return DoctorResult(
            "ok",
            f"no probe results in {where} for {len(rows)} enabled MCP servers",
            "the dashboard's MCP servers page probes them; `kirocrew mcp probe --all` probes now",
        )
    return DoctorResult("ok", f"{len(probed)} probed MCP servers answered their last probe in {where}")


@hookimpl
def addhooks(pluginmanager: KirocrewPluginManager) -> None:
    from kirocrew_mcp import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("mcp", "kirocrew_mcp.cli:mcp", "Render, list, probe and apply MCP servers.")
    cli.add_lazy_command("apps", "kirocrew_mcp.apps_cli:apps", "List, enable and disable apps and their MCP servers.")
    cli.add_lazy_command(
        "cli-setup", "kirocrew_mcp.cli:cli_setup", "Remove stale kirocrew-managed entries from provider MCP globals."
    )


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from kirocrew_mcp.api import routes

    return routes()


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    from kirocrew_mcp.page import PACKAGE, mcp_page

    return [DashboardPage("/mcp", "MCP servers", mcp_page,
                          "Which MCP servers kiro-cli sessions load: scopes, probes, tools, add and uninstall",
                          package=PACKAGE)]


@hookimpl
def gateway_startup(app: Starlette) -> None:
    from kirocrew_mcp.api import startup

    startup(app)


@hookimpl
def gateway_stopping(app: Starlette) -> Any:
    from kirocrew_mcp.api import shutdown

    return shutdown(app)


@hookimpl
def gateway_shutdown(app: Starlette) -> Any:
    from kirocrew_mcp.api import shutdown

    return shutdown(app)


@hookimpl(tryfirst=True)
def host_services() -> list[HostService]:
    """Render the agent file when the host starts (in the background; a failure is logged).

    ``tryfirst``: the render is under way before any other service (conversations, cron's catch-up)
    can start a session, so ``agent_file_ready`` always finds it to wait for.
    """
    from kirocrew_mcp.hosted import startup_render

    return [startup_render().service()]


@hookimpl
def agent_file_ready() -> Awaitable[str | None]:
    """No session starts on the rendered agent before the host's startup render, nor on an unusable file."""
    from kirocrew_mcp.hosted import agent_file_problem

    return agent_file_problem()


@hookimpl
def doctor_checks() -> list[DoctorCheck]:
    return [
        DoctorCheck("mcp.scope-files", check_scope_files,
                    "MCP scope files and the rendered agent are absent or valid MCP files"),
        DoctorCheck("mcp.agent-file", check_agent_file,
                    "the rendered agent holds the managed servers and never re-reads the Kiro global"),
        DoctorCheck("mcp.provider-globals", check_provider_globals,
                    "no kirocrew-managed server lingers in a provider global"),
        DoctorCheck("mcp.probe-status", check_probe_status, "no MCP server failed its last probe"),
    ]
