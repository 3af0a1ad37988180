"""One kiro session as the ACP runtime hosts it, and the callbacks a caller plugs into it.

:class:`AcpSession` is what :meth:`AcpRuntime.new_session`,
:meth:`AcpRuntime.load_session` and :meth:`AcpRuntime.fork_session` return:
the session's results (kiro's raw ``models`` included), kiro's notifications
about it (OAuth requests, MCP status, usage metadata), and its calls. Updates reach the caller's sink
through one queue per session, so a slow sink sees them in arrival order and
:meth:`AcpSession.prompt` returns only once the whole turn has been delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kirocrew_core import kiro_ext
from kirocrew_core.kiro_ext import CommandResult, KiroSessionState, SessionModels, SessionModes

if TYPE_CHECKING:
    from acp.schema import PermissionOption, PromptResponse, ToolCallUpdate

    from kirocrew_core.acp_runtime import AcpRuntime

log = logging.getLogger(__name__)


# -- callbacks and results ------------------------------------------------------


@dataclass(frozen=True)
class PermissionRequest:
    """kiro-cli asks before running a tool. ``meta`` holds kiro's extras (``trustOptions``)."""

    session_id: str
    tool_call: ToolCallUpdate
    options: tuple[PermissionOption, ...]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def option_of_kind(self, *kinds: str) -> str | None:
        """The id of the first option whose kind is one of ``kinds`` (in the order given)."""
        for kind in kinds:
            for option in self.options:
                if str(getattr(option.kind, "value", option.kind)) == kind:
                    return option.option_id
        return None


# How many recent tool_call updates a session keeps for its permission handler.
TOOL_CALLS_KEPT = 256

# The option id to select, or None to answer "cancelled".
PermissionHandler = Callable[[PermissionRequest], Awaitable[str | None]]
# (session_id, update) for every session/update; ``update`` is the SDK's typed model.
UpdateSink = Callable[[str, Any], Awaitable[None]]


async def reject_permission(request: PermissionRequest) -> str | None:
    """The default policy: select ``reject_once`` if offered, else answer "cancelled".

    A runtime nobody supervises must never let a tool run on its own say-so;
    ``reject_always`` is not chosen because kiro would remember it beyond this call.
    """
    return request.option_of_kind("reject_once")


@dataclass(frozen=True)
class PromptResult:
    """How a turn ended: ``stop_reason`` is end_turn|max_tokens|max_turn_requests|refusal|cancelled.

    ``metadata`` is the ``_kiro.dev/metadata`` kiro sent during this turn (usage), None if it sent none.
    """

    stop_reason: str
    response: PromptResponse
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class AppliedSettings:
    """What a session runs on once :meth:`AcpSession.apply_settings` returned, as kiro reported it.

    ``model`` and ``mode`` come from kiro's own reports (the new/load result, a
    ``current_mode_update``, an accepted set call); ``effort`` is the ``--effort``
    the process started a new session with, or the value an accepted effort
    command set, None when neither (kiro reports no effort). ``changed`` names
    the settings a request had to change, in the order they were sent.
    """

    model: str | None
    mode: str | None
    effort: str | None
    changed: tuple[str, ...] = ()


# -- sessions -------------------------------------------------------------------


class AcpSession(KiroSessionState):
    """One kiro session in a runtime: its results, kiro's notifications about it, and its calls.

    Attributes: ``session_id``, ``cwd``, ``modes`` and ``models`` (parsed; None if
    kiro sent none), ``raw`` (the raw new/load/fork result, kiro's extra fields
    included), ``current_mode_id`` and ``current_model_id`` (kiro's last word on
    them), ``current_effort`` (see :class:`AppliedSettings`), plus everything
    :class:`KiroSessionState` records (``oauth_requests``, ``mcp_status``,
    ``metadata``, ``available_commands``).
    """

    def __init__(self, runtime: AcpRuntime, session_id: str, cwd: str, *,
                 on_update: UpdateSink | None, on_permission: PermissionHandler | None) -> None:
        super().__init__()
        self.runtime = runtime
        self.session_id = session_id
        self.cwd = cwd
        self.raw: dict[str, Any] = {}
        self.modes: SessionModes | None = None
        self.models: SessionModels | None = None
        self.current_mode_id: str | None = None
        self.current_model_id: str | None = None
        self.current_effort: str | None = None
        self.on_update = on_update
        self.on_permission = on_permission
        self.closed = False
        self._updates: asyncio.Queue[Any] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None
        self._permission_tasks: set[asyncio.Task[Any]] = set()
        #: The newest ``tool_call`` updates by tool call id, recorded on arrival (see :meth:`_deliver`).
        self.tool_calls: dict[str, Any] = {}

    def _apply_result(self, raw: Mapping[str, Any]) -> None:
        self.raw = dict(raw)
        self.modes = kiro_ext.parse_session_modes(raw.get("modes"))
        self.models = kiro_ext.parse_session_models(raw.get("models"))
        if self.modes is not None:
            self.current_mode_id = self.modes.current_mode_id
        if self.models is not None:
            self.current_model_id = self.models.current_model_id

    # The calls, for convenience: each is the runtime's method for this session.
    async def prompt(self, prompt: str | Sequence[Any]) -> PromptResult:
        return await self.runtime.prompt(self.session_id, prompt)

    async def cancel(self) -> None:
        await self.runtime.cancel(self.session_id)

    async def set_mode(self, mode_id: str) -> dict[str, Any]:
        return await self.runtime.set_mode(self.session_id, mode_id)

    async def set_model(self, model_id: str) -> dict[str, Any]:
        return await self.runtime.set_model(self.session_id, model_id)

    async def apply_settings(self, *, model: str | None = None, mode: str | None = None,
                             effort: str | None = None) -> AppliedSettings:
        return await self.runtime.apply_settings(self.session_id, model=model, mode=mode, effort=effort)

    async def execute_command(self, command: str, args: Mapping[str, Any] | None = None) -> CommandResult:
        return await self.runtime.execute_command(self.session_id, command, args)

    async def steer(self, message: str) -> bool:
        return await self.runtime.steer(self.session_id, message)

    async def terminate(self) -> None:
        await self.runtime.terminate_session(self.session_id)

    # Update delivery: one pump per session keeps the sink's calls in arrival order.
    def _start_pump(self) -> None:
        self._pump = asyncio.get_running_loop().create_task(self._run_pump(), name=f"acp-updates-{self.session_id}")

    async def _run_pump(self) -> None:
        while True:
            update = await self._updates.get()
            try:
                if self.on_update is not None:
                    await self.on_update(self.session_id, update)
            except Exception:
                log.exception("update sink of session %s failed; update dropped", self.session_id)
            finally:
                self._updates.task_done()

    def _deliver(self, update: Any) -> None:
        kind = getattr(update, "session_update", None)
        mode = getattr(update, "current_mode_id", None)
        if kind == "current_mode_update" and isinstance(mode, str):
            self.current_mode_id = mode
        elif kind == "tool_call":
            # Kept as it arrives, ahead of the sink: a permission handler reads the call kiro asks about here
            # without waiting for every queued update to pass the sink (which may be writing each to a store).
            self.tool_calls[str(getattr(update, "tool_call_id", ""))] = update
            while len(self.tool_calls) > TOOL_CALLS_KEPT:
                self.tool_calls.pop(next(iter(self.tool_calls)))
        self._updates.put_nowait(update)

    async def flush_updates(self) -> None:
        """Wait until every update already queued for this session has passed its sink.

        Only what this process has received is covered; kiro's updates the SDK is
        still dispatching are not, so prefer :meth:`AcpRuntime.settle_updates`,
        which waits for those first. Use either inside a permission handler (so
        the ``tool_call`` that names the tool has been delivered) or after
        :meth:`AcpRuntime.load_session` (so the replayed history has drained
        before you attach a sink). Returns at once for a closed session.
        """
        if self._pump is None or self._pump.done():
            return
        joined = asyncio.ensure_future(self._updates.join())
        try:
            # The pump may be cancelled (session closed) while we wait: then stop waiting too.
            await asyncio.wait([joined, self._pump], return_when=asyncio.FIRST_COMPLETED)
        finally:
            joined.cancel()

    def _cancel_permissions(self) -> None:
        for task in list(self._permission_tasks):
            task.cancel()

    async def _close(self) -> None:
        self.closed = True
        self._cancel_permissions()
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
