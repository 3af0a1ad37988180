"""kirocrew-mcp in the host: render the agent file when the host starts, and say when it is ready.

The managed servers' launch commands come from the running code, so a host started
after an upgrade re-renders the agent file and the next kiro-cli session loads the
new commands. Enabled apps are refreshed first (their backend's port, their agent
files' framework-owned keys: :mod:`kirocrew_mcp.app_lifecycle`). The render runs in
the background: the host's socket does not wait for it (a relay that started the
host is waiting on that socket), and a failure is logged, never fatal. ``busy``
keeps an idle host from exiting mid-render.

A session must not start before the render it would load: :func:`agent_file_problem`
(the ``agent_file_ready`` hook) waits for this process's startup render, then checks
the file as every MCP reader does. A process that is not a host (a standalone
conversations server, a command working in process) renders nothing and checks the
file as it is — with one exception, in a host or not: when the owner changed the
permission policy or the ceiling since the last render, the file is rendered again
first, so its blanket grants never cover a call a new rule would refuse.
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
        self.outcome = None
        self._task = asyncio.get_running_loop().create_task(self._render(), name="mcp-startup-render")

    async def _render(self) -> SyncOutcome:
        from kirocrew_mcp.app_lifecycle import refresh_enabled_apps_async

        await refresh_enabled_apps_async()  # first, so the render below already has each app's live port
        outcome = await sync_agent_file_async()
        if outcome.ok:
            log.info("rendered the agent file at host start: %d MCP servers%s", outcome.servers,
                     "" if outcome.written else " (unchanged)")
        else:
            log.warning("could not render the agent file at host start (%s): %s; sessions load the file as it is",
                        outcome.code, outcome.error)
        self.outcome = outcome
        return outcome

    async def finished(self) -> SyncOutcome | None:
        """Wait for a render in progress (bounded by the render's own cap); what the last one did, if any.

        A render started in another event loop is not waited on (a task belongs to its loop); the
        host's sessions run in the loop that started it.
        """
        task = self._task
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(task)
        return self.outcome

    def busy(self) -> str | None:
        return "rendering the agent file" if self._task is not None and not self._task.done() else None

    async def stop(self) -> None:
        """Wait for a render still running (it is bounded), so the host never exits mid-write."""
        task, self._task = self._task, None
        if task is not None:
            await task

    def service(self) -> HostService:
        return HostService(SERVICE_NAME, self.start, self.stop, self.busy)


_STARTUP: StartupRender | None = None


def startup_render() -> StartupRender:
    """This process's startup render (one host per process; the host service and the hook share it)."""
    global _STARTUP
    if _STARTUP is None:
        _STARTUP = StartupRender()
    return _STARTUP


async def agent_file_problem() -> str | None:
    """Why a session cannot start on the rendered agent yet (None: it can), once the startup render is done."""
    from kirocrew_core.agent_file import file_problem

    from kirocrew_mcp.render import policy_changed_since_render
    from kirocrew_mcp.scopes import mcp_document_problem

    outcome = await startup_render().finished()
    if await asyncio.to_thread(policy_changed_since_render):
        # The owner changed the permission policy (or the ceiling) since the render: the file's blanket grants may
        # cover a call a new rule refuses, and kiro-cli reads the file only when it starts. Render it first.
        outcome = await sync_agent_file_async()
    reason = await asyncio.to_thread(file_problem, check=mcp_document_problem)
    if reason is not None and outcome is not None and not outcome.ok:
        reason += f" (the host's render failed: {outcome.code})"
    return reason
