"""The scheduler and the runs of jobs, in process: a real store, real ``sh -c`` commands, a clock the test moves.

Each test builds a :class:`CronHost` over the isolated crew home's store with a
:class:`ManualClock`; commands really run (``echo``, ``exit 3``, ``sleep 60``), and moving the
clock is what makes jobs fall due, time out and get reaped. ``settle`` waits until the
scheduler sleeps with nothing left to do and no run is active.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kirocrew_core.errors import KirocrewError
from kirocrew_testing.aio import run_bounded

from kirocrew_cron.clock import ManualClock
from kirocrew_cron.model import AUTO_PAUSE_THRESHOLD, Job, RunRecord, Schedule
from kirocrew_cron.runner import ActiveRun, JobRunner, Outcome
from kirocrew_cron.service import CronHost
from kirocrew_cron.store import CronStore

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_host import T0, command_job, settle, started

T = TypeVar("T")
BOUND_SECS = 60.0


def run(coro: Awaitable[T]) -> T:
    return run_bounded(coro, BOUND_SECS)


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
        racing = await asyncio.gather(host.trigger(job.id), host.trigger(job.id), return_exceptions=True)
        assert sorted(type(r).__name__ for r in racing) == ["RunRecord", "ToolRefused"]  # two at once: one runs
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

    async def main() -> str:
        host = await started(store, ManualClock(T0))
        with pytest.raises(KirocrewError) as refused:
            await host.trigger(job.id)  # the one asking hears why; the row records it
        await settle(host)
        await host.stop()
        return refused.value.code

    assert run(main()) == "authority_unavailable"
    [record] = store.history(job.id)
    assert record.status == "denied" and record.error.startswith("authority_unavailable: ")
    kept = store.get(job.id)
    assert kept is not None and kept.consecutive_failures == 1


# -- the schedule -------------------------------------------------------------------------------------


async def at(host: CronHost, clock: ManualClock, when: float) -> None:
    """Move the clock to ``when`` and let everything due by then happen."""
    await clock.set(when)
    await settle(host)


def test_an_interval_job_fires_at_each_due_instant_and_never_between(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "echo tick", tmp_path, schedule=Schedule("every", every_secs=600))

    async def main() -> list[list[str]]:
        clock = ManualClock(T0)
        host = await started(store, clock)
        seen = []
        for when in (T0 + 599, T0 + 600, T0 + 1199, T0 + 1200, T0 + 1500):
            await at(host, clock, when)
            seen.append(statuses(store, job.id))
        await host.stop()
        return seen

    assert run(main()) == [[], ["success"], ["success"], ["success", "success"], ["success", "success"]]
    records = list(reversed(store.history(job.id)))
    assert [r.due_ts for r in records] == [T0 + 600, T0 + 1200]
    assert [r.trigger for r in records] == ["scheduled", "scheduled"]
    after = store.get(job.id)
    assert after is not None and after.last_due_ts == T0 + 1200


def test_next_fire_is_what_the_scheduler_waits_for_and_none_when_paused(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "echo tick", tmp_path, schedule=Schedule("every", every_secs=600))
    paused = command_job(store, "echo tick", tmp_path, user_paused=True)

    async def main() -> tuple[float | None, float | None, float | None, str | None]:
        host = await started(store, ManualClock(T0))
        planned = host.scheduler.planned(job.id)
        result = host.next_fire(job), planned, host.next_fire(paused), host.busy()
        await host.stop()
        return result

    assert run(main()) == (T0 + 600, T0 + 600, None, "1 cron job scheduled")


def test_a_change_re_plans_the_job_without_waiting_for_the_old_plan(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "echo tick", tmp_path, schedule=Schedule("every", every_secs=3600))

    async def main() -> list[str]:
        clock = ManualClock(T0)
        host = await started(store, clock)
        store.update(job.id, schedule=Schedule("every", every_secs=60))
        host.changed(job.id)
        await settle(host)
        await at(host, clock, T0 + 60)
        first = statuses(store, job.id)
        store.update(job.id, user_paused=True)
        host.changed(job.id)
        await at(host, clock, T0 + 600)
        await host.stop()
        return [*first, "|", *statuses(store, job.id)]

    assert run(main()) == ["success", "|", "success"]


def test_a_due_instant_while_the_job_still_runs_is_recorded_missed_not_run_twice(
        store: CronStore, tmp_path: Path) -> None:
    slow = command_job(store, "sleep 60", tmp_path, name="slow")
    quick = command_job(store, "echo quick", tmp_path, name="quick")

    async def main() -> tuple[list[str], list[str], list[str]]:
        clock = ManualClock(T0)
        host = await started(store, clock)
        await clock.set(T0 + 60)
        await until(lambda: statuses(store, quick.id) == ["success"] and host.is_running(slow.id))
        await clock.set(T0 + 120)
        await until(lambda: statuses(store, quick.id) == ["success"] * 2 and len(store.history(slow.id)) == 2)
        running = host.running_jobs()
        await host.stop()
        return running, statuses(store, slow.id), statuses(store, quick.id)

    running, slow_seen, quick_seen = run(main())
    assert running == [slow.id]
    assert slow_seen == ["cancelled", "missed"]  # running at T0+60 (ended by the stop), T0+120 missed
    assert store.history(slow.id)[0].missed == 1 and store.history(slow.id)[0].due_ts == T0 + 120
    assert quick_seen == ["success", "success"]  # the hung job blocked nothing


async def until(condition: Callable[[], bool]) -> None:
    """Until ``condition()`` holds (the test's bound ends a wait that never comes)."""
    while not condition():
        await asyncio.sleep(0.01)


def test_a_run_past_its_deadline_is_cancelled_and_its_process_group_killed(store: CronStore, tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    job = command_job(store, f"sleep 300 & echo $! > {marker}; wait", tmp_path, timeout_secs=30)

    async def main() -> None:
        clock = ManualClock(T0)
        host = await started(store, clock)
        await host.trigger(job.id)
        while not marker.exists() or not marker.read_text().strip():
            await asyncio.sleep(0.01)
        await clock.advance(30)
        await settle(host)
        await host.stop()

    run(main())
    [record] = store.history(job.id)
    assert record.status == "timeout" and record.error == "Timed out after 30s"
    child = int(marker.read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_the_reaper_force_ends_a_run_whose_cancel_did_not_end_it(
        store: CronStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIROCREW_TEST_CRON_REAP_FLOOR_SECS", "0")
    monkeypatch.setenv("KIROCREW_CRON_REAPER_SECS", "1")
    job = command_job(store, "sleep 300", tmp_path, timeout_secs=5)
    real = JobRunner()
    ignored: list[str] = []

    async def stubborn(job: Job, active: ActiveRun) -> Outcome:
        """The real runner, deaf to cancellation: only the reaper's kill can end it."""
        inner = asyncio.ensure_future(real(job, active))
        while True:
            try:
                return await asyncio.shield(inner)
            except asyncio.CancelledError:
                if inner.done():  # the run itself was cancelled (the test's bound, the loop closing): give up
                    raise
                ignored.append("cancel")

    async def main() -> tuple[list[str], bool]:
        clock = ManualClock(T0)
        host = await started(store, clock, runner=stubborn)
        await host.trigger(job.id)
        await until(lambda: (active := host.active_run(job.id)) is not None and active.process is not None)
        await clock.advance(5)  # the deadline: the cancel is ignored
        await asyncio.sleep(0.1)
        before = statuses(store, job.id)
        await clock.advance(31)  # past max(min(5, 86400), floor 0) + 30 s grace: the reaper
        await settle(host)
        still = host.is_running(job.id)
        await host.stop()
        return before, still

    before, still = run(main())
    assert before == ["running"] and ignored and not still
    [record] = store.history(job.id)
    assert record.status == "timeout" and record.error == "Reaped after 36s (exceeded 5s deadline)"


def test_five_failures_in_a_row_pause_the_job_and_a_success_clears_the_count(
        store: CronStore, tmp_path: Path) -> None:
    from kirocrew_core import audit
    from kirocrew_core.notifications.store import all_notifications

    flag = tmp_path / "ok"
    job = command_job(store, f"test -f {flag}", tmp_path, name="flaky")

    async def main() -> None:
        clock = ManualClock(T0)
        host = await started(store, clock)
        for n in range(1, AUTO_PAUSE_THRESHOLD + 3):
            await at(host, clock, T0 + 60 * n)  # two more instants: a paused job does not fire
        paused = store.get(job.id)
        assert paused is not None and paused.auto_paused and paused.consecutive_failures == AUTO_PAUSE_THRESHOLD
        flag.touch()
        await host.trigger(job.id)  # the person runs it by hand once fixed
        await settle(host)
        await at(host, clock, T0 + 60 * (AUTO_PAUSE_THRESHOLD + 3))  # then it is back on its schedule
        await host.stop()

    run(main())
    # the instants while it was paused are neither run nor missed: the schedule resumes at the next one
    assert statuses(store, job.id) == ["failure"] * AUTO_PAUSE_THRESHOLD + ["success", "success"]
    assert store.history(job.id)[0].due_ts == T0 + 60 * (AUTO_PAUSE_THRESHOLD + 3)
    cleared = store.get(job.id)
    assert cleared is not None and cleared.consecutive_failures == 0 and not cleared.auto_paused
    [paused_event] = [r for r in audit.tail(50) if r.get("event") == "cron.auto_pause"]
    assert paused_event["fields"]["job_id"] == job.id and paused_event["fields"]["failures"] == AUTO_PAUSE_THRESHOLD
    notes = [n for n in all_notifications() if n.group_key == f"cron:{job.id}"]
    assert len(notes) == 1 and notes[0].title == "Cron: flaky"  # one card per job, the newest run's


def test_a_run_publishes_a_notification_unless_the_job_is_silent(store: CronStore, tmp_path: Path) -> None:
    from kirocrew_core.notifications.store import all_notifications

    loud = command_job(store, "echo loud result", tmp_path, name="loud")
    quiet = command_job(store, "echo quiet", tmp_path, name="quiet", silent=True)

    async def main() -> None:
        clock = ManualClock(T0)
        host = await started(store, clock)
        await at(host, clock, T0 + 60)
        await host.stop()

    run(main())
    notes = {n.group_key: n for n in all_notifications()}
    assert f"cron:{quiet.id}" not in notes
    note = notes[f"cron:{loud.id}"]
    assert note.title == "Cron: loud" and note.body == "loud result" and note.url == f"/cron#job-{loud.id}"


def test_a_one_shot_is_removed_after_its_run_or_paused_when_it_is_kept(store: CronStore, tmp_path: Path) -> None:
    removed = command_job(store, "echo once", tmp_path, schedule=Schedule("at", at_ts=T0 + 30), delete_after_run=True)
    kept = command_job(store, "echo once", tmp_path, schedule=Schedule("at", at_ts=T0 + 30))

    async def main() -> None:
        clock = ManualClock(T0)
        host = await started(store, clock)
        await at(host, clock, T0 + 30)
        await at(host, clock, T0 + 3600)
        await host.stop()

    run(main())
    assert store.get(removed.id) is None
    # Its history outlives it, answered by its id (kirocrew cron history, the job's page).
    assert statuses(store, removed.id) == ["success"]
    gone = store.removed_job(removed.id)
    assert gone is not None and (gone.name, gone.owner) == (removed.name, removed.owner)
    after = store.get(kept.id)
    assert after is not None and after.user_paused and statuses(store, kept.id) == ["success"]


def test_fire_time_vetting_refuses_a_command_and_keeps_the_job(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "cat ~/.ssh/id_rsa", tmp_path)  # stored before vetting existed, say

    async def main() -> None:
        clock = ManualClock(T0)
        host = await started(store, clock)
        await at(host, clock, T0 + 60)
        await host.stop()

    run(main())
    [record] = store.history(job.id)
    assert record.status == "denied" and record.error.startswith("command_refused: ")
    kept = store.get(job.id)
    assert kept is not None and kept.consecutive_failures == 1 and kept.enabled


def test_governance_denies_a_sessions_job_at_fire_time_but_not_the_persons(store: CronStore, tmp_path: Path) -> None:
    from kirocrew_core.config import set_value

    mine = command_job(store, "echo person", tmp_path)
    theirs = command_job(store, "echo session", tmp_path, owner="conversation:conv_1")
    set_value("governance.cron", "deny")

    async def main() -> None:
        clock = ManualClock(T0)
        host = await started(store, clock)
        await at(host, clock, T0 + 60)
        await host.stop()

    run(main())
    assert statuses(store, mine.id) == ["success"]
    [record] = store.history(theirs.id)
    assert record.status == "denied" and record.error.startswith("governance_denied: ")


# -- catch-up -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "expected_runs", "expected_missed"), [
    ("skip", 0, 5), ("once", 1, 4), ("all", 3, 2),
])
def test_instants_missed_while_no_host_ran_follow_the_jobs_catch_up_policy(
        store: CronStore, tmp_path: Path, policy: str, expected_runs: int, expected_missed: int) -> None:
    job = command_job(store, "echo caught", tmp_path, schedule=Schedule("every", every_secs=3600),
                      catch_up=policy, catch_up_max=3)

    async def main() -> float | None:
        clock = ManualClock(T0 + 5 * 3600 + 600)  # the host starts 5 h 10 min after the job was made
        host = await started(store, clock)
        planned = host.scheduler.planned(job.id)
        await host.stop()
        return planned

    planned = run(main())
    records = list(reversed(store.history(job.id)))
    runs = [r for r in records if r.status == "success"]
    assert len(runs) == expected_runs and all(r.trigger == "catch-up" for r in runs)
    assert sum(r.missed for r in records if r.status == "missed") == expected_missed
    after = store.get(job.id)
    assert after is not None and after.last_due_ts == T0 + 5 * 3600
    assert planned == T0 + 6 * 3600  # then the schedule goes on from the last instant


def test_a_wake_that_finds_a_long_missed_instant_applies_catch_up(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "echo caught", tmp_path, schedule=Schedule("every", every_secs=600), catch_up="once")

    async def main() -> None:
        clock = ManualClock(T0)
        host = await started(store, clock)
        await at(host, clock, T0 + 3 * 3600 + 30)  # the machine slept through 18 instants
        await host.stop()

    run(main())
    records = list(reversed(store.history(job.id)))
    assert [r.status for r in records] == ["missed", "success"]  # once: one run for all 18 instants
    assert records[0].missed == 17 and records[1].trigger == "catch-up" and records[1].due_ts == T0 + 3 * 3600


def test_a_thousand_jobs_are_planned_and_one_change_re_plans_one(store: CronStore, tmp_path: Path) -> None:
    jobs = [command_job(store, "echo x", tmp_path, schedule=Schedule("every", every_secs=60 + n))
            for n in range(1000)]

    async def main() -> tuple[int, str | None, float | None]:
        host = await started(store, ManualClock(T0))
        count = len(host.scheduler.planned_ids())
        busy = host.busy()
        store.update(jobs[5].id, user_paused=True)
        host.changed(jobs[5].id)
        await settle(host)
        gone = host.scheduler.planned(jobs[5].id)
        assert len(host.scheduler.planned_ids()) == 999
        await host.stop()
        return count, busy, gone

    assert run(main()) == (1000, "1000 cron jobs scheduled", None)


# -- time zones, jitter, skip dates (the schedule module decides; the scheduler must fire exactly then) ---


def _utc(text: str) -> float:
    from datetime import datetime, timezone

    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def test_a_cron_job_fires_at_local_nine_in_its_zone_on_both_sides_of_a_dst_change(
        store: CronStore, tmp_path: Path) -> None:
    start = _utc("2026-03-27T12:00:00")  # Europe/Paris moves to summer time on 2026-03-29
    job = store.add(Job(id=store.new_id(), name="morning", schedule=Schedule("cron", cron_expr="0 9 * * *"),
                        command="echo morning", timezone="Europe/Paris", strict_schedule=True,
                        workspace=str(tmp_path), created_ts=start, updated_ts=start))

    async def main() -> None:
        clock = ManualClock(start)
        host = await started(store, clock)
        for when in ("2026-03-28T07:59:59", "2026-03-28T08:00:00", "2026-03-29T06:59:59", "2026-03-29T07:00:00"):
            await at(host, clock, _utc(when))
        await host.stop()

    run(main())
    assert [r.due_ts for r in reversed(store.history(job.id))] == [_utc("2026-03-28T08:00:00"),
                                                                   _utc("2026-03-29T07:00:00")]


def test_a_jittered_job_fires_at_its_due_instant_plus_its_jitter_not_before(store: CronStore, tmp_path: Path) -> None:
    from kirocrew_cron import schedule

    job = command_job(store, "echo late", tmp_path, schedule=Schedule("every", every_secs=3600))
    store.remove(job.id)
    while schedule.jitter(job := dataclasses.replace(job, id=store.new_id(), strict_schedule=False),
                          T0 + 3600) < 2:
        pass
    store.add(job)
    shift = schedule.jitter(job, T0 + 3600)
    assert 2 <= shift <= 300

    async def main() -> tuple[list[str], list[str]]:
        clock = ManualClock(T0)
        host = await started(store, clock)
        await at(host, clock, T0 + 3600 + shift - 1)
        before = statuses(store, job.id)
        await at(host, clock, T0 + 3600 + shift)
        await host.stop()
        return before, statuses(store, job.id)

    assert run(main()) == ([], ["success"])
    assert store.history(job.id)[0].due_ts == T0 + 3600  # history keeps the due instant, not the fire time


def test_a_skip_date_is_passed_over_without_a_run_or_a_missed_row(store: CronStore, tmp_path: Path) -> None:
    job = command_job(store, "echo daily", tmp_path, schedule=Schedule("every", every_secs=86_400),
                      skip_dates=("2026-03-04",))  # T0 is 2026-03-02 12:00 UTC

    async def main() -> None:
        clock = ManualClock(T0)
        host = await started(store, clock)
        for day in range(1, 4):
            await at(host, clock, T0 + day * 86_400)
        await host.stop()

    run(main())
    assert [r.due_ts for r in reversed(store.history(job.id))] == [T0 + 86_400, T0 + 3 * 86_400]
    assert all(r.status == "success" for r in store.history(job.id))


def test_a_one_shot_missed_while_no_host_ran_runs_late_or_is_kept_paused_when_its_policy_is_skip(
        store: CronStore, tmp_path: Path) -> None:
    late = command_job(store, "echo late", tmp_path, schedule=Schedule("at", at_ts=T0 + 60), delete_after_run=True)
    skipped = command_job(store, "echo never", tmp_path, schedule=Schedule("at", at_ts=T0 + 60),
                          delete_after_run=True, catch_up="skip")

    async def main() -> None:
        host = await started(store, ManualClock(T0 + 3600))
        await host.stop()

    run(main())
    assert store.get(late.id) is None  # ran (trigger catch-up), then removed like any one-shot
    kept = store.get(skipped.id)
    assert kept is not None and kept.user_paused and statuses(store, skipped.id) == ["missed"]


def test_kirocrew_serve_offers_no_crons() -> None:
    from click.testing import CliRunner
    from kirocrew_core.gateway.serve import serve

    shown = CliRunner().invoke(serve, ["--help"])
    assert shown.exit_code == 0 and "--no-crons" in shown.output and "KIROCREW_CRONS=off" in shown.output


# -- what an agent run is sent ------------------------------------------------------------------------


def test_a_persistent_agent_job_sends_its_previous_result_first_capped_and_a_fresh_one_the_bare_message() -> None:
    from kirocrew_cron.model import LAST_RESULT_MAX, MINIMAL_LAST_RESULT_MAX
    from kirocrew_cron.runner import agent_prompt

    job = Job(id="0a1b2c3d", name="digest", schedule=Schedule("every", every_secs=3600), message="Summarise.",
              last_result="x" * (LAST_RESULT_MAX + 10))
    assert agent_prompt(job) == ("[Previous run result — do NOT repeat the same content]\n" + "x" * LAST_RESULT_MAX
                                 + "\n[End of previous run result]\n\nSummarise.")
    lean = agent_prompt(dataclasses.replace(job, minimal_context=True))
    assert lean.count("x") == MINIMAL_LAST_RESULT_MAX
    assert agent_prompt(dataclasses.replace(job, persistent_session=False)) == "Summarise."
    assert agent_prompt(dataclasses.replace(job, last_result="")) == "Summarise."  # a first run: nothing before


def test_command_jobs_beyond_the_concurrency_bound_wait_for_a_slot(store: CronStore, tmp_path: Path) -> None:
    jobs = [command_job(store, "sleep 60", tmp_path, name=f"slow {n}") for n in range(3)]

    async def main() -> tuple[int, list[str]]:
        host = await started(store, ManualClock(T0), runner=JobRunner(max_commands=2))
        for job in jobs:
            await host.trigger(job.id)
        def spawned() -> int:
            return sum(1 for job in jobs if (active := host.active_run(job.id)) is not None and active.process)

        await until(lambda: spawned() == 2)
        await asyncio.sleep(0.2)  # time enough for a third process, were it allowed
        running = sorted(host.running_jobs())
        count = spawned()
        await host.stop()
        return count, running

    spawned, running = run(main())
    assert spawned == 2 and running == sorted(job.id for job in jobs)  # the third is running, waiting for a slot
