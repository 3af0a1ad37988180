"""What the tools act on when ``kirocrew cron …`` runs them in process (``KIROCREW_NO_HOST=1``).

The host's CronHost is the store's writer and runs the jobs; without a host the command
holds the store's owner lock itself and hands the tools this stand-in: the same store,
the wall clock, nothing running and nothing to wake. Nothing fires here, so a manual run
is refused with ``host_required`` rather than pretending.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_cron.clock import SystemClock
from kirocrew_cron.errors import cron_error

if TYPE_CHECKING:
    from kirocrew_cron.model import Job, RunRecord
    from kirocrew_cron.store import CronStore


class OfflineCronHost:
    """A :class:`~kirocrew_cron.ops.JobHost` over ``store`` with no scheduler (see the module docstring)."""

    scheduler_on = False

    def __init__(self, store: CronStore) -> None:
        self._store = store
        self._clock = SystemClock()

    @property
    def store(self) -> CronStore:
        return self._store

    @property
    def clock(self) -> SystemClock:
        return self._clock

    def changed(self, job_id: str | None = None) -> None:
        """Nothing to wake: the host's scheduler plans from the store when it starts."""

    def is_running(self, job_id: str) -> bool:
        return False  # runs live in the host, and the owner lock held here says none runs

    def next_fire(self, job: Job) -> float | None:
        """When the job would fire next (jitter included), as the host's scheduler plans it."""
        from kirocrew_cron import schedule

        if not job.enabled:
            return None
        due = schedule.next_due(job, self._clock.now())
        return None if due is None else schedule.fire_time(job, due)

    async def trigger(self, job_id: str) -> RunRecord:
        raise cron_error("host_required", "running a job needs the host (unset KIROCREW_NO_HOST, or start it with "
                                          "kirocrew serve)")

