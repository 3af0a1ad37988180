"""A standard-library MCP client for a twin command's tool calls on a server the host serves.

A twin command (``kirocrew cron list``, ``kirocrew artifact get``…) makes one tool call or a
few. Importing the mcp SDK for that (with pydantic and anyio) cost 0.3-0.5 s of CPU, most of
the command. This client speaks the few JSON-RPC messages such an exchange needs, one per line
as the host frames them: after the hello (:func:`connect_hosted`: a ``cli`` caller block, a
host started in the background when none answers, again while a stopping one makes way),
``initialize``, ``notifications/initialized``, then ``tools/call`` as often as the command
needs. Server notifications are skipped; a server request is answered (``ping``) or refused
(``-32601``). Unlike the SDK's client it does not re-check a result against the tool's output
schema (the servers are ours, and the twins read the text or ``structuredContent`` as sent).

Blocking sockets and no asyncio: a twin waits for one answer at a time, and Ctrl-C stops it
in the read. Errors keep stable codes: :class:`~kirocrew_core.host.client.HostError` for the
connection (those of the hello; ``host_disconnected`` when the peer closes before it answers
a request, ``host_timeout`` when ``initialize`` is not answered in time, ``host_refused`` for
a line that is too long, not JSON-RPC, or a JSON-RPC error), and a tool's refusal as
:func:`refusal` of its ``error[code]: message`` text.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from kirocrew_core import __version__
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.host import client, protocol
from kirocrew_core.host.client import HostError

# Bounds that only stop a hang; the host answers a hello and an initialize in milliseconds.
CONNECT_TIMEOUT_SECS = 5.0
INITIALIZE_TIMEOUT_SECS = 30.0
# Refusals that mean "a host is on its way out": connect again (to the next host) shortly.
TRANSIENT_CODES = frozenset({"host_stopping", "host_unavailable"})
RETRY_DELAY_SECS = 0.05
#: The revision offered in ``initialize``: the mcp SDK client's (a test keeps them equal).
PROTOCOL_VERSION = "2025-11-25"
#: Revisions a server may answer with (those the SDK negotiates through ``initialize``).
KNOWN_PROTOCOL_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
CLIENT_INFO = {"name": "kirocrew", "version": __version__}
METHOD_NOT_FOUND = -32601
#: Refusal codes that mean the caller's input was wrong: the same exit status as bad input given in process.
BAD_INPUT_CODES = frozenset({"invalid_arguments", "unknown_tool"})


def refusal(code: str, message: str) -> KirocrewError:
    """The error a twin raises for a tool's refusal ``code``: bad input (exit 2) or a failure (exit 1)."""
    kind = BadInputError if code in BAD_INPUT_CODES else KirocrewError
    return kind(message, code=code)


@dataclass(frozen=True)
class ToolResult:
    """A ``tools/call`` result as sent: its content blocks, ``structuredContent`` and ``isError``."""

    content: list[Any] = field(default_factory=list)
    structured: dict[str, Any] | None = None
    is_error: bool = False

    @property
    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.content
                       if isinstance(block, dict) and isinstance(block.get("text"), str))

    def refusal(self) -> KirocrewError:
        """The :func:`refusal` an ``isError`` result stands for, its code read from the text."""
        from kirocrew_core import tool_results

        return refusal(*tool_results.error_from_text(self.text))


class ToolSession:
    """An MCP client session over a connected socket (the host's after its welcome, or a control socket).

    :meth:`initialize` first, then :meth:`call` as often as needed; :meth:`close` (or ``with``) ends it.
    """

    def __init__(self, sock: socket.socket, leftover: bytes = b"", *, welcome: dict[str, Any] | None = None,
                 peer: str = "the host", max_line_bytes: int = protocol.MAX_REPLY_LINE_BYTES) -> None:
        self.sock = sock
        self.welcome = welcome or {}
        self.peer = peer
        self.max_line_bytes = max_line_bytes
        self._buffer = bytearray(leftover)
        self._last_id = 0

    @property
    def host_pid(self) -> int:
        return int(self.welcome["pid"])

    def __enter__(self) -> ToolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def initialize(self, timeout: float = INITIALIZE_TIMEOUT_SECS) -> dict[str, Any]:
        """The ``initialize`` handshake, answered within ``timeout`` seconds; the server's result."""
        result = self.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                             "clientInfo": CLIENT_INFO}, timeout=timeout)
        version = result.get("protocolVersion")
        if version not in KNOWN_PROTOCOL_VERSIONS:
            raise HostError("host_refused", f"{self.peer} speaks MCP protocol {version!r}, which this client "
                                            "does not know")
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return result

    def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """One ``tools/call``, waited for as long as the tool takes; its result (a refusal is ``is_error``)."""
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        content = result.get("content")
        structured = result.get("structuredContent")
        return ToolResult(content if isinstance(content, list) else [],
                          structured if isinstance(structured, dict) else None, result.get("isError") is True)

    def call_text(self, tool: str, arguments: dict[str, Any]) -> str:
        """One ``tools/call``'s text; its refusal raised with its stable code."""
        result = self.call(tool, arguments)
        if result.is_error:
            raise result.refusal()
        return result.text

    def request(self, method: str, params: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        """Send one request and read until its response (at most ``timeout`` seconds); its ``result``."""
        self._last_id += 1
        request_id = self._last_id
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            message = self._read(method, deadline)
            if "method" in message:
                if "id" in message:
                    self._answer(message)
                continue  # a notification (a log message, a list change): nothing to do
            if message.get("id") != request_id:
                continue  # a response to nothing this session asked
            if "error" in message:
                raise _rpc_failure(self.peer, method, message["error"])
            result = message.get("result")
            if not isinstance(result, dict):
                raise HostError("host_refused", f"{self.peer} answered {method} with no result object")
            return result

    def _answer(self, request: dict[str, Any]) -> None:
        """Answer a server's request: ``ping`` with an empty result, anything else as an unknown method."""
        if request["method"] == "ping":
            self._send({"jsonrpc": "2.0", "id": request["id"], "result": {}})
        else:
            self._send({"jsonrpc": "2.0", "id": request["id"],
                        "error": {"code": METHOD_NOT_FOUND, "message": "Method not found"}})

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self.sock.sendall(protocol.encode(message))
        except OSError as exc:
            raise HostError("host_disconnected", f"the connection to {self.peer} failed: {exc}") from None

    def _read(self, method: str, deadline: float | None) -> dict[str, Any]:
        """The next JSON-RPC message while ``method`` is waited for."""
        try:
            self.sock.settimeout(None if deadline is None else max(deadline - time.monotonic(), 0.001))
            line = client.next_line(self.sock, self._buffer, self.max_line_bytes)
        except TimeoutError:
            raise HostError("host_timeout", f"{self.peer} did not answer {method} in time") from None
        except OSError as exc:
            raise HostError("host_disconnected", f"the connection to {self.peer} failed during {method}: "
                                                 f"{exc}") from None
        if line is None:
            raise HostError("host_disconnected", f"{self.peer} closed the connection before it answered {method} "
                                                 "(it stopped, or dropped this client)")
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            raise HostError("host_refused", f"{self.peer} sent a line that is not a JSON-RPC message: "
                                            f"{line[:120]!r}")
        return message


def _rpc_failure(peer: str, method: str, error: Any) -> HostError:
    """A JSON-RPC error answer as a :class:`HostError`: the code in its ``data`` or its text, else ``host_refused``."""
    from kirocrew_core import tool_results

    error = error if isinstance(error, dict) else {}
    message = str(error.get("message") or "no message")
    data = error.get("data")
    code = data.get("code") if isinstance(data, dict) else None
    if isinstance(code, str) and code.isidentifier():
        return HostError(code, message)
    parsed, text = tool_results.error_from_text(message)
    if parsed != "internal_error":
        return HostError(parsed, text)
    return HostError("host_refused", f"{peer} refused {method}: {message} (JSON-RPC error {error.get('code')})")


def open_session(server: str, *, env: dict[str, str] | None = None,
                 session_type: str = protocol.SESSION_TYPE_CLI) -> ToolSession:
    """An initialized session on the hosted ``server`` (its name or its ``kirocrew`` subcommand).

    A host is started in the background when none answers (or when the one that answered is
    stopping); ``env`` is the environment it gets then (default: this process's). Errors are
    :class:`HostError` with a stable code (the module's, or the host's refusal: ``unknown_server``,
    or the hosted service's own, such as ``state_dir_in_use``).
    """
    sock, welcome, leftover = connect_hosted(server, session_type, env)
    session = ToolSession(sock, leftover, welcome=welcome)
    try:
        session.initialize()
    except BaseException:
        session.close()
        raise
    return session


def call_text(server: str, tool: str, arguments: dict[str, Any]) -> str:
    """One tool call on the hosted ``server`` as a ``cli`` client (a twin command); its text, or its refusal raised."""
    with open_session(server) as session:
        return session.call_text(tool, arguments)


def connect_hosted(server: str, session_type: str,
                   env: dict[str, str] | None) -> tuple[socket.socket, dict[str, Any], bytes]:
    """:func:`_say_hello` to a running host (started if needed), again while a stopping one makes way."""
    deadline = time.monotonic() + client.START_TIMEOUT_SECS
    while True:
        client.ensure_host(env)
        try:
            return _say_hello(server, session_type)
        except HostError as exc:
            if exc.code not in TRANSIENT_CODES or time.monotonic() >= deadline:
                raise
        time.sleep(RETRY_DELAY_SECS)


def _say_hello(server: str, session_type: str) -> tuple[socket.socket, dict[str, Any], bytes]:
    """Connect (directory and peer checked), send the ``mcp`` hello, read the welcome (blocking)."""
    from kirocrew_core.host.fingerprint import code_fingerprint

    caller = protocol.caller_block(os.environ.get(protocol.SESSION_KEY_ENV, ""), session_type, os.getpid(),
                                   os.getppid(), protocol.env_pid(os.environ.get(protocol.HOST_PID_ENV)))
    hello = protocol.hello(protocol.KIND_MCP, server=server, fingerprint=code_fingerprint(), caller=caller)
    sock, welcome, leftover = client.open_mcp(hello, CONNECT_TIMEOUT_SECS)
    return sock, welcome, bytes(leftover)
