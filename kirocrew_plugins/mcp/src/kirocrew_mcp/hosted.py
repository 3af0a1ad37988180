"""kirocrew-mcp in the host: render the agent file when the host starts.

The managed servers' launch commands come from the running code, so a host started
after an upgrade re-renders the agent file and the next kiro-cli session loads the
new commands. The render runs in the background: the host's socket does not wait for
it (a relay that started the host is waiting on that socket), and a failure is
logged, never fatal. ``busy`` keeps an idle host from exiting mid-render.
"""

from __future__ import annotations

import asyncio
import logging

from kirocrew_core.contributions import HostService

from kirocrew_mcp.sync import SyncOutcome, sync_agent_file_async

log = logging.getLogger(__name__)

SERVICE_NAME = "mcp.agent-file"


class StartupRender:
    """One background render per host start; :attr:`outcome` is what it did once it finished."""

    def __init__(self) -> None:
        self._task: asyncio.Task[SyncOutcome] | None = None
        self.outcome: SyncOutcome | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._render(), name="mcp-startup-render")

    async def _render(self) -> SyncOutcome:
        outcome = await sync_agent_file_async()
        if outcome.ok:
            log.info("rendered the agent file at host start: %d MCP servers%s", outcome.servers,
                     "" if outcome.written else " (unchanged)")
        else:
            log.warning("could not render the agent file at host start (%s): %s; sessions load the file as it is",
                        outcome.code, outcome.error)
        self.outcome = outcome
        return outcome

    def busy(self) -> str | None:
        return "rendering the agent file" if self._task is not None and not self._task.done() else None

    async def stop(self) -> None:
        """Wait for a render still running (it is bounded), so the host never exits mid-write."""
        task, self._task = self._task, None
        if task is not None:
            await task

    def service(self) -> HostService:
        return HostService(SERVICE_NAME, self.start, self.stop, self.busy)
