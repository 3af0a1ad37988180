"""Core builtin plugin: history (the ``list_sessions`` / ``get_chat_session`` / ``search_chat_history`` tools,
``kirocrew history`` and the History page).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.contributions import DashboardPage
from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    import asyncio
    import threading

    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CoreMcpTool, HostService
    from kirocrew_core.history.index import HistoryIndex


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("history", "kirocrew_core.history.cli:history",
                         "List, read, search and export past sessions (kiro-cli's own and kirocrew's).")


@hookimpl
def host_services() -> list[HostService]:
    """Watches kiro-cli's session stores while the host runs and brings the index up to date at start."""
    from kirocrew_core.contributions import HostService

    return [HostService("history", _warm.start, _warm.stop)]


class _WarmIndex:
    """The history's part of the host: its session watcher and the start-time refresh.

    Both start in a worker thread the host's start never awaits (the watcher walks kiro-cli's
    session folders; the first refresh may build the whole index); stop ends the refresh between
    two sessions, then closes the watcher, whose thread ends with it.
    """

    def __init__(self) -> None:
        self._stop: threading.Event | None = None
        self._task: asyncio.Future[None] | None = None
        self._watched: HistoryIndex | None = None

    async def start(self) -> None:
        import asyncio
        import threading

        self._stop = threading.Event()
        self._task = asyncio.ensure_future(asyncio.to_thread(self._refresh, self._stop))

    def _refresh(self, stop: threading.Event) -> None:
        import logging

        from kirocrew_core.errors import KirocrewError
        from kirocrew_core.history.index import shared

        log = logging.getLogger(__name__)
        try:
            index = shared()
            if not stop.is_set():
                index.watch()
                self._watched = index
            report = index.refresh(stop)
        except KirocrewError as exc:
            log.warning("the history index could not be brought up to date: %s", exc.message)
            return
        except Exception:  # the host runs on; the next answer refreshes again
            log.exception("the history index could not be brought up to date")
            return
        for problem in report.problems:
            log.warning("history: %s", problem)

    async def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            await self._task
        if self._watched is not None:
            self._watched.unwatch()
        self._stop = self._task = self._watched = None


_warm = _WarmIndex()


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
