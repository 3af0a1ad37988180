"""What a host that died left running, and the next host: in process, a real store, real process groups.

A command run records its process group (its id and its leader's start) with its ``running``
history row; a host starting after one died (:func:`kirocrew_cron.service.recover_runs`) kills a
group whose leader is still the same process, never a reused pid, and holds a job whose leftovers
it cannot end, so no job runs twice at once. The host's death itself (the tie) is in
``test_faults_e2e.py``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kirocrew_core import proc
from kirocrew_core.errors import KirocrewError
from kirocrew_testing.aio import run_bounded

from kirocrew_cron.clock import ManualClock
from kirocrew_cron.model import Schedule
from kirocrew_cron.service import HELD_ENDED_ERROR, KILLED_ERROR, CronHost, recover_runs
from kirocrew_cron.store import INTERRUPTED_ERROR, CronStore

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_host import T0, command_job, settle, started

HOURLY = Schedule("every", every_secs=3600)

T = TypeVar("T")
BOUND_SECS = 60.0


def run(coro: Awaitable[T]) -> T:
    return run_bounded(coro, BOUND_SECS)


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)



@pytest.fixture
def store() -> Iterator[CronStore]:
    with CronStore.open() as opened:
        yield opened


@pytest.fixture
def leftovers() -> Iterator[list[subprocess.Popen[Any]]]:
    """Processes standing for what a dead host's run left; torn down at the end whatever happened."""
    children: list[subprocess.Popen[Any]] = []
    yield children
    for child in children:
        proc.terminate(child, reason="test cleanup")


def _leftover(leftovers: list[subprocess.Popen[Any]], script: str, **kwargs: Any) -> subprocess.Popen[Any]:
    child = proc.spawn(["/bin/sh", "-c", script], env=dict(os.environ), **kwargs)
    leftovers.append(child)
    return child


def _dead_hosts_run(store: CronStore, job_id: str, group: proc.GroupRecord) -> int:
    """A ``running`` row with its process group recorded, as a host that died during the run left it."""
    record = store.start_run(job_id, "manual", due_ts=None, started_at=T0)
    store.record_process(record.id, group)
    return record.id


def _row(store: CronStore, record_id: int) -> tuple[Any, ...]:
    db = sqlite3.connect(store.path)
    try:
        return db.execute("SELECT status, error, pgid, leader_start FROM history WHERE id = ?", (record_id,)).fetchone()
    finally:
        db.close()


def _recorded(store: CronStore, record_id: int) -> bool:
    return _row(store, record_id)[2] is not None


def test_a_running_command_records_its_process_group_with_its_history_row(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "sleep 60", tmp_path, schedule=HOURLY)

    async def main() -> tuple[int, int]:
        host = await started(store, ManualClock(T0))
        record = await host.trigger(job.id)
        await until(lambda: _row(store, record.id)[2] is not None)
        active = host.active_run(job.id)
        assert active is not None and active.process is not None
        pid = active.process.pid
        await host.stop()
        return record.id, pid

    record_id, pid = run(main())
    status, error, pgid, leader_start = _row(store, record_id)
    assert (status, error, pgid) == ("cancelled", "the host stopped during the run", pid)
    assert leader_start and proc.group_ended(proc.GroupRecord(pgid, leader_start))


def test_the_next_host_kills_the_group_a_dead_hosts_run_left_and_the_row_says_so(
        store: CronStore, tmp_path: Path, leftovers: list) -> None:
    job = command_job(store, "sleep 90", tmp_path, schedule=HOURLY)
    left = _leftover(leftovers, "sleep 90 & sleep 90", stdin=proc.DEVNULL)
    group = proc.group_record(left)
    assert group is not None
    record_id = _dead_hosts_run(store, job.id, group)
    other = command_job(store, "echo", tmp_path, schedule=HOURLY, name="no process recorded")
    plain = store.start_run(other.id, "scheduled", due_ts=T0, started_at=T0)  # an agent run, say

    held = recover_runs(store, T0 + 5)

    assert held == [] and proc.group_ended(group)
    assert _row(store, record_id)[:2] == ("failure", KILLED_ERROR)
    assert _row(store, plain.id)[:2] == ("failure", INTERRUPTED_ERROR)

    async def main() -> list[str]:  # the job runs again at once: nothing of the old run is left beside it
        host = await started(store, ManualClock(T0 + 5))
        await host.trigger(job.id)
        await until(lambda: host.active_run(job.id) is not None)
        await host.stop()
        return [record.status for record in store.history(job.id)]

    assert run(main()) == ["cancelled", "failure"]


def test_a_reused_pid_is_never_killed_and_the_run_is_recorded_interrupted(
        store: CronStore, tmp_path: Path, leftovers: list) -> None:
    job = command_job(store, "sleep 90", tmp_path, schedule=HOURLY)
    stranger = _leftover(leftovers, "sleep 90", stdin=proc.DEVNULL)
    group = proc.group_record(stranger)
    assert group is not None
    # The dead host's run had this pid once, but another process holds it now (another start).
    record_id = _dead_hosts_run(store, job.id, proc.GroupRecord(group.pgid, group.leader_start + "7"))

    assert recover_runs(store, T0 + 5) == []

    assert stranger.poll() is None and not proc.group_ended(group)
    assert _row(store, record_id)[:2] == ("failure", INTERRUPTED_ERROR)


def test_what_a_dead_hosts_run_left_but_cannot_be_ended_holds_its_job_until_it_is_gone(
        store: CronStore, tmp_path: Path, leftovers: list, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIROCREW_CRON_REAPER_SECS", "1")
    job = command_job(store, "echo again", tmp_path, schedule=HOURLY)
    left = _leftover(leftovers, "sleep 90 & echo $!; read line")
    assert left.stdout is not None and left.stdin is not None
    straggler = int(left.stdout.readline())
    group = proc.group_record(left)
    assert group is not None
    record_id = _dead_hosts_run(store, job.id, group)
    left.stdin.close()
    left.wait(30)  # its leader is gone, its sleep still runs in the group: not provably the run's, not killed

    [held] = recover_runs(store, T0 + 5)
    assert held.record.id == record_id and _row(store, record_id)[0] == "running"

    async def main() -> None:
        clock = ManualClock(T0 + 5)
        host = CronHost(store, clock)
        host.hold([held])
        await host.start()
        await settle(host)
        assert host.is_running(job.id)
        with pytest.raises(KirocrewError) as refused:
            await host.trigger(job.id)
        assert refused.value.code == "job_running"
        proc.kill_pids([straggler])  # the leftover ends by itself, say
        await until(lambda: proc.group_ended(group))
        await clock.advance(1)  # the reaper's next pass lets the job go
        await until(lambda: not host.is_running(job.id))
        await host.trigger(job.id)
        await settle(host)
        await host.stop()

    run(main())
    assert [(r.status, r.error) for r in reversed(store.history(job.id))] == [
        ("failure", HELD_ENDED_ERROR), ("success", "")]


def test_a_sessions_command_holds_a_session_key_while_it_runs_and_the_persons_none(
        store: CronStore, tmp_path: Path) -> None:
    from kirocrew_core.coretools import identity

    theirs = command_job(store, "sleep 30", tmp_path, schedule=HOURLY, owner="conversation:conv_1")
    mine = command_job(store, "sleep 30", tmp_path, schedule=HOURLY, name="the person's")

    async def main() -> list[int]:
        host = await started(store, ManualClock(T0))
        counts = []
        for job in (mine, theirs):
            record = await host.trigger(job.id)
            await until(functools.partial(_recorded, store, record.id))
            counts.append(identity.registry().live_count())
        await host.stop()
        return counts

    assert run(main()) == [0, 1]  # the session's job alone got a key (the e2e tests show what it acts as)
    assert identity.registry().live_count() == 0  # revoked when its run ended
