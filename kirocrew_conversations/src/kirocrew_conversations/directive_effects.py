"""What a session directive does to the conversation whose run carried it (the consumer's half).

The orchestrator decodes a directive only from a tool call kiro-cli's ``_meta`` recorded as
served by ``kirocrew-core`` under a directive tool's name, then calls :func:`apply` with the run
that carried it: the effect lands on *that run's own* conversation, never on one named in the
payload (a payload names none). Appliers are looked up by directive kind in
:data:`directive_appliers`; another part (``ask_question``) registers its own there.

An applier never raises: it returns an :class:`Outcome` (applied or refused, with a short
message) that becomes a ``directive`` event on the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kirocrew_core import home
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations.questions import apply_exchange
from kirocrew_conversations.redact import redact_secrets, redact_text

if TYPE_CHECKING:
    from kirocrew_conversations.orchestrator import Orchestrator

log = logging.getLogger(__name__)

MONITORS_ENV = "KIROCREW_MONITORS"  # "off": monitor directives are refused on this host
# For tests and demos only: every loop waits this many seconds instead of its interval_secs
# (the tools' schema keeps models at 15 s or more).
MONITOR_INTERVAL_ENV = "KIROCREW_MONITOR_INTERVAL_SECS"
SUMMARY_MAX = 300


@dataclass(frozen=True)
class DirectiveContext:
    """Where a directive landed: the run (and its conversation) whose tool call carried it."""

    orchestrator: Orchestrator
    conversation_id: str
    run_id: str
    tool_call_id: str


@dataclass(frozen=True)
class Outcome:
    """An applier's verdict: ``applied`` or ``refused``, a short message, redacted details for the event."""

    status: Literal["applied", "refused"]
    message: str
    details: dict[str, Any] = field(default_factory=dict)


Applier = Callable[[DirectiveContext, dict[str, Any]], Awaitable[Outcome]]


async def apply(ctx: DirectiveContext, kind: str, args: dict[str, Any]) -> Outcome:
    """Run ``kind``'s applier and record a ``directive`` event on the run; never raises."""
    applier = directive_appliers.get(kind)
    if applier is None:
        outcome = Outcome("refused", f"{kind} is not handled by this host")
    else:
        try:
            outcome = await applier(ctx, args)
        except KirocrewError as exc:
            outcome = Outcome("refused", exc.message)
        except Exception:  # an applier bug must not break the run
            log.exception("the %s directive failed on conversation %s", kind, ctx.conversation_id)
            outcome = Outcome("refused", f"{kind} failed on this host")
    await ctx.orchestrator.record(ctx.conversation_id, ctx.run_id, "directive", {
        "directive": kind, "outcome": outcome.status,
        "message": redact_text(outcome.message, SUMMARY_MAX), **outcome.details})
    log.info("directive %s %s on conversation %s", kind, outcome.status, ctx.conversation_id)
    return outcome


# -- monitor loops --------------------------------------------------------------------------------


def monitors_enabled() -> bool:
    return os.environ.get(MONITORS_ENV, "").strip().lower() not in ("off", "0", "false", "no")


def _interval_override() -> float | None:
    raw = os.environ.get(MONITOR_INTERVAL_ENV, "").strip()
    try:
        value = float(raw) if raw else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None


class MonitorLoops:
    """The host's timers for monitor loops (state lives in the store, so loops survive a restart).

    After each run of a conversation ends its loop (if active) is armed; a new message to the
    conversation disarms it until that run ends. When the timer fires on an idle conversation,
    the cycle is counted and ``[monitor cycle n/max] message`` is queued as the conversation's
    own message; a conversation with work active or queued is skipped, not counted.
    """

    def __init__(self, orchestrator: Orchestrator) -> None:
        self._orch = orchestrator
        self._timers: dict[str, asyncio.Task[None]] = {}

    def arm(self, conversation_id: str) -> None:
        """Start the idle timer of the conversation's loop, if it has an active one (a quick read)."""
        self.disarm(conversation_id)
        if self._orch.closed or not monitors_enabled():
            return
        monitor = self._orch.store.directives.monitor(conversation_id)
        if monitor is None or not monitor.active:
            return
        self._timers[conversation_id] = asyncio.get_running_loop().create_task(
            self._wait_and_fire(conversation_id), name=f"monitor-{conversation_id}")

    def disarm(self, conversation_id: str) -> None:
        timer = self._timers.pop(conversation_id, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    async def rearm_all(self) -> None:
        """After a (re)start: arm every active loop whose conversation is idle."""
        store = self._orch.store
        for monitor in await asyncio.to_thread(store.directives.active_monitors):
            if not await asyncio.to_thread(store.unfinished_runs, monitor.conversation_id):
                self.arm(monitor.conversation_id)

    async def aclose(self) -> None:
        timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()
        for timer in timers:
            with contextlib.suppress(asyncio.CancelledError):
                await timer

    async def _wait_and_fire(self, conversation_id: str) -> None:
        monitor = self._orch.store.directives.monitor(conversation_id)
        if monitor is None or not monitor.active:
            self._timers.pop(conversation_id, None)
            return
        await asyncio.sleep(_interval_override() or monitor.interval_secs)
        self._timers.pop(conversation_id, None)
        try:
            await self._fire(conversation_id, monitor.id)
        except Exception:
            log.exception("monitor loop of conversation %s failed to fire", conversation_id)

    async def _fire(self, conversation_id: str, monitor_id: str) -> None:
        store = self._orch.store
        try:
            conversation = await asyncio.to_thread(store.get_conversation, conversation_id)
        except KirocrewError:  # deleted: its loop went with it
            return
        if conversation.state == "archived":
            await asyncio.to_thread(store.directives.stop_monitor, conversation_id, "archived")
            return
        if await asyncio.to_thread(store.unfinished_runs, conversation_id):
            return  # skipped, not counted: the run that is active or queued re-arms the loop when it ends
        monitor = await asyncio.to_thread(store.directives.count_cycle, conversation_id, monitor_id)
        if monitor is None:
            return
        text = f"[monitor cycle {monitor.cycles}/{monitor.max_cycles}] {monitor.message}"
        run = await self._orch.submit(conversation_id, text, monitor_cycle=(monitor.id, monitor.cycles,
                                                                            monitor.max_cycles))
        if not monitor.active:
            await self._orch.record(conversation_id, run.id, "monitor_stopped",
                                    {"monitorId": monitor.id, "reason": "cycle_cap", "cycles": monitor.cycles})


def _monitor_details(monitor: Any) -> dict[str, Any]:
    return {"monitorId": monitor.id, "intervalSecs": monitor.interval_secs, "maxCycles": monitor.max_cycles,
            "cycles": monitor.cycles}


async def _monitor_start(ctx: DirectiveContext, args: dict[str, Any]) -> Outcome:
    if not monitors_enabled():
        return Outcome("refused", "monitor loops are disabled on this host")
    message, interval, cycles = args.get("message"), args.get("idle_secs"), args.get("max_cycles")
    if not isinstance(message, str) or not message.strip() or not isinstance(interval, int) \
            or not isinstance(cycles, int) or interval < 1 or cycles < 1:
        return Outcome("refused", "monitor_start: the directive's payload is malformed")
    monitor = await asyncio.to_thread(ctx.orchestrator.store.directives.start_monitor, ctx.conversation_id,
                                      message=message, interval_secs=interval, max_cycles=cycles)
    # Armed when this run ends (the idle gap starts then), by the orchestrator.
    return Outcome("applied", f"Monitor loop {monitor.id} started on this conversation: the message is queued "
                   f"{interval}s after each run ends, at most {cycles} cycle(s).", _monitor_details(monitor))


async def _monitor_update(ctx: DirectiveContext, args: dict[str, Any]) -> Outcome:
    if not monitors_enabled():
        return Outcome("refused", "monitor loops are disabled on this host")
    patch = args.get("patch")
    allowed = {"message": str, "idle_secs": int, "max_cycles": int}
    if not isinstance(patch, dict) or not patch or any(
            k not in allowed or not isinstance(v, allowed[k]) for k, v in patch.items()):
        return Outcome("refused", "monitor_update: the directive's payload is malformed")
    monitor = await asyncio.to_thread(ctx.orchestrator.store.directives.update_monitor, ctx.conversation_id, patch)
    return Outcome("applied", f"Monitor loop {monitor.id} updated on this conversation "
                   f"({', '.join(sorted(patch))}).", _monitor_details(monitor))


async def _autonudge_stop(ctx: DirectiveContext, args: dict[str, Any]) -> Outcome:
    reason = str(args.get("reason") or "")[:500]
    stopped = await asyncio.to_thread(ctx.orchestrator.store.directives.stop_monitor, ctx.conversation_id, "manual")
    ctx.orchestrator.monitors.disarm(ctx.conversation_id)
    if stopped is None:
        return Outcome("refused", "No active monitor loop on this conversation — nothing to stop.")
    return Outcome("applied", f"Monitor loop {stopped.id} stopped on this conversation"
                   + (f" (reason: {reason})" if reason else "") + ". No further cycles will run.",
                   {**_monitor_details(stopped), "reason": "manual"})


# -- set_project ----------------------------------------------------------------------------------

# Directories no project may be bound in: credentials, kirocrew's and kiro's own homes, the system.
SYSTEM_ROOTS = ("/etc", "/proc", "/sys", "/dev", "/boot", "/root", "/var/run", "/run")


def _sensitive_roots() -> list[Path]:
    from kirocrew_conversations.sandbox.policy import CREDENTIALS

    user = home.user_home()
    return [*(user / name for name in CREDENTIALS), home.crew_home(), home.kiro_home(), *map(Path, SYSTEM_ROOTS)]


def is_sensitive_path(path: str) -> bool:
    """Whether ``path`` is ``/``, the user's home itself, or inside a credentials/system/kirocrew directory."""
    candidate = Path(os.path.normpath(path))
    if candidate in (Path("/"), home.user_home()):
        return True
    for root in _sensitive_roots():
        for form in {root, Path(os.path.realpath(root))}:
            if candidate == form or form in candidate.parents:
                return True
    return False


def resolve_project(raw: str) -> str:
    """The realpath of a project directory, or :class:`KirocrewError` saying why it cannot be one."""
    from kirocrew_conversations.errors import conversation_error

    expanded = os.path.expanduser(raw)
    if not os.path.isabs(expanded):
        raise conversation_error("invalid_arguments", "set_project: the path must be absolute")
    if is_sensitive_path(expanded):
        raise conversation_error("invalid_arguments", "access denied (sensitive path)")
    real = os.path.realpath(expanded)
    if is_sensitive_path(real):
        raise conversation_error("invalid_arguments", "access denied (sensitive path)")
    if not os.path.isdir(real):
        raise conversation_error("invalid_arguments", "not a directory")
    return real


async def _set_project(ctx: DirectiveContext, args: dict[str, Any]) -> Outcome:
    raw, clear = args.get("project"), bool(args.get("clear"))
    if not isinstance(raw, str):
        return Outcome("refused", "set_project: the directive's payload is malformed")
    project = None if clear or not raw else await asyncio.to_thread(resolve_project, raw)
    changed = await asyncio.to_thread(ctx.orchestrator.store.directives.bind_project, ctx.conversation_id, project)
    if changed:
        ctx.orchestrator.cold_start_after_run(ctx.conversation_id)
    label = "unbound" if project is None else f"bound to {Path(project).name or project}"
    if not changed:
        return Outcome("applied", f"The conversation's project is already {label}; nothing changed.",
                       {"changed": False})
    return Outcome("applied", f"The conversation's project is now {label}; its next run starts a new Kiro "
                   "session there.", {"changed": True})


# -- suggest_followup -----------------------------------------------------------------------------

_FOLLOWUP_FIELDS = {"title": 120, "description": 600, "prompt": 8000, "branch": 80}


async def _suggest_followup(ctx: DirectiveContext, args: dict[str, Any]) -> Outcome:
    raw = args.get("items")
    if not isinstance(raw, list) or not 1 <= len(raw) <= 3 or not all(isinstance(i, dict) for i in raw):
        return Outcome("refused", "suggest_followup: the directive's payload is malformed")
    items = []
    for item in raw:
        # Secrets go; paths stay (a follow-up prompt is the model's words for the person, as a reply is).
        kept = {name: redact_secrets(item[name])[:limit] for name, limit in _FOLLOWUP_FIELDS.items()
                if isinstance(item.get(name), str) and item[name]}
        if not {"title", "description", "prompt"} <= set(kept):
            return Outcome("refused", "suggest_followup: every item needs a title, a description and a prompt")
        items.append(kept)
    await asyncio.to_thread(ctx.orchestrator.store.directives.set_followups, ctx.conversation_id, ctx.run_id, items)
    return Outcome("applied", f"Follow-up card with {len(items)} suggestion(s) shown on the conversation's page.",
                   {"followUps": len(items)})


directive_appliers: dict[str, Applier] = {
    "monitor_start": _monitor_start,
    "monitor_update": _monitor_update,
    "autonudge_stop": _autonudge_stop,
    "set_project": _set_project,
    "suggest_followup": _suggest_followup,
    "ask_question": apply_exchange,  # questions.py: the card was settled in the host; this records it
}
