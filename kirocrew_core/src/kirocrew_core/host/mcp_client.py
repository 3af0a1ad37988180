"""An MCP ``ClientSession`` to a server the host serves: how kirocrew's own commands call hosted tools.

The ``kirocrew conversations …`` twins (and any later command that needs a live service)
call the host the way a relay does, minus the relay: :func:`host_session` makes sure a host
runs (starting one in the background, :func:`kirocrew_core.host.client.ensure_host`), says
hello for one hosted server with a caller block of session type ``cli``, and runs the mcp
SDK's client over the same line framing the host speaks (:mod:`.transport`).

``KIROCREW_NO_HOST=1`` (:func:`host_disabled`) tells such commands to do their work in
process instead, for environments where no background process may run.

The mcp SDK is imported inside the functions; importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

NO_HOST_ENV = "KIROCREW_NO_HOST"
# Bounds that only stop a hang; the host answers a hello and an initialize in milliseconds.
CONNECT_TIMEOUT_SECS = 5.0
INITIALIZE_TIMEOUT_SECS = 30.0
_FALSE = frozenset({"", "0", "false", "no", "off"})
# Refusals that mean "a host is on its way out": connect again (to the next host) shortly.
TRANSIENT_CODES = frozenset({"host_stopping", "host_unavailable"})
RETRY_DELAY_SECS = 0.05


def host_disabled(env: Mapping[str, str] | None = None) -> bool:
    """True when ``KIROCREW_NO_HOST`` asks commands to work in process rather than through the host."""
    return (os.environ if env is None else env).get(NO_HOST_ENV, "").strip().lower() not in _FALSE


@dataclass(frozen=True)
class HostSession:
    """An initialized MCP session on a hosted server, and the host's welcome (its ``pid``, ``retiring``)."""

    session: Any  # mcp.ClientSession
    welcome: dict[str, Any]

    @property
    def host_pid(self) -> int:
        return int(self.welcome["pid"])


#: Refusal codes that mean the caller's input was wrong: the same exit status as bad input given in process.
BAD_INPUT_CODES = frozenset({"invalid_arguments", "unknown_tool"})


def tool_refusal(result: Any) -> Exception:
    """The :class:`~kirocrew_core.errors.KirocrewError` of an ``isError`` tool result, with its stable code."""
    from kirocrew_core import tool_results
    from kirocrew_core.errors import BadInputError, KirocrewError

    code, message = tool_results.read_error(result)
    kind = BadInputError if code in BAD_INPUT_CODES else KirocrewError
    return kind(message, code=code)


async def call_tool_text(server: str, tool: str, arguments: dict[str, Any]) -> str:
    """One tool call on the hosted ``server`` as a ``cli`` client (a twin command); its text, or its refusal raised."""
    async with host_session(server) as hosted:
        result = await hosted.session.call_tool(tool, arguments)
    if result.is_error:
        raise tool_refusal(result)
    return "".join(getattr(block, "text", "") for block in result.content)


@contextlib.asynccontextmanager
async def host_session(server: str, *, env: dict[str, str] | None = None,
                       session_type: str | None = None) -> AsyncIterator[HostSession]:
    """An initialized MCP session on the hosted ``server`` (its name or its ``kirocrew`` subcommand).

    A host is started in the background when none answers (or when the one that answered
    is stopping); ``env`` is the environment it gets then (default: this process's). Errors are
    :class:`~kirocrew_core.host.client.HostError` with a stable code: ``host_unavailable``,
    ``host_start_failed``, ``host_dir_unsafe``, or the code of the host's refusal
    (``unknown_server``, or the hosted service's own, such as ``state_dir_in_use``). An error
    raised in the ``with`` body leaves as itself, not wrapped in the SDK's exception groups.
    """
    import anyio
    from anyio.abc import UNIXSocketStream
    from anyio.streams.buffered import BufferedByteReceiveStream

    from kirocrew_core.host import protocol

    sock, welcome, leftover = await anyio.to_thread.run_sync(
        lambda: _connect(server, session_type or protocol.SESSION_TYPE_CLI, env))
    try:
        sock.settimeout(None)
        sock.setblocking(False)
        stream = await UNIXSocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise
    buffered = BufferedByteReceiveStream(stream)
    if leftover:
        buffered.feed_data(leftover)
    async with client_session(stream, buffered=buffered) as session:
        yield HostSession(session, welcome)


def _connect(server: str, session_type: str, env: dict[str, str] | None) -> tuple[Any, dict[str, Any], bytes]:
    """:func:`_say_hello` to a running host (started if needed), again while a stopping one makes way."""
    from kirocrew_core.host import client

    deadline = time.monotonic() + client.START_TIMEOUT_SECS
    while True:
        client.ensure_host(env)
        try:
            return _say_hello(server, session_type)
        except client.HostError as exc:
            if exc.code not in TRANSIENT_CODES or time.monotonic() >= deadline:
                raise
        time.sleep(RETRY_DELAY_SECS)


def _say_hello(server: str, session_type: str) -> tuple[Any, dict[str, Any], bytes]:
    """Connect (directory and peer checked), send the ``mcp`` hello, read the welcome (blocking)."""
    from kirocrew_core.host import client, protocol
    from kirocrew_core.host.fingerprint import code_fingerprint

    caller = protocol.caller_block(os.environ.get(protocol.SESSION_KEY_ENV, ""), session_type, os.getpid(),
                                   os.getppid(), protocol.env_pid(os.environ.get(protocol.HOST_PID_ENV)))
    hello = protocol.hello(protocol.KIND_MCP, server=server, fingerprint=code_fingerprint(), caller=caller)
    sock, welcome, leftover = client.open_mcp(hello, CONNECT_TIMEOUT_SECS)
    return sock, welcome, bytes(leftover)


@contextlib.asynccontextmanager
async def client_session(stream: Any, *, buffered: Any = None,
                         timeout: float = INITIALIZE_TIMEOUT_SECS) -> AsyncIterator[Any]:
    """An initialized MCP ``ClientSession`` over a connected anyio byte stream, closed with it.

    Shared by :func:`host_session` and the conversations control socket (standalone mode).
    An error raised in the ``with`` body is re-raised as itself once the session has closed
    cleanly, so a command still prints its ``error[code]`` and exits with its status.
    """
    import anyio

    from kirocrew_core.sdk_models import prepare as prepare_sdk_models

    prepare_sdk_models()  # a twin command's first SDK import is usually this one
    from mcp import ClientSession

    from kirocrew_core.host.protocol import MAX_REPLY_LINE_BYTES
    from kirocrew_core.host.transport import line_transport

    failure: Exception | None = None
    transport = line_transport(stream, buffered=buffered, max_line_bytes=MAX_REPLY_LINE_BYTES)
    async with stream, transport as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(timeout):
            await session.initialize()
        try:
            yield session
        except Exception as exc:  # noqa: BLE001 - re-raised below, once the session has closed cleanly
            failure = exc
    if failure is not None:
        raise failure
