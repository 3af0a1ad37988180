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
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

SOCKET_NAME = "control.sock"
MAX_LINE_BYTES = 64 * 1024 * 1024  # a 200,000-character message with four 25 MiB image paths fits easily
CONNECT_TIMEOUT_SECS = 5.0


def socket_path(state_dir: Path) -> Path:
    return Path(state_dir) / SOCKET_NAME


@contextlib.asynccontextmanager
async def line_transport(stream: Any) -> AsyncIterator[tuple[Any, Any]]:
    """(read, write) MCP message streams over one connected anyio byte stream."""
    import anyio
    import mcp_types as types
    from anyio.streams.buffered import BufferedByteReceiveStream
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    incoming_writer, incoming = create_context_streams[SessionMessage | Exception](0)
    outgoing, outgoing_reader = create_context_streams[SessionMessage](0)
    buffered = BufferedByteReceiveStream(stream)

    async def reader() -> None:
        async with incoming_writer:
            while True:
                try:
                    line = await buffered.receive_until(b"\n", MAX_LINE_BYTES)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                        anyio.ClosedResourceError):
                    return
                except anyio.DelimiterNotFound as exc:  # an oversized line: drop the connection
                    await incoming_writer.send(exc)
                    return
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # noqa: BLE001 - the session reads a bad line as an error
                    await incoming_writer.send(exc)
                    continue
                await incoming_writer.send(SessionMessage(message))

    async def writer() -> None:
        async with outgoing_reader:
            async for session_message in outgoing_reader:
                data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await stream.send(data.encode("utf-8") + b"\n")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield incoming, outgoing
        finally:
            tg.cancel_scope.cancel()


def _peer_uid(stream: Any) -> int | None:
    from anyio.abc import SocketAttribute

    raw = stream.extra(SocketAttribute.raw_socket, None)
    if raw is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = raw.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


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
            if _peer_uid(stream) not in (None, os.getuid()):
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
    from mcp import ClientSession

    with anyio.fail_after(CONNECT_TIMEOUT_SECS):
        stream = await anyio.connect_unix(path)
    failure: Exception | None = None
    async with stream, line_transport(stream) as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(CONNECT_TIMEOUT_SECS):
            await session.initialize()
        try:
            yield session
        except Exception as exc:  # noqa: BLE001 - re-raised below, once the session has closed cleanly
            failure = exc
    if failure is not None:
        raise failure
