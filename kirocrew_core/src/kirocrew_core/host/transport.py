"""MCP sessions over a connected local socket: one JSON-RPC message per line, as on stdio.

One owner for the framing that the host's socket and the conversations control socket
(standalone mode) share. ``line_transport`` turns an anyio byte stream into the (read,
write) message streams the mcp SDK's ``Server.run`` and ``ClientSession`` take. It also owns
what the host knows of the process at the other end (:func:`pin_peer`). The mcp SDK is
imported inside the functions: the relay never imports this module.

Memory: a line is read into a buffer only up to ``max_line_bytes``, and on the host every
connection draws on one :class:`ByteBudget` for the bytes it holds, partly received lines and
requests not yet answered alike; a connection that would pass either bound is closed with a
logged reason, and the host and its other connections go on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from kirocrew_core.host.client import peer_credentials as client_peer_credentials
from kirocrew_core.host.protocol import MAX_LINE_BYTES

log = logging.getLogger(__name__)

# What the host may do to each incoming message before the SDK sees it (stamp the caller); a
# JSON-RPC reply it returns is sent instead, and the message goes no further.
Inspect = Callable[[Any], "dict[str, Any] | None"]
# Told about each outgoing message (the host counts requests in flight by the responses).
Observe = Callable[[Any], None]
READ_CHUNK_BYTES = 64 * 1024
# Linux 6.5+: a pidfd of the peer as it was at connect(), which no later process can share.
_SO_PEERPIDFD = 77


class LineBoundExceeded(Exception):
    """A connection would pass a memory bound; the message says which (it is logged, then the connection closes)."""


class ByteBudget:
    """Bytes that every connection of one host holds at once, against one total (event-loop only, no lock).

    Each connection's :class:`LineReader` is charged for its partly received line and for its
    requests not yet answered. When a charge would pass the total, the connection holding the most
    is closed (:meth:`LineReader.evict`), its charge given back at once, until the rest fits: a
    flood costs its sender its connection, while a small request of another connection goes through.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._held: dict[LineReader, int] = {}

    def take(self, holder: LineReader, count: int) -> None:
        """Charge ``holder``; :class:`LineBoundExceeded` when it is the one closed to make room."""
        self._held[holder] = self._held.get(holder, 0) + count
        self.used += count
        while self.used > self.total:
            victim = max(self._held, key=self._held.__getitem__)
            held = self._held.pop(victim)
            self.used -= held
            reason = (f"the host's connections would hold more than {self.total} bytes at once, and this one "
                      f"held the most ({held} bytes)")
            if victim is holder:
                raise LineBoundExceeded(reason)
            victim.evict(reason)

    def give(self, holder: LineReader, count: int) -> None:
        held = self._held.get(holder)
        if held is None:
            return  # evicted: its charge was given back then
        count = min(count, held)
        self._held[holder] = held - count
        self.used -= count

    def forget(self, holder: LineReader) -> None:
        self.used -= self._held.pop(holder, 0)


class LineReader:
    """Lines from a byte stream, the partial line charged to a :class:`ByteBudget` while it is buffered.

    ``source`` is anything with anyio's ``receive()`` (a socket stream, or a buffered stream holding
    bytes read past a hello). :meth:`line` raises :class:`LineBoundExceeded` for a line longer than
    ``limit`` or a connection the budget closed, ``anyio.EndOfStream`` at the end. ``close_source``
    is how :meth:`evict` closes the connection from outside its own task (a socket shutdown).
    """

    def __init__(self, source: Any, budget: ByteBudget | None = None,
                 close_source: Callable[[], None] | None = None) -> None:
        self._source = source
        self._budget = budget
        self._close_source = close_source
        self._buffer = bytearray()
        self._scanned = 0  # the buffer has no newline before this offset
        self.evicted: str | None = None

    async def line(self, limit: int) -> bytes:
        """The next line without its newline."""
        while True:
            if self.evicted is not None:
                raise LineBoundExceeded(self.evicted)
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                self._scanned = 0
                self.give(end + 1)
                return line
            self._scanned = len(self._buffer)
            if len(self._buffer) > limit:
                raise LineBoundExceeded(f"a line is longer than {limit} bytes")
            chunk = await self._source.receive(READ_CHUNK_BYTES)
            if self.evicted is not None:
                raise LineBoundExceeded(self.evicted)
            self.take(len(chunk))
            self._buffer += chunk

    @property
    def budget(self) -> ByteBudget | None:
        return self._budget

    def take(self, count: int) -> None:
        """Charge ``count`` more bytes to this connection (a line read, a request in flight)."""
        if self._budget is not None:
            self._budget.take(self, count)

    def give(self, count: int) -> None:
        if self._budget is not None:
            self._budget.give(self, count)

    def evict(self, reason: str) -> None:
        """The budget closes this connection to make room: log why, drop its buffer, shut its socket."""
        if self.evicted is not None:
            return
        self.evicted = reason
        log.warning("closed a connection: %s", reason)
        self._buffer = bytearray()
        if self._close_source is not None:
            with contextlib.suppress(OSError):
                self._close_source()

    def close(self) -> None:
        """Give back all this connection holds (it ended)."""
        self._buffer = bytearray()
        if self._budget is not None:
            self._budget.forget(self)


def socket_closer(stream: Any) -> Callable[[], None] | None:
    """How to close ``stream``'s socket from another task: a shutdown both ways, which wakes its reader."""
    raw = _raw_socket(stream)
    if raw is None:
        return None
    return lambda: raw.shutdown(socket.SHUT_RDWR)


@contextlib.asynccontextmanager
async def line_transport(stream: Any, *, inspect: Inspect | None = None, observe: Observe | None = None,
                         buffered: Any = None, reader: LineReader | None = None,
                         max_line_bytes: int = MAX_LINE_BYTES) -> AsyncIterator[tuple[Any, Any]]:
    """(read, write) MCP message streams over one connected anyio byte stream.

    ``inspect`` gets each incoming message as parsed JSON and may change it in place, or return a
    reply that answers it instead; ``observe`` gets each outgoing JSON-RPC message object. A line
    that is not JSON is answered with a JSON-RPC parse error, one that is not JSON-RPC (an ``id``
    that is an object, an array or a boolean included) with an invalid-request error (its id kept
    when it is a string or a number), and the session goes on. A line longer than
    ``max_line_bytes``, or bytes the ``reader``'s budget refuses, close the connection with the
    reason logged. ``reader`` is a :class:`LineReader` already reading ``stream`` (bytes past a
    hello, the host's budget); ``buffered`` a ``BufferedByteReceiveStream`` wrapping it instead.
    A request the SDK is handling stays charged to the budget until it is answered.
    """
    import anyio
    import mcp_types as types
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared.message import SessionMessage

    incoming_writer, incoming = create_context_streams[SessionMessage | Exception](0)
    outgoing, outgoing_reader = create_context_streams[SessionMessage](0)
    lines = reader if reader is not None else LineReader(buffered if buffered is not None else stream)
    held: dict[Any, int] = {}  # request id -> bytes still charged while the SDK handles it

    def release(request_id: Any) -> None:
        with contextlib.suppress(TypeError):
            lines.give(held.pop(request_id, 0))

    async def reader_task() -> None:
        async with incoming_writer:
            while True:
                try:
                    line = await lines.line(max_line_bytes)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                        anyio.ClosedResourceError):
                    return
                except LineBoundExceeded as exc:
                    await _close_over_bound(stream, exc, lines)
                    return
                if not line.strip():
                    continue
                try:
                    parsed = json.loads(line)
                except ValueError:
                    await _answer(stream, None, -32700, "Parse error: the line is not JSON")
                    continue
                if _bad_id(parsed):
                    await _answer(stream, None, -32600, "Invalid Request: an id is a string or an integer")
                    continue
                if inspect is not None:
                    reply = inspect(parsed)
                    if reply is not None:
                        await _send_json(stream, reply)
                        continue
                try:
                    message = types.jsonrpc_message_adapter.validate_python(parsed, by_name=False)
                except ValueError:
                    request_id = parsed.get("id") if isinstance(parsed, dict) else None
                    if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
                        request_id = None
                    await _answer(stream, request_id, -32600, "Invalid Request: not a JSON-RPC 2.0 message")
                    continue
                try:
                    _hold(parsed, len(line) + 1)
                except LineBoundExceeded as exc:
                    await _close_over_bound(stream, exc, lines)
                    return
                await incoming_writer.send(SessionMessage(message))

    def _hold(parsed: Any, count: int) -> None:
        """Keep a request's bytes charged until it is answered; a cancellation gives its request's back."""
        if lines.budget is None:
            return
        if isinstance(parsed, dict) and "method" in parsed and "id" in parsed:
            release(parsed["id"])  # a reused id: its earlier request is answered or will be refused
            lines.take(count)
            held[parsed["id"]] = count  # a string or an integer: _bad_id refused any other
        elif isinstance(parsed, dict) and parsed.get("method") == "notifications/cancelled":
            params = parsed.get("params")
            if isinstance(params, dict):
                release(params.get("requestId"))

    async def writer_task() -> None:
        async with outgoing_reader:
            async for session_message in outgoing_reader:
                if observe is not None:
                    observe(session_message.message)
                root = getattr(session_message.message, "root", session_message.message)
                if held and not hasattr(root, "method"):
                    release(getattr(root, "id", None))
                data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await stream.send(data.encode("utf-8") + b"\n")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader_task)
            tg.start_soon(writer_task)
            try:
                yield incoming, outgoing
            finally:
                tg.cancel_scope.cancel()
    finally:
        held.clear()
        lines.close()


async def _close_over_bound(stream: Any, exc: LineBoundExceeded, lines: LineReader) -> None:
    """The connection passed a memory bound: say why in the log (once), and close it (never the host)."""
    if lines.evicted is None:
        log.warning("closed a connection: %s", exc)
    with contextlib.suppress(Exception):
        await stream.aclose()


def _bad_id(message: Any) -> bool:
    """A message whose ``id`` no JSON-RPC request or response may carry (the SDK would take it for a notification).

    A string or an integer is an id; ``null`` only on a response (to a message that could not be read).
    """
    if not isinstance(message, dict) or "id" not in message:
        return False
    value = message["id"]
    if value is None:
        return "method" in message
    return isinstance(value, bool) or not isinstance(value, (str, int))


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
    await _send_json(stream, {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


async def _send_json(stream: Any, message: dict[str, Any]) -> None:
    import anyio

    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(json.dumps(message).encode("utf-8") + b"\n")


def _raw_socket(stream: Any) -> socket.socket | None:
    from anyio.abc import SocketAttribute

    raw: socket.socket | None = stream.extra(SocketAttribute.raw_socket, None)
    return raw


def peer_credentials(stream: Any) -> tuple[int, int] | None:
    """``(pid, uid)`` of the process at the other end of a unix stream, from the kernel, or ``None``.

    ``SO_PEERCRED`` on Linux, ``LOCAL_PEERPID``/``LOCAL_PEERCRED`` on macOS
    (:func:`kirocrew_core.host.client.peer_credentials`). ``None`` elsewhere: callers then rely on
    the 0700 directory alone, as the socket's mode already does, and no caller is verified.
    """
    raw = _raw_socket(stream)
    return client_peer_credentials(raw) if raw is not None else None


@dataclass
class PinnedPeer:
    """The process that connected, pinned at accept: its pid, its uid, its start time, a pidfd where there is one.

    A pid alone is not a process: once it exits, its number goes to the next. ``started`` is read
    as soon as the host accepts the connection, and :meth:`running` re-checks it; where the kernel
    hands out a pidfd of the peer (``SO_PEERPIDFD``, Linux 6.5+), that pidfd names the very process
    that called ``connect`` and no later one, which closes even the moment between ``connect`` and
    the accept. ``started`` is None when the peer was gone before it could be read.
    """

    pid: int
    uid: int
    started: float | None
    pidfd: int | None = None

    def running(self) -> bool:
        """Whether the process that connected still runs (not a later process given its pid)."""
        if self.started is None:
            return False
        if self.pidfd is not None:
            return not _pidfd_exited(self.pidfd)
        from kirocrew_core import processes

        return processes.is_running(processes.ProcessRef(self.pid, self.started))

    def close(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None


def pin_peer(stream: Any) -> PinnedPeer | None:
    """The peer of a just-accepted unix stream (see :class:`PinnedPeer`); None without kernel credentials."""
    from kirocrew_core import processes

    raw = _raw_socket(stream)
    if raw is None:
        return None
    creds = client_peer_credentials(raw)
    if creds is None:
        return None
    pidfd = _peer_pidfd(raw)
    peer = PinnedPeer(creds[0], creds[1], processes.start_time(creds[0]), pidfd)
    if pidfd is not None and _pidfd_exited(pidfd):
        peer.started = None  # the start time read may be a later process's that took the pid
    return peer


def _peer_pidfd(raw: socket.socket) -> int | None:
    if sys.platform != "linux":
        return None
    try:
        fd = raw.getsockopt(socket.SOL_SOCKET, _SO_PEERPIDFD)
    except OSError:  # an older kernel (ENOPROTOOPT)
        return None
    return fd if fd >= 0 else None


def _pidfd_exited(pidfd: int) -> bool:
    """A pidfd polls readable once its process has exited."""
    try:
        readable, _, _ = select.select([pidfd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
