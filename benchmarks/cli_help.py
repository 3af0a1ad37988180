#!/usr/bin/env python3
"""Wall time of ``kirocrew --help`` next to ``python -c pass`` and ``python -c "import click"``.

    .venv/bin/python benchmarks/cli_help.py [--runs 40]

Runs under a throwaway HOME so no real config is read, the commands interleaved so a change
in the machine's load meets them all. ``kirocrew --help`` is timed twice: from a current
command index (what every help after the first costs) and with the index removed before each
run (the one help that rebuilds it after an install changed, loading every plugin). Prints
median, p90 and min of each, the ratio of the medians to ``python -c pass`` (the floor) and to
``import click`` (what any click CLI pays), the target, and the largest imports of the help path.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from _bench import cli_homes, row

#: ``kirocrew --help`` (index current) at most this many times ``python -c pass``, at the median.
TARGET_RATIO = 6.0


def _once(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000


def _row(label: str, samples: list[float]) -> str:
    return row(label, samples, width=34, fmt="7.1f")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    from kirocrew_core import home

    with cli_homes() as (exe, env):
        index = home.cli_index_file()
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            'python -c "import click"': [sys.executable, "-c", "import click"],
            "kirocrew --help (index current)": [str(exe), "--help"],
            "kirocrew --help (index rebuilt)": [str(exe), "--help"],
        }
        samples: dict[str, list[float]] = {label: [] for label in commands}
        for cmd in commands.values():  # warm the page cache; the help's first run writes the index
            subprocess.run(cmd, env=env, capture_output=True, check=True)
        if not index.is_file():
            print(f"kirocrew --help wrote no index at {index}", file=sys.stderr)
            return 1
        for _ in range(args.runs):
            for label, cmd in commands.items():
                if label.endswith("(index rebuilt)"):
                    index.unlink()
                samples[label].append(_once(cmd, env))
        probe = subprocess.run(
            [sys.executable, "-X", "importtime", "-c",
             "from kirocrew_core.cli import main\ntry:\n main(['--help'])\nexcept SystemExit:\n pass"],
            env=env, capture_output=True, text=True,
        )
    for label, values in samples.items():
        print(_row(label, values))
    floor = statistics.median(samples["python -c pass"])
    click_floor = statistics.median(samples['python -c "import click"'])
    helped = statistics.median(samples["kirocrew --help (index current)"])
    rebuilt = statistics.median(samples["kirocrew --help (index rebuilt)"])
    print(f"ratio to python -c pass (medians): import click {click_floor / floor:.1f}x, "
          f"--help {helped / floor:.1f}x (index current), {rebuilt / floor:.1f}x (index rebuilt)")
    print(f"--help beyond import click: {helped - click_floor:.1f} ms at the median")
    ratio = helped / floor
    print(f"target: --help (index current) <= {TARGET_RATIO:g}x python -c pass at the median -> "
          f"{'met' if ratio <= TARGET_RATIO else 'MISSED'} ({ratio:.1f}x)")
    costly = []
    for line in probe.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            costly.append((int(parts[1]), parts[2].rstrip()))
    print("largest cumulative imports of --help, index current (us):")
    for cumulative, name in sorted(costly, reverse=True)[:10]:
        print(f"  {cumulative:>8}  {name.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
