"""Runs conversations' queued messages on kiro-cli: workers, waits, cancel, deadlines, permissions.

One worker per active conversation owns one ``AcpRuntime`` (one ``kiro-cli acp``
process) and one ACP session; runs of a conversation execute one at a time in
FIFO order (the store enforces it). At most ``max_workers`` conversations hold a
worker; the others wait FIFO for a slot, and an idle worker gives its slot up at
once when someone is waiting, else after ``idle_close_secs``. A conversation
whose worker closed resumes with ``session/load`` on its next run.

Waiting is event-driven: every run state change notifies one
``asyncio.Condition``, and waiters re-check their targets only then.

Kiro's session id of each conversation is kept in the store (never shown to
clients), so a conversation resumes its context even after a server restart.
If kiro cannot load the saved session, the run starts a fresh one and says so
in a ``session_reset`` event rather than failing or hiding the lost context.

A kiro-cli process reads its MCP configuration (the agent file) only when it
starts, so :meth:`Orchestrator.restart_sessions` begins a new *configuration
generation*: idle workers close at once, and a busy worker's kiro-cli is closed
as soon as its run ends. Each process remembers the generation it started in,
and a run never starts on a process of an older generation.

A kiro-cli process also keeps the blanket grants of the agent file it started with, so a
worker started before the owner's permission policy (or the ceiling) changed is closed
before its next run, and the new one starts on an agent file rendered from the policy in
force (:func:`kirocrew_core.gate.policy_file.policy_signature`).

Before each prompt the session is put on the run's model, mode and effort and
kiro's report is checked (a loaded session comes back on the agent and model it
was saved with); a setting kiro refuses fails the run with
``settings_not_applied`` and nothing is prompted. A run queued without a model
records the one kiro reports then, so every run says what it ran on.

No kiro-cli is started on the rendered ``kirocrew`` agent before its file is
ready (:func:`kirocrew_core.agent_file.require_ready`: a host's startup render
finished, the file usable); otherwise the run fails with ``agent_file_unavailable``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import base64
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kirocrew_core.acp_runtime import (
    AcpConnectionLost,
    AcpError,
    AcpOptions,
    AcpRequestError,
    AcpRuntime,
    AcpSession,
    PromptResult,
    SettingsNotAppliedError,
)
from kirocrew_core.acp_session import PermissionRequest as AcpPermissionRequest
from kirocrew_core.agent_file import AGENT_FILE_UNAVAILABLE, require_ready
from kirocrew_core.coretools.contract import ToolRefused
from kirocrew_core.coretools import directives
from kirocrew_core.errors import KirocrewError
from kirocrew_core.gate.policy_file import policy_signature
from kirocrew_core.kiro_ext import parse_usage

from kirocrew_conversations import directive_effects, gatekeeper, limits, slash
from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.questions import Outcome, PendingQuestion, QuestionBoard, check_answers
from kirocrew_conversations.redact import redact_text
from kirocrew_conversations.store import Conversation, ImageInput, Run, Settings, Store
from kirocrew_conversations.vocabulary import DECISIONS, OWNER_DECISIONS

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long telling a turn why a call was refused may delay the refusal (kiro may not answer steering at all).
STEER_TIMEOUT_SECS = 2.0
# After a cancel or deadline, how long the aborted turn may take to wind down before teardown.
ABORT_GRACE_SECS = 2.0
ERROR_DETAIL_MAX_CHARS = limits.ERROR_MESSAGE_MAX_CHARS
# Erased prompts leave old frames in the WAL until a checkpoint; one checkpoint (two syncs) serves a
# burst of erasures and runs off the runs' path, this long after the first of them.
SCRUB_DELAY_SECS = 0.25

OptionsFactory = Callable[[Conversation, Run], AcpOptions]
# Told about every run that executed, once it reached its terminal status (sub-agent completions).
RunEndListener = Callable[[Run], Awaitable[None]]


@dataclass(frozen=True)
class PermissionAsked:
    """A run's tool call waits on the owner (``state`` ``asked``), or no longer does (``settled``)."""

    run_id: str
    conversation_id: str
    permission_id: str
    tool: str | None
    state: str


PermissionListener = Callable[[PermissionAsked], None]


def default_acp_options(conversation: Conversation, run: Run) -> AcpOptions:
    """kiro-cli on the run's agent, model and effort; nothing trusted, so every call comes to the gate."""
    return AcpOptions(agent=run.mode, model=run.model, effort=run.effort)


@dataclass(frozen=True)
class WaitResult:
    """The targets' runs as the wait ended; ``wait_expired`` when the timeout came first."""

    runs: tuple[Run, ...]
    wait_expired: bool


@dataclass(frozen=True)
class InterruptResult:
    """What ``interrupt`` did: the replacement run, the active run it cancelled, the queued runs it superseded."""

    run: Run
    interrupted_run_id: str | None
    superseded: tuple[str, ...]


@dataclass
class Observed:
    """What live kiro sessions advertised (agents as modes, slash commands); shown by ``kiro_capabilities``."""

    modes: tuple[str, ...] = ()
    current_mode: str | None = None
    commands: tuple[str, ...] = ()


@dataclass
class _RunContext:
    run_id: str
    cwd: str = ""
    chunks: list[str] = field(default_factory=list)
    tool_names: dict[str, str | None] = field(default_factory=dict)  # tool call id → redacted name
    # Session directives: the directive each tool call may carry, from kiro's _meta only (never the title);
    # the calls whose directive was consumed, and those whose marker was already reported as ignored.
    directive_tools: dict[str, str] = field(default_factory=dict)
    directives_seen: set[str] = field(default_factory=set)
    cancel_requested: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_code: str = "run_cancelled"  # "run_replaced" when kiro_send interrupted it
    attention_expired: bool = False  # a permission request outlived the attention deadline
    finished: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass
class _PendingPermission:
    run_id: str
    offered: dict[str, str]  # decision kind → kiro's option id
    answer: asyncio.Future[str]
    decided: gatekeeper.Decided | None = None  # the policy's ask (None: the call could not be decided)


@dataclass
class _Worker:
    conversation_id: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    runtime: AcpRuntime | None = None
    session: AcpSession | None = None
    current: _RunContext | None = None
    idle: bool = False
    evict: bool = False
    generation: int = 0  # the configuration generation ``runtime`` was started in
    options: AcpOptions | None = None  # what ``runtime`` was asked for (before the session's key was added)
    session_key: str | None = None  # the kirocrew session key ``runtime`` runs as (revoked when it closes)
    cold_start: bool = False  # set_project changed the project: close kiro-cli when the run ends
    policy: str | None = None  # the permission policy's signature when ``runtime`` started (its agent file's grants)


class Orchestrator:
    """Schedules and supervises runs. Use as ``async with Orchestrator(store) as orch``."""

    def __init__(self, store: Store, *, max_workers: int = limits.WORKERS_DEFAULT,
                 idle_close_secs: float = limits.IDLE_WORKER_SECONDS,
                 run_deadline_secs: float = limits.RUN_DEADLINE_SECONDS,
                 attention_deadline_secs: float = limits.ATTENTION_DEADLINE_SECONDS,
                 acp_options_factory: OptionsFactory = default_acp_options, pm: Any = None) -> None:
        if not limits.WORKERS_MIN <= max_workers <= limits.WORKERS_MAX:
            raise conversation_error("invalid_arguments",
                                     f"max_workers must be {limits.WORKERS_MIN}..{limits.WORKERS_MAX}")
        self.store = store
        self.max_workers = max_workers
        self.idle_close_secs = idle_close_secs
        self.run_deadline_secs = run_deadline_secs
        self.attention_deadline_secs = attention_deadline_secs
        self.acp_options_factory = acp_options_factory
        self.pm = pm  # the plugin manager asked whether the agent file is ready (None: the process's)
        self._changed = asyncio.Condition()
        self._workers: dict[str, _Worker] = {}
        self._waiting: collections.deque[str] = collections.deque()  # conversations without a slot, FIFO
        self.observed = Observed()
        self._permissions: dict[str, _PendingPermission] = {}
        self.audit = gatekeeper.AuditTrail()
        self.questions = QuestionBoard()  # ask_question cards waiting on the owner (questions.py)
        self._attention_lock = asyncio.Lock()  # a question card's run: running ⇄ needs_attention
        self._start_lock = asyncio.Lock()  # queued → running vs queued → cancelled
        self._closed = False
        self._generation = 0  # bumped by restart_sessions; older kiro-cli processes are retired
        self._scrub_pending = asyncio.Event()
        self._scrubber: asyncio.Task[None] | None = None
        #: Called (on the loop, after waiters were woken) with each executed run's terminal row; a failing
        #: listener is logged and never affects the run or the worker.
        self.run_end_listeners: list[RunEndListener] = []
        #: Called (on the loop) with the run's id at each tool call kiro starts, so a caller can bound a run's calls
        #: (a workflow's tool calls per step); a failing listener is logged and never affects the run.
        self.tool_call_listeners: list[Callable[[str], None]] = []
        #: Called (on the loop) when a run's tool call starts waiting on the owner's answer and when it stops
        #: waiting (answered, expired or cancelled), so a caller can show where the owner is needed (a workflow's
        #: ``approval_requested``); a failing listener is logged and never affects the run.
        self.permission_listeners: list[PermissionListener] = []
        loop = asyncio.get_running_loop()
        self.monitors = directive_effects.MonitorLoops(self)
        self._rearm = loop.create_task(self.monitors.rearm_all(), name="monitor-rearm")

        def erased() -> None:  # called from the store's thread
            loop.call_soon_threadsafe(self._erased)

        store.on_erase = erased

    async def __aenter__(self) -> Orchestrator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- public API ----------------------------------------------------------------------------

    async def submit(self, conversation_id: str, text: str, settings: Settings | None = None,
                     images: Sequence[ImageInput] = (), *,
                     monitor_cycle: tuple[str, int, int] | None = None) -> Run:
        """Queue ``text`` as a run at the tail of the conversation's FIFO and schedule it.

        New work disarms the conversation's monitor timer until that run ends. ``monitor_cycle``
        (loop id, cycle, cap) marks a message the monitor loop queued.
        """
        if self._closed:
            raise conversation_error("server_stopped", "the orchestrator is shut down")
        self.monitors.disarm(conversation_id)
        run = await self._db(self.store.enqueue_run, conversation_id, text, settings=settings, images=images)
        if monitor_cycle is not None:
            monitor_id, cycle, cap = monitor_cycle
            await self._event(run, "monitor_cycle", {"monitorId": monitor_id, "cycle": cycle, "maxCycles": cap})
        await self._notify()
        self._schedule(conversation_id)
        return run

    async def interrupt(self, conversation_id: str, text: str, settings: Settings | None = None,
                        images: Sequence[ImageInput] = ()) -> InterruptResult:
        """Cancel the active run and every queued one, then queue ``text`` as the replacement.

        This is cancellation followed by a new turn: the cancelled turn never sees ``text``.
        Returns after the cancelled run's kiro-cli is shut down.
        """
        if self._closed:
            raise conversation_error("server_stopped", "the orchestrator is shut down")
        self.monitors.disarm(conversation_id)
        async with self._start_lock:  # nothing starts between superseding the queue and queueing the replacement
            unfinished = await self._db(self.store.unfinished_runs, conversation_id)
            active = next((r for r in unfinished if r.status != "queued"), None)
            superseded = []
            for queued in (r for r in unfinished if r.status == "queued"):
                await self._db(self.store.transition_run, queued.id, "cancelled", error_code="run_superseded")
                superseded.append(queued.id)
            run = await self._db(self.store.enqueue_run, conversation_id, text, settings=settings, images=images)
            ctx = self._current(active.id) if active is not None else None
        await self._notify()
        if ctx is not None:
            ctx.cancel_code = "run_replaced"
            ctx.cancel_requested.set()
            await asyncio.shield(ctx.finished)
        self._schedule(conversation_id)
        return InterruptResult(run, active.id if active is not None else None, tuple(superseded))

    def _current(self, run_id: str) -> _RunContext | None:
        for worker in self._workers.values():
            if worker.current is not None and worker.current.run_id == run_id:
                return worker.current
        return None

    def _schedule(self, conversation_id: str) -> None:
        worker = self._workers.get(conversation_id)
        if worker is not None:
            worker.wake.set()
        else:
            self._admit(conversation_id)

    async def wait(self, run_ids: Sequence[str], mode: str = "any",
                   timeout: float = limits.WAIT_CEILING_SECONDS) -> WaitResult:
        """Until one (``any``) or every (``all``) target is terminal, or one needs attention.

        Reaching ``timeout`` returns ``wait_expired=True`` and cancels nothing.
        """
        targets = list(dict.fromkeys(run_ids))
        if not limits.WAIT_MIN_TARGETS <= len(targets) <= limits.WAIT_MAX_TARGETS or mode not in ("any", "all"):
            raise conversation_error(
                "invalid_arguments",
                f"wait takes {limits.WAIT_MIN_TARGETS}..{limits.WAIT_MAX_TARGETS} targets and mode any|all")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._changed:
            while True:
                runs = tuple([await self._db(self.store.get_run, rid) for rid in targets])
                done = [r.terminal for r in runs]
                if (any(r.status == "needs_attention" for r in runs)
                        or (any(done) if mode == "any" else all(done))):
                    return WaitResult(runs, wait_expired=False)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return WaitResult(runs, wait_expired=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)

    async def cancel(self, run_id: str) -> Run:
        """Cancel one run; returns after its worker's kiro-cli is shut down (queued runs end at once)."""
        async with self._start_lock:
            run = await self._db(self.store.get_run, run_id)
            if run.terminal:
                return run
            if run.status == "queued":
                run = await self._db(self.store.transition_run, run_id, "cancelled", error_code="run_cancelled")
                await self._notify()
                return run
            worker = self._workers.get(run.conversation_id)
            ctx = worker.current if worker is not None else None
        if ctx is not None and ctx.run_id == run_id:
            ctx.cancel_requested.set()
            await asyncio.shield(ctx.finished)
        return await self._db(self.store.get_run, run_id)

    async def decide(self, run_id: str, permission_id: str, option: str, *,
                     scope: str = "workspace") -> tuple[Run, list[str]]:
        """Answer a pending permission request for the owner; the run and the ids of any rules added.

        ``allow_once``/``reject_once`` are passed to kiro as they are. ``allow_always`` first adds
        the permission-policy rules the request's call needs (one per part that asked, in
        ``scope``: this ``workspace``, this ``authority``, or ``everywhere``), then answers kiro
        ``allow_once``: kiro's own "always" would trust the whole tool for the session, past the
        policy. Anything else, or "allow always" where no allow rule could change the answer
        (a built-in protection or an ``ask`` rule asked), fails closed and changes nothing.
        """
        run = await self._db(self.store.get_run, run_id)
        if option not in OWNER_DECISIONS:
            raise conversation_error("unsupported_permission_option",
                                     f"the decision must be one of {', '.join(OWNER_DECISIONS)}")
        pending = self._permissions.get(permission_id)
        if pending is None or pending.run_id != run_id:
            known = any(p.id == permission_id for p in await self._db(self.store.permission_requests, run_id))
            if known:
                raise conversation_error("permission_not_pending",
                                         f"permission request {permission_id} was already answered or withdrawn")
            raise conversation_error("permission_not_found", f"no permission request {permission_id!r} for this run")
        kiro_option = "allow_once" if option == "allow_always" else option
        if kiro_option not in pending.offered:
            raise conversation_error("unsupported_permission_option",
                                     f"kiro did not offer {kiro_option} for this request")
        added: list[str] = []
        if option == "allow_always":
            if pending.decided is None or not pending.decided.always:
                raise conversation_error("unsupported_permission_option",
                                         "allow_always cannot change this answer (a built-in protection or an ask "
                                         "rule asked, or kirocrew could not read the call); allow it once instead")
            added = await asyncio.to_thread(gatekeeper.always, pending.decided, scope)
            if not added:
                raise conversation_error("unsupported_permission_option",
                                         "no rule can allow this call for good; allow it once instead")
        await self._db(self.store.decide_permission, permission_id, option)
        self._permissions.pop(permission_id, None)  # the attention deadline may have withdrawn it meanwhile
        others = any(p.run_id == run_id for p in self._permissions.values()) or self.questions.of_run(run_id)
        if not others and run.status == "needs_attention":
            # Back to running before kiro hears the answer: the turn may end right after it.
            run = await self._db(self.store.transition_run, run_id, "running")
        payload: dict[str, Any] = {"permissionId": permission_id, "decision": option}
        if added:
            payload["rulesAdded"] = added
        await self._event(run, "permission_decided", payload)
        self.audit.record({"allow_once": "owner_allow", "reject_once": "owner_reject",
                           "allow_always": "owner_allow_always"}[option], pending.decided,
                          conversation_id=run.conversation_id, run_id=run.id, actor="owner",
                          rules_added=added or None)
        if not pending.answer.done():
            pending.answer.set_result(kiro_option)
        await self._notify()
        return run, added

    async def ask(self, conversation_id: str, questions: list[dict[str, Any]],
                  window_secs: float) -> tuple[PendingQuestion, Outcome, dict[str, str]]:
        """Block the conversation's running run on a question card until it is settled; how it ended.

        Refused at once, never left waiting: an unknown conversation (``conversation_not_found``),
        or one with no run executing to block (``conversation_ended``: archived, idle, or its run
        already ended). While pending, the run is ``needs_attention``; the card is removed and the
        attention cleared however it ends, the caller's cancellation included.
        """
        if self._closed:
            raise ToolRefused("the host is stopping; the question was not asked", code="conversation_ended")
        conversation = await self._db(self.store.get_conversation, conversation_id)  # conversation_not_found
        worker = self._workers.get(conversation.id)
        ctx = worker.current if worker is not None else None
        run = await self._db(self.store.get_run, ctx.run_id) if ctx is not None else None
        if conversation.state == "archived" or run is None or run.status not in ("running", "needs_attention") \
                or ctx is None or ctx.cancel_requested.is_set():
            raise ToolRefused("this conversation has no run in progress to block on a question (it ended, is "
                              "archived, or is being cancelled); nothing was asked", code="conversation_ended")
        pending = self.questions.open(conversation.id, run.id, questions, window_secs)
        try:
            async with self._attention_lock:  # parallel asks of one run: one transition
                run = await self._db(self.store.get_run, run.id)
                if run.status == "running":
                    run = await self._db(self.store.transition_run, run.id, "needs_attention")
            await self._event(run, "question_asked", {"askId": pending.ask_id, "questions": len(questions)})
            await self._notify()
            try:
                outcome, answers = await asyncio.wait_for(asyncio.shield(pending.result), window_secs)
            except TimeoutError:
                self.questions.settle(pending, "expired")
                outcome, answers = await pending.result
        except BaseException:  # the MCP call was cancelled, or the run ended under the card: never left open
            self.questions.settle(pending, "withdrawn")
            await asyncio.shield(self._question_closed(pending))
            raise
        await self._question_closed(pending)
        return pending, outcome, answers

    async def _question_closed(self, pending: PendingQuestion) -> None:
        """Drop the card; its run back to running when nothing else holds its attention; say how it ended."""
        self.questions.close(pending.ask_id)
        outcome = pending.result.result()[0] if pending.result.done() else "withdrawn"
        with contextlib.suppress(KirocrewError):  # the run may have ended meanwhile: nothing to clear then
            async with self._attention_lock:
                run = await self._db(self.store.get_run, pending.run_id)
                others = self.questions.of_run(run.id) or any(p.run_id == run.id for p in self._permissions.values())
                if run.status == "needs_attention" and not others:
                    run = await self._db(self.store.transition_run, run.id, "running")
            await self._event(run, "question_" + outcome, {"askId": pending.ask_id})
        await self._notify()

    def answer_question(self, conversation_id: str, ask_id: str, answers: Sequence[dict[str, str]] | None) -> str:
        """Settle an open card with answers, or dismiss it (``answers`` None); the outcome.

        ``question_not_found`` for an unknown, settled or other conversation's id; bad answers
        are refused with their code and leave the card open.
        """
        pending = self.questions.find(conversation_id, ask_id)
        if answers is None:
            self.questions.settle(pending, "dismissed")
            return "dismissed"
        checked = check_answers(pending, answers)
        self.questions.settle(pending, "answered", checked)
        return "answered"

    async def fork_session(self, conversation: Conversation, session_id: str) -> str:
        """Fork kiro's saved session of an idle conversation; returns the new session's id.

        The conversation's idle worker (if any) is closed first, so no live process holds the source session.
        """
        await self.release(conversation.id, purpose="fork")
        cwd = conversation.workspace.worktree_path or conversation.workspace.path
        async with AcpRuntime(AcpOptions()) as runtime:
            try:
                forked = await runtime.fork_session(session_id, cwd)
            except AcpRequestError as exc:
                raise conversation_error("kiro_run_failed", f"kiro-cli refused the fork: [{exc.rpc_code}]") from exc
            return forked.session_id

    async def release(self, conversation_id: str, *, purpose: str = "this") -> None:
        """Close the conversation's idle worker, so no kiro-cli of ours holds its session; a busy one refuses."""
        worker = self._workers.get(conversation_id)
        if worker is not None and worker.task is not None:
            if not worker.idle:
                raise conversation_error("conversation_busy", f"{purpose} needs the conversation idle")
            worker.evict = True
            worker.wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(worker.task)

    def restart_sessions(self) -> int:
        """Start a new configuration generation: no run starts on a kiro-cli started before it.

        Idle workers close now; a worker that is executing a run keeps its process until the
        run ends (it is never interrupted) and closes it then. Returns how many kiro-cli
        processes were closed or scheduled to close.
        """
        self._generation += 1
        count = 0
        for worker in self._workers.values():
            if worker.runtime is not None:
                count += 1  # idle: closed now; busy: _retire_stale closes it when its run ends
            if worker.idle:
                worker.evict = True
                worker.wake.set()
        return count

    def cold_start_after_run(self, conversation_id: str) -> None:
        """The conversation's next run must start a new kiro session (its project changed): close its
        kiro-cli when the current run ends. The store already forgot kiro's session id."""
        worker = self._workers.get(conversation_id)
        if worker is not None:
            worker.cold_start = True

    @property
    def closed(self) -> bool:
        return self._closed

    async def record(self, conversation_id: str, run_id: str | None, kind: str, payload: dict[str, Any]) -> None:
        """Append an event (``payload`` already redacted) and wake waiters."""
        await self._append(conversation_id, run_id, kind, payload)

    def worker_pids(self) -> tuple[int, ...]:
        """The process ids of the kiro-cli workers running now (cheap: no database)."""
        return tuple(pid for worker in self._workers.values()
                     if worker.runtime is not None and (pid := worker.runtime.pid) is not None)

    def runs_in_progress(self) -> int:
        """Runs executing now plus conversations waiting for a worker (cheap: no database)."""
        return sum(worker.current is not None for worker in self._workers.values()) + len(self._waiting)

    async def aclose(self) -> None:
        """Stop every worker; a run still executing ends ``interrupted`` (``server_stopped``)."""
        self._closed = True
        self._waiting.clear()
        self.questions.withdraw_all()
        self._rearm.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._rearm
        await self.monitors.aclose()
        tasks = [w.task for w in self._workers.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._scrubber is not None:
            self._scrubber.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scrubber
        self.store.on_erase = None
        if self._scrub_pending.is_set():
            await asyncio.to_thread(self.store.scrub_wal)
        await self.audit.drain()

    def _erased(self) -> None:
        """A prompt was erased (on the loop, via the store's hook): scrub the WAL soon, in the background."""
        self._scrub_pending.set()
        if self._scrubber is None and not self._closed:
            self._scrubber = asyncio.get_running_loop().create_task(self._scrub_forever(), name="wal-scrubber")

    async def _scrub_forever(self) -> None:
        while True:
            await self._scrub_pending.wait()
            await asyncio.sleep(SCRUB_DELAY_SECS)
            self._scrub_pending.clear()
            try:
                await asyncio.to_thread(self.store.scrub_wal)
            except Exception:  # a busy or failing checkpoint is retried with the next erasure
                log.warning("the WAL checkpoint after a prompt erasure failed", exc_info=True)

    # -- scheduling ----------------------------------------------------------------------------

    def _admit(self, conversation_id: str) -> None:
        """Give the conversation a worker, or queue it FIFO for the next free slot."""
        if self._closed or conversation_id in self._workers or conversation_id in self._waiting:
            return
        if len(self._workers) < self.max_workers:
            self._start_worker(conversation_id)
            return
        self._waiting.append(conversation_id)
        self._evict_one_idle()

    def _evict_one_idle(self) -> None:
        for worker in self._workers.values():
            if worker.idle and not worker.evict:
                worker.evict = True
                worker.wake.set()
                return

    def _start_worker(self, conversation_id: str) -> None:
        worker = _Worker(conversation_id)
        self._workers[conversation_id] = worker
        worker.task = asyncio.get_running_loop().create_task(
            self._worker_loop(worker), name=f"conversation-worker-{conversation_id}")

    def _fill_slots(self) -> None:
        while self._waiting and len(self._workers) < self.max_workers and not self._closed:
            self._start_worker(self._waiting.popleft())
        if self._waiting:
            self._evict_one_idle()

    async def _worker_loop(self, worker: _Worker) -> None:
        cid = worker.conversation_id
        try:
            while True:
                worker.wake.clear()  # before looking, so a submit after the look still wakes us
                run = await self._db(self.store.next_queued_run, cid)
                if run is None:
                    if worker.evict or self._waiting:
                        return  # another conversation is waiting for this slot
                    worker.idle = True
                    try:
                        await asyncio.wait_for(worker.wake.wait(), self.idle_close_secs)
                    except TimeoutError:
                        return
                    finally:
                        worker.idle = False
                    continue
                await self._execute(worker, run)
                if worker.cold_start:
                    worker.cold_start = False
                    await self._close_runtime(worker)
                await self._retire_stale(worker)
        finally:
            await self._close_runtime(worker)
            del self._workers[cid]
            self._fill_slots()
            if not self._closed and await self._db(self.store.next_queued_run, cid) is not None:
                self._admit(cid)  # a run queued while this worker was closing

    # -- one run -------------------------------------------------------------------------------

    async def _execute(self, worker: _Worker, queued: Run) -> None:
        async with self._start_lock:
            run = await self._db(self.store.get_run, queued.id)
            if run.status != "queued":
                return  # cancelled while it waited for this worker
            run = await self._db(self.store.transition_run, run.id, "running")
            ctx = _RunContext(run.id)
            worker.current = ctx
        try:
            await self._notify()
            status, code, detail = await self._supervise(worker, ctx, run)
            ended = await self._db(self.store.transition_run, run.id, status, error_code=code,
                                   error_detail=detail,
                                   reply=directives.strip_markers("".join(ctx.chunks)) if ctx.chunks else None)
        except asyncio.CancelledError:
            await self._close_runtime(worker)
            with contextlib.suppress(KirocrewError):
                await self._db(self.store.transition_run, run.id, "interrupted", error_code="server_stopped")
            raise
        finally:
            worker.current = None
            self.questions.withdraw_run(run.id)
            if not ctx.finished.done():
                ctx.finished.set_result(None)
            await self._notify()
        self.monitors.arm(run.conversation_id)  # the idle gap of its monitor loop starts now
        for listener in self.run_end_listeners:
            try:
                await listener(ended)
            except Exception:  # a listener's bug must not take the worker down
                log.exception("a run-end listener failed for run %s", ended.id)

    async def _supervise(self, worker: _Worker, ctx: _RunContext, run: Run) -> tuple[str, str | None, str | None]:
        """Run the turn under its deadline and cancel request; the run's end status, error code, detail."""
        work = asyncio.ensure_future(self._turn(worker, ctx, run))
        cancel = asyncio.ensure_future(ctx.cancel_requested.wait())
        try:
            done, _ = await asyncio.wait({work, cancel}, timeout=self.run_deadline_secs,
                                         return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            raise
        finally:
            cancel.cancel()
        if work in done and not ctx.attention_expired:
            try:
                stop_reason = work.result()
            except AcpRequestError as exc:
                return "failed", "kiro_run_failed", _clip(_refusal_detail(exc, run.conversation_id))
            except SettingsNotAppliedError as exc:  # never prompt on settings the run did not ask for
                await self._close_runtime(worker)
                return "failed", "settings_not_applied", _clip(redact_text(str(exc)))
            except (AcpError, KirocrewError) as exc:
                await self._close_runtime(worker)
                if exc.code in ("authority_unavailable", "slash_command_refused",
                                AGENT_FILE_UNAVAILABLE):  # refused before kiro saw it
                    return "failed", exc.code, _clip(redact_text(str(exc)))
                return "failed", "kiro_run_failed", _clip(f"kiro-cli failed: {exc.code}")
            except Exception as exc:  # a bug of ours must end the run, not strand it as running
                log.exception("run %s failed unexpectedly", run.id)
                await self._close_runtime(worker)
                return "failed", "kiro_run_failed", _clip(f"internal error: {type(exc).__name__}")
            if stop_reason == "cancelled":  # kiro ended the turn itself (e.g. a permission answered cancelled)
                return "cancelled", "run_cancelled", None
            if stop_reason == "refusal":
                return "failed", "kiro_run_failed", "kiro refused the request"
            return "completed", None, None
        self.questions.withdraw_run(run.id)  # its blocked ask_question returns, so the turn can wind down
        await self._abort(worker, work)
        if ctx.attention_expired:
            return "needs_attention_expired", "attention_deadline_exceeded", None
        if ctx.cancel_requested.is_set():
            return "cancelled", ctx.cancel_code, None
        return "timed_out", "run_deadline_exceeded", None

    async def _retire_stale(self, worker: _Worker) -> None:
        """Close the worker's kiro-cli if it was started before the latest ``restart_sessions``."""
        if worker.runtime is not None and worker.generation != self._generation:
            await self._close_runtime(worker)

    async def _turn(self, worker: _Worker, ctx: _RunContext, run: Run) -> str:
        conversation = await self._db(self.store.get_conversation, run.conversation_id)
        options = self.acp_options_factory(conversation, run)
        if worker.runtime is not None and (worker.options != options or not worker.runtime.alive
                                           or worker.generation != self._generation
                                           or worker.policy != policy_signature()):
            # New settings (model, effort, authority), a restart (MCP configuration) or a changed permission
            # policy (the agent file's blanket grants, read by kiro-cli only at start) need a new process.
            await self._close_runtime(worker)
        session, resumed = await self._open_session(worker, conversation, options)
        await self._apply_settings(run, session)
        ctx.cwd = session.cwd
        prompt = await self._db(self.store.read_prompt, run.id)
        command = slash.command_name(prompt.text)
        if command is not None:  # allowed by the conversation when queued; kiro must still announce it
            slash.check_announced(command, await slash.wait_announced(session) or self.observed.commands)
            await self._append(conversation.id, run.id, "slash_command", {"command": command[:64]})
        turn = asyncio.ensure_future(session.prompt(_prompt_blocks(prompt.text, prompt.images)))
        try:
            await asyncio.sleep(0)  # let session/prompt leave before the text is erased
            await self._db(self.store.mark_delivered, run.id,
                           started={"resumed": resumed, "images": len(prompt.images)})
            result = await turn
            self._observe(session)
        except BaseException:
            turn.cancel()
            raise
        await self._record_usage(run, result)
        return result.stop_reason

    async def _apply_settings(self, run: Run, session: AcpSession) -> None:
        """Put the session on the run's model, mode and effort, as kiro confirms, and record it.

        A new session was pinned by the spawn flags, but a loaded one is back on what it was
        saved with, and a live one may have been moved meanwhile; so this runs before every
        prompt. Changed spawn options still mean a new process (:meth:`_turn`): authority needs
        one, and the flags are what pins a session kiro has to start afresh (the one reliable
        way to a model of another provider); this then moves the reloaded session. A null
        model or mode (kiro-cli was not asked when the run was created: a sub-agent's run, a
        monitor cycle's) is left as the session has it, and the run records what that was.
        """
        try:
            applied = await session.apply_settings(model=run.model, mode=run.mode, effort=run.effort)
        except SettingsNotAppliedError as exc:
            await self._append(run.conversation_id, run.id, "settings_refused",
                               {"setting": exc.setting, "value": exc.wanted})
            raise
        if (run.model is None and applied.model) or (run.mode is None and applied.mode):
            await self._db(self.store.record_reported_settings, run.id, model=applied.model, mode=applied.mode)
            await self._notify()
        await self._append(run.conversation_id, run.id, "settings_applied",
                           {"model": applied.model, "mode": applied.mode, "effort": applied.effort,
                            "changed": list(applied.changed)})

    async def _record_usage(self, run: Run, result: PromptResult) -> None:
        """A ``usage`` event with kiro's numbers for the turn (context percent, credits, duration), if it sent any."""
        usage = parse_usage(result.metadata)
        if usage is None:
            return
        payload: dict[str, Any] = {}
        if usage.context_percent is not None:
            payload["contextPercent"] = round(usage.context_percent)
        if usage.credits is not None:
            payload["credits"] = min(usage.credits, 1e9)
        if usage.turn_duration_ms is not None:
            payload["turnDurationMs"] = min(usage.turn_duration_ms, limits.COUNT_MAX)
        await self._append(run.conversation_id, run.id, "usage", payload)

    async def _open_session(self, worker: _Worker, conversation: Conversation,
                            options: AcpOptions) -> tuple[AcpSession, bool]:
        if worker.session is not None and not worker.session.closed:
            return worker.session, False
        cwd = conversation.cwd
        runtime = worker.runtime if worker.runtime is not None else await self._open_runtime(worker, options, cwd)

        async def on_update(session_id: str, update: Any) -> None:
            await self._on_update(worker, update)

        async def on_permission(request: AcpPermissionRequest) -> str | None:
            return await self._on_permission(worker, request)

        known = await self._db(self.store.session_id, conversation.id)
        if known is not None:
            try:
                worker.session = await runtime.load_session(known, cwd, on_update=None,
                                                            on_permission=on_permission)
            except (AcpRequestError, AcpConnectionLost):
                # kiro no longer has the saved session (it answers an error, or exits as 2.x does): say so,
                # then start afresh below. A session another live process holds (SessionLockedError) is not
                # lost: that run fails, and the next one tries the load again.
                await self._append(conversation.id, worker.current.run_id if worker.current else None,
                                   "session_reset", {"reason": "kiro could not load the saved session"})
            else:
                # The replayed history must not leak into this run's reply: let it drain, then attach the sink.
                await runtime.settle_updates(worker.session)
                worker.session.on_update = on_update
                self._observe(worker.session)
                return worker.session, True
            if not runtime.alive:
                await self._close_runtime(worker)
                runtime = await self._open_runtime(worker, options, cwd)
        worker.session = await runtime.new_session(cwd, on_update=on_update, on_permission=on_permission)
        await self._db(self.store.set_session_id, conversation.id, worker.session.session_id)
        self._observe(worker.session)
        return worker.session, False

    def _observe(self, session: AcpSession) -> None:
        """Remember the agents (modes) and slash commands the session announced, for ``kiro_capabilities``."""
        if session.modes is not None:
            self.observed.modes = tuple(session.modes.ids())[:limits.CATALOG_MAX_ITEMS]
            self.observed.current_mode = session.modes.current_mode_id
        names = slash.announced(session)
        if names:
            self.observed.commands = names

    async def _abort(self, worker: _Worker, work: asyncio.Future[Any]) -> None:
        """Cancel the turn (open permission requests are answered ``cancelled``), then stop kiro-cli."""
        if worker.session is not None and not worker.session.closed:
            with contextlib.suppress(AcpError, KirocrewError):
                await worker.session.cancel()
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, AcpError, KirocrewError):
            await asyncio.wait_for(asyncio.shield(work), ABORT_GRACE_SECS)
        work.cancel()
        with contextlib.suppress(BaseException):
            await work
        await self._close_runtime(worker)

    async def _open_runtime(self, worker: _Worker, options: AcpOptions, cwd: str) -> AcpRuntime:
        policy = policy_signature()  # before the agent file is checked (and re-rendered if the policy changed)
        await require_ready(options.agent, self.pm)  # kiro-cli reads the agent file once: never a missing one
        key = _SessionKeys.issue(worker.conversation_id, options, cwd)
        worker.runtime, worker.generation = AcpRuntime(_SessionKeys.launch(options, key)), self._generation
        worker.options, worker.session_key, worker.policy = options, key, policy
        await worker.runtime.open()
        await _SessionKeys.bind(key, worker.runtime.pid)
        return worker.runtime

    async def _close_runtime(self, worker: _Worker) -> None:
        runtime, worker.runtime, worker.session = worker.runtime, None, None
        key, worker.session_key, worker.options = worker.session_key, None, None
        try:
            if runtime is not None:
                # Bounded (stdin EOF, wait, then process-group teardown) and finished even when the worker is
                # cancelled meanwhile (the host stopping right after a run that closes its kiro-cli, as a
                # set_project cold start does): an interrupted close would leave the process behind.
                closing = asyncio.ensure_future(runtime.aclose())
                try:
                    await asyncio.shield(closing)
                except asyncio.CancelledError:
                    await closing
                    raise
        finally:
            _SessionKeys.revoke(key)

    # -- what kiro sends -----------------------------------------------------------------------

    async def _on_update(self, worker: _Worker, update: Any) -> None:
        """Collect the reply; record only redacted events (no thoughts, prompts, arguments, output, paths)."""
        ctx = worker.current
        if ctx is None:
            return
        kind = getattr(update, "session_update", None)
        if kind == "agent_message_chunk":
            text = getattr(getattr(update, "content", None), "text", None)
            if isinstance(text, str):
                ctx.chunks.append(text)
        elif kind == "tool_call":
            name = ctx.tool_names[str(update.tool_call_id)] = _tool_name(update)
            server, tool = _kiro_meta(update, "mcpServerName"), _kiro_meta(update, "toolName")

            ctx.directive_tools[str(update.tool_call_id)] = directives.directive_tool_for(server, tool)
            await self._append(worker.conversation_id, ctx.run_id, "tool_call",
                               {"toolName": name, "status": _status(update),
                                "locations": _relative_locations(update, ctx.cwd)})
            for listener in list(self.tool_call_listeners):
                try:
                    listener(ctx.run_id)
                except Exception:
                    log.exception("a tool-call listener failed")
        elif kind == "tool_call_update":
            if getattr(update, "status", None) is not None:
                await self._append(worker.conversation_id, ctx.run_id, "tool_call_update",
                                   {"toolName": ctx.tool_names.get(str(update.tool_call_id)),
                                    "status": _status(update), "locations": _relative_locations(update, ctx.cwd)})
            await self._consume_directive(worker, ctx, update)
        elif kind == "plan":
            await self._append(worker.conversation_id, ctx.run_id, "plan",
                               {"entries": len(getattr(update, "entries", ()) or ())})
        elif kind == "current_mode_update":
            mode = getattr(update, "current_mode_id", None)
            await self._append(worker.conversation_id, ctx.run_id, "mode_changed",
                               {"mode": str(mode)[:limits.AGENT_MODE_MAX_CHARS] if mode else None})
        elif kind == "available_commands_update":
            names = [str(getattr(c, "name", "")) for c in getattr(update, "available_commands", ()) or ()]
            self.observed.commands = tuple(n[:64] for n in names if n)[:limits.CATALOG_MAX_ITEMS]

    async def _consume_directive(self, worker: _Worker, ctx: _RunContext, update: Any) -> None:
        """Apply a session directive carried by a tool result, once per tool call, to this run's conversation.

        Honoured only when the call's ``tool_call`` update named ``kirocrew-core`` and a directive
        tool in ``_meta.kiro`` (recorded above); a marker anywhere else (a shell's output, another
        server's tool, a call without ``_meta``) is reported once as ignored and never applied.
        """
        call_id = str(update.tool_call_id)
        if call_id in ctx.directives_seen:
            return
        texts = [t for t in _result_texts(update) if directives.has_marker(t)]
        if not texts:
            return
        ctx.directives_seen.add(call_id)
        expected = ctx.directive_tools.get(call_id, "")
        payload = next((args for t in texts if (args := directives.decode(t, expected)) is not None), None)
        if payload is None:
            reason = ("the tool call was not recorded by kiro as a kirocrew-core directive tool" if not expected
                      else f"the marker is not {expected}'s")
            log.warning("ignored a session-directive marker on conversation %s: %s", worker.conversation_id, reason)
            await self._append(worker.conversation_id, ctx.run_id, "directive_ignored",
                               {"toolName": ctx.tool_names.get(call_id), "reason": reason})
            return
        await directive_effects.apply(directive_effects.DirectiveContext(
            self, worker.conversation_id, ctx.run_id, call_id), expected, payload)

    async def _on_permission(self, worker: _Worker, request: AcpPermissionRequest) -> str | None:
        """Decide by the permission policy (:mod:`.gatekeeper`); an ``ask`` waits for :meth:`decide`.

        A cancel or the attention deadline answers ``cancelled``.
        """
        ctx = worker.current
        if ctx is None:
            return None
        offered = {kind: oid for kind in DECISIONS if (oid := request.option_of_kind(kind)) is not None}
        call_id = str(request.tool_call.tool_call_id)
        # kiro names the tool only in its tool_call update: the session keeps those as they arrive. Only if it
        # has not arrived yet, wait for the queued updates (each may be a store write: not on every call).
        update = worker.session.tool_calls.get(call_id) if worker.session is not None else None
        if update is None and worker.session is not None:
            await worker.session.flush_updates()
            update = worker.session.tool_calls.get(call_id)
        tool = _tool_name(update) if update is not None else _tool_name(request.tool_call)
        call = _gate_call(update, tool)
        run = await self._db(self.store.get_run, ctx.run_id)
        try:
            decided: gatekeeper.Decided | None = gatekeeper.decide(
                call, authority=run.authority, agent=run.mode, workspace=ctx.cwd)
        except Exception:  # a bug in the gate must leave the call to the owner, never allow it
            log.exception("the permission policy could not decide a call of run %s", run.id)
            decided = None
        if decided is not None and decided.verdict.decision == "allow" and "allow_once" in offered:
            self.audit.record("allow", decided, conversation_id=run.conversation_id, run_id=run.id)
            return offered["allow_once"]
        if decided is not None and decided.verdict.decision == "deny":
            return await self._refuse(worker, run, tool, decided, offered)
        return await self._ask_owner(worker, ctx, run, tool, decided, offered)

    async def _refuse(self, worker: _Worker, run: Run, tool: str | None, decided: gatekeeper.Decided,
                      offered: dict[str, str]) -> str | None:
        """``reject_once`` (the turn goes on without the call), and the running turn is told which rule and why."""
        self.audit.record("deny", decided, conversation_id=run.conversation_id, run_id=run.id)
        await self._event(run, "permission_denied", {"toolName": tool, "rule": decided.rule_view(),
                                                     "subject": decided.subject})
        if worker.session is not None:
            # Before kiro hears "no": the steer is queued for the turn's next generation boundary, which is
            # where the model reads the rejected call's result, so the two arrive together.
            with contextlib.suppress(AcpError, KirocrewError, TimeoutError):
                await asyncio.wait_for(worker.session.steer(gatekeeper.steer_text(decided)), STEER_TIMEOUT_SECS)
        return offered.get("reject_once")  # not offered: "cancelled", which ends the turn (never a run)

    async def _ask_owner(self, worker: _Worker, ctx: _RunContext, run: Run, tool: str | None,
                         decided: gatekeeper.Decided | None, offered: dict[str, str]) -> str | None:
        """``needs_attention`` with the rule that asked, a card in the owner's feed, until :meth:`decide`."""
        options = list(offered) + (["allow_always"] if decided is not None and decided.always
                                   and "allow_once" in offered else [])
        perm = await self._db(self.store.add_permission_request, ctx.run_id, options, tool_name=tool,
                              rule=decided.rule_view() if decided is not None else None,
                              subject=decided.subject if decided is not None else None,
                              reason=decided.reason if decided is not None else
                              "the permission policy could not decide this call")
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._permissions[perm.id] = _PendingPermission(ctx.run_id, offered, answer, decided)
        self.audit.record("ask", decided, conversation_id=run.conversation_id, run_id=run.id, tool=tool,
                          rule=None if decided is not None else "gate_failed")
        try:
            if run.status == "running":
                run = await self._db(self.store.transition_run, ctx.run_id, "needs_attention")
            await self._event(run, "permission_requested",
                              {"permissionId": perm.id, "toolName": tool, "options": options,
                               "rule": decided.rule_view() if decided is not None else None})
            await self._notify()
            self._tell_permission(PermissionAsked(run.id, run.conversation_id, perm.id, tool, "asked"))
            if decided is not None:
                conversation = await self._db(self.store.get_conversation, run.conversation_id)
                await asyncio.to_thread(gatekeeper.notify_owner, decided, conversation_id=conversation.id,
                                        conversation_name=conversation.name, permission_id=perm.id)
            try:
                return offered[await asyncio.wait_for(asyncio.shield(answer), self.attention_deadline_secs)]
            except TimeoutError:
                # Nobody answered: withdraw the request (a late decide gets permission_not_pending), answer
                # kiro "cancelled" and end the run needs_attention_expired, so the queue moves on.
                self._permissions.pop(perm.id, None)
                await self._event(run, "permission_expired", {"permissionId": perm.id})
                self.audit.record("expired", decided, conversation_id=run.conversation_id, run_id=run.id, tool=tool)
                ctx.attention_expired = True
                ctx.cancel_requested.set()
                return None
        finally:
            self._permissions.pop(perm.id, None)
            self._tell_permission(PermissionAsked(run.id, run.conversation_id, perm.id, tool, "settled"))

    def _tell_permission(self, notice: PermissionAsked) -> None:
        for listener in list(self.permission_listeners):
            try:
                listener(notice)
            except Exception:
                log.exception("a permission listener failed")

    # -- helpers -------------------------------------------------------------------------------

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await db_call(fn, *args, **kwargs)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _event(self, run: Run, kind: str, payload: dict[str, Any]) -> None:
        await self._append(run.conversation_id, run.id, kind, payload)

    async def _append(self, conversation_id: str, run_id: str | None, kind: str, payload: dict[str, Any]) -> None:
        await self._db(self.store.append_event, conversation_id, run_id, kind, payload)


def _kiro_meta(tool_call: Any, key: str) -> Any:
    """``_meta.kiro[key]`` of an update, kiro-cli's out-of-band record of the call (None when absent)."""
    meta = getattr(tool_call, "field_meta", None) or {}
    kiro = meta.get("kiro") if isinstance(meta, dict) else None
    return kiro.get(key) if isinstance(kiro, dict) else None


RESULT_TEXTS_MAX = 32


def _result_texts(update: Any) -> list[str]:
    """The texts a tool result carries: its content text blocks and the strings in its rawOutput."""
    found: list[str] = []
    for item in getattr(update, "content", None) or ():
        text = getattr(getattr(item, "content", None), "text", None)
        if isinstance(text, str):
            found.append(text)
    stack = [getattr(update, "raw_output", None)]
    while stack and len(found) < RESULT_TEXTS_MAX:
        value = stack.pop()
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


class _SessionKeys:
    """Session identity for kirocrew-core (issue 17): one key per kiro-cli worker process.

    Issued before the spawn (agent = the run's mode, workspace = the conversation's cwd),
    injected as ``KIROCREW_SESSION_KEY`` with the ``KIROCREW_HOST_PID`` prefix, bound to the
    process once it runs, revoked whenever the worker's kiro-cli closes (idle close,
    ``restart_sessions``, a crash, the host stopping all pass through ``_close_runtime``).
    The registry is this process's: the host's, or a standalone server's own.
    """

    @staticmethod
    def issue(conversation_id: str, options: AcpOptions, cwd: str) -> str:
        from kirocrew_core.coretools import identity

        return identity.registry().issue("conversation", conversation_id, agent=options.agent, workspace=cwd)

    @staticmethod
    def launch(options: AcpOptions, key: str) -> AcpOptions:
        from kirocrew_core.coretools import identity

        return identity.session_launch(options, key)

    @staticmethod
    async def bind(key: str, pid: int | None) -> None:
        from kirocrew_core.coretools import identity

        if pid is not None:
            await asyncio.to_thread(identity.registry().bind_pid, key, pid)

    @staticmethod
    def revoke(key: str | None) -> None:
        from kirocrew_core.coretools import identity

        if key is not None:
            identity.registry().revoke(key)


def _gate_call(update: Any, tool: str | None) -> Any:
    """The call a permission request is about, from kiro's ``tool_call`` update (``_meta.kiro``, ``rawInput``)."""
    if update is None:
        return gatekeeper.tool_call(tool, None, None)
    name, server = _kiro_meta(update, "toolName"), _kiro_meta(update, "mcpServerName")
    return gatekeeper.tool_call(name if isinstance(name, str) and name else tool,
                                server if isinstance(server, str) and server else None,
                                getattr(update, "raw_input", None))


def _tool_name(tool_call: Any) -> str | None:
    """kiro's tool name (``_meta.kiro.toolName``), else the ACP kind; never the title, which holds arguments."""
    meta = getattr(tool_call, "field_meta", None) or {}
    name = meta.get("kiro", {}).get("toolName") if isinstance(meta.get("kiro"), dict) else None
    if isinstance(name, str) and name:
        return name[:limits.MODEL_MAX_CHARS]
    kind = getattr(tool_call, "kind", None)
    return None if kind is None else str(getattr(kind, "value", kind))


async def db_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A store call: a :func:`~kirocrew_conversations.store.quick_read` runs inline, anything else in a thread."""
    if getattr(fn, "quick_read", False):
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


def _refusal_detail(exc: AcpRequestError, conversation_id: str) -> str:
    """kiro's refusal as a run error: its code only (its text may quote the prompt), and the repair for bad media."""
    from kirocrew_conversations.session_images import is_media_refusal

    detail = f"kiro-cli refused the prompt: [{exc.rpc_code}]"
    if is_media_refusal(f"{exc.rpc_message} {exc.data or ''}"):
        detail += (": the Kiro session holds images kiro's backend refuses, so every request of it fails; "
                   f"`kirocrew conversations repair {conversation_id}` mends it")
    return detail


def _prompt_blocks(text: str, images: Sequence[ImageInput]) -> str | list[Any]:
    if not images:
        return text
    from acp import image_block, text_block

    return [text_block(text), *(image_block(base64.b64encode(i.data).decode("ascii"), i.mime_type) for i in images)]


MAX_LOCATIONS = 16


def _relative_locations(update: Any, cwd: str) -> list[str]:
    """Tool locations as workspace-relative paths; anything outside the workspace is dropped, never shown."""
    found: list[str] = []
    root = os.path.realpath(cwd) if cwd else ""
    for location in getattr(update, "locations", None) or ():
        path = getattr(location, "path", None)
        if not isinstance(path, str) or not root or not os.path.isabs(path):
            continue
        relative = os.path.relpath(os.path.realpath(path), root)
        if relative == ".." or relative.startswith("../") or os.path.isabs(relative):
            continue
        found.append(relative[:limits.PATH_MAX_CHARS])
        if len(found) == MAX_LOCATIONS:
            break
    return found


def _status(update: Any) -> str | None:
    status = getattr(update, "status", None)
    return None if status is None else str(getattr(status, "value", status))


def _clip(text: str) -> str:
    return text[:ERROR_DETAIL_MAX_CHARS]
