"""The workflow engine in the host: a checked script run in its own sandboxed process, its ctx calls served here.

:meth:`WorkflowEngine.start` checks the script (:mod:`~kirocrew_conversations.workflow_check`),
resolves the ``read_only`` authority's launcher (``authority_unavailable`` when the sandbox
cannot run here: a workflow never runs unconfined), and starts
:mod:`~kirocrew_conversations.workflow_runner` under it, tied to the host
(:func:`kirocrew_core.proc.spawn_tied_async`). The process reaches the host only through a
Unix socket in the run's private folder; the first connection that shows the token the host
gave the process is the run, any other is closed. What the run may do is decided here, never
by what the process says: each ``ctx.agent`` is counted against the ceilings before a child
conversation is spawned, the wall time is the host's clock, and passing a ceiling ends the run
(``run_failed`` with ``where: ceiling``) and kills the process group.

Agent calls go through an :data:`AgentRunner` (the host's is :func:`conversation_agent_runner`:
a sub-agent of the run's owner, collected and released). The run's record is stored by
:mod:`~kirocrew_conversations.workflow_runs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError

from kirocrew_conversations import workflow_runs as store
from kirocrew_conversations.limits import WORKFLOW_PROMPT_MAX_CHARS as PROMPT_MAX_CHARS
from kirocrew_conversations.vocabulary import READ_ONLY

if TYPE_CHECKING:
    from kirocrew_conversations.orchestrator import PermissionAsked
    from kirocrew_conversations.service import ConversationsService
    from kirocrew_conversations.store import Conversation

log = logging.getLogger(__name__)

WALL_MIN_SECS, WALL_DEFAULT_SECS, WALL_MAX_SECS = 60, 3600, 21600
AGENT_CALLS_MAX = 1000
TOOL_CALLS_PER_STEP_MAX = 200
EVENTS_MAX = 10000
RESULT_MAX_BYTES = 1024 * 1024
#: The workflow process's address space (the interpreter takes some 30 MiB of it) and its CPU time past the wall.
MEMORY_MAX_BYTES = 1024 * 1024 * 1024
CPU_GRACE_SECS = 5
FLUSH_EVERY_SECS = 0.5
HANDSHAKE_SECS = 30.0
PARALLEL_DEFAULT = 4


def clamp_wall(value: Any) -> float:
    """A wall time asked for (META's ``wall_secs``), clamped to 60–21600 s; 3600 s when none or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return WALL_DEFAULT_SECS
    return float(min(max(value, WALL_MIN_SECS), WALL_MAX_SECS))


def narrowed(value: Any, ceiling: int) -> int:
    """A count ceiling a script asks for (META): it may lower ``ceiling``, never raise it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return ceiling
    return min(value, ceiling)


def ceilings_for(meta: dict[str, Any], *, agent_calls: int = AGENT_CALLS_MAX) -> Ceilings:
    """A run's ceilings: META's ``wall_secs`` clamped, its ``agent_calls`` and ``tool_calls_per_step`` only lowering
    the defaults (and ``agent_calls``, the caller's budget)."""
    return Ceilings(wall_secs=clamp_wall(meta.get("wall_secs")),
                    agent_calls=narrowed(meta.get("agent_calls"), agent_calls),
                    tool_calls_per_step=narrowed(meta.get("tool_calls_per_step"), TOOL_CALLS_PER_STEP_MAX))


@dataclass(frozen=True)
class Ceilings:
    """What one run may use; the engine enforces them whatever the process does."""

    wall_secs: float = WALL_DEFAULT_SECS
    agent_calls: int = AGENT_CALLS_MAX
    tool_calls_per_step: int = TOOL_CALLS_PER_STEP_MAX
    events: int = EVENTS_MAX


@dataclass(frozen=True)
class AgentRequest:
    prompt: str
    index: int = 0
    label: str | None = None
    phase: str | None = None
    agent: str | None = None
    model: str | None = None


class AgentFailed(Exception):
    """An agent call that produced no reply; ``code`` is recorded in its ``agent_finished`` event."""

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(detail or code)
        self.code = code


#: ``(run, request, seconds left) -> reply text``; raises :class:`AgentFailed` for a call that failed.
AgentRunner = Callable[["ActiveRun", AgentRequest, float], Awaitable[str]]


@dataclass(frozen=True)
class NudgeRequest:
    """``ctx.nudge``: the owning session's monitor loop, within ``monitor_start``'s bounds."""

    message: str
    idle_secs: int
    max_cycles: int


#: ``(run, request) -> (armed, what happened)``: the ``nudge`` port (the host's is :func:`session_nudger`).
Nudger = Callable[["ActiveRun", NudgeRequest], Awaitable[tuple[bool, str]]]


def nudge_request(message: dict[str, Any]) -> NudgeRequest:
    """A ``nudge`` call's arguments checked against ``monitor_start``'s bounds, its defaults filled in;
    :class:`ValueError` saying which is wrong."""
    from kirocrew_conversations import directive_tools as bounds

    text, idle, cycles = message.get("message"), message.get("idle_secs"), message.get("max_cycles")
    idle = bounds.INTERVAL_DEFAULT if idle is None else idle
    cycles = bounds.CYCLES_DEFAULT if cycles is None else cycles
    if not isinstance(text, str) or not text.strip() or len(text) > bounds.MONITOR_MESSAGE_MAX:
        raise ValueError(f"nudge: message must be text of 1-{bounds.MONITOR_MESSAGE_MAX} characters")
    if isinstance(idle, bool) or not isinstance(idle, int) or not bounds.INTERVAL_MIN <= idle <= bounds.INTERVAL_MAX:
        raise ValueError(f"nudge: idle_secs must be a whole number {bounds.INTERVAL_MIN}-{bounds.INTERVAL_MAX}")
    if isinstance(cycles, bool) or not isinstance(cycles, int) or not bounds.CYCLES_MIN <= cycles <= bounds.CYCLES_MAX:
        raise ValueError(f"nudge: max_cycles must be a whole number {bounds.CYCLES_MIN}-{bounds.CYCLES_MAX}")
    return NudgeRequest(text.strip(), idle, cycles)


async def _no_nudger(run: ActiveRun, request: NudgeRequest) -> tuple[bool, str]:
    return False, "skipped: this host wires no nudge port"


class RunEnded(Exception):
    """Ends a run from inside its serving loop: its status, where and why."""

    def __init__(self, status: str, where: str = "", reason: str = "", result: Any = None) -> None:
        super().__init__(reason)
        self.status, self.where, self.reason, self.result = status, where, reason, result


@dataclass
class ActiveRun:
    """A run in progress: its record (what is stored), and what the host holds for it."""

    record: dict[str, Any]
    ceilings: Ceilings
    owner_conversation: Conversation | None = None
    cwd: str | None = None
    agent_calls: int = 0
    next_index: int = 0
    replay: dict[int, Any] = field(default_factory=dict)
    #: The run's socket (in its private 0700 folder) while it runs: only the token the process got opens it.
    socket_path: str = ""
    #: The periodic save in flight, if any (the final save waits for it).
    saving: asyncio.Future[Any] | None = None
    started: float = 0.0
    phases: set[str] = field(default_factory=set)
    ended: asyncio.Future[RunEnded] | None = None
    task: asyncio.Task[None] | None = None
    dirty: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def run_id(self) -> str:
        return str(self.record["run_id"])

    @property
    def owner(self) -> str:
        return str(self.record["owner"])

    def event(self, kind: str, data: dict[str, Any]) -> None:
        events = self.record["events"]
        events.append({"run_id": self.run_id, "seq": len(events) + 1, "ts": store.now(), "type": kind,
                       "data": store.redacted(data, 4000)})
        self.dirty.set()
        if len(events) >= self.ceilings.events and kind not in ("run_failed", "run_finished", "run_cancelled"):
            self.end(RunEnded("failed", "ceiling", f"the run passed its ceiling of {self.ceilings.events} events"))

    def end(self, outcome: RunEnded) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(outcome)


class WorkflowEngine:
    """Starts, serves, cancels and lists workflow runs (one engine per conversations service)."""

    def __init__(self, agent_runner: AgentRunner, *, runs_dir: Path | None = None, authority: str = READ_ONLY,
                 parallel: int = PARALLEL_DEFAULT,
                 on_end: Callable[[ActiveRun], Awaitable[None]] | None = None, nudger: Nudger | None = None) -> None:
        self.agent_runner = agent_runner
        self.nudger = nudger or _no_nudger
        self.on_end = on_end
        self.runs_dir = runs_dir
        self.authority = authority
        self.parallel = parallel
        self.active: dict[str, ActiveRun] = {}
        recovered = store.recover(runs_dir)
        if recovered:
            log.info("%d workflow run(s) were running when the host stopped; marked failed", recovered)

    async def start(self, source: str, *, owner: str, args: dict[str, Any] | None = None,
                    ceilings: Ceilings | None = None, owner_conversation: Conversation | None = None,
                    cwd: str | None = None, replay: dict[int, Any] | None = None,
                    rerun_of: str | None = None) -> ActiveRun:
        """Check ``source``, make sure the sandbox runs, record the run and start it; the run at once.

        ``replay``: agent call index → the value to return without running it (a rerun's recorded results).
        Refusals change nothing: :class:`~kirocrew_conversations.workflow_check.WorkflowRejected` (``where:
        validate``), ``authority_unavailable``.
        """
        from kirocrew_conversations.workflow_check import check_source

        meta = check_source(source)
        if ceilings is None:
            ceilings = ceilings_for(meta)
        workdir = Path(tempfile.mkdtemp(prefix="kirocrew-workflow-"))
        try:
            launcher, env = await asyncio.to_thread(_sandbox_launch, self.authority, str(workdir))
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        record = {"run_id": store.new_run_id(), "name": str(meta.get("name", "workflow"))[:200], "owner": owner,
                  "status": "running", "where": None, "reason": None, "created_at": store.now(), "ended_at": None,
                  "args": store.redacted(args or {}), "meta": store.redacted(meta),
                  "ceilings": {"wall_secs": ceilings.wall_secs, "agent_calls": ceilings.agent_calls,
                               "tool_calls_per_step": ceilings.tool_calls_per_step, "events": ceilings.events},
                  "agent_calls": 0, "result": None, "source": store.redacted(source, len(source) + 1),
                  "rerun_of": rerun_of, "cwd": cwd, "calls": {}, "events": []}
        run = ActiveRun(record, ceilings, owner_conversation, cwd, replay=dict(replay or {}),
                        started=asyncio.get_running_loop().time())
        run.ended = asyncio.get_running_loop().create_future()
        run.event("run_started", {"name": record["name"], "ceilings": record["ceilings"]})
        await asyncio.to_thread(store.save, record, self.runs_dir)
        self.active[run.run_id] = run
        run.task = asyncio.create_task(self._run(run, source, args or {}, workdir, launcher, env))
        return run

    async def cancel(self, run_id: str) -> bool:
        """End a running run as ``cancelled``; False when it is not running (here)."""
        run = self.active.get(run_id)
        if run is None:
            return False
        run.end(RunEnded("cancelled", reason="cancelled"))
        if run.task is not None:
            await asyncio.shield(run.task)
        return True

    async def rerun(self, record: dict[str, Any], from_index: int, *, owner_conversation: Conversation | None = None,
                    cwd: str | None = None) -> ActiveRun:
        """``record``'s script again, as a new run of the same owner: agent calls before ``from_index`` return
        their recorded results without running (``workflow_not_rerunnable`` while it still runs)."""
        if record.get("status") == "running":
            raise KirocrewError(f"run {record['run_id']} is still running; cancel it or wait for its end",
                                code="workflow_not_rerunnable")
        calls = record.get("calls") or {}
        replay = {int(key): value for key, value in calls.items() if str(key).isdigit() and int(key) < from_index}
        bounds = record.get("ceilings") or {}
        ceilings = Ceilings(wall_secs=clamp_wall(bounds.get("wall_secs")),
                            agent_calls=narrowed(bounds.get("agent_calls"), AGENT_CALLS_MAX),
                            tool_calls_per_step=narrowed(bounds.get("tool_calls_per_step"), TOOL_CALLS_PER_STEP_MAX))
        return await self.start(str(record.get("source", "")), owner=str(record["owner"]),
                                args=dict(record.get("args") or {}), ceilings=ceilings,
                                owner_conversation=owner_conversation, cwd=cwd or record.get("cwd"), replay=replay,
                                rerun_of=str(record["run_id"]))

    async def record(self, run_id: str) -> dict[str, Any] | None:
        """A run's record: the live one while it runs, else the stored one (None when unknown). Live records are
        read on the loop only (the run changes them there); the stored ones in a worker thread."""
        run = self.active.get(run_id)
        if run is not None:
            return run.record
        return await asyncio.to_thread(store.load, run_id, self.runs_dir)

    async def records(self) -> list[dict[str, Any]]:
        """Every run, newest first (the live ones as they are now)."""
        stored = {r["run_id"]: r for r in await asyncio.to_thread(store.listing, self.runs_dir)}
        stored.update({run_id: run.record for run_id, run in self.active.items()})
        return sorted(stored.values(), key=lambda r: str(r.get("created_at", "")), reverse=True)

    async def close(self) -> None:
        for run in list(self.active.values()):
            run.end(RunEnded("failed", "exec", "the host stopped"))
        await asyncio.gather(*(r.task for r in list(self.active.values()) if r.task), return_exceptions=True)

    # -- one run ---------------------------------------------------------------------------------

    async def _run(self, run: ActiveRun, source: str, args: dict[str, Any], workdir: Path, launcher: list[str],
                   env: dict[str, str]) -> None:
        from kirocrew_core import proc

        assert run.ended is not None
        token = secrets.token_urlsafe(32)
        connected, served, spawned = asyncio.Event(), asyncio.Event(), asyncio.Event()
        agents: set[asyncio.Task[None]] = set()
        limiter = asyncio.Semaphore(self.parallel)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if connected.is_set():  # the run has its process; nobody else speaks for it
                writer.close()
                return
            try:
                await asyncio.wait_for(spawned.wait(), HANDSHAKE_SECS)
                if not await asyncio.to_thread(_spawned_peer, writer, child):
                    raise ValueError("not the run's process")
                hello = json.loads(await asyncio.wait_for(reader.readline(), HANDSHAKE_SECS))
                if not hmac.compare_digest(str(hello.get("token", "")), token):
                    raise ValueError("wrong token")
            except (ValueError, TimeoutError, AttributeError, OSError):
                writer.close()
                return
            connected.set()
            writer.write(_line({"op": "start", "source": source, "args": args, "memory_bytes": MEMORY_MAX_BYTES,
                                "cpu_secs": int(run.ceilings.wall_secs) + CPU_GRACE_SECS}))
            try:
                await self._serve(run, reader, writer, agents, limiter)
            finally:
                served.set()

        flusher = asyncio.create_task(self._flush(run))
        server = child = None
        outcome = RunEnded("failed", "exec", "the host stopped")
        try:
            run.socket_path = str(workdir / "run.sock")
            server = await asyncio.start_unix_server(serve, path=run.socket_path, limit=16 * 1024 * 1024)
            os.chmod(run.socket_path, 0o600)
            runner = str(Path(__file__).with_name("workflow_runner.py"))
            from kirocrew_conversations.workflow_runner import TOKEN_ENV

            child_env = {"PATH": env.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", TOKEN_ENV: token}
            child = await proc.spawn_tied_async([*launcher, sys.executable, "-I", "-S", runner,
                                                 run.socket_path], env=child_env, cwd=str(workdir),
                                                stdout=proc.DEVNULL, stderr=proc.PIPE)
            spawned.set()
            watcher = asyncio.create_task(self._watch_exit(run, child, connected, served))
            try:
                outcome = await asyncio.wait_for(asyncio.shield(run.ended), run.ceilings.wall_secs)
            except TimeoutError:
                outcome = RunEnded("failed", "ceiling", f"the run passed its wall time of {run.ceilings.wall_secs:g}s")
            watcher.cancel()
        except KirocrewError as exc:
            outcome = RunEnded("failed", "exec", f"the workflow process could not start: {exc.message}")
        finally:
            for task in agents:
                task.cancel()
            await asyncio.gather(*agents, return_exceptions=True)
            if child is not None:
                await asyncio.shield(proc.terminate_async(child, reason=f"workflow run {run.run_id} ended"))
            if server is not None:
                server.close()
            shutil.rmtree(workdir, ignore_errors=True)
            self._finish(run, outcome)
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
            # A periodic save still writing in its thread lands first, so the final record is the last one written.
            if run.saving is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(run.saving)
            try:
                await asyncio.shield(asyncio.to_thread(store.save, run.record, self.runs_dir))
            except OSError:
                log.exception("workflow run %s: its final record could not be written", run.run_id)
            finally:
                self.active.pop(run.run_id, None)
        if self.on_end is not None:
            try:
                await self.on_end(run)
            except Exception:  # the run is stored; only its announcement is lost
                log.exception("workflow run %s: its end could not be announced", run.run_id)

    async def _watch_exit(self, run: ActiveRun, child: asyncio.subprocess.Process, connected: asyncio.Event,
                          served: asyncio.Event) -> None:
        """The process ended before it said how the run ended: the run failed, with what it printed last."""
        assert child.stderr is not None
        tail = b""
        while chunk := await child.stderr.read(64 * 1024):
            tail = (tail + chunk)[-2000:]
        code = await child.wait()
        if connected.is_set():  # what it sent before it exited is served first
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(served.wait(), HANDSHAKE_SECS)
        text = tail.decode("utf-8", "replace").strip()
        run.end(RunEnded("failed", "exec", f"the workflow process exited ({code}) without a result"
                         + (f": {text}" if text else "")))

    async def _serve(self, run: ActiveRun, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     agents: set[asyncio.Task[None]], limiter: asyncio.Semaphore) -> None:
        while True:
            try:
                line = await reader.readline()
                message = json.loads(line) if line else None
            except (ValueError, asyncio.LimitOverrunError):
                run.end(RunEnded("failed", "exec", "the workflow process sent a malformed message"))
                return
            if not isinstance(message, dict):
                return
            op = message.get("op")
            if op == "log":
                run.event("log", {"message": str(message.get("message", ""))[:4000]})
            elif op == "agent":
                index = run.next_index
                run.next_index += 1
                if index in run.replay:  # a rerun: the recorded result, no agent
                    value = run.replay[index]
                    run.record["calls"][str(index)] = value
                    run.event("agent_started", {"index": index, "label": _optional(message.get("label")),
                                                "phase": _optional(message.get("phase")), "replayed": True})
                    run.event("agent_finished", {"index": index, "ok": True, "replayed": True})
                    writer.write(_line({"id": message.get("id"), "value": value}))
                    continue
                run.agent_calls += 1
                run.record["agent_calls"] = run.agent_calls
                if run.agent_calls > run.ceilings.agent_calls:
                    run.end(RunEnded("failed", "ceiling", f"agent call {run.agent_calls} passes the run's ceiling of "
                                     f"{run.ceilings.agent_calls} agent calls"))
                    return
                if run.agent_calls in _milestones(run.ceilings.agent_calls):
                    run.event("budget_update", {"agent_calls": run.agent_calls,
                                                "agent_calls_ceiling": run.ceilings.agent_calls,
                                                "wall_secs_left": round(self._left(run), 1)})
                task = asyncio.create_task(self._agent(run, index, message, writer, limiter))
                agents.add(task)
                task.add_done_callback(agents.discard)
            elif op == "nudge":
                await self._nudge(run, message, writer)
            elif op == "done":
                result = message.get("result")
                if len(json.dumps(result, default=str)) > RESULT_MAX_BYTES:  # a run's file stays readable
                    result = f"[the result was larger than {RESULT_MAX_BYTES} bytes and was not kept]"
                run.end(RunEnded("finished", result=result))
                return
            elif op == "raised":
                line_no = message.get("line") or 0
                run.end(RunEnded("failed", "exec", str(message.get("error", "the workflow raised"))[:2000]
                                 + (f" (line {line_no})" if line_no else "")))
                return
            else:
                run.end(RunEnded("failed", "exec", "the workflow process sent an unknown message"))
                return

    async def _agent(self, run: ActiveRun, index: int, message: dict[str, Any], writer: asyncio.StreamWriter,
                     limiter: asyncio.Semaphore) -> None:
        request = AgentRequest(prompt=_text(message.get("prompt")), index=index, label=_optional(message.get("label")),
                               phase=_optional(message.get("phase")), agent=_optional(message.get("agent")),
                               model=_optional(message.get("model")))
        schema = message.get("schema")
        if len(request.prompt) > PROMPT_MAX_CHARS:  # refused before a child exists; the call returns None
            run.event("agent_finished", {"index": index, "label": request.label, "ok": False,
                                         "error": "prompt_too_long"})
            run.record["calls"][str(index)] = None
            if not writer.is_closing():
                writer.write(_line({"id": message.get("id"), "value": None}))
            return
        if request.phase and request.phase not in run.phases:
            run.phases.add(request.phase)
            run.event("phase_started", {"phase": request.phase})
        run.event("agent_started", {"index": index, "label": request.label, "phase": request.phase})
        value: Any = None
        outcome: dict[str, Any] = {"index": index, "label": request.label}
        try:
            async with limiter:
                text = await self.agent_runner(run, request, self._left(run))
            value = _shaped(text, schema)
            outcome.update(ok=True, text=text)
        except AgentFailed as exc:
            outcome.update(ok=False, error=exc.code, detail=str(exc))
        run.record["calls"][str(index)] = store.redacted(value)
        run.event("agent_finished", outcome)
        if not writer.is_closing():
            writer.write(_line({"id": message.get("id"), "value": value}))

    async def _nudge(self, run: ActiveRun, message: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """``ctx.nudge``: the port's outcome is a ``log`` event; arguments out of bounds are the script's error."""
        try:
            request = nudge_request(message)
        except ValueError as exc:
            writer.write(_line({"id": message.get("id"), "error": str(exc)}))
            return
        try:
            armed, said = await self.nudger(run, request)
        except KirocrewError as exc:
            armed, said = False, f"refused: {exc.message}"
        run.event("log", {"message": f"nudge {said}"[:4000], "nudge": "armed" if armed else "not armed"})
        writer.write(_line({"id": message.get("id"), "value": armed}))

    @staticmethod
    def _left(run: ActiveRun) -> float:
        """Seconds of wall time the run has left (at least one: the run's own deadline ends it anyway)."""
        return max(1.0, run.started + run.ceilings.wall_secs - asyncio.get_running_loop().time())

    @staticmethod
    def _finish(run: ActiveRun, outcome: RunEnded) -> None:
        record = run.record
        record.update(status=outcome.status, where=outcome.where or None, reason=outcome.reason or None,
                      ended_at=store.now(), result=store.redacted(outcome.result))
        if outcome.status == "finished":
            run.event("run_finished", {"result": record["result"]})
        elif outcome.status == "cancelled":
            run.event("run_cancelled", {})
        else:
            run.event("run_failed", {"where": outcome.where, "reason": outcome.reason})

    async def _flush(self, run: ActiveRun) -> None:
        """Save the record when it changed, at most every :data:`FLUSH_EVERY_SECS` (a failed save is logged; the
        next change tries again)."""
        while True:
            await run.dirty.wait()
            run.dirty.clear()
            snapshot = json.loads(json.dumps(run.record))  # taken on the loop, written in a thread
            run.saving = asyncio.ensure_future(asyncio.to_thread(store.save, snapshot, self.runs_dir))
            try:
                await asyncio.shield(run.saving)
            except OSError:
                log.exception("workflow run %s: its record could not be written", run.run_id)
            await asyncio.sleep(FLUSH_EVERY_SECS)


def _milestones(ceiling: int) -> set[int]:
    """The agent call counts a ``budget_update`` is sent at: half the ceiling and nine tenths of it."""
    return {max(1, -(-ceiling * share // 10)) for share in (5, 9)}


def _sandbox_launch(authority: str, workspace: str) -> tuple[list[str], dict[str, str]]:
    from kirocrew_conversations.authority import launch

    return launch(authority, workspace)


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, default=str).encode("utf-8") + b"\n"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _optional(value: Any) -> str | None:
    return str(value)[:200] if value is not None else None


def _shaped(text: str, schema: Any) -> Any:
    """The reply as the call asked: the text, or the JSON in it validated against ``schema``."""
    if schema is None:
        return text
    import jsonschema

    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        body = body.rsplit("```", 1)[0]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise AgentFailed("invalid_schema", exc.message) from None
    try:
        value = json.loads(body)
    except ValueError:
        raise AgentFailed("schema_mismatch", "the reply is not JSON") from None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if error is not None:
        raise AgentFailed("schema_mismatch", error.message)
    return value


def conversation_agent_runner(service: ConversationsService) -> AgentRunner:
    """Agent calls as sub-agents of the run's owner (its conversation; none for the person), each collected and
    released when it ends, so a workflow leaves no idle children behind."""

    async def run_agent(run: ActiveRun, request: AgentRequest, seconds_left: float) -> str:
        from kirocrew_conversations.subagents import Task

        hub = service.subagents
        parent = run.owner_conversation
        try:
            spawned = await hub.spawn(parent, [Task(request.prompt, request.agent)], cwd=run.cwd,
                                      model=request.model, claim=True)
        except KirocrewError as exc:
            raise AgentFailed(exc.code, exc.message) from None
        child, child_run = spawned[0].conversation, spawned[0].run.id
        calls = 0

        def counted(run_id: str) -> None:
            nonlocal calls
            if run_id == child_run:
                calls += 1
                if calls & (calls - 1) == 0:  # 1, 2, 4, 8…: a long step shows life in a bounded number of events
                    run.event("agent_progress", {"index": request.index, "label": request.label, "tool_calls": calls})
                if calls > run.ceilings.tool_calls_per_step:
                    run.end(RunEnded("failed", "ceiling", f"agent call {request.label or child.id} made more than "
                                     f"{run.ceilings.tool_calls_per_step} tool calls in one step"))

        def waiting(notice: PermissionAsked) -> None:
            if notice.run_id == child_run:
                approval_event(run, request, notice)

        service.orchestrator.tool_call_listeners.append(counted)
        service.orchestrator.permission_listeners.append(waiting)
        settled: set[str] = set()
        try:
            settled = await hub.collect(spawned, seconds_left)
            [entry] = await hub.results(spawned)
        finally:
            service.orchestrator.tool_call_listeners.remove(counted)
            service.orchestrator.permission_listeners.remove(waiting)
            hub.unclaim([s.conversation for s in spawned if s.conversation.id not in settled])
            with contextlib.suppress(KirocrewError):
                await asyncio.shield(hub.release(parent, child.id))
        if entry["status"] != "completed":
            raise AgentFailed(str(entry.get("error") or entry["status"]))
        ended = await hub.latest_run(child)
        return (ended.reply_text if ended is not None else None) or str(entry.get("text", ""))

    return run_agent


def approval_event(run: ActiveRun, request: AgentRequest, notice: PermissionAsked) -> None:
    """An agent call's tool call waits on the owner: ``approval_requested`` names the call, the tool and where the
    owner answers (the child conversation and its run, whose page and the owner's feed carry the request); its
    answer (or expiry) is an ``agent_progress`` with ``approval: settled``, so the call shows as running again."""
    where = {"conversation_id": notice.conversation_id, "conversation_run_id": notice.run_id,
             "permission_id": notice.permission_id}
    if notice.state == "asked":
        run.event("approval_requested", {"index": request.index, "label": request.label, "phase": request.phase,
                                         "tool": notice.tool, **where})
    else:
        run.event("agent_progress", {"index": request.index, "label": request.label, "approval": "settled", **where})


def session_nudger(service: ConversationsService) -> Nudger:
    """The ``nudge`` port: ``monitor_start`` applied to the run's owning conversation (the same loop, the same
    ``directive`` event on its latest run), armed at once when that conversation is idle. The person's run has
    no session to nudge."""

    async def nudge(run: ActiveRun, request: NudgeRequest) -> tuple[bool, str]:
        from kirocrew_conversations import directive_effects as effects

        conversation = run.owner_conversation
        if conversation is None:
            return False, "skipped: the person's run has no session to nudge"
        orchestrator = service.orchestrator
        latest = await service.subagents.latest_run(conversation)
        if latest is None:
            return False, "skipped: the owning conversation has no run"
        outcome = await effects.apply(effects.DirectiveContext(orchestrator, conversation.id, latest.id, ""),
                                      "monitor_start", {"message": request.message, "idle_secs": request.idle_secs,
                                                        "max_cycles": request.max_cycles})
        if outcome.status != "applied":
            return False, f"refused: {outcome.message}"
        if not await asyncio.to_thread(orchestrator.store.unfinished_runs, conversation.id):
            orchestrator.monitors.arm(conversation.id)  # idle already: no run's end will arm it
        return True, f"armed on {conversation.id}: {outcome.message}"

    return nudge


def owner_announcer(service: ConversationsService) -> Callable[[ActiveRun], Awaitable[None]]:
    """A session's run ends: its result is queued to the session's conversation as a message (after its turn)."""

    async def announce(run: ActiveRun) -> None:
        conversation = run.owner_conversation
        if conversation is None:
            return
        record = run.record
        how = record["status"] + (f" (where: {record['where']}): {record['reason']}" if record.get("where") else "")
        result = json.dumps(record.get("result"), ensure_ascii=False)[:4000]
        try:
            await service.orchestrator.submit(conversation.id, f"[kirocrew workflow] Run {run.run_id} "
                                              f"({record['name']}) ended {how}.\nResult: {result}")
        except KirocrewError as exc:
            log.warning("workflow run %s: its result could not be delivered: %s", run.run_id, exc.code)

    return announce


def _spawned_peer(writer: asyncio.StreamWriter, child: asyncio.subprocess.Process | None) -> bool:
    """Whether the process that connected descends from the run's own (tied) process, by the kernel's word.

    The token alone is something the process holds, which another process of the same user could read
    (``/proc/<pid>/environ``); the peer's pid from ``SO_PEERCRED`` and its ancestry are the kernel's.
    """
    from kirocrew_core import processes
    from kirocrew_core.host.client import peer_credentials

    sock = writer.get_extra_info("socket")
    peer = peer_credentials(sock) if sock is not None else None
    if child is None or peer is None:
        return False
    pid, uid = peer
    return uid == os.getuid() and processes.is_ancestor(child.pid, pid)
