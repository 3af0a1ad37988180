"""Where a ``kirocrew conversations …`` command sends its tool call.

If a server owns the state directory, the command is one MCP tool call over
that server's control socket: the server supervises the runs, so ``spawn``
returns at once and ``wait``/``decide``/``cancel`` act on live runs. With no
server running, the command opens the state directory itself (restart recovery
included) and runs the tool in process; a run it starts lives only as long as
the command, so the CLI supervises such runs in the foreground until they end.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from kirocrew_core import tool_results
from kirocrew_core.errors import BadInputError, KirocrewError

from kirocrew_conversations import control_socket
from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.service import ConversationsService, ServiceConfig
from kirocrew_conversations.state_paths import state_dir as default_state_dir


BAD_INPUT_CODES = frozenset({"invalid_arguments", "unknown_tool"})


class Backend(Protocol):
    #: True when this process owns the state directory (runs end when the command exits).
    local: bool

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]: ...


class LocalBackend:
    local = True

    def __init__(self, service: ConversationsService) -> None:
        self.service = service

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.service.call(tool, arguments)


class RemoteBackend:
    local = False

    def __init__(self, session: Any) -> None:
        self.session = session

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's structured output, or its error raised with the stable code from the error text."""
        result = await self.session.call_tool(tool, arguments)
        if result.is_error:
            code, message = tool_results.read_error(result)
            # The caller's input was wrong: the same exit status as when the tool runs in process.
            kind = BadInputError if code in BAD_INPUT_CODES else KirocrewError
            raise kind(message, code=code)
        payload = result.structured_content
        if payload is None:  # a server without structured output still sends the same JSON as text
            text = "".join(getattr(block, "text", "") for block in result.content)
            try:
                payload = json.loads(text)
            except ValueError:
                raise KirocrewError(f"the server's reply is not JSON: {text[:300]}", code="internal_error") from None
        return payload


@contextlib.asynccontextmanager
async def open_backend(config: ServiceConfig) -> AsyncIterator[Backend]:
    """The owning server over its socket if one runs, else an in-process service."""
    directory = config.state_dir or default_state_dir()
    path = control_socket.socket_path(directory)
    if path.exists():
        stack = contextlib.AsyncExitStack()
        try:
            session = await stack.enter_async_context(control_socket.connect(path))
        except TimeoutError:  # (an OSError too, so it comes first)
            raise conversation_error("state_dir_in_use", "a server owns the state directory but its control "
                                                         "socket does not answer") from None
        except OSError:
            session = None  # a stale socket from a server that died: open the directory ourselves below
        if session is not None:
            async with stack:
                yield RemoteBackend(session)
            return
    service = await ConversationsService.start(config)
    try:
        yield LocalBackend(service)
    finally:
        await service.aclose()
