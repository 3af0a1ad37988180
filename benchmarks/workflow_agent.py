#!/usr/bin/env python3
"""What ``ctx.agent`` costs over a direct sub-agent, and 100 agent calls of one workflow in parallel.

    .venv/bin/python benchmarks/workflow_agent.py [--calls 20] [--parallel 100]

Runs in process under a throwaway HOME with the fake kiro-cli: a real ``ConversationsService`` and a
real ``WorkflowEngine`` whose workflow process runs in the ``read_only`` sandbox (bubblewrap), its
agent calls served as sub-agents exactly as in the host. Three figures:

* **ctx round trip**: ``--calls`` sequential ``ctx.agent`` calls answered at once by the engine (no
  conversation): the socket, the JSON, the events and the ceilings alone, per call.
* **direct vs ctx.agent**: the same fake task (``!say x``) ``--calls`` times as a direct sub-agent
  (spawn, collect, release: what ``spawn_run``/``spawn_sub_agents`` do), then as ``ctx.agent`` calls
  of one workflow; the difference of the medians is the workflow's overhead per call.
* **parallel**: one workflow's ``ctx.parallel`` of ``--parallel`` agent calls: its wall time next to
  one call's and the worker cap (the most agents run at once).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import fake_kiro_environment, row


def _script(body: str) -> str:
    return 'META = {"name": "bench"}\n\nasync def workflow(ctx):\n' + "".join(f"    {line}\n"
                                                                             for line in body.splitlines())


async def _timed_run(engine: Any, source: str, cwd: str) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    run = await engine.start(source, owner="person", cwd=cwd)
    await run.task
    elapsed = time.perf_counter() - start
    if run.record["status"] != "finished":
        raise SystemExit(f"the workflow run ended {run.record['status']}: {run.record['reason']}")
    return run.record, elapsed


def _times(record: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Per sequential agent call, in ms: its host-side time (``agent_started`` → ``agent_finished``: the sub-agent
    itself) and the whole cycle (one ``agent_started`` to the next: the reply to the process, the script, the
    next request back included). The difference is what ``ctx`` adds to a call."""
    from datetime import datetime

    def at(event: dict[str, Any]) -> float:
        return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp() * 1000

    started = [at(e) for e in record["events"] if e["type"] == "agent_started"]
    finished = [at(e) for e in record["events"] if e["type"] == "agent_finished"]
    inside = [f - s for s, f in zip(started, finished, strict=False)]
    cycles = [b - a for a, b in zip(started, started[1:], strict=False)]
    return inside[:len(cycles)], cycles


async def bench(calls: int, parallel: int, root: Path) -> None:
    from kirocrew_conversations.service import ConversationsService, ServiceConfig
    from kirocrew_conversations.subagents import Task
    from kirocrew_conversations.workflows import AgentRequest, WorkflowEngine, conversation_agent_runner

    cwd = str(root / "workspace")
    from kirocrew_mcp.render import rebuild_agent_config

    rebuild_agent_config()  # the kirocrew agent the sub-agents run on, as the host renders it
    async with await ConversationsService.start(ServiceConfig(state_dir=root / "state")) as service:
        cap = service.config.max_subagents

        async def instant(run: Any, request: AgentRequest, seconds_left: float) -> str:
            return request.prompt

        quick = WorkflowEngine(instant, runs_dir=root / "runs-instant", parallel=cap)
        body = f"for i in range({calls * 10}):\n    await ctx.agent('x')"
        instant_record, _ = await _timed_run(quick, _script(body), cwd)
        _, round_trips = _times(instant_record)
        _, empty = await _timed_run(quick, _script("return 1"), cwd)

        hub = service.subagents
        direct: list[float] = []
        await hub.collect(await hub.spawn(None, [Task("!say warm")], cwd=cwd, claim=True), 60)  # first kiro-cli
        for _ in range(calls):
            start = time.perf_counter()
            spawned = await hub.spawn(None, [Task("!say x")], cwd=cwd, claim=True)
            await hub.collect(spawned, 60)
            await hub.results(spawned)
            await hub.release(None, spawned[0].conversation.id)
            direct.append((time.perf_counter() - start) * 1000)

        engine = WorkflowEngine(conversation_agent_runner(service), runs_dir=root / "runs", parallel=cap)
        record, _ = await _timed_run(engine, _script(f"for i in range({calls}):\n    await ctx.agent('!say x')"), cwd)
        inside, cycles = _times(record)
        added = [cycle - sub for sub, cycle in zip(inside, cycles, strict=True)]
        fanned, fan_secs = await _timed_run(engine, _script(
            f"return await ctx.parallel([ctx.agent('!say ' + str(i)) for i in range({parallel})])"), cwd)
        if len(fanned["result"]) != parallel or fanned["result"][0] != "0":
            raise SystemExit(f"the parallel run's results are wrong: {fanned['events'][-3:]}")

    import statistics

    print(f"load average {os.getloadavg()[0]:.1f}; sub-agent cap (agents at once) {cap}; "
          f"python {sys.version.split()[0]}")
    print(f"an empty workflow run, start to end (sandbox and process start included): {empty * 1000:.0f} ms")
    print(row(f"ctx.agent round trip, instant agent (x{len(round_trips)})", round_trips, width=46))
    print(f"{'  mean over the whole run (ms timestamps)':<46} {sum(round_trips) / len(round_trips):.3f} ms")
    print(row("direct sub-agent (spawn+collect+release)", direct, width=46))
    print(row("ctx.agent of the same task, whole cycle", cycles, width=46))
    print(row("  of which the sub-agent (host side)", inside, width=46))
    print(row("  of which ctx (cycle - sub-agent)", added, width=46))
    one = statistics.median(cycles) / 1000
    print(f"{parallel} agent calls in ctx.parallel: {fan_secs:.2f} s wall; {parallel}/{cap} waves x one call "
          f"({one:.2f} s) = {parallel / cap * one:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = fake_kiro_environment(root)
        os.environ.update(env)
        asyncio.run(bench(args.calls, args.parallel, root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
