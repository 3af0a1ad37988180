"""The host's cron service: the store's one writer, the scheduler, and every run of a job.

``kirocrew serve`` starts :func:`host_service` (``cron``): it takes the store's owner lock
for the host's life (a ``kirocrew cron`` command working without a host holds it meanwhile:
the start waits for it, bounded), opens the store, imports ``<crew home>/crons.json`` once,
ends what a dead host's runs left (:func:`recover_runs`: a command's recorded process group
whose leader still runs is killed, its row and the others left ``running`` become failures
saying so; a group that cannot be ended keeps its job held, so it never runs twice at once),
and starts the scheduler, which first applies each job's catch-up policy to what it missed
while no host ran. With
``KIROCREW_CRONS=off`` (``kirocrew serve --no-crons``) the store and the tools work but nothing
fires: no scheduler, and a trigger is refused with ``scheduler_off``.

While any enabled job is scheduled the service is ``busy`` ("N cron jobs scheduled"), so a
host a relay started on demand does not idle out and drop the schedule.

A run (:meth:`CronHost._launch`): fire-time vetting of a command and the ``governance.cron``
switch for a session's job (a refusal is a ``denied`` row; the job is kept), a session's job
narrowed to its conversation's authority now (:func:`effective_authority`: a conversation
narrowed since the job was made narrows its job), a ``running`` history row, the runner
(:mod:`kirocrew_cron.runner`) under the job's ``timeout_secs`` (``Timed out after {t}s``), then
the row's end, the job's last result and failure count
(auto-pause after :data:`~kirocrew_cron.model.AUTO_PAUSE_THRESHOLD` failures in a row, audited
``cron.auto_pause``; a success clears it), the one-shot's removal or pause, and a notification
unless the job is silent. A job never runs twice at once. The reaper force-ends a run whose
cancel did not end it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import HostService
from kirocrew_core.coretools.contract import ToolRefused

from kirocrew_cron.errors import cron_error
from kirocrew_cron.model import (
    AUTO_PAUSE_THRESHOLD,
    FAILED_STATUSES,
    PERSON,
    SUMMARY_MAX,
    TIMEOUT_SECS_MAX,
    Job,
    RunRecord,
    Trigger,
)

if TYPE_CHECKING:
    from kirocrew_core.notifications.store import NewNotification, Source
    from kirocrew_core.ownership import Ownership
    from kirocrew_core.proc import GroupRecord

    from kirocrew_cron.clock import Clock
    from kirocrew_cron.runner import ActiveRun, Outcome, Runner
    from kirocrew_cron.store import CronStore

log = logging.getLogger(__name__)

SERVICE_NAME = "cron"
#: ``off`` (set by ``kirocrew serve --no-crons``): the host runs without the scheduler.
CRONS_ENV = "KIROCREW_CRONS"
#: How often the reaper looks for runs past their hard deadline (seconds; default :data:`REAPER_INTERVAL_SECS`).
REAPER_INTERVAL_ENV = "KIROCREW_CRON_REAPER_SECS"
REAPER_INTERVAL_SECS = 60.0
#: Test-only: the reaper's floor (default :data:`REAP_FLOOR_SECS`), so a test can reap in seconds.
REAP_FLOOR_ENV = "KIROCREW_TEST_CRON_REAP_FLOOR_SECS"
REAP_FLOOR_SECS = 1800.0
#: Added to the reaper's deadline: the run's own cancel gets this long to end it first.
REAP_GRACE_SECS = 30.0
#: How long a stopping host waits for cancelled runs to record their end.
STOP_GRACE_SECS = 10.0
#: How long a starting host waits for a ``kirocrew cron`` command holding the store (the hand-over).
HOST_LOCK_WAIT_SECS = 30.0
HOST_STOPPED_ERROR = "the host stopped during the run"
KILLED_ERROR = ("host restarted during the run: the command was still running, and its process group was killed "
                "by the next host")
HELD_ENDED_ERROR = "host restarted during the run: what the command left running ended later"
HELD_ABANDONED_ERROR = ("host restarted during the run: what the command left running could not be ended; the job "
                        "was held until its deadline")


def crons_enabled() -> bool:
    return os.environ.get(CRONS_ENV, "").strip().lower() != "off"


def reap_after(job: Job) -> float:
    """The reference's hard deadline: ``max(min(timeout_secs, 86400), floor)`` seconds (floor 1800 s)."""
    return max(min(float(job.timeout_secs), float(TIMEOUT_SECS_MAX)), _env_float(REAP_FLOOR_ENV, REAP_FLOOR_SECS))


class CronHost:
    """The jobs' writer and runner in one host (see the module docstring).

    Tests build one directly: ``CronHost(store, ManualClock(t), runner=...)``, then
    ``await host.start()``; the default runner is :class:`~kirocrew_cron.runner.JobRunner`.
    """

    def __init__(self, store: CronStore, clock: Clock | None = None, *, scheduler_on: bool = True,
                 runner: Runner | None = None) -> None:
        from kirocrew_cron.clock import SystemClock
        from kirocrew_cron.runner import JobRunner
        from kirocrew_cron.scheduler import Scheduler

        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.scheduler_on = scheduler_on
        self.runner: Runner = runner or JobRunner()
        self.scheduler = Scheduler(self)
        self._active: dict[str, ActiveRun] = {}
        # Runs a dead host left whose processes could not be ended: their jobs wait (never two runs at once).
        self._held: dict[str, HeldRun] = {}
        self._starting: set[str] = set()  # jobs between the running check and their run's start (awaits there)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._started = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the scheduler (it applies catch-up first) and the reaper, unless the scheduler is off."""
        self._started = True
        if not self.scheduler_on:
            return
        self.scheduler.start()
        self._reaper = asyncio.get_running_loop().create_task(self._reap_forever(), name="cron-reaper")

    async def stop(self) -> None:
        """Stop planning, cancel every run (each records its end, bounded by :data:`STOP_GRACE_SECS`)."""
        self._started = False
        await self.scheduler.stop()
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_GRACE_SECS)

    # -- the interface the tools, the CLI and the page use ---------------------------------------

    def changed(self, job_id: str | None = None) -> None:
        """A job was added, changed or removed (None: any): the scheduler re-plans it. Safe from any thread."""
        self.scheduler.changed(job_id)

    def is_running(self, job_id: str) -> bool:
        return job_id in self._active or job_id in self._starting or job_id in self._held

    def hold(self, held: list[HeldRun]) -> None:
        """Runs a dead host left that may still run (:func:`recover_runs`): their jobs count as running until
        the reaper sees their processes gone, or their deadline passes."""
        for run in held:
            self._held[run.record.job_id] = run

    def running_jobs(self) -> list[str]:
        return list(self._active)

    def job_of_conversation(self, conversation_id: str) -> str | None:
        """The job whose agent run is in ``conversation_id`` now or was (its persistent one, a finished run's)."""
        for job_id, active in list(self._active.items()):
            if active.conversation_id == conversation_id:
                return job_id
        return self.store.job_of_conversation(conversation_id)

    def active_run(self, job_id: str) -> ActiveRun | None:
        """The job's run in progress (what it started: its conversation run, its process), or None."""
        return self._active.get(job_id)

    def tasks(self) -> list[asyncio.Task[Any]]:
        """The run and catch-up tasks in flight (a test waits on them after moving the clock)."""
        return list(self._tasks)

    def next_fire(self, job: Job) -> float | None:
        """When ``job`` fires next (jitter included), or None: paused, never again, or no scheduler."""
        from kirocrew_cron import schedule

        if not self.scheduler_on or not job.enabled:
            return None
        try:
            due = schedule.next_due(job, job.last_due_ts if job.last_due_ts is not None else job.created_ts)
        except Exception:  # noqa: BLE001 - a job the schedule cannot evaluate has no next run to show
            return None
        return None if due is None else schedule.fire_time(job, due)

    async def trigger(self, job_id: str) -> RunRecord:
        """Run ``job_id`` now (trigger ``manual``; its schedule is untouched); the run's first history row.

        ``scheduler_off`` under ``--no-crons``, ``job_not_found``, ``job_running`` while it runs; a fire
        refused by the checks at fire time is recorded (a ``denied`` row) and then raised with its code
        (``command_refused``, ``governance_denied``, ``authority_unavailable``).
        """
        if not self.scheduler_on or not self._started:
            raise cron_error("scheduler_off", "this host runs without its scheduler (kirocrew serve --no-crons): "
                                              "nothing fires or triggers")
        job = await asyncio.to_thread(self.store.get, job_id)
        if job is None:
            raise cron_error("job_not_found", f"Error: job not found: {job_id}")
        if self.is_running(job_id):
            raise cron_error("job_running", f"job {job_id} is running now; a job never runs twice at once")
        return await self._launch(job, "manual", None)

    def busy(self) -> str | None:
        """``"N cron jobs scheduled"`` while enabled jobs wait to fire (or run): the host must not idle out."""
        if not self.scheduler_on:
            return None
        count = len(set(self.scheduler.planned_ids()) | set(self._active) | set(self._held))
        if not count:
            return None
        return f"{count} cron job{'s' if count != 1 else ''} scheduled"

    # -- what the scheduler calls ----------------------------------------------------------------

    async def fire_scheduled(self, job: Job, due: float) -> Job | None:
        """Handle due instant ``due`` of ``job``: run it, or record it missed while the job still runs.

        ``last_due_ts`` moves to ``due`` either way; the job as it is now (None if it went away).
        """
        moved = await self._moved(job.id, due)
        if moved is None:
            return None
        if self.is_running(job.id):
            await asyncio.to_thread(self.store.record_missed, job.id, due_ts=due, count=1, at=self.clock.now())
            return moved
        await self._launch(moved, "scheduled", due)
        return moved

    async def catch_up(self, job: Job, now: float) -> None:
        """Apply ``job``'s catch-up policy to every instant it missed up to ``now``: run some (trigger
        ``catch-up``), record the rest as one ``missed`` row."""
        from kirocrew_core.errors import KirocrewError

        from kirocrew_cron import schedule

        plan = schedule.plan_catch_up(job, now, 0.0)  # the instant just past is one of the missed, not a run of its own
        runs = list(plan.run)
        missed = plan.missed
        if runs and self.is_running(job.id):
            missed, runs = missed + len(runs), []
        if missed:
            last = plan.last_due if plan.last_due is not None else now
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.record_missed, job.id, due_ts=last, count=missed, at=now)
        if plan.last_due is not None:
            moved = await self._moved(job.id, plan.last_due)
            if moved is None:
                return
            job = moved
        if runs:
            self._spawn(self._catch_up_runs(job, runs), f"cron-catch-up-{job.id}")
        elif job.schedule.kind == "at" and missed:  # a one-shot that will never run: kept, paused, for the person
            with contextlib.suppress(KirocrewError):
                await asyncio.to_thread(lambda: self.store.update(job.id, user_paused=True))

    async def _catch_up_runs(self, job: Job, instants: list[float]) -> None:
        """The catch-up runs of one job, oldest first, one at a time (a job never runs twice at once)."""
        for due in instants:
            current = await asyncio.to_thread(self.store.get, job.id)
            if current is None or self.is_running(job.id):
                return
            await self._launch(current, "catch-up", due)
            active = self._active.get(job.id)
            if active is not None and active.task is not None:
                await asyncio.wait({active.task})

    # -- one run ---------------------------------------------------------------------------------

    async def _launch(self, job: Job, trigger: Trigger, due: float | None) -> RunRecord:
        """Check the fire, write its ``running`` row and start it as its own task; the row."""
        if self.is_running(job.id):  # checked and claimed with no await between: never two runs at once
            raise cron_error("job_running", f"job {job.id} is running now; a job never runs twice at once")
        self._starting.add(job.id)
        try:
            return await self._start(job, trigger, due)
        finally:
            self._starting.discard(job.id)

    async def _start(self, job: Job, trigger: Trigger, due: float | None) -> RunRecord:
        from kirocrew_cron.runner import ActiveRun, Outcome

        now = self.clock.now()
        job, refusal = await asyncio.to_thread(fire_time_check, job)
        if refusal is not None:
            code, message = refusal
            error = f"{code}: {message}"
            record = await asyncio.to_thread(self.store.record, job.id, trigger, "denied", started_at=now,
                                             due_ts=due, error=error)
            await self._after(job, trigger, Outcome("denied", error=error), now)
            if trigger == "manual":  # the person (or session) asking is told, with the code; the row stays
                raise ToolRefused(f"the fire was refused and recorded in the job's history: {message}", code=code)
            return record
        record = await asyncio.to_thread(self.store.start_run, job.id, trigger, due_ts=due, started_at=now)
        active = ActiveRun(job.id, record.id, trigger, started_at=now, deadline=now + job.timeout_secs,
                           reap_at=now + reap_after(job) + REAP_GRACE_SECS,
                           on_process=lambda group: self.store.record_process(record.id, group))
        self._active[job.id] = active
        active.task = self._spawn(self._execute(job, active), f"cron-run-{job.id}")
        return record

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _execute(self, job: Job, active: ActiveRun) -> None:
        from kirocrew_cron.runner import Outcome

        try:
            outcome = await self._supervise(job, active)
        except asyncio.CancelledError:
            if not active.reaped:  # the host is stopping: say so in history, then let the stop go on
                await asyncio.shield(self._finish(job, active, Outcome("cancelled", error=HOST_STOPPED_ERROR)))
            raise
        except Exception as exc:  # a bug of ours ends the run as a failure, never leaves it running
            log.exception("cron job %s: the run failed unexpectedly", job.id)
            outcome = Outcome("failure", error=f"internal error: {type(exc).__name__}")
        if not active.reaped:
            await self._finish(job, active, outcome)

    async def _supervise(self, job: Job, active: ActiveRun) -> Outcome:
        """The runner under the job's deadline; past it the run is cancelled (``Timed out after {t}s``)."""
        from kirocrew_cron.runner import Outcome

        work = asyncio.ensure_future(self.runner(job, active))
        timer = asyncio.ensure_future(self._sleep_until(active.deadline))
        try:
            done, _ = await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            work.cancel()
            timer.cancel()
            await asyncio.wait({work}, timeout=STOP_GRACE_SECS)
            raise
        timer.cancel()
        if work in done:
            return work.result()
        work.cancel()
        await asyncio.wait({work})  # the runner tears its run down; if it never ends, the reaper ends this
        return Outcome("timeout", error=f"Timed out after {job.timeout_secs}s",
                       conversation_id=active.conversation_id, run_id=active.run_id)

    async def _finish(self, job: Job, active: ActiveRun, outcome: Outcome) -> None:
        if self._active.get(job.id) is active:
            del self._active[job.id]
        now = self.clock.now()
        summary = (outcome.result or outcome.error)[:SUMMARY_MAX]
        try:
            await asyncio.to_thread(self.store.finish_run, active.record_id, outcome.status, finished_at=now,
                                    summary=summary, error=outcome.error,
                                    conversation_id=outcome.conversation_id or active.conversation_id or None,
                                    run_id=outcome.run_id or active.run_id or None)
        except Exception:  # the store failing must not lose the job's own update below
            log.exception("cron job %s: its history row could not be finished", job.id)
        await self._after(job, active.trigger, outcome, active.started_at)

    async def _after(self, job: Job, trigger: str, outcome: Outcome, started_at: float) -> None:
        """The job after a run: last result, failures and auto-pause, the one-shot's end, the notification."""
        from kirocrew_core.errors import KirocrewError

        from kirocrew_cron.runner import capped_result

        current = await asyncio.to_thread(self.store.get, job.id)
        if current is None:  # removed while it ran
            return
        failed = outcome.status in FAILED_STATUSES
        changes: dict[str, Any] = {"last_run_ts": started_at}
        paused_itself = False
        if outcome.status == "success":
            changes.update(last_status="ok", last_error="", consecutive_failures=0, auto_paused=False,
                           last_result=capped_result(current, outcome.result))
            if current.auto_paused:  # as a resume does (ops.resume_job): the paused instants are not caught up
                changes["last_due_ts"] = self.clock.now()
        elif failed:
            failures = current.consecutive_failures + 1
            changes.update(last_status="error", last_error=outcome.error, consecutive_failures=failures)
            if failures >= AUTO_PAUSE_THRESHOLD and not current.auto_paused:
                changes["auto_paused"] = paused_itself = True
        else:
            changes["last_error"] = outcome.error
        if current.persistent_session and outcome.conversation_id and not current.command:
            changes["conversation_id"] = outcome.conversation_id
        one_shot_done = current.schedule.kind == "at" and trigger != "manual"
        removed = False
        try:
            if one_shot_done and current.delete_after_run and outcome.status != "denied":
                # Its history outlives it: `kirocrew cron history` and the job's page still answer by its id.
                await asyncio.to_thread(lambda: self.store.remove(job.id, keep_history=True))
                removed = True
            else:
                if one_shot_done:
                    changes["user_paused"] = True
                current = await asyncio.to_thread(lambda: self.store.update(job.id, **changes))
        except KirocrewError as exc:
            if exc.code != "job_not_found":
                raise
            return
        self.changed(job.id)
        if paused_itself:
            await asyncio.to_thread(_audit_auto_pause, current)
        if not current.silent:
            await asyncio.to_thread(_notify, current, outcome, paused_itself, removed)

    # -- deadlines -------------------------------------------------------------------------------

    async def _sleep_until(self, deadline: float) -> None:
        never = asyncio.Event()
        while self.clock.now() < deadline:
            await self.clock.sleep_until(deadline, never)

    async def _reap_forever(self) -> None:
        interval = max(0.05, _env_float(REAPER_INTERVAL_ENV, REAPER_INTERVAL_SECS))
        while True:
            await self._sleep_until(self.clock.now() + interval)
            try:
                await self.reap()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the cron reaper failed a pass")

    async def reap(self) -> int:
        """Force-end every run past its hard deadline whose cancel did not end it; how many. Also looks again
        at the held runs a dead host left: one whose processes are gone, or past its deadline, lets its job go."""
        from kirocrew_cron.runner import Outcome

        now = self.clock.now()
        await self._release_held(now)
        reaped = 0
        for job_id, active in list(self._active.items()):
            if now < active.reap_at or active.reaped:
                continue
            active.reaped = True
            reaped += 1
            job = await asyncio.to_thread(self.store.get, job_id)
            limit = int(active.reap_at - REAP_GRACE_SECS - active.started_at)
            outcome = Outcome("timeout", error=f"Reaped after {int(now - active.started_at)}s (exceeded {limit}s "
                                               "deadline)")
            self._spawn(_force_end(active), f"cron-reap-{job_id}")
            if active.task is not None:
                active.task.cancel()
            if job is not None:
                await self._finish(job, active, outcome)
            elif self._active.get(job_id) is active:
                del self._active[job_id]
        return reaped

    async def _release_held(self, now: float) -> None:
        from kirocrew_core import proc

        for job_id, held in list(self._held.items()):
            ended = await asyncio.to_thread(proc.group_ended, held.group)
            if not ended and now < held.give_up_at:
                continue
            del self._held[job_id]
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.finish_run, held.record.id, "failure", finished_at=now,
                                        error=HELD_ENDED_ERROR if ended else HELD_ABANDONED_ERROR)
            self.changed(job_id)

    async def _moved(self, job_id: str, due: float) -> Job | None:
        """``last_due_ts`` set to ``due`` (the instant is handled); the job, or None if it went away."""
        from kirocrew_core.errors import KirocrewError

        try:
            return await asyncio.to_thread(lambda: self.store.update(job_id, last_due_ts=due))
        except KirocrewError as exc:
            if exc.code == "job_not_found":
                return None
            raise


async def _force_end(active: ActiveRun) -> None:
    """Kill what a reaped run left: its process group, its conversation run (each bounded)."""
    from kirocrew_core import proc

    if active.process is not None and active.process.returncode is None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.terminate_async(active.process, reason="reaped cron run"), 30)
    if active.run_id:
        with contextlib.suppress(Exception):
            from kirocrew_conversations.public import hosted_service

            service = hosted_service()
            if service is not None:
                await asyncio.wait_for(service.orchestrator.cancel(active.run_id), 30)


def fire_time_check(job: Job) -> tuple[Job, tuple[str, str] | None]:
    """The job as this fire runs it (a session's job narrowed to its conversation's authority now), and why
    the fire is refused, as (code, message), or None."""
    import dataclasses

    if job.owner != PERSON:
        authority, problem = effective_authority(job)
        if problem is not None:
            return job, ("authority_unavailable", problem)
        job = dataclasses.replace(job, authority=authority)
    return job, _fire_time_refusal(job)


#: The built-in authorities from the narrowest; another plugin's cannot be compared with them.
AUTHORITY_BREADTH = ("read_only", "workspace_write", "unrestricted")


def effective_authority(job: Job) -> tuple[str, str | None]:
    """The authority a session's job runs with now: the narrower of its own (its session's when it was made)
    and its conversation's now, which the person may have narrowed since; a job never has more authority
    than its session. A conversation that is gone leaves the job's own. Two authorities that cannot be
    compared (a third-party one) refuse the fire: ``(job's, why)``.
    """
    from kirocrew_core.errors import KirocrewError

    from kirocrew_conversations.public import hosted_service

    kind, _, target = job.owner.partition(":")
    service = hosted_service()
    if kind != "conversation" or service is None:
        return job.authority, None
    try:
        now = service.store.get_conversation(target).authority
    except KirocrewError:
        return job.authority, None
    narrowed = narrower_authority(job.authority, now)
    if narrowed is not None:
        return narrowed, None
    return job.authority, (f"the job's authority {job.authority} and its conversation's {now} cannot be compared, "
                           "and a session's job never runs with more authority than its conversation")


def narrower_authority(one: str, other: str) -> str | None:
    """The narrower of two authorities; None when they cannot be compared (a plugin's against another)."""
    if one == other:
        return one
    if one in AUTHORITY_BREADTH and other in AUTHORITY_BREADTH:
        return min(one, other, key=AUTHORITY_BREADTH.index)
    return None


def _fire_time_refusal(job: Job) -> tuple[str, str] | None:
    """Why this fire is refused now, as (code, message), or None.

    The command fails vetting (``command_refused``), governance denies a session's job
    (``governance_denied``), or the job's authority cannot run here (``authority_unavailable``).
    """
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.governance import capability_allowed

    from kirocrew_conversations.public import authority_availability, installed_authorities

    if job.command:
        from kirocrew_cron.vet import vet_command

        try:
            vet_command(job.command)
        except KirocrewError as exc:
            return "command_refused", exc.message
    if job.owner != PERSON and not capability_allowed("cron"):
        return ("governance_denied", 'cron jobs of sessions are blocked by governance policy (governance.cron is '
                                     'not "allow")')
    ok, reason = authority_availability(job.authority, installed_authorities())
    if not ok:
        return "authority_unavailable", f"authority {job.authority} is unavailable: {reason}"
    return None


@dataclass(frozen=True)
class HeldRun:
    """A run a dead host left whose processes may still run: its job waits until they are gone or ``give_up_at``."""

    record: RunRecord
    group: GroupRecord
    give_up_at: float


def recover_runs(store: CronStore, now: float) -> list[HeldRun]:
    """End what the runs of a host that died left (call at host start, the owner lock held, before any fire).

    Each ``running`` row with a recorded process group: a leader still running as the same process (same
    start) has its group killed (:func:`kirocrew_core.proc.end_recorded_group`) and the row says so; a group
    that cannot be ended (it survived SIGKILL, or what runs under its id is not provably the run's) keeps
    its row ``running`` and is returned, to be held. Every other ``running`` row becomes a failure, "host
    restarted during the run".
    """
    from kirocrew_core import proc

    held: list[HeldRun] = []
    for record, group in store.running_processes():
        ended = proc.end_recorded_group(group, reason=f"cron job {record.job_id}: the host that ran it died")
        if ended is proc.Recovered.KILLED:
            store.finish_run(record.id, "failure", finished_at=now, error=KILLED_ERROR)
        elif ended is proc.Recovered.HELD:
            job = store.get(record.job_id)
            budget = reap_after(job) if job is not None else REAP_FLOOR_SECS
            held.append(HeldRun(record, group, give_up_at=max(now, record.started_at + budget + REAP_GRACE_SECS)))
            log.warning("cron job %s: a run of the host before this one may still be running (process group %d); "
                        "the job waits for it", record.job_id, group.pgid)
    store.interrupt_running(now, keep=[run.record.id for run in held])
    return held


def _audit_auto_pause(job: Job) -> None:
    from kirocrew_core import audit
    from kirocrew_core.errors import KirocrewError

    try:
        audit.record("cron.auto_pause", job_id=job.id, failures=job.consecutive_failures,
                     owner="person" if job.owner == PERSON else job.owner)
    except KirocrewError as exc:
        log.warning("cron job %s paused itself; the SEL record failed: %s", job.id, exc.code)


def _notify(job: Job, outcome: Outcome, paused_itself: bool, removed: bool) -> None:
    """The run's notification in kirocrew-core's feed (one card per job: ``group_key`` ``cron:<id>``).

    Published as cron's (sender ``cron``), not the run's conversation's: a session reusing the group
    key cannot replace it, and a session's flood does not evict it.
    """
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.notifications.store import publish

    notification, source = notification_of(job, outcome, paused_itself, removed)
    try:
        publish(notification, source, sender="cron")
    except (KirocrewError, OSError) as exc:
        log.warning("cron job %s: its notification could not be published: %s", job.id, exc)


def notification_of(job: Job, outcome: Outcome, paused_itself: bool, removed: bool) -> tuple[NewNotification,
                                                                                              Source | None]:
    """The notification a run of ``job`` that ended with ``outcome`` publishes, and its source (a run's
    conversation); ``kirocrew cron preview`` prints it without publishing. A removed one-shot's card links
    to the job's page, which keeps its history."""
    from kirocrew_core.notifications.store import BODY_MAX_CHARS, TITLE_MAX_CHARS, NewNotification, Source

    if outcome.status == "success":
        body = outcome.result
    else:
        body = f"{outcome.status}: {outcome.error}" if outcome.error else outcome.status
    if paused_itself:
        body += (f"\n\nThe job paused itself after {job.consecutive_failures} failed runs in a row; resume it "
                 f"with `kirocrew cron resume {job.id}` or on the Cron page.")
    cid = outcome.conversation_id
    url = f"/conversations/{cid}" + (f"#run-{outcome.run_id}-heading" if outcome.run_id else "") if cid else (
        f"/cron/{job.id}" if removed else f"/cron#job-{job.id}")
    source = Source(kind="conversation", target_id=cid, agent=job.agent or None) if cid else None
    return NewNotification(title=f"Cron: {job.name}"[:TITLE_MAX_CHARS],
                           priority="critical" if paused_itself else "default",
                           body=body[:BODY_MAX_CHARS], url=url, group_key=f"cron:{job.id}"), source


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        log.warning("%s is not a number; using %s", name, default)
        return default


# -- the host's one CronHost -------------------------------------------------------------------------


@dataclass
class _Hosted:
    host: CronHost | None = None
    lock: Ownership | None = None


_HOSTED = _Hosted()


def cron_host() -> CronHost:
    """The host's CronHost; ``host_required`` outside a running host (or before its cron service started)."""
    if _HOSTED.host is None:
        raise cron_error("host_required", "this needs the running kirocrew host (it runs the jobs); start it with "
                                          "kirocrew serve")
    return _HOSTED.host


async def _start() -> None:
    from kirocrew_core import home

    from kirocrew_cron import importer
    from kirocrew_cron.store import CronStore, acquire_owner_lock

    lock = await asyncio.to_thread(acquire_owner_lock, HOST_LOCK_WAIT_SECS)
    try:
        store = await asyncio.to_thread(CronStore.open)
        try:
            report = await asyncio.to_thread(importer.import_once, store, home.crew_home())
            if report is not None and report.problem:  # the next start tries again
                log.warning("crons.json was not imported: %s", report.problem)
            held = await asyncio.to_thread(recover_runs, store, time.time())
            host = CronHost(store, scheduler_on=crons_enabled())
            host.hold(held)
            await host.start()
        except BaseException:
            store.close()
            raise
    except BaseException:
        lock.release()
        raise
    _HOSTED.host, _HOSTED.lock = host, lock


async def _stop() -> None:
    host, lock = _HOSTED.host, _HOSTED.lock
    _HOSTED.host = _HOSTED.lock = None
    if host is not None:
        await host.stop()
        await asyncio.to_thread(host.store.close)
    if lock is not None:
        lock.release()


def _busy() -> str | None:
    host = _HOSTED.host
    return host.busy() if host is not None else None


def host_service() -> HostService:
    """The ``cron`` host service: start (lock, store, import once, catch-up, scheduler), stop, busy."""
    return HostService(SERVICE_NAME, _start, _stop, _busy)
