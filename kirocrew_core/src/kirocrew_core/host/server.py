"""The host's socket: plugin services, the MCP servers they expose, and the host's own lifecycle.

``kirocrew serve`` builds one :class:`Host` and runs it inside the gateway app's lifespan:
services start (``host_services()``), the hosted servers are collected
(``host_mcp_servers()``), then the owner-only socket accepts connections (wire format:
:mod:`kirocrew_core.host.protocol`). Each ``mcp`` connection is one MCP session run by
the mcp SDK's server inside this process, with its verified caller bound for every
request (:mod:`kirocrew_core.host.caller`).

The host ends when asked (Ctrl-C, SIGTERM, a ``stop`` hello), when an auto-started host
has been idle for ``host.idle_secs``, or when it retires: a relay of other code (another
fingerprint) connected, so it exits as soon as nothing is busy and no request is in
flight, and the relays reconnect to a fresh host running the new code.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError
from kirocrew_core.host import paths, protocol
from kirocrew_core.host.caller import (
    CallerBlockError,
    CallerContext,
    parse_block,
    reset_current_caller,
    set_current_caller,
)

if TYPE_CHECKING:
    from kirocrew_core.contributions import HostedMcpServer, HostService
    from kirocrew_core.host.transport import PinnedPeer
    from kirocrew_core.plugins import KirocrewPluginManager

log = logging.getLogger(__name__)

IDLE_ENV = "KIROCREW_HOST_IDLE_SECS"
WRITE_STALL_ENV = "KIROCREW_HOST_WRITE_STALL_SECS"
# A hello must arrive this soon after connecting; a silent peer is dropped.
HELLO_TIMEOUT_SECS = 10.0
# A client that reads nothing for this long while the host has a message for it is disconnected.
WRITE_STALL_SECS = 60.0
# How often the watcher looks at idleness and retirement.
WATCH_INTERVAL_SECS = 0.5


class _Connection:
    """One MCP connection: its verified caller, the process pinned at accept, and its requests still unanswered."""

    def __init__(self, server: str, caller: CallerContext, peer: PinnedPeer | None = None) -> None:
        self.server = server
        self.caller = caller
        self.peer = peer
        self.pending: set[Any] = set()
        self._gone_logged = False

    def inspect(self, message: Any) -> dict[str, Any] | None:
        """Replace any caller block on a request with the verified one, and count it in flight.

        A request that arrives after the process that opened the connection has exited is answered
        here with ``caller_gone`` and goes no further: a connection handed to a child that outlived
        its opener keeps no identity (the child could otherwise act as whoever the opener was, or as
        a later process given the opener's pid).
        """
        if self.peer is not None and protocol.is_request(message) and not self.peer.running():
            if not self._gone_logged:
                self._gone_logged = True
                log.warning("a %s connection's process (pid %s) has exited; its requests are refused caller_gone",
                            self.server, self.peer.pid)
            return _caller_gone_reply(message)
        if protocol.stamp_caller(message, self.caller.block()):
            with contextlib.suppress(TypeError):  # an unhashable id is refused by the SDK anyway
                self.pending.add(message["id"])
        elif isinstance(message, dict) and message.get("method") == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict):
                with contextlib.suppress(TypeError):
                    self.pending.discard(params.get("requestId"))
        return None

    def observe(self, message: Any) -> None:
        """A response or error to one of the client's requests ends it."""
        root = getattr(message, "root", message)
        if not hasattr(root, "method"):
            self.pending.discard(getattr(root, "id", None))


def _caller_gone_reply(request: dict[str, Any]) -> dict[str, Any]:
    """``caller_gone`` as the request's answer: a tool error for ``tools/call`` (what a client shows), else an error."""
    from kirocrew_core.coretools.server import CALLER_GONE_TEXT
    from kirocrew_core.tool_results import error_text

    text = error_text("caller_gone", CALLER_GONE_TEXT)
    if request.get("method") == "tools/call":
        return {"jsonrpc": "2.0", "id": request["id"],
                "result": {"content": [{"type": "text", "text": text}], "isError": True}}
    return {"jsonrpc": "2.0", "id": request["id"],
            "error": {"code": protocol.RELAY_ERROR_CODE, "message": text, "data": {"code": "caller_gone"}}}


@dataclass
class HostStatus:
    """What a pong reports; also written to ``host.json`` (never the owner token)."""

    pid: int
    fingerprint: str
    started_at: float
    background: bool
    url: str
    socket: str
    idle_secs: float
    services: list[str] = field(default_factory=list)
    failed_services: dict[str, str] = field(default_factory=dict)
    servers: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "fingerprint": self.fingerprint, "startedAt": self.started_at,
                "background": self.background, "url": self.url, "socket": self.socket, "idleSecs": self.idle_secs,
                "services": list(self.services), "failedServices": dict(self.failed_services),
                "servers": list(self.servers)}


class Host:
    """The long-lived host of one crew home (see the module docstring).

    :param background: started on demand by a relay: idles out after ``idle_secs``.
    :param url: the dashboard's address without the token (for ``host.json`` and pongs).
    :param request_exit: called once when the host decides to stop (idle, retired, asked);
        ``kirocrew serve`` makes it end uvicorn, whose lifespan then calls :meth:`stop`.
    """

    def __init__(self, pm: KirocrewPluginManager, *, background: bool, url: str, idle_secs: float,
                 fingerprint: str, request_exit: Callable[[str], None] | None = None) -> None:
        self.pm = pm
        self.background = background
        self.idle_secs = idle_secs
        self.status = HostStatus(pid=os.getpid(), fingerprint=fingerprint, started_at=time.time(),
                                 background=background, url=url, socket=str(paths.socket_path()),
                                 idle_secs=idle_secs)
        self.request_exit: Callable[[str], None] = request_exit or (lambda reason: None)
        self.services: list[HostService] = []
        self.servers: dict[str, HostedMcpServer] = {}
        self.connections: set[_Connection] = set()
        self.retiring: str | None = None
        self.stopping = False
        self._http_active = 0
        self._last_active = time.monotonic()
        self._tasks: list[asyncio.Task[Any]] = []
        self._socket: Path | None = None
        from kirocrew_core.host.transport import ByteBudget

        self.budget = ByteBudget(protocol.MAX_HELD_BYTES)  # what all connections may hold at once

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start every service, collect the hosted servers, then accept connections."""
        await self._start_services()
        self._collect_servers()
        self.status.servers = sorted(self.servers)
        ready = asyncio.Event()
        self._tasks.append(asyncio.create_task(self._serve_socket(ready), name="host-socket"))
        await ready.wait()
        self._tasks.append(asyncio.create_task(self._watch(), name="host-watch"))
        self._write_state()

    async def stop(self) -> None:
        """Stop accepting, end every connection, stop the services in reverse order, remove the files."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for service in reversed(self.services):
            try:
                await service.stop()
            except Exception:  # one service must not keep the others running
                log.exception("host service %s failed to stop", service.name)
        for path in (paths.state_file(), self._socket):
            if path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        if self._socket is not None and self._socket.parent != paths.host_dir():
            with contextlib.suppress(OSError):
                os.rmdir(self._socket.parent)  # the short directory outside the crew home

    async def _start_services(self) -> None:
        from kirocrew_core.contributions import HostService, flatten
        from kirocrew_core.plugins import call_hook

        call = call_hook(self.pm, "host_services", on_error="skip")
        for contribution in flatten(call.contributions):
            service = contribution.value
            if not isinstance(service, HostService):
                log.error("plugin %r returned %r from host_services(); expected a HostService",
                          contribution.plugin, service)
                continue
            try:
                await service.start()
            except Exception as exc:  # the host runs on without this service
                log.exception("host service %s (plugin %r) did not start", service.name, contribution.plugin)
                self.status.failed_services[service.name] = f"{type(exc).__name__}: {exc}"
                self.services.append(service)  # stop() still runs: it must cope with a failed start
                continue
            self.services.append(service)
            self.status.services.append(service.name)

    def _collect_servers(self) -> None:
        from kirocrew_core.contributions import HostedMcpServer, flatten
        from kirocrew_core.plugins import call_hook

        call = call_hook(self.pm, "host_mcp_servers", on_error="skip")
        owners: dict[str, str] = {}
        for contribution in flatten(call.contributions):
            server = contribution.value
            if not isinstance(server, HostedMcpServer):
                log.error("plugin %r returned %r from host_mcp_servers(); expected a HostedMcpServer",
                          contribution.plugin, server)
                continue
            taken = [key for key in (server.name, server.command) if key in owners]
            if taken:
                log.warning("plugin %r tried to host %r, already hosted by %r; ignored",
                            contribution.plugin, taken[0], owners[taken[0]])
                continue
            owners[server.name] = owners[server.command] = contribution.plugin
            self.servers[server.name] = server

    def _lookup(self, requested: str) -> HostedMcpServer | None:
        found = self.servers.get(requested)
        if found is not None:
            return found
        return next((server for server in self.servers.values() if server.command == requested), None)

    def _write_state(self) -> None:
        from kirocrew_core.jsonfile import write_json_atomic

        write_json_atomic(paths.state_file(), self.status.as_dict(), secret=True)

    # -- activity, idleness, retirement -----------------------------------------------------------
    def http_started(self) -> None:
        self._http_active += 1
        self._last_active = time.monotonic()

    def http_finished(self) -> None:
        self._http_active -= 1
        self._last_active = time.monotonic()

    def in_flight(self) -> int:
        return sum(len(connection.pending) for connection in self.connections)

    def busy_reasons(self) -> list[str]:
        """Why the host is busy now: each busy service's reason, and requests in flight."""
        reasons = []
        for service in self.services:
            try:
                reason = service.busy()
            except Exception as exc:  # noqa: BLE001 - a broken busy() must not stop the host from idling forever
                log.warning("host service %s: busy() failed: %s", service.name, exc)
                continue
            if reason:
                reasons.append(f"{service.name}: {reason}")
        if pending := self.in_flight():
            reasons.append(f"{pending} request(s) in flight")
        return reasons

    def retire(self, reason: str) -> None:
        if self.retiring is None:
            self.retiring = reason
            log.warning("retiring: %s; this host exits as soon as nothing is busy, and relays move to a "
                        "fresh host running the new code", reason)

    async def _watch(self) -> None:
        interval = min(WATCH_INTERVAL_SECS, max(self.idle_secs / 4, 0.05))
        while not self.stopping:
            await asyncio.sleep(interval)
            busy = self.busy_reasons()
            now = time.monotonic()
            if self.retiring is not None and not busy:
                self._exit(f"retired ({self.retiring})")
                return
            if busy or self.connections or self._http_active:
                self._last_active = now
            elif self.background and now - self._last_active >= self.idle_secs:
                self._exit(f"idle for {self.idle_secs:g} s")
                return

    def _exit(self, reason: str) -> None:
        if not self.stopping:
            self.stopping = True
            log.warning("stopping: %s", reason)
            self.request_exit(reason)

    # -- the socket --------------------------------------------------------------------------------
    async def _serve_socket(self, ready: asyncio.Event) -> None:
        from kirocrew_core.host.transport import owner_only_listener

        paths.ensure_socket_dir()
        path = paths.socket_path()
        listener = await owner_only_listener(path)  # we hold the run lock: a file left there is a dead host's
        self._socket = path
        ready.set()
        async with listener:
            await listener.serve(self._guarded)

    async def _guarded(self, stream: Any) -> None:
        try:
            await self._connection(stream)
        except Exception:  # one broken connection must never close the socket for the others
            log.exception("a host connection failed")

    async def _connection(self, stream: Any) -> None:
        import anyio

        from kirocrew_core.host.transport import LineBoundExceeded, LineReader, pin_peer, socket_closer

        async with stream:
            # Read the peer's start time before anything else: the later it is read, the longer a
            # process that connected and exited leaves for its pid to be handed to another.
            peer = pin_peer(stream)
            try:
                if peer is not None and peer.uid != os.getuid():
                    log.warning("refused a connection from uid %s (pid %s): this host serves uid %s only",
                                peer.uid, peer.pid, os.getuid())
                    return
                reader = LineReader(stream, self.budget, socket_closer(stream))
                try:
                    with anyio.fail_after(HELLO_TIMEOUT_SECS):
                        line = await reader.line(protocol.MAX_HELLO_BYTES)
                except LineBoundExceeded as exc:
                    log.warning("refused a hello: %s", exc)
                    await _send(stream, protocol.refusal("bad_hello", "the hello is longer than "
                                                         f"{protocol.MAX_HELLO_BYTES} bytes, or the host's "
                                                         "connections hold too much already"))
                    reader.close()
                    return
                except (TimeoutError, anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                    reader.close()
                    return
                hello, problem = _parse_hello(line)
                if hello is None:
                    reader.close()
                    await _send(stream, protocol.refusal(*problem))
                    return
                kind = hello["kind"]
                if kind == protocol.KIND_PING:
                    reader.close()
                    await _send(stream, protocol.encode(self.pong()))
                elif kind == protocol.KIND_STOP:
                    reader.close()
                    await _send(stream, protocol.encode({"kirocrew": protocol.STOPPING, "pid": os.getpid()}))
                    self._exit("asked to stop")
                else:
                    await self._mcp(stream, reader, hello, peer)
            finally:
                if peer is not None:
                    peer.close()

    def pong(self) -> dict[str, Any]:
        return {"kirocrew": protocol.PONG, "version": protocol.VERSION, **self.status.as_dict(),
                "connections": len(self.connections), "busy": self.busy_reasons(),
                "retiring": self.retiring, "stopping": self.stopping}

    async def _mcp(self, stream: Any, reader: Any, hello: dict[str, Any], peer: PinnedPeer | None) -> None:
        try:
            try:
                caller = parse_block(hello.get("caller"))
            except CallerBlockError as exc:
                await _send(stream, protocol.refusal("bad_caller", str(exc)))
                return
            if peer is not None:
                if caller.relay_pid != peer.pid:
                    log.warning("refused a caller block naming relay pid %s from peer pid %s", caller.relay_pid,
                                peer.pid)
                    await _send(stream, protocol.refusal(
                        "forged_caller", f"the caller block names relay pid {caller.relay_pid}, but the peer is pid "
                                         f"{peer.pid}"))
                    return
                if not peer.running():
                    log.warning("refused a connection whose process (pid %s) exited before its hello was read",
                                peer.pid)
                    await _send(stream, protocol.refusal("caller_gone", "the process that connected has exited"))
                    return
                caller = dataclasses.replace(caller, peer_verified=True, relay_started=peer.started)
            if self.stopping:
                await _send(stream, protocol.refusal("host_stopping", "this host is stopping; connect again"))
                return
            requested = hello.get("server")
            hosted = self._lookup(requested) if isinstance(requested, str) else None
            if hosted is None:
                shown = requested if isinstance(requested, str) and requested.isprintable() and len(requested) < 80 \
                    else "?"
                await _send(stream, protocol.refusal(
                    "unknown_server", f"this host serves no MCP server named {shown}; it serves: "
                                      f"{', '.join(sorted(self.servers)) or 'none'}"))
                return
            fingerprint = hello.get("fingerprint")
            if isinstance(fingerprint, str) and fingerprint and fingerprint != self.status.fingerprint:
                self.retire(f"a client runs other code (fingerprint {fingerprint[:12]}, this host's "
                            f"{self.status.fingerprint[:12]})")
            try:
                from kirocrew_core.plugins import await_me_maybe

                server = await await_me_maybe(hosted.server)
            except KirocrewError as exc:
                await _send(stream, protocol.refusal(exc.code, exc.message))
                return
            await self._check_claims(hosted.name, caller)
            await _send(stream, protocol.encode({
                "kirocrew": protocol.WELCOME, "version": protocol.VERSION, "server": hosted.name,
                "pid": os.getpid(), "fingerprint": self.status.fingerprint, "retiring": self.retiring is not None,
            }))
            await self._run_session(stream, reader, server, _Connection(hosted.name, caller, peer))
        finally:
            reader.close()

    async def _check_claims(self, server: str, caller: CallerContext) -> None:
        """Log and audit a caller whose block claims what its ancestry contradicts (the claim is never used)."""
        from kirocrew_core.coretools import identity

        if not caller.peer_verified or (not caller.session_key and caller.host_pid_env is None):
            return
        resolved = await asyncio.to_thread(identity.registry().resolve, caller)
        problem = identity.contradiction(caller, resolved)
        if problem is None:
            return
        log.warning("%s connection from pid %s: %s; it is resolved by its ancestry", server, caller.relay_pid, problem)
        from kirocrew_core import audit

        session = identity.fingerprint(resolved.session.key if resolved.session is not None else "")
        try:
            await asyncio.to_thread(audit.record, "host.caller_claim_contradicted", actor=session, outcome="denied",
                                    server=server, origin=resolved.origin, session=session,
                                    claimed=identity.fingerprint(caller.session_key),
                                    claimed_host_pid=caller.host_pid_env or 0)
        except KirocrewError as exc:
            log.warning("could not audit a contradicted caller claim: %s", exc)

    async def _run_session(self, stream: Any, reader: Any, server: Any, connection: _Connection) -> None:
        from kirocrew_core.host.transport import line_transport

        self.connections.add(connection)
        token = set_current_caller(connection.caller)  # request handler tasks inherit it
        try:
            async with line_transport(_StallGuard(stream, write_stall_secs()), inspect=connection.inspect,
                                      observe=connection.observe, reader=reader) as (read, write):
                await server.run(read, write, server.create_initialization_options())
        except* (BrokenPipeError, ConnectionResetError):
            log.info("a %s client went away", connection.server)
        finally:
            reset_current_caller(token)
            self.connections.discard(connection)
            self._last_active = time.monotonic()


class _StallGuard:
    """A byte stream whose ``send`` gives up, closing the connection, when the peer stops reading.

    Without it one client that never reads would pin its session (and the memory of what
    it was sent) forever; other connections are unaffected either way.
    """

    def __init__(self, stream: Any, stall_secs: float) -> None:
        self._stream = stream
        self._stall = stall_secs

    async def send(self, data: bytes) -> None:
        import anyio

        try:
            with anyio.fail_after(self._stall):
                await self._stream.send(data)
        except TimeoutError:
            log.warning("a client read nothing for %g s; disconnecting it", self._stall)
            await self._stream.aclose()
            raise anyio.ClosedResourceError from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    def extra(self, attribute: Any, default: Any = None) -> Any:
        return self._stream.extra(attribute, default)


async def _send(stream: Any, data: bytes) -> None:
    import anyio

    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, TimeoutError), \
            anyio.fail_after(HELLO_TIMEOUT_SECS):
        await stream.send(data)


def _parse_hello(line: bytes) -> tuple[dict[str, Any] | None, tuple[str, str]]:
    """The hello, or why it is refused (``bad_hello``, ``unsupported_version``)."""
    try:
        hello = json.loads(line)
    except ValueError:
        return None, ("bad_hello", "the first line is not JSON; send a kirocrew hello")
    if not isinstance(hello, dict) or hello.get("kirocrew") != protocol.HELLO:
        return None, ("bad_hello", 'the first line is not a kirocrew hello ({"kirocrew": "hello", ...})')
    version = hello.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        return None, ("bad_hello", "the hello has no integer version")
    if version != protocol.VERSION:
        return None, ("unsupported_version", f"this host speaks version {protocol.VERSION}, not {version}")
    if hello.get("kind") not in protocol.KINDS:
        return None, ("bad_hello", f"the hello's kind must be one of {', '.join(sorted(protocol.KINDS))}")
    return hello, ("", "")


def idle_secs() -> float:
    """``KIROCREW_HOST_IDLE_SECS`` if set (a positive number), else config ``host.idle_secs``."""
    raw = os.environ.get(IDLE_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if value <= 0 or value != value:
            raise KirocrewError(f"{IDLE_ENV} must be a positive number of seconds, got {raw!r}",
                                code="invalid_configuration", exit_code=2)
        return value
    from kirocrew_core.config import load_config

    return float(load_config().get("host.idle_secs"))


def write_stall_secs() -> float:
    raw = os.environ.get(WRITE_STALL_ENV, "").strip()
    try:
        value = float(raw) if raw else WRITE_STALL_SECS
    except ValueError:
        value = WRITE_STALL_SECS
    return value if value > 0 else WRITE_STALL_SECS
