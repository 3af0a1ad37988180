"""Re-render the agent file from a coroutine, bounded, never raising: the restart route and the host use it.

A restart exists so that new kiro-cli processes load the current MCP configuration,
so ``POST /api/sessions/restart`` renders the agent file first; the host renders it
when it starts, so a code upgrade's managed-server commands reach the next session.
Neither may fail because the render did: the outcome is reported (and logged) instead.
The render is blocking file work under the ``agent-file`` lock, so it runs in a worker
thread, and the wait for it is capped (a thread cannot be cancelled: one that overruns
finishes on its own, and its atomic write leaves a whole file either way).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

log = logging.getLogger(__name__)

#: How long a caller waits for one render (the reference's cap for the restart's MCP sync).
SYNC_TIMEOUT_SECS = 30.0


@dataclass(frozen=True)
class SyncOutcome:
    """What one render did: ``servers`` is how many MCP servers the agent file now declares."""

    ok: bool
    servers: int = 0
    written: bool = False
    code: str | None = None
    error: str | None = None

    def as_fields(self) -> dict[str, Any]:
        """The restart answer's fields: ``mcpSynced``, ``mcpSyncOk`` and, on failure, why."""
        fields: dict[str, Any] = {"mcpSynced": self.servers, "mcpSyncOk": self.ok}
        fields["mcpSyncError"] = None if self.ok else {"code": self.code, "error": self.error}
        return fields


def sync_agent_file(pm: KirocrewPluginManager | None = None) -> SyncOutcome:
    """Rebuild the agent file (not strict: an unusable scope file is skipped with a warning)."""
    from kirocrew_mcp.render import rebuild_agent_config

    try:
        report = rebuild_agent_config(pm=pm)
    except KirocrewError as exc:
        return SyncOutcome(False, code=exc.code, error=exc.message)
    except OSError as exc:
        return SyncOutcome(False, code="agent_file_write_failed", error=f"{exc.strerror or exc}")
    return SyncOutcome(True, servers=len(report.servers), written=report.written)


async def sync_agent_file_async(pm: KirocrewPluginManager | None = None, *,
                                timeout: float | None = None) -> SyncOutcome:
    """:func:`sync_agent_file` in a worker thread, waited on for at most ``timeout`` seconds."""
    limit = SYNC_TIMEOUT_SECS if timeout is None else timeout
    try:
        return await asyncio.wait_for(asyncio.to_thread(sync_agent_file, pm), limit)
    except asyncio.TimeoutError:
        return SyncOutcome(False, code="mcp_sync_timeout",
                           error=f"rendering the agent file took longer than {limit:g} s; it finishes on its own")
    except Exception as exc:  # a render bug must not stop a restart or a host start
        log.exception("rendering the agent file failed unexpectedly")
        return SyncOutcome(False, code="mcp_sync_failed", error=f"{type(exc).__name__}: {exc}")
