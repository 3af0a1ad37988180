#!/usr/bin/env python3
"""Wall time of ``kirocrew learn context``, the rendered agent's agentSpawn hook, next to ``python -c pass``.

    .venv/bin/python benchmarks/lessons_context.py [--runs 40] [--lessons 200]

kiro-cli runs the hook at every session start, so its cost is added to every session's start.
Runs under a throwaway HOME holding ``--lessons`` workspace lessons (half of them for the
directory the hook event names); prints median, p90 and min for both, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import kirocrew_argv, row


def _time(cmd: list[str], env: dict[str, str], runs: int, stdin: bytes) -> list[float]:
    subprocess.run(cmd, env=env, input=stdin, capture_output=True, check=True)  # warm the page cache
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, input=stdin, capture_output=True, check=True)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--lessons", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        env = dict(os.environ, HOME=root, KIRO_HOME=f"{root}/.kiro", KIROCREW_HOME=f"{root}/crew")
        os.environ.update({k: env[k] for k in ("HOME", "KIRO_HOME", "KIROCREW_HOME")})
        from kirocrew_core.lessons import store

        here, there = Path(root, "project"), Path(root, "other")
        for n in range(args.lessons):
            store.add(store.validate_new(f"lesson {n}", scope="workspace", workspace=str(here if n % 2 else there)),
                      author=store.OWNER)
        event = json.dumps({"hook_event_name": "agentSpawn", "cwd": str(here / "src")}).encode()
        baseline = _time([sys.executable, "-c", "pass"], env, args.runs, b"")
        hook = _time([*kirocrew_argv(), "learn", "context"], env, args.runs, event)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.lessons} workspace lessons")
    print(row("python -c pass", baseline, width=24, fmt="7.1f"))
    print(row("kirocrew learn context", hook, width=24, fmt="7.1f"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
