"""Core builtin plugin: the knowledge library (``local_knowledge_search``, ``knowledge_dedup``,
``kirocrew knowledge`` and its ingestion in the host).

Also the Knowledge page, with the Skills section, and its routes (:mod:`kirocrew_core.knowledge.page`,
:mod:`kirocrew_core.knowledge.api`).

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


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from kirocrew_core.knowledge.api import routes

    return routes()


async def _page(request: Request) -> Response:
    from kirocrew_core.knowledge.page import knowledge_page

    return await knowledge_page(request)


async def _source(request: Request) -> Response:
    from kirocrew_core.knowledge.page import source_page

    return await source_page(request)


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    return [DashboardPage("/knowledge", "Knowledge", _page,
                          "The library sessions search: its sources and their state, a search, one document removed; "
                          "the skills sessions see, the broken ones with why, and installing one from a registry.",
                          package="kirocrew_core.knowledge"),
            DashboardPage("/knowledge/sources/{id:int}", "Knowledge source", _source,
                          package="kirocrew_core.knowledge")]
