"""Conversations inside the host: one service for every MCP client and ``kirocrew conversations`` twin.

The host (``kirocrew serve``) starts :class:`HostedConversations` with itself and serves
``kirocrew-conversations`` on its socket; each relay's connection is one MCP session on
the same :func:`~kirocrew_conversations.server.build_server`, so every client shares one
orchestrator, and a run one client started can be waited on by another.

Settings come from the host's environment (``KIRO_CONVERSATIONS_*``, inherited from the
relay or twin that started it). If the service cannot start (a standalone server owns
the state directory: ``state_dir_in_use``), the host runs on without it and lists it as
failed: each connection is refused with that error, and the next one tries the start
again, so stopping the standalone server is enough to make the host's conversations
available.

Cheap to import (the host loads every plugin): the service and the mcp SDK are imported
when the service starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import HostedMcpServer, HostService, WorkerLoad
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations.plugin import DESCRIPTION, SERVER_COMMAND, SERVER_NAME

if TYPE_CHECKING:
    from kirocrew_conversations.service import ConversationsService

log = logging.getLogger(__name__)

SERVICE_NAME = "conversations"


class HostedConversations:
    """The host's conversations service: started once, shared by every connection, closed at host stop."""

    def __init__(self) -> None:
        self._service: ConversationsService | None = None
        self._server: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting: asyncio.Lock | None = None
        self._stopped = False
        self.failure: KirocrewError | None = None  # why the last start failed, reported to connections

    @property
    def service(self) -> ConversationsService | None:
        return self._service

    async def start(self) -> None:
        """The host starting: open the state directory now.

        A failure is raised, so the host reports it (``kirocrew host status``) and runs on
        without the service, and it is kept: each connection is refused with it until a
        later connection's start succeeds.
        """
        self._stopped = False
        await self._ensure_started()

    async def stop(self) -> None:
        """The host stopping: a run still executing ends ``interrupted``; the state directory is released."""
        self._stopped = True
        async with self._start_lock():  # a start in progress finishes first, so its service is closed too
            service, self._service, self._server = self._service, None, None
        if service is None:
            return
        closing = asyncio.ensure_future(service.aclose())
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:  # never leave the service half-closed
            await closing
            raise

    async def ready(self) -> ConversationsService:
        """The running service for an in-process caller (the dashboard's routes); started if it is not.

        Like a connection, a caller after a failed start tries the start again, and gets the
        failure's code if it fails again (``server_stopped`` while the host stops).
        """
        return await self._ensure_started()

    def busy(self) -> str | None:
        """``"N runs in progress"`` while runs execute or wait for a worker; the host must not exit then."""
        service = self._service
        count = service.orchestrator.runs_in_progress() if service is not None else 0
        flows = len(service.workflows.active) if service is not None and service.workflows is not None else 0
        if not count and not flows:
            return None
        busy = [f"{count} run{'s' if count != 1 else ''} in progress"] if count else []
        busy += [f"{flows} workflow run{'s' if flows != 1 else ''} in progress"] if flows else []
        return ", ".join(busy)

    def worker_load(self) -> WorkerLoad:
        """The live kiro-cli workers and the sub-agent cap, for ``resource_status`` (the configured ones while
        the service is not running)."""
        service = self._service
        if service is None:
            config = _configured()
            return WorkerLoad(SERVICE_NAME, (), config.max_workers, 0, config.max_subagents)
        orchestrator = service.orchestrator
        return WorkerLoad(SERVICE_NAME, orchestrator.worker_pids(), orchestrator.max_workers,
                          orchestrator.runs_in_progress(), service.config.max_subagents)

    async def server(self) -> Any:
        """The MCP server for one more connection; the start failure (its code) if the service is not running.

        Built on the first connection, not at host start: importing the mcp SDK takes about a
        second, which a host started for the dashboard or a ping need not wait for. The import
        runs in a thread, so the host keeps answering meanwhile.
        """
        service = await self._ensure_started()
        async with self._start_lock():
            if self._server is None:
                self._server = await asyncio.to_thread(_build_server, service)
            return self._server

    async def restart_sessions(self, reason: str) -> int:
        """Retire every kiro-cli worker (idle ones now, busy ones after their run); how many."""
        service, loop = self._service, self._loop
        if service is None or loop is None:
            return 0
        if _running_loop() is not loop:  # called from another thread's loop: hand it to the service's
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.restart_sessions(reason), loop))
        count = service.orchestrator.restart_sessions()
        log.info("restart_sessions (%s): %d kiro-cli worker(s) closed or retiring", reason, count)
        return count

    def session_placement(self, conversation_id: str) -> tuple[str, str]:
        """``(authority, cwd)`` a session of ``conversation_id`` works with now, for work it hands on (a cron job).

        The authority is its run in progress's (a run may narrow the conversation's default), else
        the conversation's. Blocking store reads: a coroutine calls it through ``asyncio.to_thread``.
        Refused ``caller_unverified`` when the service is not running or the conversation is gone:
        a session key names a live conversation of this host, so neither is a session to act for.
        """
        from kirocrew_core.coretools.contract import ToolRefused

        service = self._service
        try:
            if service is None:
                raise KirocrewError("conversations are not running", code="service_unavailable")
            return service.session_placement(conversation_id)
        except KirocrewError as exc:
            raise ToolRefused("the calling session's conversation is not available in this host",
                              code="caller_unverified") from exc

    def host_service(self) -> HostService:
        return HostService(SERVICE_NAME, self.start, self.stop, self.busy)

    def hosted_server(self) -> HostedMcpServer:
        return HostedMcpServer(SERVER_NAME, SERVER_COMMAND, self.server, DESCRIPTION)

    def _start_lock(self) -> asyncio.Lock:
        if self._starting is None:
            self._starting = asyncio.Lock()
        return self._starting

    async def _ensure_started(self) -> ConversationsService:
        async with self._start_lock():
            if self._service is not None:
                return self._service
            if self._stopped:
                raise KirocrewError("the host is stopping; conversations are closed", code="server_stopped")
            try:
                service = await _start_service()
            except KirocrewError as exc:
                self.failure = exc
                raise
            # Workflow runs live in the host only: its start marks a run the last host left running failed.
            from kirocrew_conversations.workflows import (
                WorkflowEngine,
                conversation_agent_runner,
                owner_announcer,
                session_nudger,
            )

            service.workflows = await asyncio.to_thread(WorkflowEngine, conversation_agent_runner(service),
                                                        parallel=service.config.max_subagents,
                                                        on_end=owner_announcer(service),
                                                        nudger=session_nudger(service))
            self._service, self._loop = service, asyncio.get_running_loop()
            self.failure = None
            return service


async def _start_service() -> ConversationsService:
    from kirocrew_conversations.service import ConversationsService, ServiceConfig

    try:
        return await ConversationsService.start(ServiceConfig.from_env())
    except KirocrewError:
        raise
    except Exception as exc:  # the host's log gets the traceback, the client a code
        log.exception("the conversations service failed to start")
        raise KirocrewError(f"the conversations service failed to start: {type(exc).__name__}",
                            code="internal_error") from exc


def _configured() -> Any:
    from kirocrew_conversations.service import ServiceConfig

    return ServiceConfig.from_env()


def _build_server(service: ConversationsService) -> Any:
    from kirocrew_conversations.server import build_server

    return build_server(service)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    with contextlib.suppress(RuntimeError):
        return asyncio.get_running_loop()
    return None


_HOSTED: HostedConversations | None = None


def hosted() -> HostedConversations:
    """This process's hosted conversations (one host per process; the plugin's hooks share it)."""
    global _HOSTED
    if _HOSTED is None:
        _HOSTED = HostedConversations()
    return _HOSTED
