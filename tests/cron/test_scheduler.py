"""The scheduler and the runs of jobs, in process: a real store, real ``sh -c`` commands, a clock the test moves.

Each test builds a :class:`CronHost` over the isolated crew home's store with a
:class:`ManualClock`; commands really run (``echo``, ``exit 3``, ``sleep 60``), and moving the
clock is what makes jobs fall due, time out and get reaped. ``settle`` waits until the
scheduler sleeps with nothing left to do and no run is active.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kirocrew_core.errors import KirocrewError

from kirocrew_cron.clock import ManualClock
from kirocrew_cron.model import Job, RunRecord, Schedule
from kirocrew_cron.service import CronHost
from kirocrew_cron.store import CronStore

T = TypeVar("T")
# 2026-03-02 12:00:00 UTC, a Monday
T0 = 1_772_452_800.0
BOUND_SECS = 60.0


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, BOUND_SECS)

    return asyncio.run(bounded())


def command_job(store: CronStore, command: str, workspace: Path, **fields: Any) -> Job:
    fields.setdefault("schedule", Schedule("every", every_secs=60))
    job = Job(id=store.new_id(), name=fields.pop("name", "job"), command=command, workspace=str(workspace),
              created_ts=T0, updated_ts=T0, strict_schedule=True, **fields)
    return store.add(job)


async def settle(host: CronHost) -> None:
    """Until the scheduler sleeps with nothing to re-plan and no run (or catch-up) task is left."""
    while True:
        await asyncio.sleep(0.01)
        if host.scheduler_on and not host.scheduler.idle.is_set():
            continue
        if host.tasks():
            await asyncio.wait(host.tasks())
            continue
        return


async def started(store: CronStore, clock: ManualClock, **kwargs: Any) -> CronHost:
    host = CronHost(store, clock, **kwargs)
    await host.start()
    await settle(host)
    return host


def statuses(store: CronStore, job_id: str) -> list[str]:
    return [record.status for record in reversed(store.history(job_id))]


@pytest.fixture
def store() -> Any:
    with CronStore.open() as opened:
        yield opened


# -- a manual trigger ---------------------------------------------------------------------------------


def test_a_triggered_command_job_runs_in_its_workspace_and_its_output_becomes_the_last_result(
        store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "pwd; echo hi", tmp_path)

    async def main() -> RunRecord:
        host = await started(store, ManualClock(T0))
        first = await host.trigger(job.id)
        assert host.is_running(job.id) and first.status == "running" and first.trigger == "manual"
        await settle(host)
        await host.stop()
        return first

    first = run(main())
    [record] = store.history(job.id)
    assert record.id == first.id and record.status == "success" and record.finished_at is not None
    after = store.get(job.id)
    assert after is not None
    assert after.last_result == f"{tmp_path.resolve()}\nhi" and after.last_status == "ok"
    assert after.last_due_ts is None  # a manual run is no due instant: the schedule is untouched


def test_a_failing_command_is_a_failure_naming_its_exit_status(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "echo oops; exit 3", tmp_path)

    async def main() -> None:
        host = await started(store, ManualClock(T0))
        await host.trigger(job.id)
        await settle(host)
        await host.stop()

    run(main())
    [record] = store.history(job.id)
    assert record.status == "failure" and record.error == "exit status 3: oops"
    after = store.get(job.id)
    assert after is not None and after.consecutive_failures == 1 and after.last_status == "error"


def test_a_job_never_runs_twice_at_once_and_trigger_says_so(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "sleep 60", tmp_path)

    async def main() -> str:
        host = await started(store, ManualClock(T0))
        await host.trigger(job.id)
        with pytest.raises(KirocrewError) as refused:
            await host.trigger(job.id)
        await host.stop()
        return refused.value.code

    assert run(main()) == "job_running"
    assert statuses(store, job.id) == ["cancelled"]  # the stopping host cancelled it and said why
    assert store.history(job.id)[0].error == "the host stopped during the run"


def test_without_its_scheduler_a_host_fires_nothing_and_refuses_a_trigger(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "echo hi", tmp_path)

    async def main() -> tuple[str, str | None]:
        clock = ManualClock(T0)
        host = await started(store, clock, scheduler_on=False)
        with pytest.raises(KirocrewError) as refused:
            await host.trigger(job.id)
        await clock.advance(3600)
        await asyncio.sleep(0.05)
        busy = host.busy()
        await host.stop()
        return refused.value.code, busy

    assert run(main()) == ("scheduler_off", None)
    assert store.history(job.id) == []


def test_triggering_an_unknown_job_is_job_not_found(store: CronStore) -> None:
    async def main() -> str:
        host = await started(store, ManualClock(T0))
        with pytest.raises(KirocrewError) as refused:
            await host.trigger("abcdef12")
        await host.stop()
        return refused.value.code

    assert run(main()) == "job_not_found"


def test_a_restricted_authority_that_cannot_run_refuses_the_fire_and_keeps_the_job(
        store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "echo hi", tmp_path, authority="no_such_authority")

    async def main() -> None:
        host = await started(store, ManualClock(T0))
        await host.trigger(job.id)
        await settle(host)
        await host.stop()

    run(main())
    [record] = store.history(job.id)
    assert record.status == "denied" and record.error.startswith("authority_unavailable: ")
    kept = store.get(job.id)
    assert kept is not None and kept.consecutive_failures == 1
