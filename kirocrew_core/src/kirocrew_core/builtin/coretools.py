"""The ``kirocrew-core`` MCP server as a core builtin plugin: the relay command, the rendered entry, the host parts.

Cheap to import (``kirocrew --help`` loads every builtin): the server, the mcp SDK and
jsonschema are imported when the host builds the server, on its first ``kirocrew-core``
connection.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import HostedMcpServer, HostService, ManagedMcpServer
from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    import asyncio

    from kirocrew_core.cli import KirocrewCLI

log = logging.getLogger(__name__)

SERVER_NAME = "kirocrew-core"
SERVER_COMMAND = "mcp-core"
#: The rendered entry's ``timeout`` (ms): above ask_question's longest window (540 s), with room to answer.
CALL_TIMEOUT_MS = 600_000
DESCRIPTION = "The model-facing tools of a kirocrew session (questions, directives, sub-agents, lessons…)."


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command(SERVER_COMMAND, "kirocrew_core.coretools.command:mcp_core",
                         "The kirocrew-core MCP server on stdio (for kiro-cli sessions): a relay to the host.")


@hookimpl
def managed_mcp_servers() -> list[ManagedMcpServer]:
    # Auto-approve may be granted (the governance ceiling still decides): every tool acts only on the
    # calling session (strict identity), asks a person who still answers, or is bounded by a cap.
    # ask_question blocks for up to 540 s while a person answers: kiro-cli must not give up on the call first.
    return [ManagedMcpServer(SERVER_NAME, (SERVER_COMMAND,), may_auto_approve=True, description=DESCRIPTION,
                             timeout_ms=CALL_TIMEOUT_MS)]


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    return [HostedMcpServer(SERVER_NAME, SERVER_COMMAND, _hosted.server, DESCRIPTION)]


@hookimpl
def host_services() -> list[HostService]:
    return [HostService("coretools", _hosted.start, _hosted.stop)]


class _HostedCore:
    """The host's one kirocrew-core server (built on first use) and the legacy sidecar sweep at start."""

    def __init__(self) -> None:
        self._server: Any = None
        self._lock: asyncio.Lock | None = None

    async def start(self) -> None:
        import asyncio  # here, not at module level: ``kirocrew --help`` imports this module

        await asyncio.to_thread(_prepare_sidecars)

    async def stop(self) -> None:
        self._server = None

    async def server(self) -> Any:
        import asyncio

        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._server is None:
                self._server = await asyncio.to_thread(_build)
            return self._server


def _build() -> Any:
    from kirocrew_core.coretools.server import build_server

    return build_server()


def _prepare_sidecars() -> None:
    """A fresh host: remove the pid sidecars an earlier version published; make sure the SEL key exists."""
    from kirocrew_core import audit
    from kirocrew_core.coretools.identity import SessionRegistry
    from kirocrew_core.errors import KirocrewError

    removed = SessionRegistry.remove_legacy_sidecars()
    try:  # the audit owner creates its key with the log's first record
        audit.record("coretools.host_started", sidecars_removed=removed)
    except KirocrewError as exc:
        log.warning("the SEL is unusable (%s): kirocrew-core calls are not audited", exc)


_hosted = _HostedCore()
