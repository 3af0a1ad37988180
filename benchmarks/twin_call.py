#!/usr/bin/env python3
"""One twin command against a running host: ``kirocrew cron list``, through the light client and through the SDK.

    .venv/bin/python benchmarks/twin_call.py [--runs 20]

A throwaway crew home (fake kiro-cli, every installed plugin) and its host, started once in
the background; then, interleaved so a change in the machine's load meets them all:

* ``python -c pass``: the floor;
* ``kirocrew cron list``: the console script, as a person runs it;
* the same command as ``python -c "…main(['cron', 'list'])"``, through the standard-library
  client (what twins do now) and with :func:`kirocrew_core.host.mcp_client.call_tool_text`
  (the mcp SDK's ``ClientSession``, what they did before) patched in its place.

For each: wall time and the child's CPU time (user + sys, from ``getrusage`` of waited
children; median/p90/min), and the host's CPU per call (``/proc/<pid>/stat``, Linux, mean: its
clock ticks are 10 ms). Bytecode cached in a throwaway prefix, as for an installed wheel.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import (
    fake_kiro_environment,
    kirocrew_argv,
    machine_load,
    row,
    start_host,
    stop_host,
    use_environment,
    with_bytecode_cache,
)

_CRON_LIST = "from kirocrew_core.cli import main\nmain(['cron', 'list'])\n"
_THROUGH_THE_SDK = ("import asyncio\nfrom kirocrew_core.host import mcp_client, tool_client\n"
                    "tool_client.call_text = lambda *call: asyncio.run(mcp_client.call_tool_text(*call))\n")


def _host_cpu_secs(pid: int) -> float:
    """The host's user + sys CPU seconds so far (0 where ``/proc`` does not say)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (USER_HZ = 100)


def _once(cmd: list[str], host_pid: int) -> tuple[float, float, float]:
    """``(wall ms, child CPU ms, host CPU ms)`` of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    host_before = _host_cpu_secs(host_pid)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{cmd[-1]!r} exited {done.returncode}:\n{done.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000, (_host_cpu_secs(host_pid) - host_before) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    python = sys.executable
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "kirocrew cron list (console script)": [*kirocrew_argv(), "cron", "list"],
        "cron list, light client": [python, "-c", _CRON_LIST],
        "cron list, mcp SDK client": [python, "-c", _THROUGH_THE_SDK + _CRON_LIST],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        use_environment(with_bytecode_cache(fake_kiro_environment(root), root))
        host_pid = int(start_host()["pid"])
        try:
            for cmd in commands.values():  # warm the bytecode cache and the host's first connection per server
                subprocess.run(cmd, capture_output=True, check=True)
            wall: dict[str, list[float]] = {label: [] for label in commands}
            cpu: dict[str, list[float]] = {label: [] for label in commands}
            host: dict[str, list[float]] = {label: [] for label in commands}
            print(machine_load())
            for _ in range(args.runs):
                for label, cmd in commands.items():
                    took, used, served = _once(cmd, host_pid)
                    wall[label].append(took)
                    cpu[label].append(used)
                    host[label].append(served)
            print(machine_load())
        finally:
            stop_host()
    floor = statistics.median(wall["python -c pass"])
    floor_cpu = statistics.median(cpu["python -c pass"])
    for label in commands:
        print(row(f"{label}: wall", wall[label], width=44, fmt="7.1f")
              + f"   ({statistics.median(wall[label]) / floor:.1f}x the floor)")
        print(row(f"{label}: CPU", cpu[label], width=44, fmt="7.1f")
              + f"   ({statistics.median(cpu[label]) / floor_cpu:.1f}x the floor)")
        print(f"{'':44} host CPU per call: mean {statistics.fmean(host[label]):.1f} ms")
    light, sdk = "cron list, light client", "cron list, mcp SDK client"
    print(f"light client saves {statistics.median(cpu[sdk]) - statistics.median(cpu[light]):.0f} ms of CPU and "
          f"{statistics.median(wall[sdk]) - statistics.median(wall[light]):.0f} ms of wall time per twin call "
          "(medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
