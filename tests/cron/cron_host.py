"""Helpers of the tests that drive a :class:`~kirocrew_cron.service.CronHost` in process on a manual clock.

Imported as ``cron_host`` with this folder on ``sys.path`` (``--import-mode=importlib``), as ``cron_e2e`` is.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kirocrew_cron.clock import ManualClock
from kirocrew_cron.model import Job, Schedule
from kirocrew_cron.service import CronHost
from kirocrew_cron.store import CronStore

# 2026-03-02 12:00:00 UTC, a Monday
T0 = 1_772_452_800.0


def command_job(store: CronStore, command: str, workspace: Path, **fields: Any) -> Job:
    """A stored strict command job (every minute unless ``schedule`` is given), made at :data:`T0`."""
    fields.setdefault("schedule", Schedule("every", every_secs=60))
    job = Job(id=store.new_id(), name=fields.pop("name", "job"), command=command, workspace=str(workspace),
              created_ts=T0, updated_ts=T0, strict_schedule=True, **fields)
    return store.add(job)


async def settle(host: CronHost) -> None:
    """Until the scheduler sleeps with nothing to re-plan and no run (or catch-up) task is left."""
    while True:
        await asyncio.sleep(0.01)
        if host.scheduler_on and not host.scheduler.idle.is_set():
            continue
        if host.tasks():
            await asyncio.wait(host.tasks())
            continue
        return


async def started(store: CronStore, clock: ManualClock, **kwargs: Any) -> CronHost:
    """A started host, settled."""
    host = CronHost(store, clock, **kwargs)
    await host.start()
    await settle(host)
    return host
