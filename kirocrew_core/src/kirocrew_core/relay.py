"""The relay: what ``kirocrew mcp-<server>`` runs, pumping an MCP client's stdio to the host (standard library only).

The MCP servers themselves run inside the host (:mod:`kirocrew_core.host`); the process an
MCP client starts only connects to the host's socket (starting a host when none answers),
says which server it wants, and then copies JSON-RPC lines both ways. On the way it:

* replaces any ``kirocrew.caller`` block in a request with its own (the session key from
  ``KIROCREW_SESSION_KEY``, its pid, its parent's pid, ``KIROCREW_HOST_PID``), so no client
  can speak for another;
* answers malformed lines and lines longer than ``MAX_LINE_BYTES`` itself, so they never
  reach the host;
* remembers the client's ``initialize`` and ``notifications/initialized``: when the host goes
  away, every request in flight is answered with a retryable ``host_restarted`` error, and
  the next message reconnects (to a fresh host, started on demand) and replays them first,
  so the client's session survives a host restart;
* reads from one side only while the other keeps up (bounded buffers): a client that stops
  reading stalls its own session, never the relay's memory.

It imports neither the mcp SDK nor the plugins: a relay is up in a few tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import time

from kirocrew_core.host import client, protocol
from kirocrew_core.host.fingerprint import code_fingerprint

TYPE_CHECKING = False  # not typing's: importing typing costs the relay milliseconds
if TYPE_CHECKING:
    from typing import Any

# What run() returns when the host serves no such server: the launcher runs the full CLI instead.
NOT_HOSTED = -1
# Stop reading a side while this much is waiting to be written to the other.
HIGH_WATER_BYTES = 8 * 1024 * 1024
READ_CHUNK_BYTES = 256 * 1024
# How long a host may take to welcome a connection (its server factory may start a service).
WELCOME_TIMEOUT_SECS = 60.0
# After stdin closes, answers still in flight are written for at most this long (a script piping
# requests in gets them; a long call whose client has gone does not keep the relay alive).
EOF_DRAIN_SECS = 10.0
REPLAY_ID_PREFIX = "kirocrew-relay-replay-"
# Codes that mean "try again shortly": a host stopping, or one that died between our connect and its welcome.
_TRANSIENT = frozenset({"host_stopping", "host_unavailable"})

_PARSE_ERROR = protocol.encode({"jsonrpc": "2.0", "id": None, "error": {
    "code": -32700, "message": "Parse error: the line is not JSON", "data": {"code": "parse_error"}}})
_INVALID_REQUEST = protocol.encode({"jsonrpc": "2.0", "id": None, "error": {
    "code": -32600, "message": "Invalid request: a JSON-RPC message is an object",
    "data": {"code": "invalid_request"}}})
_LINE_TOO_LONG = protocol.encode({"jsonrpc": "2.0", "id": None, "error": {
    "code": -32600, "message": f"Invalid request: the line is longer than {protocol.MAX_LINE_BYTES} bytes and was "
                               "discarded", "data": {"code": "line_too_long"}}})
_INITIALIZED = protocol.encode({"jsonrpc": "2.0", "method": "notifications/initialized"})
# How the host's SDK writes a response (``{"jsonrpc":"2.0","id":…,"result"…``) and a notification.
_RESPONSE_HEAD = b'{"jsonrpc":"2.0","id":'
_NOTIFICATION_HEAD = b'{"jsonrpc":"2.0","method":'
_ID_SCAN_BYTES = 512
_DECODER = json.JSONDecoder()


def run(command: str) -> int:
    """Relay stdio to the host's server for ``command`` (``mcp-conversations``); the exit status.

    :data:`NOT_HOSTED` when the host serves no such server (nothing was read from stdin).
    """
    relay = Relay(command)
    try:
        if not relay.open(first=True):
            return NOT_HOSTED
        return relay.pump()
    except KeyboardInterrupt:
        return 130
    finally:
        relay.close()


class Relay:
    """One MCP client's stdio, relayed to one host connection at a time."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.label = f"kirocrew {command}"
        self.block = protocol.caller_block(os.environ.get(protocol.SESSION_KEY_ENV, ""), protocol.SESSION_TYPE_RELAY,
                                           os.getpid(), os.getppid(),
                                           protocol.env_pid(os.environ.get(protocol.HOST_PID_ENV)))
        self.sock: Any = None
        self.sock_fd = -1
        self.from_client = bytearray()
        self.to_host = bytearray()
        self.from_host = bytearray()
        self.to_client = bytearray()
        self.discarding = False  # inside an oversized client line, dropping it up to its newline
        self.stdin_eof = False
        self.in_flight: dict[Any, None] = {}  # the client's requests sent and not yet answered
        self.swallow: set[str] = set()  # ids of replayed initializes, whose answers the client never sees
        self.initialize: dict[str, Any] | None = None
        self.initialized = False
        self.replays = 0
        self.unreachable: client.HostError | None = None  # why the last connection attempt failed
        self.fatal: client.HostError | None = None  # a refusal that no retry will change
        self.fatal_answered = False

    # -- the host connection ---------------------------------------------------------------------------

    def open(self, *, first: bool = False) -> bool:
        """Connect and say hello (starting a host if none answers); False only for ``unknown_server``.

        On failure the relay stays disconnected: ``unreachable`` says why and requests are
        answered with it until a later attempt works; ``fatal`` is set for a refusal that a
        retry cannot fix (the first request gets it, then the relay exits 1).
        """
        deadline = time.monotonic() + client.START_TIMEOUT_SECS
        while True:
            try:
                self._open()
                self.unreachable = None
                return True
            except client.HostError as exc:
                if exc.code == "unknown_server" and first:
                    return False
                if exc.code in _TRANSIENT and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                if exc.code.startswith("host_") or exc.code == "unknown_server":
                    self.unreachable = exc
                else:
                    self.fatal = exc
                self._say(f"cannot use the kirocrew host: error[{exc.code}]: {exc.message}")
                return True

    def _open(self) -> None:
        # Computed for each connection: a relay that outlived an upgrade reports the code now on
        # disk (what a host it starts runs), so it follows the new host instead of retiring it.
        hello = protocol.hello(protocol.KIND_MCP, server=self.command, fingerprint=code_fingerprint(),
                               caller=self.block)
        try:
            sock, welcome, leftover = client.open_mcp(hello, WELCOME_TIMEOUT_SECS)
        except client.HostError as exc:
            if exc.code != "host_unavailable":
                raise
            client.ensure_host()
            sock, welcome, leftover = client.open_mcp(hello, WELCOME_TIMEOUT_SECS)
        sock.setblocking(False)
        self.sock, self.sock_fd = sock, sock.fileno()
        self.from_host = leftover
        if welcome.get("retiring"):
            self._say(f"the kirocrew host (pid {welcome.get('pid')}) runs other code and retires once idle; "
                      "this relay moves to a fresh host then")

    def _reconnect(self) -> bool:
        """Connect again after the host went away and replay the client's initialization first."""
        self.open()
        if self.sock is None:
            return False
        if self.initialize is not None:
            self.replays += 1
            replay_id = f"{REPLAY_ID_PREFIX}{self.replays}"
            self.swallow.add(replay_id)
            self.to_host += protocol.encode({**self.initialize, "id": replay_id})
            if self.initialized:
                self.to_host += _INITIALIZED
        return True

    def _host_lost(self, why: str) -> None:
        """Drop the connection; every request in flight is answered with a retryable ``host_restarted``."""
        self._say(f"lost the kirocrew host ({why}); the next message reconnects")
        self._drop_socket()
        for request_id in self.in_flight:
            self.to_client += protocol.rpc_error(
                request_id, "host_restarted", "the kirocrew host stopped while this request was in flight; "
                "the next request reaches a fresh host, so retry it", retryable=True)
        self.in_flight.clear()
        self.swallow.clear()
        self.to_host.clear()
        self.from_host = bytearray()

    def _drop_socket(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.sock_fd = None, -1

    def close(self) -> None:
        self._drop_socket()

    # -- the pump --------------------------------------------------------------------------------------

    def pump(self) -> int:
        """Copy lines both ways until the client closes stdin (0) or a fatal refusal was answered (1).

        After stdin closes, the answers in flight are still written, for at most ``EOF_DRAIN_SECS``.
        """
        if os.isatty(0):
            self._say("speaks MCP on stdin/stdout and is meant to be launched by an MCP client; "
                      "press Ctrl-D to stop.")
        restore = [fd for fd in (0, 1) if not os.isatty(fd) and os.get_blocking(fd)]
        for fd in restore:
            os.set_blocking(fd, False)
        try:
            return self._loop()
        finally:
            for fd in restore:
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, True)

    def _loop(self) -> int:
        to_client, to_host = self.to_client, self.to_host
        drain_until: float | None = None
        while True:
            wait: float | None = None
            if self.stdin_eof and self.fatal is None:
                if not self.in_flight and not to_host and not to_client:
                    return 0
                if drain_until is None:
                    drain_until = time.monotonic() + EOF_DRAIN_SECS
                wait = drain_until - time.monotonic()
                if wait <= 0:
                    self._say(f"stdin closed; {len(self.in_flight)} request(s) still unanswered after "
                              f"{EOF_DRAIN_SECS:g} s are dropped")
                    return 0
            if self.fatal is not None and self.fatal_answered and not to_client:
                return 1
            readers: list[int] = []
            writers: list[int] = []
            sock_fd = self.sock_fd
            if not self.stdin_eof and len(to_host) < HIGH_WATER_BYTES and len(to_client) < HIGH_WATER_BYTES:
                readers.append(0)
            if sock_fd >= 0:
                if len(to_client) < HIGH_WATER_BYTES:
                    readers.append(sock_fd)
                if to_host:
                    writers.append(sock_fd)
            if to_client:
                writers.append(1)
            if not readers and not writers:  # stdin closed, nothing pending, no host: done
                return 1 if self.fatal is not None else 0
            ready_r, ready_w, _ = select.select(readers, writers, [], wait)
            if 1 in ready_w and not self._write_client():
                return 0  # the client is gone
            if sock_fd >= 0 and sock_fd == self.sock_fd:
                if sock_fd in ready_w:
                    self._write_host()
                if sock_fd in ready_r and self.sock is not None:
                    self._read_host()
            if 0 in ready_r:
                self._read_client()
                if to_host and self.sock is not None:
                    self._write_host()  # most often it all goes now: no wait for the next select
            if to_client and not self._write_client():
                return 0

    def _write_client(self) -> bool:
        """Write what the client may take now; False when it is gone (EPIPE)."""
        try:
            written = os.write(1, self.to_client)
        except BlockingIOError:
            return True
        except OSError:
            return False
        del self.to_client[:written]
        return True

    def _write_host(self) -> None:
        try:
            sent = self.sock.send(self.to_host)
        except BlockingIOError:
            return
        except OSError as exc:
            self._host_lost(f"sending failed: {exc}")
            return
        del self.to_host[:sent]

    def _read_host(self) -> None:
        try:
            data = self.sock.recv(READ_CHUNK_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            self._host_lost(f"reading failed: {exc}")
            return
        if not data:
            self._host_lost("it closed the connection")
            return
        self._host_data(data)

    def _host_data(self, data: bytes) -> None:
        """Forward the complete lines in ``data`` to the client, ending answered requests on the way."""
        if self.from_host:
            self.from_host += data
            buf: Any = self.from_host
        else:
            buf = data
        end = buf.find(b"\n")
        if end < 0:
            if buf is data:
                self.from_host = bytearray(data)
            if len(self.from_host) > protocol.MAX_REPLY_LINE_BYTES:
                self._host_lost(f"it sent a line longer than {protocol.MAX_REPLY_LINE_BYTES} bytes")
            return
        start = emitted = 0
        while end >= 0 and (self.in_flight or self.swallow):
            answered = _answered_id(buf, start, end)
            if answered is not _NOT_A_RESPONSE:
                if answered in self.swallow:  # a replayed initialize: the client has its own answer
                    self.swallow.discard(answered)
                    self.to_client += buf[emitted:start]
                    emitted = end + 1
                else:
                    self.in_flight.pop(answered, None)
            start = end + 1
            end = buf.find(b"\n", start)
        if end >= 0:  # nothing left to track: the rest of the complete lines go as they are
            start = buf.rfind(b"\n") + 1
        self.to_client += buf[emitted:start]
        self.from_host = bytearray(buf[start:]) if start < len(buf) else bytearray()

    def _read_client(self) -> None:
        try:
            data = os.read(0, READ_CHUNK_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.stdin_eof = True
            if self.from_client and not self.discarding:
                self._client_line(bytes(self.from_client))  # a last line without its newline
            self.from_client.clear()
            return
        buf = self.from_client
        buf += data
        start = 0
        if self.discarding:
            end = buf.find(b"\n")
            if end < 0:
                buf.clear()
                return
            self.discarding = False
            start = end + 1
        end = buf.find(b"\n", start)
        while end >= 0:
            if end - start > protocol.MAX_LINE_BYTES:
                self._answer(_LINE_TOO_LONG)
            elif end > start:
                self._client_line(buf[start:end])
            start = end + 1
            end = buf.find(b"\n", start)
        del buf[:start]
        if len(buf) > protocol.MAX_LINE_BYTES:
            buf.clear()
            self.discarding = True
            self._answer(_LINE_TOO_LONG)

    # -- one client message ----------------------------------------------------------------------------

    def _client_line(self, line: Any) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            if line.strip():
                self._answer(_PARSE_ERROR)
            return
        if isinstance(message, list):
            self._refuse_batch(message)
            return
        if not isinstance(message, dict):
            self._answer(_INVALID_REQUEST)
            return
        requests: list[Any] = []
        self._note(message, requests)
        if self.fatal is not None:
            self._refuse_fatally(requests)
            return
        if self.sock is None and "method" not in message:
            return  # an answer to a request of the host that went away: nobody waits for it
        if self.sock is None and not self._reconnect():
            self._answer_unreachable(requests)
            return
        self.to_host += protocol.encode(message)
        for request_id in requests:
            with contextlib.suppress(TypeError):  # an unhashable id: the host's SDK refuses the request
                self.in_flight[request_id] = None
        if message.get("method") == "initialize":
            self.initialize = message

    def _refuse_batch(self, batch: list[Any]) -> None:
        """Answer every request of a JSON-RPC batch with an error: MCP (2025-06-18) has no batches."""
        ids = [item["id"] for item in batch if isinstance(item, dict) and "method" in item and "id" in item]
        for request_id in ids or [None]:
            self._answer(protocol.encode({"jsonrpc": "2.0", "id": request_id, "error": {
                "code": -32600, "message": "Invalid request: JSON-RPC batches are not part of MCP; send one "
                                           "message per line", "data": {"code": "batch_unsupported"}}}))

    def _note(self, message: Any, requests: list[Any]) -> None:
        """Stamp a request's caller block and note what a reconnect must replay or forget."""
        if protocol.stamp_caller(message, self.block):
            requests.append(message["id"])
            return
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if method == "notifications/initialized":
            self.initialized = True
        elif method == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict):
                with contextlib.suppress(TypeError):
                    self.in_flight.pop(params.get("requestId"), None)

    def _answer(self, line: bytes) -> None:
        self.to_client += line

    def _answer_unreachable(self, requests: list[Any]) -> None:
        reason = self.unreachable
        detail = f"{reason.message} [{reason.code}]" if reason is not None else "no connection"
        for request_id in requests:
            self._answer(protocol.rpc_error(request_id, "host_unavailable",
                                            f"kirocrew could not reach its host: {detail}", retryable=True))

    def _refuse_fatally(self, requests: list[Any]) -> None:
        fatal = self.fatal
        assert fatal is not None
        for request_id in requests:
            self._answer(protocol.rpc_error(request_id, fatal.code, fatal.message))
            self.fatal_answered = True

    def _say(self, text: str) -> None:
        with contextlib.suppress(OSError):
            os.write(2, f"{self.label}: {text}\n".encode("utf-8", "replace"))


_NOT_A_RESPONSE = object()


def _answered_id(buf: Any, start: int, end: int) -> Any:
    """The id a host line answers, or ``_NOT_A_RESPONSE`` (a notification or a request from the server).

    The SDK writes ``{"jsonrpc":"2.0","id":…,"result"|"error"…`` so the id is read from the
    line's first bytes; any other shape is parsed whole.
    """
    if buf.startswith(_RESPONSE_HEAD, start):
        head_end = min(end, start + len(_RESPONSE_HEAD) + _ID_SCAN_BYTES)
        head = bytes(buf[start + len(_RESPONSE_HEAD):head_end]).decode("utf-8", "replace")
        try:
            value, used = _DECODER.raw_decode(head)
        except ValueError:
            value, used = None, -1
        if used > 0:
            rest = head[used:used + 10]
            if rest.startswith((',"result"', ',"error"')):
                return value if _scalar(value) else _NOT_A_RESPONSE
            if rest.startswith(',"method"'):
                return _NOT_A_RESPONSE
    elif buf.startswith(_NOTIFICATION_HEAD, start):
        return _NOT_A_RESPONSE
    try:
        message = json.loads(buf[start:end])
    except ValueError:
        return _NOT_A_RESPONSE
    if isinstance(message, dict) and "method" not in message and _scalar(message.get("id", _NOT_A_RESPONSE)):
        return message["id"]
    return _NOT_A_RESPONSE


def _scalar(value: Any) -> bool:
    """A JSON-RPC id the relay can track (a string, a number or null); anything else answers nothing."""
    return value is None or isinstance(value, (str, int, float))
