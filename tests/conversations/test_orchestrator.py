"""The orchestrator against the fake kiro-cli: real processes, real ACP, a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kirocrew_core.acp_runtime import AcpOptions
from kirocrew_core.errors import KirocrewError

from kirocrew_testing.policy import write_policy

from kirocrew_conversations.errors import CATALOGUE
from kirocrew_conversations.orchestrator import Orchestrator
from kirocrew_conversations.store import Store, Workspace

T = TypeVar("T")
TEST_TIMEOUT_SECS = 60.0

@pytest.fixture(autouse=True)
def _fake(fake_kiro_cli: Any, lean_kirocrew_agent: Path) -> Any:
    return fake_kiro_cli

@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = Store.open(tmp_path / "orchestrator-v1.sqlite")
    yield s
    s.close()

def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, TEST_TIMEOUT_SECS)

    return asyncio.run(bounded())

def conversation(store: Store, tmp_path: Path, name: str) -> str:
    workspace = tmp_path / f"ws-{name}"
    workspace.mkdir()
    return store.create_conversation(name=name, workspace=Workspace("shared", str(workspace), f"ws_{name}")).id

def asking_options(conversation: Any, run: Any) -> AcpOptions:
    """No trust flags: the fake asks permission for every tool call."""
    return AcpOptions()


def owner_asks_about_deploys() -> None:
    """The owner's policy asks about the ``deploy`` tool: its requests wait for :meth:`Orchestrator.decide`."""
    write_policy(rules=[{"decision": "ask", "tool": "deploy", "reason": "deploys are the owner's call"}])

def orchestrator(store: Store, **kwargs: Any) -> Orchestrator:
    return Orchestrator(store, **kwargs)

def event_kinds(store: Store, run_id: str) -> list[str]:
    return [e.kind for e in store.list_events(run_id, limit=200).events]

def test_two_conversations_overlap_and_wait_any_then_wait_all(store: Store, tmp_path: Path) -> None:
    a, b = conversation(store, tmp_path, "a"), conversation(store, tmp_path, "b")

    async def main() -> None:
        async with orchestrator(store) as orch:
            slow = await orch.submit(a, "!say slow\n!sleep 1.5")
            fast = await orch.submit(b, "!say fast")
            first = await orch.wait([slow.id, fast.id], mode="any", timeout=30)
            assert not first.wait_expired
            by_id = {r.id: r for r in first.runs}
            assert by_id[fast.id].status == "completed"
            assert by_id[slow.id].status == "running"  # both conversations were live at once
            both = await orch.wait([slow.id, fast.id], mode="all", timeout=30)
            assert [r.status for r in both.runs] == ["completed", "completed"]
            assert [r.reply_text for r in both.runs] == ["slow", "fast"]

    run(main())

def test_runs_of_one_conversation_execute_one_at_a_time_in_fifo_order(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store) as orch:
            first = await orch.submit(a, "!say one\n!sleep 0.5")
            second = await orch.submit(a, "!say two")
            assert (await orch.wait([second.id], timeout=30)).runs[0].status == "completed"
            one, two = store.get_run(first.id), store.get_run(second.id)
            assert one.status == "completed" and (one.reply_text, two.reply_text) == ("one", "two")
            assert one.ended_at is not None and two.started_at is not None and one.ended_at <= two.started_at

    run(main())

def test_with_one_worker_a_second_conversation_queues_until_the_first_is_idle(store: Store, tmp_path: Path) -> None:
    a, b = conversation(store, tmp_path, "a"), conversation(store, tmp_path, "b")

    async def main() -> None:
        async with orchestrator(store, max_workers=1) as orch:
            busy = await orch.submit(a, "!say a\n!sleep 1")
            waiting = await orch.submit(b, "!say b")
            assert (await orch.wait([busy.id], timeout=30)).runs[0].status == "completed"
            done = (await orch.wait([waiting.id], timeout=30)).runs[0]
            assert done.status == "completed" and done.reply_text == "b"
            busy_ended = store.get_run(busy.id).ended_at
            assert done.started_at is not None and busy_ended is not None and done.started_at >= busy_ended

    run(main())

def test_cancel_ends_a_hanging_run_as_cancelled_after_teardown(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store) as orch:
            hanging = await orch.submit(a, "!say started\n!hang")
            queued = await orch.submit(a, "!say never")
            await wait_for_status(store, hanging.id, "running")
            ended = await orch.cancel(hanging.id)
            assert ended.status == "cancelled" and ended.error_code == "run_cancelled"
            assert orch._workers[a].runtime is None  # the kiro-cli process was shut down before cancel returned
            assert (await orch.cancel(queued.id)).status in {"cancelled", "completed"}

    run(main())

def test_a_queued_run_cancelled_before_it_starts_never_runs(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store) as orch:
            first = await orch.submit(a, "!sleep 0.5")
            second = await orch.submit(a, "!say never")
            assert (await orch.cancel(second.id)).status == "cancelled"
            await orch.wait([first.id], timeout=30)
            assert store.get_run(second.id).started_at is None

    run(main())

def test_a_run_past_its_deadline_ends_timed_out(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        # The deadline also covers starting kiro-cli, which the run after the deadline needs afresh (the timed-out
        # worker is torn down): a few seconds keep a loaded machine from timing that start out too.
        async with orchestrator(store, run_deadline_secs=4.0) as orch:
            late = await orch.submit(a, "!hang")
            ended = (await orch.wait([late.id], timeout=30)).runs[0]
            assert ended.status == "timed_out" and ended.error_code == "run_deadline_exceeded"
            after = await orch.submit(a, "!say still usable")
            assert (await orch.wait([after.id], timeout=30)).runs[0].reply_text == "still usable"

    run(main())

def test_a_wait_that_times_out_says_so_and_cancels_nothing(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store) as orch:
            long = await orch.submit(a, "!sleep 1.5\n!say done")
            result = await orch.wait([long.id], timeout=0.3)
            assert result.wait_expired and result.runs[0].status in {"queued", "running"}
            finished = await orch.wait([long.id], timeout=30)
            assert not finished.wait_expired and finished.runs[0].status == "completed"

    run(main())

def test_a_permission_request_needs_attention_until_allowed_once(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    owner_asks_about_deploys()

    async def main() -> None:
        async with orchestrator(store, acp_options_factory=asking_options) as orch:
            asking = await orch.submit(a, "!tool deploy\n!say deployed")
            attention = await orch.wait([asking.id], mode="all", timeout=30)
            assert not attention.wait_expired and attention.runs[0].status == "needs_attention"
            [request] = store.permission_requests(asking.id)
            # An owner's ask rule asked: an allow rule could not change that, so "allow always" is not offered.
            assert request.tool_name == "deploy" and set(request.options) == {"allow_once", "reject_once"}
            assert request.rule is not None and request.rule["tier"] == "owner" and request.subject == "deploy"
            with pytest.raises(KirocrewError) as unknown:
                await orch.decide(asking.id, "perm_unknown", "allow_once")
            with pytest.raises(KirocrewError) as unsupported:
                await orch.decide(asking.id, request.id, "allow_always")
            assert (unknown.value.code, unsupported.value.code) == ("permission_not_found",
                                                                    "unsupported_permission_option")
            await orch.decide(asking.id, request.id, "allow_once")
            with pytest.raises(KirocrewError) as stale:
                await orch.decide(asking.id, request.id, "allow_once")
            assert stale.value.code == "permission_not_pending" and stale.value.code in CATALOGUE
            done = (await orch.wait([asking.id], timeout=30)).runs[0]
            assert done.status == "completed" and done.reply_text == "deployed"
            assert {"permission_requested", "permission_decided", "tool_call"} <= set(event_kinds(store, asking.id))

    run(main())

def test_cancel_answers_an_outstanding_permission_and_ends_the_run_cancelled(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    owner_asks_about_deploys()

    async def main() -> None:
        async with orchestrator(store, acp_options_factory=asking_options) as orch:
            asking = await orch.submit(a, "!tool deploy")
            await orch.wait([asking.id], timeout=30)
            [request] = store.permission_requests(asking.id)
            assert (await orch.cancel(asking.id)).status == "cancelled"
            assert store.permission_requests(asking.id)[0].state == "cancelled"
            with pytest.raises(KirocrewError) as stale:
                await orch.decide(asking.id, request.id, "allow_once")
            assert stale.value.code == "permission_not_pending"

    run(main())

def test_an_idle_worker_closes_and_the_next_run_resumes_the_session(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store, idle_close_secs=0.2) as orch:
            first = await orch.submit(a, "!say remember me")
            await orch.wait([first.id], timeout=30)
            session_id = store.session_id(a)
            while a in orch._workers:  # the idle timer closes the worker by itself
                await asyncio.sleep(0.05)
            second = await orch.submit(a, "!say again")
            done = (await orch.wait([second.id], timeout=30)).runs[0]
            # The replayed history did not leak into the new reply, and the same Kiro session continued.
            assert done.status == "completed" and done.reply_text == "again"
            assert store.session_id(a) == session_id
            started = [e.payload for e in store.list_events(second.id).events if e.kind == "run_started"]
            assert started == [{"resumed": True, "images": 0}]
            recall = await orch.submit(a, "!recall")
            done = (await orch.wait([recall.id], timeout=30)).runs[0]
            assert "remember me" in (done.reply_text or ""), "the loaded session carries the earlier turns"

    run(main())

def test_events_keep_no_prompt_bodies_thoughts_or_absolute_paths(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store) as orch:
            done = await orch.submit(a, "!think secret-thought\n!write notes.txt secret-body\n!say ok")
            assert (await orch.wait([done.id], timeout=30)).runs[0].status == "completed"
            dumped = json.dumps([e.payload for e in store.list_events(done.id, limit=200).events])
            assert "secret" not in dumped and str(tmp_path) not in dumped
            assert "tool_call" in event_kinds(store, done.id)

    run(main())

def test_waiting_on_an_unknown_run_fails_with_a_stable_code(store: Store, tmp_path: Path) -> None:
    async def main() -> None:
        async with orchestrator(store) as orch:
            with pytest.raises(KirocrewError) as excinfo:
                await orch.wait(["run_missing"], timeout=1)
            assert excinfo.value.code == "run_not_found"
            with pytest.raises(KirocrewError) as too_many:
                await orch.wait([f"run_{i}" for i in range(9)], timeout=1)
            assert too_many.value.code == "invalid_arguments"

    run(main())

async def wait_for_status(store: Store, run_id: str, status: str) -> None:
    """Test-side helper only: the orchestrator's own waiting is event-driven."""
    for _ in range(600):
        if store.get_run(run_id).status == status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run never reached {status}")


def test_a_slash_command_kiro_does_not_announce_is_never_sent_and_the_run_fails(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store) as orch:
            first = await orch.submit(a, "!say hello")
            assert (await orch.wait([first.id], timeout=30)).runs[0].status == "completed"
            assert "/compact" in orch.observed.commands
            unknown = await orch.submit(a, "  /no-such-command now")
            announced = await orch.submit(a, "/compact")
            recall = await orch.submit(a, "!recall")
            done = await orch.wait([unknown.id, announced.id, recall.id], mode="all", timeout=30)
            refused, ran, recalled = done.runs
            assert refused.status == "failed" and refused.error_code == "slash_command_refused"
            assert "does not announce the slash command 'no-such-command'" in (refused.error_detail or "")
            assert ran.status == "completed" and ran.reply_text == "/compact done"
            assert "no-such-command" not in (recalled.reply_text or ""), "the refused command never reached kiro"
            assert "slash_command" in event_kinds(store, announced.id)
            assert "slash_command" not in event_kinds(store, unknown.id)

    run(main())


def test_an_unanswered_permission_request_ends_the_run_needs_attention_expired(store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store, acp_options_factory=asking_options, attention_deadline_secs=1.0) as orch:
            asking = await orch.submit(a, "!tool fs_write {}\n!say wrote it")
            after = await orch.submit(a, "!say after")
            woke = await orch.wait([asking.id], mode="all", timeout=30)
            assert woke.runs[0].status == "needs_attention" and not woke.wait_expired
            while store.get_run(asking.id).status == "needs_attention":  # every wait returns at once meanwhile
                await asyncio.sleep(0.05)
            done = await orch.wait([asking.id, after.id], mode="all", timeout=30)
            expired, next_run = done.runs
            assert expired.status == "needs_attention_expired" and expired.error_code == "attention_deadline_exceeded"
            assert next_run.status == "completed" and next_run.reply_text == "after"
            (request,) = store.permission_requests(asking.id)
            assert request.state == "cancelled"
            with pytest.raises(KirocrewError) as late:
                await orch.decide(asking.id, request.id, "allow_once")
            assert late.value.code == "permission_not_pending"
            assert "permission_expired" in event_kinds(store, asking.id)

    run(main())


# -- restart_sessions: a new configuration generation ------------------------------------------------------


def kiro_pids(workspace: Path) -> list[int]:
    """The kiro-cli pids that ran ``!shell echo $PPID >> kiro.pids`` in ``workspace``, in order."""
    return [int(line) for line in (workspace / "kiro.pids").read_text().split()]


def record_pid(text: str = "") -> str:
    return "!shell echo $PPID >> kiro.pids\n" + text


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def until_gone(pid: int) -> None:
    """Test-side polling only: the orchestrator closes the process on its own."""
    for _ in range(600):
        if not alive(pid):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"kiro-cli {pid} is still running")


def test_restart_sessions_closes_an_idle_worker_now_and_its_next_run_starts_a_new_kiro_cli(
        store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store) as orch:  # the idle timer (10 min) never fires in this test
            first = await orch.submit(a, record_pid("!say one"))
            assert (await orch.wait([first.id], timeout=30)).runs[0].status == "completed"
            (old,) = kiro_pids(tmp_path / "ws-a")
            assert orch.restart_sessions() == 1
            await until_gone(old)
            assert orch.runs_in_progress() == 0
            second = await orch.submit(a, record_pid("!recall"))
            done = (await orch.wait([second.id], timeout=30)).runs[0]
            assert done.status == "completed" and "one" in (done.reply_text or ""), "the session was resumed"
            assert kiro_pids(tmp_path / "ws-a")[1] != old

    run(main())


def test_restart_sessions_lets_a_busy_run_finish_then_retires_its_kiro_cli(store: Store, tmp_path: Path) -> None:
    a, b = conversation(store, tmp_path, "a"), conversation(store, tmp_path, "b")

    async def main() -> None:
        async with orchestrator(store) as orch:
            idle = await orch.submit(b, record_pid("!say idle"))
            await orch.wait([idle.id], timeout=30)
            busy = await orch.submit(a, record_pid("!sleep 1\n!say finished"))
            while not (tmp_path / "ws-a" / "kiro.pids").exists():
                await asyncio.sleep(0.02)
            assert orch.runs_in_progress() == 1
            assert orch.restart_sessions() == 2  # one idle worker closed, one busy worker scheduled
            (old,) = kiro_pids(tmp_path / "ws-a")
            assert alive(old), "a busy kiro-cli is never killed mid-run"
            done = (await orch.wait([busy.id], timeout=30)).runs[0]
            assert done.status == "completed" and done.reply_text == "finished"
            await until_gone(old)  # closed right after its run, with no further run queued
            await until_gone(kiro_pids(tmp_path / "ws-b")[0])
            after = await orch.submit(a, record_pid("!say again"))
            assert (await orch.wait([after.id], timeout=30)).runs[0].status == "completed"
            assert kiro_pids(tmp_path / "ws-a")[1] != old

    run(main())


def test_a_run_queued_behind_a_busy_one_never_starts_on_the_kiro_cli_of_before_the_restart(
        store: Store, tmp_path: Path) -> None:
    a = conversation(store, tmp_path, "a")

    async def main() -> None:
        async with orchestrator(store) as orch:
            busy = await orch.submit(a, record_pid("!sleep 1\n!say one"))
            queued = await orch.submit(a, record_pid("!say two"))
            while not (tmp_path / "ws-a" / "kiro.pids").exists():
                await asyncio.sleep(0.02)
            assert orch.restart_sessions() == 1
            done = await orch.wait([busy.id, queued.id], mode="all", timeout=30)
            assert [r.status for r in done.runs] == ["completed", "completed"]
            first, second = kiro_pids(tmp_path / "ws-a")
            assert first != second and not alive(first)

    run(main())


def test_restart_sessions_with_no_worker_closes_nothing(store: Store, tmp_path: Path) -> None:
    async def main() -> None:
        async with orchestrator(store) as orch:
            assert orch.restart_sessions() == 0 and orch.runs_in_progress() == 0

    run(main())
