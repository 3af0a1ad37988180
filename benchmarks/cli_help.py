#!/usr/bin/env python3
"""Wall time of ``kirocrew --help`` next to ``python -c pass`` on the same machine.

    .venv/bin/python benchmarks/cli_help.py [--runs 40]

Runs under a throwaway HOME so no real config is read. Prints median, p90 and
min for both, and the modules the help path imported (to catch a heavy import).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import row

TARGET_MS = 120.0


def _time(cmd: list[str], env: dict[str, str], runs: int) -> list[float]:
    subprocess.run(cmd, env=env, capture_output=True, check=True)  # warm the page cache
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, capture_output=True, check=True)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _row(label: str, samples: list[float]) -> str:
    return row(label, samples, width=22, fmt="7.1f")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    exe = Path(sys.executable).with_name("kirocrew")
    if not exe.exists():
        print(f"no kirocrew next to {sys.executable}; run with the project's .venv python", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HOME=home, KIRO_HOME=f"{home}/.kiro")
        env.pop("KIROCREW_HOME", None)
        baseline = _time([sys.executable, "-c", "pass"], env, args.runs)
        helped = _time([str(exe), "--help"], env, args.runs)
        probe = subprocess.run(
            [sys.executable, "-X", "importtime", "-c",
             "from kirocrew_core.cli import main\ntry:\n main(['--help'])\nexcept SystemExit:\n pass"],
            env=env, capture_output=True, text=True,
        )
    print(_row("python -c pass", baseline))
    print(_row("kirocrew --help", helped))
    median = statistics.median(helped)
    print(f"target: median <= {TARGET_MS:.0f} ms -> {'met' if median <= TARGET_MS else 'MISSED'}")
    costly = []
    for line in probe.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            costly.append((int(parts[1]), parts[2].rstrip()))
    print("largest cumulative imports (us):")
    for cumulative, name in sorted(costly, reverse=True)[:8]:
        print(f"  {cumulative:>8}  {name.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
