"""Core builtin plugin: history (the ``list_sessions`` / ``get_chat_session`` / ``search_chat_history`` tools,
``kirocrew history`` and the History page).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.contributions import DashboardPage
from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CoreMcpTool


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("history", "kirocrew_core.history.cli:history",
                         "List, read, search and export past sessions (kiro-cli's own and kirocrew's).")


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.history.tools import history_tools

    return history_tools()


async def _history(request: Request) -> Response:
    from kirocrew_core.history.page import history_page

    return await history_page(request)


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    return [DashboardPage("/history", "History", _history,
                          "Search every past session (kiro-cli's own and kirocrew's conversations), read one, "
                          "export it as Markdown.", package="kirocrew_core.history")]
