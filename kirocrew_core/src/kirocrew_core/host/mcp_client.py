"""The mcp SDK's ``ClientSession`` to a server the host serves, for code that wants the SDK's typed session.

The twin commands call hosted tools through the standard-library client
(:mod:`kirocrew_core.host.tool_client`), which costs no SDK import. :func:`host_session` is the
SDK's session over the same hello (:func:`~kirocrew_core.host.tool_client.connect_hosted`,
session type ``cli``) and the host's line framing (:mod:`.transport`), and :func:`call_tool_text`
one call on it: for async code and tests that check hosted servers the way an SDK client sees
them (typed results, output schemas re-checked), and for measuring what the light client saves.

The mcp SDK is imported inside the functions; importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from kirocrew_core.host.tool_client import INITIALIZE_TIMEOUT_SECS, refusal
from kirocrew_core.host.twin import NO_HOST_ENV, host_disabled

__all__ = ["NO_HOST_ENV", "HostSession", "call_tool_text", "client_session", "host_disabled", "host_session",
           "tool_refusal"]


@dataclass(frozen=True)
class HostSession:
    """An initialized MCP session on a hosted server, and the host's welcome (its ``pid``, ``retiring``)."""

    session: Any  # mcp.ClientSession
    welcome: dict[str, Any]

    @property
    def host_pid(self) -> int:
        return int(self.welcome["pid"])


def tool_refusal(result: Any) -> Exception:
    """The :class:`~kirocrew_core.errors.KirocrewError` of an SDK ``isError`` tool result, with its stable code."""
    from kirocrew_core import tool_results

    return refusal(*tool_results.read_error(result))


async def call_tool_text(server: str, tool: str, arguments: dict[str, Any]) -> str:
    """One tool call on the hosted ``server`` as a ``cli`` client through the SDK; its text, or its refusal raised.

    What :func:`kirocrew_core.host.tool_client.call_text` does without the SDK, for async code and
    for comparing the two.
    """
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
    from kirocrew_core.host.tool_client import connect_hosted

    sock, welcome, leftover = await anyio.to_thread.run_sync(
        lambda: connect_hosted(server, session_type or protocol.SESSION_TYPE_CLI, env))
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


@contextlib.asynccontextmanager
async def client_session(stream: Any, *, buffered: Any = None,
                         timeout: float = INITIALIZE_TIMEOUT_SECS) -> AsyncIterator[Any]:
    """An initialized MCP ``ClientSession`` over a connected anyio byte stream, closed with it.

    An error raised in the ``with`` body is re-raised as itself once the session has closed
    cleanly, so a command still prints its ``error[code]`` and exits with its status.
    """
    import anyio

    from kirocrew_core.sdk_models import prepare as prepare_sdk_models

    prepare_sdk_models()  # before the SDK's first import in this process
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
