#!/usr/bin/env python3
"""CPU of one fake kiro-cli session start with the rendered kirocrew agent's relays.

    .venv/bin/python benchmarks/fake_kiro_mcp_start.py [--runs 15]

Most end-to-end tests start the fake ``kiro-cli`` (hundreds of times a suite run), and its
session connects to the agent's stdio MCP servers: for the ``kirocrew`` agent that
``kirocrew mcp rebuild`` renders, the four relays (``kirocrew mcp-core``, ``mcp-conversations``,
``mcp-cron``, ``mcp-computer``) of a host that is already up. Each run spawns the fake
(``acp --agent kirocrew``, ``KIRO_FAKE_EAGER_MCP=1`` so ``session/new`` answers once every
server has reported), runs ``initialize`` and ``session/new``, checks every server runs, and
reads the fake's own CPU (user + sys of that process, not of its servers) from psutil; then
the same for an agent without MCP servers (the floor: the fake's own start). Prints the
median/p90/min of both, their difference (what connecting four stdio servers costs the fake),
and spawn → ``session/new`` answered wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _bench

AGENTS = (("kirocrew (4 relays)", "kirocrew"), ("no MCP servers (floor)", "bare"))


async def one_start(fake: str, agent: str, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(the fake's CPU seconds, wall seconds) from its spawn to ``session/new`` answered with every server up."""
    import psutil

    from kirocrew_testing.fake_kiro.harness import start_fake_kiro

    start = time.perf_counter()
    async with start_fake_kiro(fake, "acp", "--agent", agent, env=env, timeout=120) as k:
        await k.initialize()
        session = await k.new_session(str(cwd), [])
        wall = time.perf_counter() - start
        servers = (await k.execute(session["sessionId"], "mcp"))["data"]["servers"]
        if any(row["status"] != "running" for row in servers):
            raise SystemExit(f"a server did not start: {servers}\n{''.join(k.stderr)[-2000:]}")
        times = psutil.Process(k.process.pid).cpu_times()
        return times.user + times.system, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fake-kiro-mcp-start-") as tmp:
        root = Path(tmp)
        env = _bench.fake_kiro_environment(root)
        _bench.rebuild_agent_file(env)
        agents = Path(env["KIRO_HOME"]) / "agents"
        (agents / "bare.json").write_text(json.dumps({"name": "bare", "tools": ["*"], "mcpServers": {},
                                                      "includeMcpJson": False}))
        env["KIRO_FAKE_EAGER_MCP"] = "1"
        _bench.use_environment(env)
        _bench.start_host()
        try:
            samples = run_all(env, root / "workspace", args.runs)
        finally:
            _bench.stop_host()
    print(f"fake kiro-cli session start, {args.runs} runs each, interleaved ({_bench.machine_load()})")
    for label, _ in AGENTS:
        cpu, wall = samples[label]
        print(_bench.row(f"{label}: fake's CPU", [c * 1000 for c in cpu], width=44, fmt="7.1f"))
        print(_bench.row(f"{label}: spawn → session/new", [w * 1000 for w in wall], width=44, fmt="7.1f"))
    relays, floor = (samples[label][0] for label, _ in AGENTS)
    extra = 1000 * (statistics.median(relays) - statistics.median(floor))
    print(f"connecting the relays costs the fake {extra:.0f} ms "
          f"of CPU at the median ({1000 * (min(relays) - min(floor)):.0f} ms at the min)")


def run_all(env: dict[str, str], cwd: Path, runs: int) -> dict[str, tuple[list[float], list[float]]]:
    fake = os.fspath(Path(sys.executable).with_name("fake-kiro-cli"))
    samples: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label, _ in AGENTS}

    async def rounds() -> None:
        for _, agent in AGENTS:  # warm-up: bytecode, the host's first connections
            await one_start(fake, agent, env, cwd)
        for _ in range(runs):
            for label, agent in AGENTS:
                cpu, wall = await one_start(fake, agent, env, cwd)
                samples[label][0].append(cpu)
                samples[label][1].append(wall)

    asyncio.run(rounds())
    return samples


if __name__ == "__main__":
    main()
