"""kirocrew-conversations hook implementations (entry point ``conversations``).

Every ``kirocrew`` run that loads plugins imports this module, so it stays cheap: commands are
registered by import path, and the authority backends' modules and the host's
conversations service (:mod:`kirocrew_conversations.hosted`) are imported only
when their hook is called.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from kirocrew_core import hookimpl
from kirocrew_core.contributions import (
    AuthorityBackend,
    CoreMcpTool,
    DashboardPage,
    HistorySource,
    HistorySummarizer,
    HostedMcpServer,
    HostService,
    ManagedMcpServer,
    ProtectedPath,
    WorkerLoad,
)

if TYPE_CHECKING:
    from pathlib import Path

    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI

SERVER_NAME = "kirocrew-conversations"
SERVER_COMMAND = "mcp-conversations"  # the subcommand whose bare form relays to the host
DESCRIPTION = "Durable, parallel Kiro conversations over ACP."


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command(SERVER_COMMAND, "kirocrew_conversations.server_command:mcp_conversations",
                         "The Kiro Conversations MCP server on stdio (for MCP clients): a relay to the host, "
                         "or in process with --standalone.")
    cli.add_lazy_command("conversations", "kirocrew_conversations.cli:conversations",
                         "Spawn, wait on and manage durable Kiro conversations from the shell.")
    cli.add_lazy_command("spawn", "kirocrew_conversations.spawn_cli:spawn",
                         "Spawn sub-agent conversations and list every sub-agent (twins of spawn_run, spawn_list).")
    cli.add_lazy_command("run", "kirocrew_conversations.spawn_cli:run_task",
                         "Run a task file as a new conversation and print its id (twin of task_run).")
    cli.add_lazy_command("workflow", "kirocrew_conversations.workflow_cli:workflow",
                         "Run, list, show and cancel workflow runs (twins of the workflow_* tools).")


@hookimpl
def managed_mcp_servers() -> list[ManagedMcpServer]:
    # Auto-approve may be granted (the governance ceiling still decides): every tool is bounded, deleting
    # needs an archived conversation and its exact name, and nothing commits, merges or pushes.
    return [ManagedMcpServer(SERVER_NAME, (SERVER_COMMAND,), may_auto_approve=True, description=DESCRIPTION)]


@hookimpl
def authority_backends() -> list[AuthorityBackend]:
    """``unrestricted`` everywhere; ``read_only``/``workspace_write`` by bubblewrap (Linux) or Seatbelt (macOS)."""
    from kirocrew_conversations.authority import UNRESTRICTED_BACKEND
    from kirocrew_conversations.sandbox import bwrap, seatbelt

    return [UNRESTRICTED_BACKEND, *bwrap.authority_backends(), *seatbelt.authority_backends()]


@hookimpl
def protected_paths() -> list[ProtectedPath]:
    """The conversations database (every conversation's prompts and replies) and its owner lock; the worktrees
    beside them are workspaces, left to the rules."""
    from kirocrew_conversations.state_paths import database_file, lock_file

    database = database_file()
    return [ProtectedPath(path, secret=True, label="the conversations database")
            for path in (database, database.with_name(database.name + "-wal"),
                         database.with_name(database.name + "-shm"), lock_file())]


@hookimpl
def host_services() -> list[HostService]:
    """The orchestrator and its state directory, owned by the host for its whole life."""
    from kirocrew_conversations.hosted import hosted

    return [hosted().host_service()]


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    from kirocrew_conversations.hosted import hosted

    return [hosted().hosted_server()]


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    """The kirocrew-core tools of conversations: the session directives and ``ask_question`` (their effects land
    on the caller's own conversation), the sub-agent tools, ``wait`` and ``task_run`` (rebuilt per
    ``tools/list``: they quote the live cap) and the workflow tools. Imported when listed."""
    from kirocrew_conversations import ask_tool, directive_tools, subagent_tools, workflow_tools

    return [*directive_tools.tools(), ask_tool.tool(), *subagent_tools.tools(), *workflow_tools.tools()]


@hookimpl
def worker_load() -> list[WorkerLoad]:
    """The orchestrator's live kiro-cli workers and the sub-agent cap, for kirocrew-core's ``resource_status``."""
    from kirocrew_conversations.hosted import hosted

    return [hosted().worker_load()]


@hookimpl
def known_workspaces() -> list[Path]:
    """The workspaces (and worktrees) of every conversation, for Disconnect's project-agent census."""
    from kirocrew_conversations.workspaces import known_workspaces as from_database

    return from_database()


@hookimpl
def conversation_ancestry(conversation_id: str) -> list[str]:
    """Who spawned or created the conversation, and so on up (kirocrew-core's artifacts scope by that tree)."""
    from kirocrew_conversations.workspaces import conversation_ancestry as from_database

    return from_database(conversation_id)


@hookimpl
async def conversation_deliver(conversation_id: str, text: str) -> str | None:
    """Queue ``text`` as the conversation's next run (core's webhooks and ``send_message(session="origin")``)."""
    from kirocrew_conversations.hosted import hosted

    service = await hosted().ready()
    run = await service.deliver(conversation_id, text)
    return run.id


@hookimpl
def history_sources() -> list[HistorySource]:
    """The conversations (names, workspaces, run replies) for the history search and the History page."""
    from kirocrew_conversations.history_source import history_source

    return [history_source()]


@hookimpl
def history_summarizers() -> list[HistorySummarizer]:
    """Session summaries for ``list_sessions`` with ``summarize``: one prompt each on a kiro-cli with no tools."""
    from kirocrew_conversations.summaries import summarizer

    return [summarizer()]


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    """``/api/conversations…``: the dashboard's JSON routes over the host's service (one per tool it uses), and
    ``/api/workflows/runs…`` of the Workflows page."""
    from kirocrew_conversations.api import routes
    from kirocrew_conversations.workflow_page import routes as workflow_routes

    return [*routes(), *workflow_routes()]


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    from kirocrew_conversations.page import PACKAGE, conversation_page, list_page
    from kirocrew_conversations.workflow_page import workflows_page

    return [DashboardPage("/conversations", "Conversations", list_page,
                          "Start, follow and answer Kiro conversations", package=PACKAGE),
            DashboardPage("/conversations/{conversation_id}", "Conversation", conversation_page,
                          "One conversation's runs, replies, events and actions", package=PACKAGE),
            DashboardPage("/workflows", "Workflows", workflows_page,
                          "Workflow runs: their status, ceilings and results; cancel a running one", package=PACKAGE)]


# optionalhook: kirocrew-mcp declares this hook; without it installed there is simply nobody to ask.
@hookimpl(optionalhook=True)
def restart_sessions(reason: str) -> Awaitable[int]:
    """Close idle kiro-cli workers now and busy ones after their run, so each run loads the current MCP config."""
    from kirocrew_conversations.hosted import hosted

    return hosted().restart_sessions(reason)
