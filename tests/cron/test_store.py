"""The cron store on real SQLite files, the owner lock between real processes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
import pytest
from kirocrew_core.errors import KirocrewError

from kirocrew_cron import store as store_module
from kirocrew_cron.model import HISTORY_PER_JOB, PERSON, Job, Schedule
from kirocrew_cron.store import CronStore, acquire_owner_lock, owner_lock


def _job(job_id: str = "0a1b2c3d", **fields: object) -> Job:
    base = Job(id=job_id, name="nightly", schedule=Schedule("every", every_secs=3600), message="check the build",
               created_ts=1_000.0, updated_ts=1_000.0)
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def _every_field_set() -> Job:
    """A job whose every field differs from its default, so a column that is not stored shows up.

    (A real job has a message or a command, never both: the store keeps what it is given.)
    """
    return Job(id="deadbeef", name="all fields", schedule=Schedule("cron", cron_expr="0 9 * * 1-5"),
               message="check", command="echo hi", owner="conversation:conv_1", timezone="Europe/Paris",
               skip_dates=("2026-12-24", "2026-12-25"), strict_schedule=True, catch_up="all", catch_up_max=3,
               agent="reviewer", model="claude-sonnet-4", authority="sandbox", workspace="/srv/project",
               persistent_session=False, minimal_context=True, silent=True, timeout=60, timeout_secs=600,
               delete_after_run=True, user_paused=True, auto_paused=True, created_ts=1.5, updated_ts=2.5,
               last_due_ts=3.5, last_run_ts=4.5, last_status="error", last_error="boom", last_result="out",
               consecutive_failures=4, conversation_id="conv_9")


@pytest.fixture
def store() -> Iterator[CronStore]:
    with CronStore.open() as opened:
        yield opened


def _code(exc: pytest.ExceptionInfo[KirocrewError]) -> str:
    return exc.value.code


def test_every_job_field_survives_a_round_trip_through_a_reopened_store() -> None:
    job = _every_field_set()
    defaults = Job(id="x", name="x", schedule=Schedule("every", every_secs=60))
    unchanged = [f.name for f in dataclasses.fields(Job) if getattr(job, f.name) == getattr(defaults, f.name)]
    assert unchanged == [], "the fixture must set every field"
    with CronStore.open() as first:
        first.add(job)
    with CronStore.open() as second:
        assert second.get(job.id) == job
        assert second.jobs() == [job]


def test_the_store_is_private_to_the_owner() -> None:
    with CronStore.open() as opened:
        path = opened.path
    assert path == store_module.database_path()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_jobs_are_listed_per_owner_oldest_first(store: CronStore) -> None:
    mine = store.add(_job("00000001", owner=PERSON, created_ts=3))
    theirs = store.add(_job("00000002", owner="conversation:conv_a", created_ts=1))
    older = store.add(_job("00000003", owner=PERSON, created_ts=2))
    assert store.jobs() == [theirs, older, mine]
    assert store.jobs(PERSON) == [older, mine]
    assert store.jobs("conversation:conv_a") == [theirs]
    assert store.jobs("conversation:conv_b") == []


def test_new_ids_are_eight_hex_digits_and_never_a_used_one(store: CronStore) -> None:
    ids = {store.add(_job(store.new_id())).id for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 8 and int(i, 16) >= 0 for i in ids)


def test_adding_a_taken_id_is_refused_and_keeps_the_first(store: CronStore) -> None:
    store.add(_job(name="first"))
    with pytest.raises(ValueError):
        store.add(_job(name="second"))
    assert [j.name for j in store.jobs()] == ["first"]


def test_update_changes_only_the_given_fields_and_stamps_updated_ts(store: CronStore) -> None:
    store.add(_job())
    updated = store.update("0a1b2c3d", name="renamed", skip_dates=["2027-01-01"],
                           schedule=Schedule("cron", cron_expr="*/5 * * * *"))
    assert updated == store.get("0a1b2c3d")
    assert (updated.name, updated.skip_dates, updated.schedule.cron_expr) == ("renamed", ("2027-01-01",),
                                                                             "*/5 * * * *")
    assert updated.message == "check the build"
    assert updated.updated_ts > 1_000.0
    assert store.update("0a1b2c3d", updated_ts=5.0).updated_ts == 5.0


def test_update_refuses_an_unknown_field_or_id_and_changes_nothing(store: CronStore) -> None:
    job = store.add(_job())
    with pytest.raises(ValueError, match="colour"):
        store.update(job.id, name="x", colour="red")
    with pytest.raises(ValueError, match="id"):
        store.update(job.id, id="ffffffff")
    with pytest.raises(KirocrewError) as missing:
        store.update("ffffffff", name="x")
    assert _code(missing) == "job_not_found"
    assert str(missing.value) == "job not found: ffffffff"
    assert store.jobs() == [job]


def test_removing_a_job_removes_its_history(store: CronStore) -> None:
    job = store.add(_job())
    store.start_run(job.id, "manual", due_ts=None, started_at=10.0)
    assert store.remove(job.id) == job
    assert store.remove(job.id) is None
    assert store.history(job.id) == []
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM history").fetchone()[0] == 0


def test_a_one_shot_its_run_removed_keeps_its_history_and_its_id_is_never_given_again(
        store: CronStore, monkeypatch: pytest.MonkeyPatch) -> None:
    job = store.add(_job(owner="conversation:conv_a"))
    run = store.start_run(job.id, "scheduled", due_ts=5.0, started_at=10.0)
    store.finish_run(run.id, "success", finished_at=11.0, summary="done")
    assert store.remove(job.id, keep_history=True) == job
    assert store.get(job.id) is None
    assert [r.summary for r in store.history(job.id)] == ["done"]
    gone = store.removed_job(job.id)
    assert gone is not None and (gone.id, gone.name, gone.owner) == (job.id, "nightly", "conversation:conv_a")
    assert not store.id_free(job.id)
    with pytest.raises(KirocrewError) as refused:  # no run starts for a job that is gone
        store.start_run(job.id, "manual", due_ts=None, started_at=12.0)
    assert _code(refused) == "job_not_found"
    monkeypatch.setattr(store_module, "REMOVED_HISTORIES_KEPT", 2)  # the bound: the newest removed keep theirs
    for index in range(3):
        other = store.add(_job(f"0000000{index}"))
        store.record(other.id, "manual", "denied", started_at=20.0 + index)
        time.sleep(0.01)
        store.remove(other.id, keep_history=True)
    assert store.removed_job(job.id) is None and store.history(job.id) == []
    assert store.removed_job("00000000") is None and store.history("00000000") == []
    assert [store.removed_job(i) is not None for i in ("00000001", "00000002")] == [True, True]
    assert len(store.history("00000002")) == 1


def test_a_version_2_store_migrates_keeping_its_history_and_never_reusing_a_record_id() -> None:
    path = store_module.state_directory() / store_module.DATABASE_NAME
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
        for version, statements in enumerate(store_module.MIGRATIONS[:2], start=1):
            for statement in statements:
                raw.execute(statement)
            raw.execute("INSERT INTO schema_version VALUES (?, 'then')", (version,))
        raw.execute("INSERT INTO jobs (id, name, schedule_kind, every_secs, owner, catch_up, catch_up_max, authority,"
                    " timeout_secs, created_ts, updated_ts) VALUES ('0a1b2c3d', 'n', 'every', 3600, '', 'once', 10,"
                    " 'unrestricted', 1800, 1, 1)")
        for status in ("success", "failure", "success"):
            raw.execute("INSERT INTO history (job_id, trigger, status, started_at) VALUES ('0a1b2c3d', 'manual', ?,"
                        " 1)", (status,))
        raw.execute("DELETE FROM history WHERE id = 3")  # the newest row pruned: id 3 was used once
    raw.close()
    with CronStore(path) as migrated:
        assert [r.status for r in migrated.history("0a1b2c3d")] == ["failure", "success"]
        added = migrated.record("0a1b2c3d", "manual", "denied", started_at=2.0)
        assert added.id == 4
        assert migrated.remove("0a1b2c3d", keep_history=True) is not None
        assert len(migrated.history("0a1b2c3d")) == 3


def test_remove_owned_removes_one_owners_jobs_or_every_job(store: CronStore) -> None:
    store.add(_job("00000001", owner=PERSON))
    store.add(_job("00000002", owner="conversation:conv_a"))
    store.add(_job("00000003", owner="conversation:conv_a"))
    assert store.remove_owned("conversation:conv_b") == 0
    assert store.remove_owned("conversation:conv_a") == 2
    assert [j.id for j in store.jobs()] == ["00000001"]
    store.add(_job("00000004", owner="conversation:conv_c"))
    assert store.remove_owned(None) == 2
    assert store.jobs() == []


def test_a_run_is_recorded_running_then_finished(store: CronStore) -> None:
    job = store.add(_job())
    started = store.start_run(job.id, "scheduled", due_ts=100.0, started_at=101.0, conversation_id="conv_1")
    assert store.running() == [started]
    finished = store.finish_run(started.id, "success", finished_at=103.5, summary="all green", run_id="run_1")
    assert finished is not None
    assert (finished.status, finished.summary, finished.conversation_id, finished.run_id) == (
        "success", "all green", "conv_1", "run_1")
    assert finished.duration_ms == 2500
    assert store.running() == []
    assert store.history(job.id) == [finished]


def test_a_conversation_is_a_jobs_when_it_is_the_jobs_persistent_one_or_a_recorded_runs(store: CronStore) -> None:
    persistent = store.add(_job("00000001", conversation_id="conv_kept"))
    once = store.add(_job("00000002"))
    run = store.start_run(once.id, "manual", due_ts=None, started_at=1.0)
    store.finish_run(run.id, "success", finished_at=2.0, conversation_id="conv_once")
    assert store.job_of_conversation("conv_kept") == persistent.id
    assert store.job_of_conversation("conv_once") == once.id
    assert store.job_of_conversation("conv_person") is None
    assert store.job_of_conversation("") is None  # a run not linked to a conversation names none


def test_finishing_a_run_of_a_removed_job_answers_none(store: CronStore) -> None:
    job = store.add(_job())
    started = store.start_run(job.id, "manual", due_ts=None, started_at=1.0)
    store.remove(job.id)
    assert store.finish_run(started.id, "success", finished_at=2.0) is None


def test_starting_a_run_of_an_unknown_job_is_job_not_found(store: CronStore) -> None:
    with pytest.raises(KirocrewError) as refused:
        store.start_run("ffffffff", "manual", due_ts=None, started_at=1.0)
    assert _code(refused) == "job_not_found"


def test_missed_instants_are_one_catch_up_row(store: CronStore) -> None:
    job = store.add(_job())
    missed = store.record_missed(job.id, due_ts=7200.0, count=2, at=7300.0)
    assert (missed.status, missed.trigger, missed.missed, missed.due_ts) == ("missed", "catch-up", 2, 7200.0)
    denied = store.record(job.id, "scheduled", "denied", started_at=7400.0, error="command refused")
    assert store.history(job.id) == [denied, missed]


def test_history_keeps_the_newest_rows_per_job_and_never_drops_a_running_one(store: CronStore) -> None:
    job = store.add(_job())
    other = store.add(_job("11111111"))
    store.record(other.id, "manual", "success", started_at=0.0)
    running = store.start_run(job.id, "manual", due_ts=None, started_at=0.0)
    for n in range(HISTORY_PER_JOB + 5):
        store.record(job.id, "scheduled", "success", started_at=float(n + 1))
    rows = store.history(job.id, limit=HISTORY_PER_JOB + 10)
    assert len(rows) == HISTORY_PER_JOB + 1
    assert rows[0].started_at == HISTORY_PER_JOB + 5
    assert rows[-1] == running
    assert [r.started_at for r in store.history(job.id, limit=3)] == [float(HISTORY_PER_JOB + 5 - k) for k in range(3)]
    assert len(store.history(other.id)) == 1


def test_a_restarted_host_marks_runs_left_running_as_failures(store: CronStore) -> None:
    job = store.add(_job())
    left = store.start_run(job.id, "scheduled", due_ts=5.0, started_at=6.0)
    assert store.interrupt_running(at=50.0) == 1
    [row] = store.history(job.id)
    assert (row.id, row.status, row.error, row.finished_at) == (left.id, "failure", "host restarted during the run",
                                                                50.0)
    assert store.interrupt_running(at=60.0) == 0


def test_data_version_moves_when_another_connection_commits(store: CronStore) -> None:
    before = store.data_version()
    store.add(_job())
    assert store.data_version() == before, "our own commit is not another's"
    with CronStore.open() as other:
        other.update("0a1b2c3d", name="changed elsewhere")
    assert store.data_version() != before
    assert store.get("0a1b2c3d").name == "changed elsewhere"  # type: ignore[union-attr]


def test_a_store_from_a_newer_version_is_refused_and_left_alone() -> None:
    with CronStore.open() as opened:
        path = opened.path
    with sqlite3.connect(path) as raw:
        raw.execute("INSERT INTO schema_version (version, applied_at) VALUES (99, 'later')")
    before = path.read_bytes()
    with pytest.raises(KirocrewError) as refused:
        CronStore.open()
    assert _code(refused) == "cron_store_unusable"
    assert "99" in str(refused.value)
    assert path.read_bytes() == before


def test_a_file_that_is_not_sqlite_is_refused_untouched() -> None:
    path = store_module.state_directory() / store_module.DATABASE_NAME
    path.write_bytes(b"not a database, just text that is long enough to look like a header" * 20)
    before = path.read_bytes()
    with pytest.raises(KirocrewError) as refused:
        CronStore.open()
    assert _code(refused) == "cron_store_unusable"
    assert path.read_bytes() == before


_WRITER = textwrap.dedent("""
    import sys
    from kirocrew_cron.model import Job, Schedule
    from kirocrew_cron.store import CronStore
    tag, field = sys.argv[1], sys.argv[2]
    store = CronStore.open()
    for n in range(40):
        store.add(Job(id=f"{tag}{n:07x}", name=tag, schedule=Schedule("every", every_secs=60), message="m"))
        store.update("00000000", **{field: f"{tag}-{n}"})
    store.close()
""")


def test_two_processes_writing_at_once_lose_no_update(store: CronStore) -> None:
    store.add(_job("00000000"))
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, tag, field])
               for tag, field in (("a", "name"), ("b", "last_result"))]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    shared = store.get("00000000")
    assert shared is not None
    assert (shared.name, shared.last_result) == ("a-39", "b-39")
    assert len(store.jobs()) == 81


_HOLDER = textwrap.dedent("""
    import sys, time
    from kirocrew_cron.store import acquire_owner_lock
    held = acquire_owner_lock(wait=0)
    print("held", flush=True)
    time.sleep(float(sys.argv[1]))
    held.release()
    print("released", flush=True)
    time.sleep(60)
""")


@contextlib.contextmanager
def _holder(hold_secs: float) -> Iterator[subprocess.Popen[str]]:
    """A process holding the owner lock for ``hold_secs``; killed, reaped and its pipe closed after the block."""
    with subprocess.Popen([sys.executable, "-c", _HOLDER, str(hold_secs)], stdout=subprocess.PIPE,
                          text=True) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            yield holder
        finally:
            holder.kill()


def test_a_writer_finds_the_store_busy_while_another_process_holds_the_lock() -> None:
    with _holder(60) as holder:
        with pytest.raises(KirocrewError) as busy:
            acquire_owner_lock(wait=0.2)
        assert _code(busy) == "cron_store_busy"
        assert str(holder.pid) in str(busy.value)


def test_a_waiting_writer_gets_the_lock_when_the_holder_hands_it_over() -> None:
    with _holder(0.3):
        started = time.monotonic()
        with owner_lock(wait=10) as held:
            assert held.held
            assert time.monotonic() - started < 10


def test_the_lock_of_a_holder_that_died_is_free_at_once() -> None:
    with _holder(60) as holder:
        holder.kill()
        holder.wait()
    held = acquire_owner_lock(wait=0)
    try:
        assert held.held
        assert store_module.lock_path().read_text().strip() == str(os.getpid())
    finally:
        held.release()


def test_the_state_directory_is_tightened_to_the_owner() -> None:
    directory = store_module.state_directory()
    directory.chmod(0o755)
    store_module.state_directory()
    assert directory.stat().st_mode & 0o777 == 0o700
