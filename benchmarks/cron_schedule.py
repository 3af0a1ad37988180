#!/usr/bin/env python3
"""Cost of planning kirocrew-cron jobs: ``fire_time(next_due(job, now))`` over 1,000 mixed jobs, and catch-up.

    .venv/bin/python benchmarks/cron_schedule.py [--jobs 1000] [--passes 30]

Pure computation under a throwaway crew home (``cron.timezone`` set): a plan pass is what the
scheduler does for every enabled job when it re-plans. Prints the pass's median/p90/min next to a
floor of as many float additions, per kind of job, and ``plan_catch_up`` for the same jobs after a
day and after a year of downtime (bounded work: a minutely interval missed for a year is counted,
not walked).
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from _bench import row

if TYPE_CHECKING:
    from kirocrew_cron.model import Job

ZONES = ("", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney", "UTC")
EXPRESSIONS = ("*/15 * * * *", "0 9 * * MON-FRI", "30 2 * * *", "0 * * * *", "5,35 8-18 * * 1-5", "0 0 1 * *",
               "@daily", "0 9 * * 1#2")
INTERVALS = (60, 300, 3600, 7200, 86_400, 5400)


def mixed_jobs(count: int, now: float) -> list[Job]:
    from kirocrew_cron.model import Job, Schedule

    skips = tuple((date(2026, 12, 20) + timedelta(days=i)).isoformat() for i in range(14))
    jobs = []
    for i in range(count):
        kind = i % 10
        base = Job(id=f"{i:08x}", name=f"job {i}", schedule=Schedule("every", every_secs=3600),
                   created_ts=now - 86_400 - i, timezone=ZONES[i % len(ZONES)])
        if kind < 5:
            job = replace(base, schedule=Schedule("cron", cron_expr=EXPRESSIONS[i % len(EXPRESSIONS)]))
        elif kind < 9:
            job = replace(base, schedule=Schedule("every", every_secs=INTERVALS[i % len(INTERVALS)]))
        else:
            job = replace(base, schedule=Schedule("at", at_ts=now + 3600 + i))
        if i % 7 == 0:
            job = replace(job, skip_dates=skips)
        jobs.append(job)
    return jobs


def timed(fn: Callable[[], object], passes: int) -> list[float]:
    samples = []
    for _ in range(passes):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=30)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-cron-") as tmp:
        os.environ["HOME"] = str(Path(tmp) / "home")
        os.environ["KIROCREW_HOME"] = str(Path(tmp) / "crew")
        from kirocrew_core.config import set_value

        import kirocrew_cron.settings  # noqa: F401 - declares cron.timezone
        from kirocrew_cron import schedule

        set_value("cron.timezone", "Europe/Paris")
        now = 1_798_000_000.0  # 2026-12-23, inside the skip dates of every 7th job
        jobs = mixed_jobs(args.jobs, now)
        values = [float(i) for i in range(args.jobs)]

        def floor() -> None:
            total = 0.0
            for value in values:
                total += value

        def plan() -> None:
            for job in jobs:
                due = schedule.next_due(job, now)
                if due is not None:
                    schedule.fire_time(job, due)

        plan()  # warm: zones loaded, expressions described once
        floor_samples = timed(floor, args.passes)
        plan_samples = timed(plan, args.passes)
        print(row(f"floor: {args.jobs} float additions", floor_samples, width=44, fmt="8.3f"))
        print(row(f"plan pass: {args.jobs} mixed jobs", plan_samples, width=44, fmt="8.3f"))
        floor_median = sorted(floor_samples)[len(floor_samples) // 2]
        plan_median = sorted(plan_samples)[len(plan_samples) // 2]
        print(f"{'':44} ratio to the floor {plan_median / floor_median:.0f}x, "
              f"{plan_median * 1000 / args.jobs:.1f} µs per job")
        for kind in ("cron", "every", "at"):
            subset = [job for job in jobs if job.schedule.kind == kind]
            samples = timed(functools.partial(next_due_all, schedule, subset, now), args.passes)
            per_job = sorted(samples)[len(samples) // 2] * 1000 / max(1, len(subset))
            print(row(f"  next_due, {len(subset)} {kind} jobs", samples, width=44, fmt="8.3f")
                  + f"   {per_job:.1f} µs per job")
        for label, down in (("a day", 86_400.0), ("a year", 365 * 86_400.0)):
            later = [replace(job, catch_up=("skip", "once", "all")[i % 3], created_ts=now - down - 1)
                     for i, job in enumerate(jobs)]
            samples = timed(functools.partial(catch_up_all, schedule, later, now), max(3, args.passes // 10))
            print(row(f"plan_catch_up, {args.jobs} jobs down {label}", samples, width=44, fmt="8.1f"))


def next_due_all(schedule: ModuleType, jobs: list[Job], now: float) -> None:
    for job in jobs:
        schedule.next_due(job, now)


def catch_up_all(schedule: ModuleType, jobs: list[Job], now: float) -> None:
    for job in jobs:
        schedule.plan_catch_up(job, now, 60.0)

if __name__ == "__main__":
    main()
