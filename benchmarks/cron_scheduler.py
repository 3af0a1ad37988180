#!/usr/bin/env python3
"""The cron scheduler with 1,000 jobs: host start, CPU while idle, and how late a due job starts.

    .venv/bin/python benchmarks/cron_scheduler.py [--runs 5] [--idle-secs 60] [--due 200]

* **Start** (in process): open the store holding 1,000 mixed jobs (intervals, cron expressions in
  several zones, one-shots; most jittered), load them and plan each one's next fire time, until
  the scheduler first sleeps. Median of ``--runs``, after one warm-up start that pays the imports.
* **Idle CPU** (a real ``kirocrew serve``): the host process's CPU seconds (``/proc/<pid>/stat``
  utime + stime) over ``--idle-secs`` with the 1,000 jobs scheduled and none due, after a
  settling pause; next to the same host started with ``--no-crons`` (no scheduler: the floor).
* **Due → start** (a real ``kirocrew serve``): ``--due`` command jobs (``true``, strict schedule)
  due at instants spread over the next ~30 s besides the 1,000; each run's history row gives
  ``started_at - due_ts``: median, p99 and max.

Linux only (``/proc``). Everything runs under a throwaway HOME with the fake kiro-cli.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _bench import fake_kiro_environment, kirocrew_argv

ZONES = ("", "Europe/Paris", "America/New_York", "Asia/Tokyo")
CRONS = ("0 9 1 1 *", "30 2 29 2 *", "0 12 25 12 *", "45 23 31 12 *", "0 0 1 7 *")  # none falls in the window


def mixed_jobs(store: object, count: int, now: float, workspace: str) -> None:
    from kirocrew_cron.model import Job, Schedule

    for n in range(count):
        kind = n % 4
        if kind == 0:
            schedule = Schedule("every", every_secs=3600 * (1 + n % 24))
        elif kind == 1:
            schedule = Schedule("every", every_secs=86_400 * (1 + n % 7))
        elif kind == 2:
            schedule = Schedule("cron", cron_expr=CRONS[n % len(CRONS)])
        else:
            schedule = Schedule("at", at_ts=now + 3600 * (2 + n % 500))
        store.add(Job(id=store.new_id(), name=f"job {n}", schedule=schedule,  # type: ignore[attr-defined]
                      message="report", timezone=ZONES[n % len(ZONES)], strict_schedule=n % 3 == 0,
                      workspace=workspace, created_ts=now - 60, updated_ts=now - 60))


async def start_once() -> float:
    from kirocrew_cron.clock import SystemClock
    from kirocrew_cron.service import CronHost
    from kirocrew_cron.store import CronStore

    began = time.perf_counter()
    store = CronStore.open()
    host = CronHost(store, SystemClock())
    await host.start()
    await host.scheduler.idle.wait()
    elapsed = time.perf_counter() - began
    assert len(host.scheduler.planned_ids()) > 900, "the jobs were not planned"
    await host.stop()
    store.close()
    return elapsed


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve(env: dict[str, str], root: Path, *args: str) -> object:
    from kirocrew_core import proc

    stderr = (root / f"serve{'-'.join(args)}.stderr").open("w")
    gateway = proc.spawn([*kirocrew_argv(), "serve", "--port", "0", *args], env=env, stderr=stderr, text=True)
    assert gateway.stdout is not None
    if "http://" not in gateway.stdout.readline():
        raise SystemExit(f"kirocrew serve did not start; see {stderr.name}")
    return gateway


def idle_cpu(env: dict[str, str], root: Path, secs: float, *args: str) -> float:
    from kirocrew_core import proc

    gateway = serve(env, root, *args)
    try:
        time.sleep(10)  # the start's own work (imports, services, the first plan) is not idling
        before = cpu_seconds(gateway.pid)  # type: ignore[attr-defined]
        time.sleep(secs)
        return (cpu_seconds(gateway.pid) - before) * 60 / secs  # type: ignore[attr-defined]
    finally:
        proc.terminate(gateway, reason="benchmark done")  # type: ignore[arg-type]


def due_delays(env: dict[str, str], root: Path, count: int) -> list[float]:
    from kirocrew_core import proc

    from kirocrew_cron.model import Job, Schedule
    from kirocrew_cron.store import CronStore, owner_lock

    first = time.time() + 25  # after the host has started
    ids = []
    with owner_lock(), CronStore.open() as store:
        for n in range(count):
            job = Job(id=store.new_id(), name=f"due {n}", schedule=Schedule("at", at_ts=first + n * 30 / count),
                      command="true", strict_schedule=True, workspace=str(root / "workspace"),
                      created_ts=time.time(), updated_ts=time.time())
            ids.append(store.add(job).id)
    gateway = serve(env, root)
    try:
        with CronStore.open() as store:
            deadline = first + 30 + 90
            while time.time() < deadline:
                time.sleep(1)
                done = [r for job_id in ids for r in store.history(job_id, 1) if r.status != "running"]
                if len(done) == count:
                    break
            rows = [r for job_id in ids for r in store.history(job_id, 1)]
    finally:
        proc.terminate(gateway, reason="benchmark done")  # type: ignore[arg-type]
    late = [r for r in rows if r.trigger != "scheduled"]
    if late:
        print(f"  ({len(late)} of {count} ran as catch-up: the host started after their instant)")
    return [(r.started_at - r.due_ts) * 1000 for r in rows if r.trigger == "scheduled" and r.due_ts is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--idle-secs", type=float, default=60.0)
    parser.add_argument("--due", type=int, default=200)
    args = parser.parse_args()
    if not Path("/proc/self/stat").exists():
        raise SystemExit("this benchmark reads /proc (Linux)")
    print(f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-cron-") as scratch:
        root = Path(scratch)
        env = fake_kiro_environment(root, state_dir=True)
        os.environ.update(env)
        from kirocrew_cron.store import CronStore, owner_lock

        with owner_lock(), CronStore.open() as store:
            mixed_jobs(store, 1000, time.time(), str(root / "workspace"))
        asyncio.run(start_once())  # warm-up: the first start also pays the imports (cronsim, the store's SQLite)
        starts = [asyncio.run(start_once()) * 1000 for _ in range(args.runs)]
        print(f"{'host start, 1,000 jobs (load + plan)':<44} median {statistics.median(starts):8.1f} ms   "
              f"min {min(starts):8.1f} ms")
        crons = idle_cpu(env, root, args.idle_secs)
        floor = idle_cpu(env, root, args.idle_secs, "--no-crons")
        print(f"{'host CPU per idle minute, 1,000 jobs':<44} {crons:8.3f} s")
        print(f"{'host CPU per idle minute, --no-crons':<44} {floor:8.3f} s   "
              f"(scheduler: {max(0.0, crons - floor):.3f} s)")
        delays = sorted(due_delays(env, root, args.due))
        if delays:
            p99 = delays[min(len(delays) - 1, int(0.99 * len(delays)))]
            print(f"{f'due -> run start, {len(delays)} jobs':<44} median {statistics.median(delays):8.1f} ms   "
                  f"p99 {p99:8.1f} ms   max {delays[-1]:8.1f} ms")
    print(f"load average {os.getloadavg()[0]:.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
