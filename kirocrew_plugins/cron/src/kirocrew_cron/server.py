"""The host's one ``kirocrew-cron`` MCP server, and the same tools called in process.

The server is kirocrew-core's (:class:`~kirocrew_core.coretools.server.CoreToolsServer`) over
the eight tools of :mod:`kirocrew_cron.tools`: the same argument validation (unknown fields
refused), caller resolution, tool policy, sanitising and SEL audit as ``kirocrew-core``.
Relays reach it through ``kirocrew mcp-cron``; it is built on the first connection (the mcp
SDK import takes a moment) and shared by every connection, since nothing in it is per caller.

:func:`call_as_person` runs one tool in process exactly as the server would for the
``kirocrew cron`` CLI, over a host the caller provides: the CLI uses it when no host may run
(``KIROCREW_NO_HOST=1``), so the twin and the tool agree by construction.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kirocrew_core.coretools.server import CoreToolsServer

    from kirocrew_cron.tools import HostProvider

INSTRUCTIONS = """\
Scheduled work for this kirocrew session: cron_add schedules a prompt (or a shell command) every N \
seconds, on a cron expression, or once at a time; the job belongs to this session, runs in its own \
conversation with this session's authority and working directory, and its result is published as a \
notification. cron_list shows your jobs. A failed call is isError with the text error[<code>]: <message>; \
branch on the code."""

_server: Any = None
_lock: asyncio.Lock | None = None


def core_server(host: HostProvider | None = None) -> CoreToolsServer:
    """kirocrew-core's tool server over the eight cron tools (over ``host``; default: the host's CronHost)."""
    from kirocrew_core.coretools.server import CoreToolsServer

    from kirocrew_cron.plugin import SERVER_NAME
    from kirocrew_cron.tools import tools_by_name

    provided = tools_by_name() if host is None else tools_by_name(host)
    return CoreToolsServer(tool_source=lambda: provided, server_name=SERVER_NAME)


async def hosted_server() -> Any:
    """The host's one SDK server for ``kirocrew-cron`` (built in a thread on the first connection)."""
    global _server, _lock
    if _lock is None:
        _lock = asyncio.Lock()
    async with _lock:
        if _server is None:
            _server = await asyncio.to_thread(_build)
        return _server


def _build() -> Any:
    from kirocrew_core.coretools.server import build_server

    return build_server(core_server(), instructions=INSTRUCTIONS)


async def call_as_person(host: HostProvider, name: str, arguments: dict[str, Any]) -> tuple[str, str | None]:
    """``(text, error code or None)`` of tool ``name`` called by the person (the CLI) over ``host``, in process."""
    from kirocrew_core.host.caller import CallerContext
    from kirocrew_core.host.protocol import SESSION_TYPE_CLI

    caller = CallerContext(session_key="", session_type=SESSION_TYPE_CLI, relay_pid=0, host_pid=None, raw={})
    return await core_server(host).call(name, arguments, caller, as_person=True)
