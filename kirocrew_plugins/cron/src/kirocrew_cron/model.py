"""What a cron job and a run of one are, and the limits every entry point (tool, CLI, page) shares.

Plain frozen values: the store reads and writes them, the scheduler plans from them, the
tools, the CLI and the page show them. A change is a new value (``dataclasses.replace``).
The limits are the reference's (``kirocrew-core-and-cron.md`` §6.1) unless a comment says why not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import CrewSession

ScheduleKind = Literal["every", "at", "cron"]
#: What a job does with the due instants it missed while no scheduler ran (host down, machine asleep):
#: ``skip`` records them and waits for the next one, ``once`` runs once for all of them, ``all`` runs
#: each, oldest first, at most ``catch_up_max`` (the rest are recorded as missed).
CatchUp = Literal["skip", "once", "all"]
CATCH_UPS: tuple[CatchUp, ...] = ("skip", "once", "all")
Trigger = Literal["scheduled", "manual", "catch-up"]
#: ``running`` until the run ends; ``denied`` when fire-time vetting or governance refused it (the job is
#: kept); ``missed`` records due instants a ``skip`` (or a bounded ``all``) policy did not run.
RunStatus = Literal["running", "success", "failure", "timeout", "cancelled", "denied", "missed"]
FAILED_STATUSES: frozenset[str] = frozenset({"failure", "timeout", "denied"})

JOB_ID_PATTERN = r"^[a-f0-9]{1,16}$"
NAME_MAX = 500
MESSAGE_MAX = 50_000
COMMAND_MAX = 5_000
EVERY_MIN_SECS = 60
EVERY_MAX_SECS = 2_592_000  # 30 days
CRON_EXPR_MAX = 100
AT_MAX_TS = 4_102_444_800  # 2100-01-01
DELAY_MAX_SECS = 2_592_000
AT_TIME_MAX = 100
SKIP_DATES_MAX = 366
TIMEZONE_MAX = 50
TIMEZONE_PATTERN = r"^[A-Za-z0-9_/+-]+$"
TIMEOUT_MAX_SECS = 3_600  # a command's subprocess bound; 0 means COMMAND_TIMEOUT_DEFAULT_SECS
COMMAND_TIMEOUT_DEFAULT_SECS = 300
TIMEOUT_SECS_DEFAULT = 1_800  # a run's whole budget
TIMEOUT_SECS_MAX = 86_400
CATCH_UP_MAX_DEFAULT = 10
CATCH_UP_MAX_LIMIT = 100
LIST_IDS_MAX = 200
#: After this many consecutive failed runs a job pauses itself (``auto_paused``); a success clears the count.
AUTO_PAUSE_THRESHOLD = 5
SUMMARY_MAX = 200
LAST_RESULT_MAX = 20_000
MINIMAL_LAST_RESULT_MAX = 2_000
#: History rows kept per job (oldest dropped first).
HISTORY_PER_JOB = 200
#: The jobs one session (one conversation) may own; past it its cron_add is ``session_jobs_full``.
MAX_JOBS_PER_SESSION = 50
#: The jobs all sessions together may own (``jobs_full``): well under :data:`MAX_JOBS`, so sessions
#: filling their share never stop the person adding jobs.
MAX_SESSION_JOBS = 500
#: Every job, the person's included (``jobs_full``): a listing or the Cron page stays a page.
MAX_JOBS = 1_000
#: The removed one-shots whose history is kept (each bounded by :data:`HISTORY_PER_JOB`); the oldest removed go
#: first. As many as the store holds jobs, so the history table is bounded as if every job were there twice.
REMOVED_HISTORIES_KEPT = MAX_JOBS

PERSON = ""
"""The owner of a job the person made (CLI, page, import): no session sees it."""


def session_owner(session: CrewSession) -> str:
    """The owner string of jobs a verified session creates: its kind and target, stable across its processes.

    A session key names one kiro-cli process and is revoked when it closes; the conversation it
    serves lives on, so a job belongs to the conversation (``conversation:<id>``), not the key.
    """
    return f"{session.kind}:{session.target_id}"


@dataclass(frozen=True)
class Schedule:
    """When a job is due: every ``every_secs`` seconds, once at ``at_ts``, or on a 5-field ``cron_expr``."""

    kind: ScheduleKind
    every_secs: int | None = None
    at_ts: float | None = None
    cron_expr: str | None = None


@dataclass(frozen=True)
class Job:
    """One scheduled job. ``message`` makes an agent job; ``command`` a command job (never both)."""

    id: str
    name: str
    schedule: Schedule
    message: str = ""
    command: str = ""
    #: :data:`PERSON`, or :func:`session_owner` of the session that created it.
    owner: str = PERSON
    #: IANA zone for ``cron_expr`` and ``skip_dates``; empty: config ``cron.timezone``, then UTC.
    timezone: str = ""
    skip_dates: tuple[str, ...] = ()
    strict_schedule: bool = False
    catch_up: CatchUp = "once"
    catch_up_max: int = CATCH_UP_MAX_DEFAULT
    #: The Kiro agent (the run's mode); empty: kirocrew's rendered agent, as any run without a mode.
    agent: str = ""
    #: The model; empty: inherit the agent's.
    model: str = ""
    #: The execution authority the run (or the command) gets; a session's job gets the session's.
    authority: str = "unrestricted"
    #: The absolute directory the run works in.
    workspace: str = ""
    persistent_session: bool = True
    minimal_context: bool = False
    silent: bool = False
    #: A command's subprocess bound in seconds; 0: COMMAND_TIMEOUT_DEFAULT_SECS.
    timeout: int = 0
    timeout_secs: int = TIMEOUT_SECS_DEFAULT
    delete_after_run: bool = False
    user_paused: bool = False
    auto_paused: bool = False
    created_ts: float = 0.0
    updated_ts: float = 0.0
    #: The last due instant handled (run, skipped or recorded missed): catch-up counts from here.
    last_due_ts: float | None = None
    last_run_ts: float | None = None
    last_status: Literal["", "ok", "error"] = ""
    last_error: str = ""
    last_result: str = ""
    consecutive_failures: int = 0
    #: The job's persistent conversation, created at its first agent run.
    conversation_id: str = ""

    @property
    def enabled(self) -> bool:
        return not self.user_paused and not self.auto_paused

    @property
    def kind(self) -> Literal["agent", "command"]:
        return "command" if self.command else "agent"


@dataclass(frozen=True)
class RemovedJob:
    """A one-shot that its run removed: enough to answer its kept history by id, to its owner only."""

    id: str
    name: str
    owner: str
    removed_at: float


@dataclass(frozen=True)
class RunRecord:
    """One line of a job's history: a run (any trigger), a refused fire, or missed instants."""

    id: int
    job_id: str
    trigger: Trigger
    status: RunStatus
    started_at: float
    due_ts: float | None = None
    finished_at: float | None = None
    summary: str = ""
    error: str = ""
    conversation_id: str = ""
    run_id: str = ""
    #: For ``missed``: how many due instants this record stands for.
    missed: int = 0

    @property
    def duration_ms(self) -> int | None:
        if self.finished_at is None:
            return None
        return max(0, round((self.finished_at - self.started_at) * 1000))
