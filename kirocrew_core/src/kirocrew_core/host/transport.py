"""MCP sessions over a connected local socket: one JSON-RPC message per line, as on stdio.

One owner for the framing that the host's socket and the conversations control socket
(standalone mode) share. ``line_transport`` turns an anyio byte stream into the (read,
write) message streams the mcp SDK's ``Server.run`` and ``ClientSession`` take. The mcp
SDK is imported inside the functions: the relay never imports this module.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from kirocrew_core.host.client import peer_credentials as client_peer_credentials
from kirocrew_core.host.protocol import MAX_LINE_BYTES

# What the host may do to each incoming message before the SDK sees it (stamp the caller).
Inspect = Callable[[Any], None]
# Told about each outgoing message (the host counts requests in flight by the responses).
Observe = Callable[[Any], None]


@contextlib.asynccontextmanager
async def line_transport(stream: Any, *, inspect: Inspect | None = None, observe: Observe | None = None,
                         buffered: Any = None, max_line_bytes: int = MAX_LINE_BYTES
                         ) -> AsyncIterator[tuple[Any, Any]]:
    """(read, write) MCP message streams over one connected anyio byte stream.

    ``inspect`` gets each incoming message as parsed JSON and may change it in place;
    ``observe`` gets each outgoing JSON-RPC message object. A line that is not JSON is
    answered with a JSON-RPC parse error, one that is not JSON-RPC with an invalid-request
    error (its id kept when it has one), and the session goes on; a line longer than
    ``max_line_bytes`` ends the connection. ``buffered`` is a
    ``BufferedByteReceiveStream`` already wrapping ``stream`` (bytes read past a hello).
    """
    import anyio
    import mcp_types as types
    from anyio.streams.buffered import BufferedByteReceiveStream
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    incoming_writer, incoming = create_context_streams[SessionMessage | Exception](0)
    outgoing, outgoing_reader = create_context_streams[SessionMessage](0)
    receiver = buffered if buffered is not None else BufferedByteReceiveStream(stream)

    async def reader() -> None:
        async with incoming_writer:
            while True:
                try:
                    line = await receiver.receive_until(b"\n", max_line_bytes)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                        anyio.ClosedResourceError):
                    return
                except anyio.DelimiterNotFound as exc:  # an oversized line: drop the connection
                    await incoming_writer.send(exc)
                    return
                if not line.strip():
                    continue
                try:
                    parsed = json.loads(line)
                except ValueError:
                    await _answer(stream, None, -32700, "Parse error: the line is not JSON")
                    continue
                if inspect is not None:
                    inspect(parsed)
                try:
                    message = types.jsonrpc_message_adapter.validate_python(parsed, by_name=False)
                except ValueError:
                    request_id = parsed.get("id") if isinstance(parsed, dict) else None
                    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
                        request_id = None
                    await _answer(stream, request_id, -32600, "Invalid Request: not a JSON-RPC 2.0 message")
                    continue
                await incoming_writer.send(SessionMessage(message))

    async def writer() -> None:
        async with outgoing_reader:
            async for session_message in outgoing_reader:
                if observe is not None:
                    observe(session_message.message)
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


async def owner_only_listener(path: Any) -> Any:
    """An anyio unix listener on ``path``, in a directory only this user can enter; the socket is 0600.

    The caller must own the place (it holds the lock that makes it the only server there),
    so a leftover socket file is a dead server's. The directory must already be private
    (ours, no group or other bits, not a symlink): the socket is born there with the umask's
    mode and tightened right after, and nobody else can reach it in between. The process
    umask is never narrowed for the bind: it is shared by every thread, and another thread
    creating a folder at that moment would get a mode it never asked for. Peers' uids are
    still checked per connection (:func:`peer_credentials`): a mode can be loosened later,
    a uid cannot lie.
    """
    import os
    import stat
    from pathlib import Path

    import anyio

    parent = os.lstat(Path(path).parent)
    if not stat.S_ISDIR(parent.st_mode) or parent.st_uid != os.getuid() or parent.st_mode & 0o077:
        raise PermissionError(f"refusing to listen on {path}: its directory is not private to this user")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = await anyio.create_unix_listener(path)
    os.chmod(path, 0o600)
    return listener


async def _answer(stream: Any, request_id: str | int | None, code: int, message: str) -> None:
    import anyio

    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(json.dumps(error).encode("utf-8") + b"\n")


def peer_credentials(stream: Any) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process at the other end of a unix stream (``SO_PEERCRED``), or ``None``.

    ``None`` where the platform has no ``SO_PEERCRED`` (macOS): callers then rely on the
    0700 directory alone, as the socket's mode already does.
    """
    from anyio.abc import SocketAttribute

    raw = stream.extra(SocketAttribute.raw_socket, None)
    if raw is None:
        return None
    return client_peer_credentials(raw)
