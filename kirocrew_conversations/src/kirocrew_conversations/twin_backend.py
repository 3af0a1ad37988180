"""Where a ``kirocrew conversations …`` command sends its tool call.

In this order:

1. A standalone server (``kirocrew mcp-conversations --standalone``) owns the state
   directory: one MCP tool call over its control socket.
2. Otherwise the host (started in the background if none runs): one MCP tool call
   over the host's socket, as a client of session type ``cli``. The host must own
   this state directory; when it serves another one (the command names its own
   ``--state-dir``) or its conversations cannot start, the command falls through.
3. ``KIROCREW_NO_HOST=1``, or the fall-through above: the command opens the state
   directory itself (restart recovery included) and runs the tool in process.

In the first two the server supervises the runs, so ``spawn`` returns at once and
``wait``/``decide``/``cancel`` act on live runs. In the third a run lives only as
long as the command, so the CLI supervises it in the foreground until it ends.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from kirocrew_core.errors import KirocrewError
from kirocrew_core.host.client import HostError
from kirocrew_core.host.tool_client import ToolSession, open_session
from kirocrew_core.host.twin import host_disabled

from kirocrew_conversations import control_socket
from kirocrew_conversations.errors import CATALOGUE, conversation_error
from kirocrew_conversations.plugin import SERVER_NAME
from kirocrew_conversations.service import ConversationsService, ServiceConfig
from kirocrew_conversations.state_paths import STATE_DIR_ENV, recorded_owner
from kirocrew_conversations.state_paths import state_dir as default_state_dir


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

    def __init__(self, session: ToolSession) -> None:
        self.session = session

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's structured output, or its error raised with the stable code from the error text.

        The call blocks this command's loop until it is answered: the loop runs nothing else meanwhile,
        and Ctrl-C interrupts the read at once.
        """
        result = self.session.call(tool, arguments)
        if result.is_error:
            raise result.refusal()
        payload = result.structured
        if payload is None:  # a server without structured output still sends the same JSON as text
            text = result.text
            try:
                payload = json.loads(text)
            except ValueError:
                raise KirocrewError(f"the server's reply is not JSON: {text[:300]}", code="internal_error") from None
        return payload


@contextlib.asynccontextmanager
async def open_backend(config: ServiceConfig) -> AsyncIterator[Backend]:
    """A standalone server over its socket, else the host, else an in-process service (module docstring)."""
    directory = config.state_dir or default_state_dir()
    with contextlib.ExitStack() as stack:
        session = _standalone_session(directory)
        if session is None and not host_disabled():
            session = _host_session(directory)
        if session is not None:
            stack.enter_context(session)
            yield RemoteBackend(session)
            return
    service = await ConversationsService.start(config)
    try:
        yield LocalBackend(service)
    finally:
        await service.aclose()


def _standalone_session(directory: Path) -> ToolSession | None:
    """A session on the standalone server owning ``directory``, or ``None`` when none answers there."""
    path = control_socket.socket_path(directory)
    if not path.exists():
        return None
    try:
        return control_socket.connect(path)
    except TimeoutError:  # (an OSError too, so it comes first)
        raise conversation_error("state_dir_in_use", "a server owns the state directory but its control "
                                                     "socket does not answer") from None
    except OSError:
        return None  # a stale socket from a server that died: look further
    except HostError as exc:
        if exc.code != "host_disconnected":
            raise
        return None  # a server on its way out closed the connection: look further


def _host_session(directory: Path) -> ToolSession | None:
    """A session on the host when it owns ``directory``; ``None`` to work in process instead.

    A host this command starts gets ``directory`` (absolute: a host runs in its own working
    directory) as its state directory. One already running may own another (it took its
    settings from the environment of whoever started it): then this directory is not served
    by it, and the command opens it itself as before the host.
    """
    env = {**os.environ, STATE_DIR_ENV: str(directory.absolute())}
    try:
        hosted = open_session(SERVER_NAME, env=env)
    except HostError as exc:
        if exc.code in CATALOGUE or exc.code == "unknown_server":
            # The host's conversations cannot start (state_dir_in_use, say) or it serves none: in process,
            # which answers with the right error for this directory if it cannot be opened either.
            return None
        raise KirocrewError(f"{exc.message} (KIROCREW_NO_HOST=1 makes this command work in process)",
                            code=exc.code) from None
    if recorded_owner(directory) != hosted.host_pid:
        hosted.close()
        return None
    return hosted
