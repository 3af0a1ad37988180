"""MCP over the owner's Unix socket, so the CLI twins reach the server that supervises the runs.

Only one process may own a state directory (it supervises the live runs), so a
``kirocrew conversations …`` command cannot open the database for writing while
a server runs. The owning server therefore also serves the same tools on
``<state dir>/control.sock``: the socket lives in the 0700 state directory, is
itself 0600, and a peer whose uid differs from ours is dropped (``SO_PEERCRED``).

Framing is the stdio transport's: one JSON-RPC message per line. The twins connect with the
standard-library client (:class:`~kirocrew_core.host.tool_client.ToolSession`), no SDK import.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kirocrew_core.host.client import HostError
from kirocrew_core.host.tool_client import ToolSession
from kirocrew_core.host.transport import line_transport, owner_only_listener, peer_credentials

SOCKET_NAME = "control.sock"
CONNECT_TIMEOUT_SECS = 5.0


def socket_path(state_dir: Path) -> Path:
    return Path(state_dir) / SOCKET_NAME


async def serve(path: Path, handle: Callable[[Any, Any], Awaitable[None]]) -> None:
    """Accept connections on ``path`` until cancelled; ``handle(read, write)`` serves one MCP session."""
    listener = await owner_only_listener(path)  # we own the state directory: a leftover socket is ours and dead

    async def connection(stream: Any) -> None:
        async with stream:
            creds = peer_credentials(stream)
            if creds is not None and creds[1] != os.getuid():
                return
            async with line_transport(stream) as (read, write):
                await handle(read, write)

    try:
        async with listener:
            await listener.serve(connection)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def connect(path: Path) -> ToolSession:
    """An initialized MCP session (the standard-library client) to the server owning ``path``'s state directory.

    Raises ``OSError`` when nothing listens there (no server, or a stale socket), ``TimeoutError``
    when the server does not accept or answer ``initialize`` within :data:`CONNECT_TIMEOUT_SECS`,
    and :class:`~kirocrew_core.host.client.HostError` ``host_disconnected`` when it closes first.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_SECS)
        sock.connect(os.fspath(path))
        session = ToolSession(sock, peer="the conversations server")
        session.initialize(CONNECT_TIMEOUT_SECS)
    except HostError as exc:
        sock.close()
        if exc.code == "host_timeout":
            raise TimeoutError(exc.message) from None
        raise
    except BaseException:
        sock.close()
        raise
    return session
