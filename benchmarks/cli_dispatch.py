#!/usr/bin/env python3
"""CPU and wall time of a plugin command's ``--help`` imported alone, next to every plugin loaded.

    .venv/bin/python benchmarks/cli_dispatch.py [--runs 20]

``kirocrew cron --help`` and ``kirocrew knowledge --help`` (an entry-point plugin's group and a core
built-in plugin's) each run two ways, interleaved with ``python -c pass`` so a change in the machine's
load meets them all: from a current command index that names the command's owner (only that plugin's
module is imported), and from the same index with every owner removed (the root then loads every
plugin, as each plugin command did before). Runs under a throwaway HOME; CPU is the child's user + sys
(``os.wait4``). Prints median, p90 and min of each and the ratios of the medians to the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _bench import cli_homes, row


def _once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + sys) milliseconds of one run of ``cmd``."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = (time.perf_counter() - start) * 1000
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {child.returncode}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    from kirocrew_core import home

    with cli_homes() as (exe, env):
        subprocess.run([str(exe), "--help"], env=env, capture_output=True, check=True)
        index = home.cli_index_file()
        with_owners = index.read_bytes()
        document = json.loads(with_owners)
        for command in document["commands"]:
            command[3] = None
        without_owners = json.dumps(document).encode()
        runs: dict[str, tuple[list[str], bytes | None]] = {"python -c pass": ([sys.executable, "-c", "pass"], None)}
        for name in ("cron", "knowledge"):
            runs[f"kirocrew {name} --help, only its plugin"] = ([str(exe), name, "--help"], with_owners)
            runs[f"kirocrew {name} --help, every plugin"] = ([str(exe), name, "--help"], without_owners)
        walls: dict[str, list[float]] = {label: [] for label in runs}
        cpus: dict[str, list[float]] = {label: [] for label in runs}
        for cmd, content in runs.values():  # warm the page cache and the bytecode
            if content is not None:
                index.write_bytes(content)
            _once(cmd, env)
        for _ in range(args.runs):
            for label, (cmd, content) in runs.items():
                if content is not None:
                    index.write_bytes(content)  # keeps the file's owner-only mode
                wall, cpu = _once(cmd, env)
                walls[label].append(wall)
                cpus[label].append(cpu)
    floor_wall = statistics.median(walls["python -c pass"])
    floor_cpu = statistics.median(cpus["python -c pass"])
    print("wall:")
    for label, values in walls.items():
        print(f"  {row(label, values, width=44, fmt='7.1f')}   {statistics.median(values) / floor_wall:4.1f}x")
    print("CPU (user + sys):")
    for label, values in cpus.items():
        print(f"  {row(label, values, width=44, fmt='7.1f')}   {statistics.median(values) / floor_cpu:4.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
