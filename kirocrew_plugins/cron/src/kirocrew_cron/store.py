"""The cron store: jobs and their history in one SQLite database in the crew state.

``<crew home>/state/cron/cron.db`` (0600 in a 0700 directory), opened the one way
(:mod:`kirocrew_core.sqlite_db`: WAL, busy timeout, foreign keys, forward-only migrations).

**One writer.** While a host runs, its CronHost is the store's only writer: it holds the
owner lock (:func:`acquire_owner_lock`, a kernel ``flock`` on ``owner.lock``, dropped when
the process dies) for its whole life, and ``kirocrew cron …`` sends changes to it. Without a
host the CLI takes the same lock for one command (:func:`owner_lock`), so a host starting
meanwhile waits for it (a bounded wait, then ``cron_store_busy``): the hand-over. Reads need
no lock: WAL lets a reader see the last commit while the writer works.

Every write is one ``BEGIN IMMEDIATE`` transaction that re-reads what it changes, so even two
processes writing at once (which the lock exists to prevent) never lose an update.

**No secret is stored.** What a run produced (a job's ``last_result`` and ``last_error``, a history
row's ``summary`` and ``error``) passes :func:`kirocrew_core.redaction.redact_secrets` here, in the
store, whoever writes it: the database file never holds a secret value a command printed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home, ownership, sqlite_db
from kirocrew_core.ownership import Ownership

from kirocrew_cron.errors import cron_error
from kirocrew_cron.model import (
    HISTORY_PER_JOB,
    REMOVED_HISTORIES_KEPT,
    Job,
    RemovedJob,
    RunRecord,
    RunStatus,
    Schedule,
    Trigger,
)

if TYPE_CHECKING:
    from kirocrew_core.proc import GroupRecord

STATE_NAME = "cron"
DATABASE_NAME = "cron.db"
LOCK_NAME = "owner.lock"
STATE_DIR_MODE = 0o700
#: How often a waiting writer retries the owner lock.
LOCK_POLL_SECS = 0.05
#: What a CLI command waits for the owner lock before ``cron_store_busy`` (a host's own start waits longer).
CLI_LOCK_WAIT_SECS = 10.0
INTERRUPTED_ERROR = "host restarted during the run"

_STATUSES = ("running", "success", "failure", "timeout", "cancelled", "denied", "missed")
_TRIGGERS = ("scheduled", "manual", "catch-up")


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _flag(column: str, default: int = 0) -> str:
    return f"{column} INTEGER NOT NULL DEFAULT {default} CHECK ({column} IN (0, 1))"


# A new Job field needs a new migration (appended here): a schema is never derived from the code,
# so an old database always reads the same. test_store checks every Job field has its column.
_V1 = [
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    f"""CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        schedule_kind TEXT NOT NULL CHECK (schedule_kind IN ('every', 'at', 'cron')),
        every_secs INTEGER,
        at_ts REAL,
        cron_expr TEXT,
        message TEXT NOT NULL DEFAULT '',
        command TEXT NOT NULL DEFAULT '',
        owner TEXT NOT NULL,
        timezone TEXT NOT NULL DEFAULT '',
        skip_dates_json TEXT NOT NULL DEFAULT '[]',
        {_flag("strict_schedule")},
        catch_up TEXT NOT NULL CHECK (catch_up IN ('skip', 'once', 'all')),
        catch_up_max INTEGER NOT NULL,
        agent TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL DEFAULT '',
        authority TEXT NOT NULL,
        workspace TEXT NOT NULL DEFAULT '',
        {_flag("persistent_session", 1)},
        {_flag("minimal_context")},
        {_flag("silent")},
        timeout INTEGER NOT NULL DEFAULT 0,
        timeout_secs INTEGER NOT NULL,
        {_flag("delete_after_run")},
        {_flag("user_paused")},
        {_flag("auto_paused")},
        created_ts REAL NOT NULL,
        updated_ts REAL NOT NULL,
        last_due_ts REAL,
        last_run_ts REAL,
        last_status TEXT NOT NULL DEFAULT '' CHECK (last_status IN ('', 'ok', 'error')),
        last_error TEXT NOT NULL DEFAULT '',
        last_result TEXT NOT NULL DEFAULT '',
        consecutive_failures INTEGER NOT NULL DEFAULT 0,
        conversation_id TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX jobs_by_owner ON jobs (owner, created_ts)",
    # AUTOINCREMENT: a record id is never reused, so a finish_run after a prune cannot hit another row.
    f"""CREATE TABLE history (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        trigger TEXT NOT NULL CHECK (trigger IN ({_in(_TRIGGERS)})),
        status TEXT NOT NULL CHECK (status IN ({_in(_STATUSES)})),
        started_at REAL NOT NULL,
        due_ts REAL,
        finished_at REAL,
        summary TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        conversation_id TEXT NOT NULL DEFAULT '',
        run_id TEXT NOT NULL DEFAULT '',
        missed INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX history_by_job ON history (job_id, id)",
    "CREATE INDEX history_by_status ON history (status)",
    # Which entries of an imported crons.json became which job: importing again never duplicates, and a
    # job the person removed after an import does not come back with the next one.
    """CREATE TABLE imports (
        source_id TEXT PRIMARY KEY,
        job_id TEXT NOT NULL,
        imported_at REAL NOT NULL
    )""",
]
# A command run's process group, recorded while it runs (its id and its leader's start, proc.GroupRecord): a
# host that starts after one died kills what the dead host's run left (service._recover_runs).
_V2 = [
    "ALTER TABLE history ADD COLUMN pgid INTEGER",
    "ALTER TABLE history ADD COLUMN leader_start TEXT NOT NULL DEFAULT ''",
]
# A one-shot's history outlives the job its run removed (issue 28): the history table is rebuilt without its
# cascading reference to jobs (SQLite cannot drop one in place), and a removed one-shot leaves its id, name and
# owner in removed_jobs, so its history is still answered by id, to its owner only. The sequence row is carried
# over first, so a record id stays never reused.
_V3 = [
    f"""CREATE TABLE history_v3 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL,
        trigger TEXT NOT NULL CHECK (trigger IN ({_in(_TRIGGERS)})),
        status TEXT NOT NULL CHECK (status IN ({_in(_STATUSES)})),
        started_at REAL NOT NULL,
        due_ts REAL,
        finished_at REAL,
        summary TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        conversation_id TEXT NOT NULL DEFAULT '',
        run_id TEXT NOT NULL DEFAULT '',
        missed INTEGER NOT NULL DEFAULT 0,
        pgid INTEGER,
        leader_start TEXT NOT NULL DEFAULT ''
    )""",
    "INSERT INTO sqlite_sequence (name, seq) SELECT 'history_v3', seq FROM sqlite_sequence WHERE name = 'history'",
    "INSERT INTO history_v3 SELECT id, job_id, trigger, status, started_at, due_ts, finished_at, summary, error,"
    " conversation_id, run_id, missed, pgid, leader_start FROM history",
    "DROP TABLE history",
    "ALTER TABLE history_v3 RENAME TO history",
    "CREATE INDEX history_by_job ON history (job_id, id)",
    "CREATE INDEX history_by_status ON history (status)",
    """CREATE TABLE removed_jobs (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        owner TEXT NOT NULL,
        removed_at REAL NOT NULL
    )""",
    "CREATE INDEX removed_jobs_by_time ON removed_jobs (removed_at, id)",
]
MIGRATIONS: list[list[str]] = [_V1, _V2, _V3]

_SCHEDULE_COLUMNS = ("schedule_kind", "every_secs", "at_ts", "cron_expr")
_BOOL_FIELDS = frozenset(f.name for f in dataclasses.fields(Job) if f.type in ("bool", bool))
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_UPDATABLE = frozenset(_JOB_FIELDS) - {"id"}
_JOB_COLUMNS = tuple(c for name in _JOB_FIELDS for c in (
    _SCHEDULE_COLUMNS if name == "schedule" else ("skip_dates_json",) if name == "skip_dates" else (name,)))


# -- where it lives, and who writes -----------------------------------------------------------------

def state_directory() -> Path:
    """``<crew home>/state/cron``, created owner-only (0700) and tightened if it exists."""
    directory = home.state_dir(STATE_NAME)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=STATE_DIR_MODE)
        if (directory.stat().st_mode & 0o777) != STATE_DIR_MODE:
            directory.chmod(STATE_DIR_MODE)
    except OSError as exc:
        raise cron_error("cron_store_unusable", f"cannot create {directory}: {exc.strerror or exc}") from exc
    return directory


def database_path() -> Path:
    return home.state_dir(STATE_NAME) / DATABASE_NAME


def lock_path() -> Path:
    return home.state_dir(STATE_NAME) / LOCK_NAME


def acquire_owner_lock(wait: float, path: Path | None = None) -> Ownership:
    """Become the store's one writer, waiting up to ``wait`` seconds for the current one to finish.

    The host holds the result for its life (release it at stop); a CLI command uses
    :func:`owner_lock`. ``cron_store_busy`` names the holder's pid after the wait.
    """
    if path is None:
        path = state_directory() / LOCK_NAME
    deadline = time.monotonic() + max(0.0, wait)
    while True:
        try:
            return ownership.acquire(path)
        except ownership.OwnershipHeldError as held:
            if time.monotonic() >= deadline:
                raise cron_error("cron_store_busy", f"cron store busy, please retry (it is held by pid "
                                                    f"{held.owner})") from None
        except OSError as exc:
            raise cron_error("cron_store_unusable", f"cannot open {path}: {exc.strerror or exc}") from exc
        time.sleep(LOCK_POLL_SECS)


@contextlib.contextmanager
def owner_lock(wait: float | None = None, path: Path | None = None) -> Iterator[Ownership]:
    """The owner lock for the length of a ``with`` block (a CLI command working without a host).

    ``wait`` defaults to :data:`CLI_LOCK_WAIT_SECS`.
    """
    held = acquire_owner_lock(CLI_LOCK_WAIT_SECS if wait is None else wait, path)
    try:
        yield held
    finally:
        held.release()


# -- rows and values ------------------------------------------------------------------------------

def _job_values(job: Job) -> tuple[Any, ...]:
    values: list[Any] = []
    for name in _JOB_FIELDS:
        value = getattr(job, name)
        if name == "schedule":
            values += [value.kind, value.every_secs, value.at_ts, value.cron_expr]
        elif name == "skip_dates":
            values.append(json.dumps(list(value)))
        elif name in _BOOL_FIELDS:
            values.append(int(bool(value)))
        else:
            values.append(value)
    return tuple(values)


def _job(row: sqlite3.Row) -> Job:
    fields: dict[str, Any] = {}
    for name in _JOB_FIELDS:
        if name == "schedule":
            fields[name] = Schedule(row["schedule_kind"], row["every_secs"], row["at_ts"], row["cron_expr"])
        elif name == "skip_dates":
            fields[name] = tuple(json.loads(row["skip_dates_json"]))
        elif name in _BOOL_FIELDS:
            fields[name] = bool(row[name])
        else:
            fields[name] = row[name]
    return Job(**fields)


def _record(row: sqlite3.Row) -> RunRecord:
    return RunRecord(id=row["id"], job_id=row["job_id"], trigger=row["trigger"], status=row["status"],
                     started_at=row["started_at"], due_ts=row["due_ts"], finished_at=row["finished_at"],
                     summary=row["summary"], error=row["error"], conversation_id=row["conversation_id"],
                     run_id=row["run_id"], missed=row["missed"])


#: The job fields that hold what a run produced.
_RESULT_FIELDS = ("last_result", "last_error")


def _redacted(text: str) -> str:
    from kirocrew_core.redaction import redact_secrets

    return redact_secrets(text) if text else text


def _problem(exc: sqlite_db.DatabaseProblem, path: Path) -> Exception:
    if exc.kind == "too_new":
        return cron_error("cron_store_unusable", f"{path}: {exc}; it was left unchanged (upgrade kirocrew-cron)")
    return cron_error("cron_store_unusable", str(exc))


def _check_caps(db: sqlite3.Connection, owner: str, *, moving_session_job: bool | None = None) -> None:
    """``session_jobs_full`` or ``jobs_full`` when ``owner`` may own no more jobs (the limits of :mod:`.model`).

    A session is bounded by its own cap and by the sessions' share; everyone by the total. The
    sessions' share is well under the total, so the person always has room sessions cannot take.
    ``moving_session_job`` (an adoption: True when the job already counts in the sessions' share,
    False when it is the person's): the job exists already, so the total does not grow.
    """
    from kirocrew_cron import model

    if owner != model.PERSON:
        own = db.execute("SELECT COUNT(*) FROM jobs WHERE owner = ?", (owner,)).fetchone()[0]
        if own >= model.MAX_JOBS_PER_SESSION:
            raise cron_error("session_jobs_full", f"this session owns {own} cron jobs, the most one session may "
                                                  f"({model.MAX_JOBS_PER_SESSION}): remove one of its jobs first")
        sessions = db.execute("SELECT COUNT(*) FROM jobs WHERE owner != ?", (model.PERSON,)).fetchone()[0]
        if sessions >= model.MAX_SESSION_JOBS and not moving_session_job:
            raise cron_error("jobs_full", f"sessions own {sessions} cron jobs, the most sessions may together "
                                          f"({model.MAX_SESSION_JOBS}): the person removes some with kirocrew cron")
    if moving_session_job is not None:
        return
    total = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    if total >= model.MAX_JOBS:
        raise cron_error("jobs_full", f"the cron store holds {total} jobs, the most it keeps ({model.MAX_JOBS}): "
                                      "remove some first (kirocrew cron remove)")


def _drop_old_removed(db: sqlite3.Connection) -> None:
    """Keep the history of the newest :data:`~kirocrew_cron.model.REMOVED_HISTORIES_KEPT` removed one-shots."""
    old = "SELECT id FROM removed_jobs ORDER BY removed_at DESC, id DESC LIMIT -1 OFFSET ?"
    db.execute(f"DELETE FROM history WHERE job_id IN ({old})", (REMOVED_HISTORIES_KEPT,))
    db.execute(f"DELETE FROM removed_jobs WHERE id IN ({old})", (REMOVED_HISTORIES_KEPT,))


class CronStore:
    """Jobs and history. Thread-safe: one connection, every operation under one lock (writes are short)."""

    def __init__(self, path: Path | None = None) -> None:
        """Open (creating 0600 and migrating) the database at ``path`` (default :func:`database_path`)."""
        if path is None:
            path = state_directory() / DATABASE_NAME
        self.path = path
        self._lock = threading.Lock()
        try:
            sqlite_db.ensure_private_file(path)
        except OSError as exc:
            raise cron_error("cron_store_unusable", f"cannot open {path}: {exc.strerror or exc}") from exc
        try:
            self._conn = sqlite_db.connect(path)
        except sqlite_db.DatabaseProblem as exc:
            raise _problem(exc, path) from exc
        try:
            sqlite_db.migrate(self._conn, MIGRATIONS)
        except sqlite_db.DatabaseProblem as exc:
            self._conn.close()
            raise _problem(exc, path) from exc
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise cron_error("cron_store_unusable", f"{path}: {exc}") from exc
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def open(cls, path: Path | None = None) -> CronStore:
        """The store at ``path`` (default: the crew state's), created or migrated; ``cron_store_unusable``."""
        return cls(path)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> CronStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock is taken up front, so a read-modify-write never races."""
        with sqlite_db.immediate(self._conn, self._lock) as conn:
            yield conn

    # -- jobs --------------------------------------------------------------------------------------

    def new_id(self) -> str:
        """8 random hex digits no job, imported entry or removed one-shot (whose history is kept) uses."""
        while True:
            candidate = secrets.token_hex(4)
            if self.id_free(candidate):
                return candidate

    def id_free(self, job_id: str) -> bool:
        """Whether a new job may take ``job_id``: no job has it, no import gave it, no kept history names it."""
        with self._read() as db:
            return db.execute("SELECT 1 FROM jobs WHERE id = ? UNION ALL SELECT 1 FROM imports WHERE job_id = ?"
                              " UNION ALL SELECT 1 FROM removed_jobs WHERE id = ?",
                              (job_id, job_id, job_id)).fetchone() is None

    def add(self, job: Job, *, capped: bool = False) -> Job:
        """Insert ``job`` as given (its id must be free: ValueError otherwise, a programming error).

        ``capped``: first check, in the same transaction, that its owner may own one more job
        (:func:`_check_caps`); a refusal inserts nothing. Its results are stored redacted.
        """
        job = dataclasses.replace(job, last_result=_redacted(job.last_result), last_error=_redacted(job.last_error))
        columns = ", ".join(_JOB_COLUMNS)
        marks = ", ".join("?" for _ in _JOB_COLUMNS)
        try:
            with self._write() as db:
                if capped:
                    _check_caps(db, job.owner)
                db.execute(f"INSERT INTO jobs ({columns}) VALUES ({marks})", _job_values(job))
        except sqlite3.IntegrityError as exc:
            raise ValueError(f"cannot store job {job.id!r}: {exc}") from exc
        return job

    def get(self, job_id: str) -> Job | None:
        with self._read() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _job(row)

    def jobs(self, owner: str | None = None) -> list[Job]:
        """Every job (``owner`` None), the person's (``""``), or one owner's; oldest first."""
        with self._read() as db:
            if owner is None:
                rows = db.execute("SELECT * FROM jobs ORDER BY created_ts, id").fetchall()
            else:
                rows = db.execute("SELECT * FROM jobs WHERE owner = ? ORDER BY created_ts, id", (owner,)).fetchall()
        return [_job(row) for row in rows]

    def update(self, job_id: str, **changes: Any) -> Job:
        """Apply ``changes`` (Job field names) in one transaction; ``updated_ts`` is set (now, unless given).

        An unknown field is a ValueError (a programming error); an unknown id ``job_not_found``.
        """
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise ValueError(f"not a changeable job field: {', '.join(sorted(unknown))}")
        if "skip_dates" in changes:
            changes["skip_dates"] = tuple(changes["skip_dates"])
        for name in _RESULT_FIELDS:
            if name in changes:
                changes[name] = _redacted(changes[name])
        changes.setdefault("updated_ts", time.time())
        assignments = ", ".join(f"{c} = ?" for c in _JOB_COLUMNS if c != "id")
        with self._write() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise cron_error("job_not_found", f"job not found: {job_id}")
            job = dataclasses.replace(_job(row), **changes)
            db.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*_job_values(job)[1:], job_id))
        return job

    def remove(self, job_id: str, *, keep_history: bool = False) -> Job | None:
        """Delete the job and its history; the job as it was, or None when there was none.

        ``keep_history`` (a one-shot its run removed): the history stays, answered by id to the job's
        owner (:meth:`removed_job`); the newest :data:`~kirocrew_cron.model.REMOVED_HISTORIES_KEPT`
        removed jobs keep theirs, each bounded like any job's.
        """
        with self._write() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
            if keep_history:
                db.execute("INSERT OR REPLACE INTO removed_jobs (id, name, owner, removed_at) VALUES (?, ?, ?, ?)",
                           (job_id, row["name"], row["owner"], time.time()))
                _drop_old_removed(db)
            else:
                db.execute("DELETE FROM history WHERE job_id = ?", (job_id,))
        return _job(row)

    def remove_owned(self, owner: str | None) -> int:
        """Delete one owner's jobs (``None``: every job) with their history; how many."""
        with self._write() as db:
            if owner is None:
                db.execute("DELETE FROM history WHERE job_id IN (SELECT id FROM jobs)")
                return db.execute("DELETE FROM jobs").rowcount
            db.execute("DELETE FROM history WHERE job_id IN (SELECT id FROM jobs WHERE owner = ?)", (owner,))
            return db.execute("DELETE FROM jobs WHERE owner = ?", (owner,)).rowcount

    def removed_job(self, job_id: str) -> RemovedJob | None:
        """The one-shot ``job_id`` whose run removed it and whose history is kept, or None."""
        with self._read() as db:
            row = db.execute("SELECT * FROM removed_jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else RemovedJob(row["id"], row["name"], row["owner"], row["removed_at"])

    def adopt(self, job_id: str, owner: str, **changes: Any) -> Job:
        """Give ``job_id`` to ``owner`` with ``changes`` (Job fields), in one transaction that first checks the
        new owner may own one more job (:func:`_check_caps`; a job that moves between sessions does not
        count twice against the sessions' share). ``job_not_found`` for an unknown id."""
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise ValueError(f"not a changeable job field: {', '.join(sorted(unknown))}")
        from kirocrew_cron.model import PERSON

        changes.setdefault("updated_ts", time.time())
        assignments = ", ".join(f"{c} = ?" for c in _JOB_COLUMNS if c != "id")
        with self._write() as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise cron_error("job_not_found", f"job not found: {job_id}")
            current = _job(row)
            if owner != current.owner and owner != PERSON:
                _check_caps(db, owner, moving_session_job=current.owner != PERSON)
            job = dataclasses.replace(current, owner=owner, **changes)
            db.execute(f"UPDATE jobs SET {assignments} WHERE id = ?", (*_job_values(job)[1:], job_id))
        return job

    # -- history -----------------------------------------------------------------------------------

    def _insert_record(self, db: sqlite3.Connection, job_id: str, trigger: Trigger, status: RunStatus,
                       started_at: float, **fields: Any) -> RunRecord:
        if db.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is None:
            raise cron_error("job_not_found", f"job not found: {job_id}")  # only a job that exists runs
        record = RunRecord(id=0, job_id=job_id, trigger=trigger, status=status, started_at=started_at, **fields)
        values = dataclasses.asdict(record)
        del values["id"]  # the process columns are set by record_process, while the run goes on
        cursor = db.execute(f"INSERT INTO history ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                            tuple(values.values()))
        # Keep the newest HISTORY_PER_JOB rows; a run still going is never dropped.
        db.execute("DELETE FROM history WHERE job_id = ? AND status != 'running' AND id NOT IN "
                   "(SELECT id FROM history WHERE job_id = ? ORDER BY id DESC LIMIT ?)",
                   (job_id, job_id, HISTORY_PER_JOB))
        return dataclasses.replace(record, id=int(cursor.lastrowid or 0))

    def start_run(self, job_id: str, trigger: Trigger, *, due_ts: float | None, started_at: float,
                  conversation_id: str = "", run_id: str = "") -> RunRecord:
        """A ``running`` history row for a run that starts now (``job_not_found`` if the job is gone)."""
        with self._write() as db:
            return self._insert_record(db, job_id, trigger, "running", started_at, due_ts=due_ts,
                                       conversation_id=conversation_id, run_id=run_id)

    def finish_run(self, record_id: int, status: RunStatus, *, finished_at: float, summary: str = "",
                   error: str = "", conversation_id: str | None = None, run_id: str | None = None
                   ) -> RunRecord | None:
        """End a run's row; None when it is gone (its job was removed while it ran)."""
        summary, error = _redacted(summary), _redacted(error)
        with self._write() as db:
            db.execute("UPDATE history SET status = ?, finished_at = ?, summary = ?, error = ?,"
                       " conversation_id = COALESCE(?, conversation_id), run_id = COALESCE(?, run_id) WHERE id = ?",
                       (status, finished_at, summary, error, conversation_id, run_id, record_id))
            row = db.execute("SELECT * FROM history WHERE id = ?", (record_id,)).fetchone()
        return None if row is None else _record(row)

    def record_missed(self, job_id: str, *, due_ts: float, count: int, at: float) -> RunRecord:
        """``count`` due instants (the last at ``due_ts``) that were not run: status missed, trigger catch-up."""
        with self._write() as db:
            return self._insert_record(db, job_id, "catch-up", "missed", at, due_ts=due_ts, finished_at=at,
                                       missed=count)

    def record(self, job_id: str, trigger: Trigger, status: RunStatus, *, started_at: float,
               due_ts: float | None = None, error: str = "", summary: str = "") -> RunRecord:
        """A finished row in one step (a refused fire: ``denied``)."""
        error, summary = _redacted(error), _redacted(summary)
        with self._write() as db:
            return self._insert_record(db, job_id, trigger, status, started_at, due_ts=due_ts,
                                       finished_at=started_at, error=error, summary=summary)

    def job_of_conversation(self, conversation_id: str) -> str | None:
        """The job whose persistent conversation, or one of whose recorded runs, is ``conversation_id``."""
        if not conversation_id:
            return None
        with self._read() as db:
            row = db.execute("SELECT id FROM jobs WHERE conversation_id = ? UNION ALL"
                             " SELECT job_id FROM history WHERE conversation_id = ? LIMIT 1",
                             (conversation_id, conversation_id)).fetchone()
        return str(row[0]) if row else None

    def history(self, job_id: str, limit: int = 50) -> list[RunRecord]:
        """The job's newest ``limit`` rows, newest first."""
        with self._read() as db:
            rows = db.execute("SELECT * FROM history WHERE job_id = ? ORDER BY id DESC LIMIT ?",
                              (job_id, max(0, limit))).fetchall()
        return [_record(row) for row in rows]

    def running(self) -> list[RunRecord]:
        with self._read() as db:
            rows = db.execute("SELECT * FROM history WHERE status = 'running' ORDER BY id").fetchall()
        return [_record(row) for row in rows]

    def record_process(self, record_id: int, group: GroupRecord) -> None:
        """Remember the process group a running command started, so the next host can end it if this one dies."""
        with self._write() as db:
            db.execute("UPDATE history SET pgid = ?, leader_start = ? WHERE id = ? AND status = 'running'",
                       (group.pgid, group.leader_start, record_id))

    def running_processes(self) -> list[tuple[RunRecord, GroupRecord]]:
        """The ``running`` rows with a recorded process group, oldest first (a host's start looks at these)."""
        from kirocrew_core.proc import GroupRecord

        with self._read() as db:
            rows = db.execute("SELECT * FROM history WHERE status = 'running' AND pgid IS NOT NULL"
                              " AND leader_start != '' ORDER BY id").fetchall()
        return [(_record(row), GroupRecord(int(row["pgid"]), str(row["leader_start"]))) for row in rows]

    def interrupt_running(self, at: float, *, keep: Collection[int] = (), error: str = INTERRUPTED_ERROR) -> int:
        """Rows left ``running`` by a host that died become failures saying ``error``, but those in ``keep``;
        how many (call at host start, lock held)."""
        kept = tuple(keep)
        marks = ", ".join("?" for _ in kept)
        with self._write() as db:
            return db.execute("UPDATE history SET status = 'failure', finished_at = ?, error = ?"
                              f" WHERE status = 'running'{f' AND id NOT IN ({marks})' if kept else ''}",
                              (at, error, *kept)).rowcount

    # -- meta and imports --------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        with self._read() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as db:
            db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = ?",
                       (key, value, value))

    def imported_as(self, source_id: str) -> str | None:
        """The job an imported entry with this id became (even if that job was removed since), or None."""
        with self._read() as db:
            row = db.execute("SELECT job_id FROM imports WHERE source_id = ?", (source_id,)).fetchone()
        return None if row is None else str(row["job_id"])

    def add_imported(self, job: Job, source_id: str, at: float) -> bool:
        """Insert an imported job and remember its source id, in one transaction; False if already imported.

        Bounded like any job of its owner (:func:`_check_caps`: ``jobs_full`` past the total).
        """
        job = dataclasses.replace(job, last_result=_redacted(job.last_result), last_error=_redacted(job.last_error))
        columns = ", ".join(_JOB_COLUMNS)
        marks = ", ".join("?" for _ in _JOB_COLUMNS)
        with self._write() as db:
            if db.execute("SELECT 1 FROM imports WHERE source_id = ?", (source_id,)).fetchone() is not None:
                return False
            _check_caps(db, job.owner)
            db.execute(f"INSERT INTO jobs ({columns}) VALUES ({marks})", _job_values(job))
            db.execute("INSERT INTO imports (source_id, job_id, imported_at) VALUES (?, ?, ?)",
                       (source_id, job.id, at))
        return True

    def data_version(self) -> int:
        """A number that changes when another connection (another process) committed a change."""
        with self._read() as db:
            return int(db.execute("PRAGMA data_version").fetchone()[0])
