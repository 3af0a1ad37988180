"""The workflow engine with a real sandboxed workflow process: ceilings, failures, storage, the missing sandbox.

These runs need no child conversation (agent calls end to end are in
``tests/coretools/test_workflows_e2e.py``), so the engine is driven in-process with an agent
runner that answers from the prompt itself; each run is a real ``read_only`` bubblewrap process
talking to the engine over its socket.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.aio import run_bounded
from kirocrew_testing.requirements import executable

from kirocrew_conversations import workflow_runs
from kirocrew_conversations.workflows import (
    ActiveRun,
    AgentFailed,
    AgentRequest,
    Ceilings,
    NudgeRequest,
    WorkflowEngine,
)


async def _echo(run: ActiveRun, request: AgentRequest, seconds_left: float) -> str:
    """An agent that replies with its prompt (``fail:CODE`` fails with CODE): the engine's side is under test."""
    if request.prompt.startswith("fail:"):
        raise AgentFailed(request.prompt[5:])
    return request.prompt


def _script(body: str, meta: str = '{"name": "t"}') -> str:
    lines = "\n".join("    " + line for line in body.strip("\n").splitlines())
    return f"META = {meta}\n\nasync def workflow(ctx):\n{lines}\n"


@pytest.fixture
def engine(fake_kiro_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkflowEngine:
    executable("bwrap", apt="bubblewrap")
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake_kiro_cli.sandboxable_path))
    return WorkflowEngine(_echo, runs_dir=tmp_path / "runs")


def _run(engine: WorkflowEngine, source: str, ceilings: Ceilings | None = None,
         args: dict[str, Any] | None = None) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        run = await engine.start(source, owner="person", ceilings=ceilings, args=args)
        assert run.task is not None
        await run.task
        stored = workflow_runs.load(run.run_id, engine.runs_dir)
        assert stored is not None
        return stored

    return run_bounded(main(), 60)


def _types(record: dict[str, Any]) -> list[str]:
    return [event["type"] for event in record["events"]]


def test_a_run_logs_calls_agents_in_parallel_and_pipeline_and_finishes_with_its_result(engine: WorkflowEngine) -> None:
    record = _run(engine, _script('''
ctx.log("start " + ctx.args["who"])
both = await ctx.parallel([ctx.agent("a", phase="fan"), ctx.agent("b", phase="fan")])
async def up(x):
    return (await ctx.agent(x + "!", label=x)).upper()
piped = await ctx.pipeline(["p", "q"], up)
json_value = await ctx.agent('{"n": 3}', schema={"type": "object", "required": ["n"]})
wrong = await ctx.agent('{"m": 3}', schema={"type": "object", "required": ["n"]})
failed = await ctx.agent("fail:subagent_cap_reached")
too_long = await ctx.agent("x" * 100001)
return {"both": both, "piped": piped, "json": json_value, "wrong": wrong, "failed": failed, "long": too_long}
'''), args={"who": "me"})
    assert record["status"] == "finished" and record["where"] is None
    assert record["result"] == {"both": ["a", "b"], "piped": ["P!", "Q!"], "json": {"n": 3}, "wrong": None,
                                "failed": None, "long": None}
    types = _types(record)
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("agent_started") == 7 and types.count("agent_finished") == 8  # the long prompt never started
    assert types.count("phase_started") == 1
    assert [e["data"]["message"] for e in record["events"] if e["type"] == "log"] == ["start me"]
    errors = [e["data"].get("error") for e in record["events"] if e["type"] == "agent_finished"]
    assert {"schema_mismatch", "subagent_cap_reached", "prompt_too_long"} <= set(errors)
    assert [e["seq"] for e in record["events"]] == list(range(1, len(types) + 1))
    assert record["agent_calls"] == 8  # asked for, the refused one included
    path = engine.runs_dir / f"{record['run_id']}.json"  # type: ignore[operator]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_script_that_raises_fails_in_exec_with_its_error_and_line(engine: WorkflowEngine) -> None:
    record = _run(engine, _script('x = 1\nraise ValueError("no good")'))
    assert record["status"] == "failed" and record["where"] == "exec"
    assert "ValueError: no good" in record["reason"] and "(line 5)" in record["reason"]
    assert record["events"][-1]["type"] == "run_failed" and record["events"][-1]["data"]["where"] == "exec"


def test_a_memory_bomb_fails_in_its_own_process_at_the_memory_bound(engine: WorkflowEngine) -> None:
    record = _run(engine, _script('x = "a" * (4 * 1024 ** 3)\nreturn len(x)'))
    assert record["status"] == "failed" and record["where"] == "exec" and "MemoryError" in record["reason"]


def test_a_result_too_large_to_keep_is_replaced_by_a_note(engine: WorkflowEngine) -> None:
    record = _run(engine, _script('return ["y" * 100] * 20000'))
    assert record["status"] == "finished" and record["result"].startswith("[the result was larger than 1048576")


def test_a_forever_loop_and_a_long_sleep_are_stopped_at_the_wall_time(engine: WorkflowEngine) -> None:
    for body in ("while True:\n    pass", "await ctx.sleep(3600)"):
        record = _run(engine, _script(body), Ceilings(wall_secs=1.5))
        assert record["status"] == "failed" and record["where"] == "ceiling", record
        assert "wall time of 1.5s" in record["reason"]


def test_ten_thousand_agent_calls_stop_at_the_agent_ceiling(engine: WorkflowEngine) -> None:
    record = _run(engine, _script('for i in range(10000):\n    await ctx.agent("x" + str(i))'),
                  Ceilings(agent_calls=5))
    assert record["status"] == "failed" and record["where"] == "ceiling"
    assert "agent call 6 passes the run's ceiling of 5" in record["reason"]
    assert _types(record).count("agent_started") == 5
    assert [e["data"]["agent_calls"] for e in record["events"] if e["type"] == "budget_update"] == [3, 5]


def test_endless_logging_stops_at_the_event_ceiling(engine: WorkflowEngine) -> None:
    record = _run(engine, _script('while True:\n    ctx.log("again")'), Ceilings(events=50))
    assert record["status"] == "failed" and record["where"] == "ceiling" and "50 events" in record["reason"]


def test_builtins_outside_the_safe_set_are_absent_in_the_process(engine: WorkflowEngine) -> None:
    # The static check already refuses `open`; a name it lets through still finds no such builtin.
    record = _run(engine, _script('return print("x")'))
    assert record["status"] == "failed" and "NameError" in record["reason"]


def test_a_rerun_replays_the_calls_before_its_index_and_runs_the_rest(engine: WorkflowEngine) -> None:
    asked: list[str] = []

    async def counting(run: ActiveRun, request: AgentRequest, seconds_left: float) -> str:
        asked.append(request.prompt)
        return f"{request.prompt}#{len(asked)}"

    engine.agent_runner = counting
    first = _run(engine, _script('return [await ctx.agent("a"), await ctx.agent("b"), await ctx.agent("c")]'))
    assert first["result"] == ["a#1", "b#2", "c#3"]

    async def again() -> dict[str, Any]:
        run = await engine.rerun(first, 2)
        assert run.task is not None
        await run.task
        return run.record

    second = run_bounded(again(), 60)
    assert second["result"] == ["a#1", "b#2", "c#4"] and asked == ["a", "b", "c", "c"]
    assert second["rerun_of"] == first["run_id"] and second["agent_calls"] == 1
    assert [e["data"].get("replayed", False) for e in second["events"] if e["type"] == "agent_finished"] == [
        True, True, False]


def test_a_run_left_running_by_a_dead_host_is_failed_when_the_engine_starts(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    workflow_runs.save({"run_id": "wf_0123456789abcdef", "status": "running", "owner": "person",
                        "created_at": "2026-01-01T00:00:00Z", "events": []}, runs)
    WorkflowEngine(_echo, runs_dir=runs)
    record = workflow_runs.load("wf_0123456789abcdef", runs)
    assert record is not None and record["status"] == "failed" and record["where"] == "exec"
    assert "host stopped" in record["reason"] and record["events"][-1]["type"] == "run_failed"


def test_without_bubblewrap_a_workflow_is_refused_and_nothing_is_run_or_stored(
        fake_kiro_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kirocrew_core.errors import KirocrewError

    monkeypatch.setenv("KIRO_CLI_PATH", str(fake_kiro_cli.sandboxable_path))
    monkeypatch.setenv("PATH", str(Path(fake_kiro_cli.path).parent))  # no bwrap on it
    engine = WorkflowEngine(_echo, runs_dir=tmp_path / "runs")
    with pytest.raises(KirocrewError) as caught:
        run_bounded(engine.start(_script("return 1"), owner="person"), 30)
    assert caught.value.code == "authority_unavailable"
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
    assert engine.active == {}


def test_a_connection_from_another_process_is_closed_and_changes_nothing(engine: WorkflowEngine) -> None:
    async def forge(path: str, hello: dict[str, Any]) -> bytes:
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(json.dumps(hello).encode() + b"\n" + b'{"op": "done", "result": "forged"}\n')
        await writer.drain()
        try:
            answer = await asyncio.wait_for(reader.read(), 10)  # closed at once: nothing is sent back
        except ConnectionResetError:  # closed with our lines unread: the kernel says so with a reset
            answer = b""
        writer.close()
        return answer

    async def main() -> tuple[list[bytes], dict[str, Any]]:
        run = await engine.start(_script("await ctx.sleep(3600)"), owner="person")
        for _ in range(100):
            if run.socket_path and os.path.exists(run.socket_path):
                break
            await asyncio.sleep(0.05)
        answers = [await forge(run.socket_path, {"op": "hello", "token": "forged"}),
                   await forge(run.socket_path, {"op": "done"})]
        await asyncio.sleep(0.3)
        still = run.record["status"]
        await engine.cancel(run.run_id)
        return answers, {"during": still, "after": run.record["status"], "result": run.record["result"]}

    answers, seen = run_bounded(main(), 60)
    assert answers == [b"", b""]
    assert seen == {"during": "running", "after": "cancelled", "result": None}


def test_a_cancelled_run_ends_cancelled(engine: WorkflowEngine) -> None:
    async def main() -> dict[str, Any]:
        run = await engine.start(_script("await ctx.sleep(3600)"), owner="person")
        await asyncio.sleep(0.5)
        assert await engine.cancel(run.run_id)
        assert not await engine.cancel(run.run_id)
        stored = workflow_runs.load(run.run_id, engine.runs_dir)
        assert stored is not None
        return stored

    record = run_bounded(main(), 60)
    assert record["status"] == "cancelled" and _types(record)[-1] == "run_cancelled"
    assert json.dumps(record)  # plain JSON on disk


def test_nudge_goes_to_the_engines_port_with_its_defaults_and_bad_arguments_fail_the_script_at_its_line(
        engine: WorkflowEngine) -> None:
    record = _run(engine, _script('return await ctx.nudge("look again")'))
    assert record["status"] == "finished" and record["result"] is False  # an engine without the port skips it
    assert [e["data"] for e in record["events"] if e["type"] == "log"] == [
        {"message": "nudge skipped: this host wires no nudge port", "nudge": "not armed"}]

    asked: list[NudgeRequest] = []

    async def port(run: ActiveRun, request: NudgeRequest) -> tuple[bool, str]:
        asked.append(request)
        return True, "armed on c_test"

    engine.nudger = port
    record = _run(engine, _script('return [await ctx.nudge("  look again "), await ctx.nudge("x", 60, 2)]'))
    assert record["result"] == [True, True]
    assert asked == [NudgeRequest("look again", 300, 24), NudgeRequest("x", 60, 2)]  # monitor_start's defaults
    for call, wrong in (('ctx.nudge("x", idle_secs=5)', "idle_secs must be a whole number 15-86400"),
                        ('ctx.nudge("x", max_cycles=0)', "max_cycles must be a whole number 1-1000"),
                        ('ctx.nudge("   ")', "message must be text of 1-8000 characters"),
                        ('ctx.nudge("x", idle_secs=True)', "idle_secs must be a whole number")):
        record = _run(engine, _script(f'x = 1\nawait {call}\nreturn "not reached"'))
        assert record["status"] == "failed" and record["where"] == "exec", record
        assert f"ValueError: nudge: {wrong}" in record["reason"] and "(line 5)" in record["reason"]
    assert len(asked) == 2  # a refused call never reached the port
