"""MCP over the owner's Unix socket, so the CLI twins reach the server that supervises the runs.

Only one process may own a state directory (it supervises the live runs), so a
``kirocrew conversations …`` command cannot open the database for writing while
a server runs. The owning server therefore also serves the same tools on
``<state dir>/control.sock``: the socket lives in the 0700 state directory, is
itself 0600, and a peer whose uid differs from ours is dropped (``SO_PEERCRED``).

Framing is the stdio transport's: one JSON-RPC message per line.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from kirocrew_core.host.mcp_client import client_session
from kirocrew_core.host.transport import line_transport, peer_credentials

SOCKET_NAME = "control.sock"
CONNECT_TIMEOUT_SECS = 5.0


def socket_path(state_dir: Path) -> Path:
    return Path(state_dir) / SOCKET_NAME


async def serve(path: Path, handle: Callable[[Any, Any], Awaitable[None]]) -> None:
    """Accept connections on ``path`` until cancelled; ``handle(read, write)`` serves one MCP session."""
    import anyio

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # we own the state directory: a leftover socket is ours and dead
    old = os.umask(0o177)
    try:
        listener = await anyio.create_unix_listener(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)

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


@contextlib.asynccontextmanager
async def connect(path: Path) -> AsyncIterator[Any]:
    """An initialized MCP ``ClientSession`` to the server owning ``path``'s state directory.

    Raises ``OSError`` when nothing listens there (no server, or a stale socket). An error raised
    in the ``with`` body (a tool's :class:`~kirocrew_core.errors.KirocrewError`, say) leaves as
    itself, not wrapped in the ``ExceptionGroup`` of the SDK's task groups, so the CLI still
    prints its ``error[code]`` and exits with its status.
    """
    import anyio

    with anyio.fail_after(CONNECT_TIMEOUT_SECS):
        stream = await anyio.connect_unix(path)
    async with client_session(stream, timeout=CONNECT_TIMEOUT_SECS) as session:
        yield session
