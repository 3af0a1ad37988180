"""The scheduler loop: wake at the next fire time, fire what is due, sleep again. No fixed poll.

One asyncio task keeps a heap of each enabled job's next fire time (its next due instant plus
its jitter, :func:`kirocrew_cron.schedule.fire_time`) and sleeps on the clock until the earliest
(:meth:`Clock.sleep_until`), or until :meth:`Scheduler.changed` wakes it. A change re-plans only
the jobs it names (``changed(job_id)``); ``changed()`` re-plans all. Stale heap entries are
dropped lazily when they surface, so a re-plan is O(log n).

A due instant is *handled* once: run, or recorded ``missed`` when the job's previous run is
still going (a job never runs twice at once), and ``last_due_ts`` moves to it, so the next plan
is the instant after. A fire time found more than :data:`CATCH_UP_GRACE_SECS` in the past (the
host was down, the machine slept) goes to the job's catch-up policy instead
(:func:`kirocrew_cron.schedule.plan_catch_up`): the instants it runs have trigger ``catch-up``,
the rest one ``missed`` history row.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
from typing import TYPE_CHECKING

from kirocrew_cron.model import Job

if TYPE_CHECKING:
    from kirocrew_cron.service import CronHost

log = logging.getLogger(__name__)

#: A fire time older than this when the scheduler sees it was missed (host down, machine asleep): catch-up decides.
CATCH_UP_GRACE_SECS = 90.0


class Scheduler:
    """See the module docstring. Started and stopped by its :class:`~kirocrew_cron.service.CronHost`."""

    def __init__(self, host: CronHost) -> None:
        self.host = host
        self._heap: list[tuple[float, int, str, float]] = []  # (fire at, seq, job id, due instant)
        self._planned: dict[str, tuple[float, int, float]] = {}  # job id -> (fire at, seq, due) of its live entry
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._dirty: set[str] = set()
        self._all_dirty = True
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        #: Set while the loop sleeps with nothing left to do (tests wait on it after moving the clock).
        self.idle = asyncio.Event()

    # -- control ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._all_dirty = True
        self._task = self._loop.create_task(self._run(), name="cron-scheduler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def changed(self, job_id: str | None = None) -> None:
        """Re-plan ``job_id`` (None: every job) before the next sleep; safe from any thread."""
        with self._lock:
            if job_id is None:
                self._all_dirty = True
            else:
                self._dirty.add(job_id)
        loop, wake = self._loop, self._wake
        if loop is None or wake is None or loop.is_closed():
            return
        if _on_loop(loop):
            self._poke()
        else:
            loop.call_soon_threadsafe(self._poke)

    def _poke(self) -> None:
        self.idle.clear()
        if self._wake is not None:
            self._wake.set()

    # -- what the page shows ---------------------------------------------------------------------

    def planned(self, job_id: str) -> float | None:
        """The fire time the loop holds for ``job_id``, or None (paused, never again, or not planned yet)."""
        entry = self._planned.get(job_id)
        return entry[0] if entry is not None else None

    def planned_ids(self) -> list[str]:
        return list(self._planned)

    # -- the loop --------------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        clock = self.host.clock
        while True:
            self._wake.clear()
            try:
                await self._replan_dirty()
                await self._fire_due()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad job or a store hiccup must not stop the schedule
                log.exception("the cron scheduler failed a pass; retrying at the next wake")
            if self._wake.is_set():
                continue
            earliest = self._heap[0][0] if self._heap else clock.now() + 86_400.0
            self.idle.set()
            await clock.sleep_until(earliest, self._wake)
            self.idle.clear()

    async def _replan_dirty(self) -> None:
        with self._lock:
            everything, dirty = self._all_dirty, self._dirty
            self._all_dirty, self._dirty = False, set()
        store = self.host.store
        if everything:
            jobs = await asyncio.to_thread(store.jobs, None)
            self._heap.clear()
            self._planned.clear()
            for job in jobs:
                await self._plan(job)
            return
        for job_id in dirty:
            found = await asyncio.to_thread(store.get, job_id)
            if found is None:
                self._planned.pop(job_id, None)
            else:
                await self._plan(found)

    async def _plan(self, job: Job) -> None:
        """Put ``job``'s next fire time on the heap (or take it off); a long-missed instant goes to catch-up."""
        from kirocrew_cron import schedule

        self._planned.pop(job.id, None)
        if not job.enabled:
            return
        try:
            due = schedule.next_due(job, job.last_due_ts if job.last_due_ts is not None else job.created_ts)
            fire_at = None if due is None else schedule.fire_time(job, due)
        except Exception:  # a job the schedule cannot evaluate is skipped, not the whole plan
            log.exception("cron job %s: its next due time could not be computed", job.id)
            return
        if due is None or fire_at is None:
            return
        now = self.host.clock.now()
        if fire_at < now - CATCH_UP_GRACE_SECS:
            await self.host.catch_up(job, now)
            fresh = await asyncio.to_thread(self.host.store.get, job.id)
            if fresh is None or not fresh.enabled or fresh.last_due_ts == job.last_due_ts:
                return  # removed, paused, or nothing moved (never loop on a job catch-up cannot advance)
            await self._plan(fresh)
            return
        seq = next(self._seq)
        self._planned[job.id] = (fire_at, seq, due)
        heapq.heappush(self._heap, (fire_at, seq, job.id, due))

    async def _fire_due(self) -> None:
        now = self.host.clock.now()
        while self._heap and self._heap[0][0] <= now:
            fire_at, seq, job_id, due = heapq.heappop(self._heap)
            if self._planned.get(job_id) != (fire_at, seq, due):
                continue  # superseded by a re-plan
            del self._planned[job_id]
            job = await asyncio.to_thread(self.host.store.get, job_id)
            if job is None or not job.enabled:
                continue
            if fire_at < now - CATCH_UP_GRACE_SECS:  # the loop itself was held up (the machine slept)
                await self._plan(job)
                continue
            handled = await self.host.fire_scheduled(job, due)
            if handled is not None:
                await self._plan(handled)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
