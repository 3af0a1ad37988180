"""kirocrew-computer in the host: one chokepoint for every MCP client the host serves.

The host (``kirocrew serve``) owns one :class:`~kirocrew_computer.chokepoint.Chokepoint`,
so one driver (the desktop's accessibility connection) serves every connected session and
calls from all of them are serialised through the same gate; each connection gets an MCP
session on the one shared server. Nothing here is per caller: the chokepoint reads the
caller each request carries (:func:`kirocrew_core.host.caller.current_caller`) for its
audit actor and snapshot cache, and re-reads the keystone on every request.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import HostedMcpServer, HostService
from kirocrew_core.errors import KirocrewError

from kirocrew_computer.plugin import DESCRIPTION, SERVER_COMMAND, SERVER_NAME

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from kirocrew_computer.chokepoint import Chokepoint

SERVICE_NAME = "computer.chokepoint"


class HostedComputer:
    """The host's chokepoint and the one MCP server built on it, from ``start`` to ``stop``."""

    def __init__(self) -> None:
        self._chokepoint: Chokepoint | None = None
        self._server: Server[Any] | None = None
        self._building = asyncio.Lock()  # replaced at each start: a lock belongs to one event loop

    @property
    def chokepoint(self) -> Chokepoint | None:
        """The host's chokepoint while the service runs."""
        return self._chokepoint

    async def start(self) -> None:
        from kirocrew_computer.chokepoint import Chokepoint

        # The driver itself starts on the first call, in a worker thread: a host that never
        # serves computer use never touches the desktop.
        self._chokepoint = Chokepoint()
        self._building = asyncio.Lock()

    async def stop(self) -> None:
        chokepoint, self._chokepoint, self._server = self._chokepoint, None, None
        if chokepoint is not None:
            await chokepoint.aclose()

    async def server(self) -> Server[Any]:
        """The shared server for a new connection; refused when the service is not running.

        Built on the first connection, not at host start: importing the mcp SDK takes about a
        second, which a host started for the dashboard or a ping need not wait for. The import
        runs in a thread, so the host keeps answering meanwhile.
        """
        async with self._building:
            chokepoint = self._chokepoint
            if chokepoint is None:
                raise KirocrewError("computer use is not running in this host (its service stopped or never "
                                    "started)", code="computer_unavailable")
            if self._server is None:
                await asyncio.to_thread(_import_server_modules)
                from kirocrew_computer.server import build_server

                self._server = build_server(chokepoint)
            return self._server

    def service(self) -> HostService:
        return HostService(SERVICE_NAME, self.start, self.stop)

    def hosted_server(self) -> HostedMcpServer:
        return HostedMcpServer(SERVER_NAME, SERVER_COMMAND, self.server, DESCRIPTION)


def _import_server_modules() -> None:
    """The slow part of building the server (the mcp SDK), done off the event loop."""
    import importlib

    for module in ("mcp.types", "mcp.server.lowlevel", "kirocrew_computer.server"):
        importlib.import_module(module)


_HOSTED: HostedComputer | None = None


def hosted() -> HostedComputer:
    """This process's hosted computer use (one host per process; the plugin's two hooks share it)."""
    global _HOSTED
    if _HOSTED is None:
        _HOSTED = HostedComputer()
    return _HOSTED
