"""Core builtin plugin: the knowledge library (``local_knowledge_search``, ``knowledge_dedup``,
``kirocrew knowledge`` and its ingestion in the host).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer, HostService


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("knowledge", "kirocrew_core.knowledge.cli:knowledge",
                         "Add, list, remove, reindex and search the knowledge library sessions read.")


@hookimpl
def host_services() -> list[HostService]:
    """Re-reads the knowledge sources in a worker thread while the host runs, as their files change (never
    awaited by its start)."""
    from kirocrew_core.contributions import HostService
    from kirocrew_core.knowledge.service import ingestor

    return [HostService("knowledge", ingestor.start, ingestor.stop)]


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.knowledge.tools import knowledge_tools

    return knowledge_tools()


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    """``kirocrew-knowledge-admin``: the owner's library changes, which ``kirocrew knowledge`` calls."""
    from kirocrew_core.knowledge.admin import hosted_server

    return [hosted_server()]
