"""The scheduler's time: the wall clock in the host, a clock the tests move.

Everything that asks "what time is it" or "wake me at T" in kirocrew-cron takes a
:class:`Clock`, so schedules, time zones, jitter, skip dates and catch-up are tested by
moving a :class:`ManualClock` instead of sleeping.

Deadlines are wall-clock instants (Unix seconds), not loop-monotonic ones: a monotonic
clock stops while the machine sleeps, so a timer armed on it would fire late by the length
of the sleep. :class:`SystemClock` therefore never sleeps longer than :data:`MAX_SLEEP_SECS`
at once and re-reads the wall clock each time; a scheduler that wakes after a suspend sees
the true time and handles what it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

#: The longest single sleep: how late a wake after a machine suspend can be noticed, at worst.
MAX_SLEEP_SECS = 300.0


class Clock(Protocol):
    def now(self) -> float:
        """The current wall-clock time, Unix seconds."""
        ...

    async def sleep_until(self, deadline: float, wake: asyncio.Event) -> None:
        """Return at ``deadline`` (wall clock), when ``wake`` is set, or earlier (callers re-check ``now``)."""
        ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float, wake: asyncio.Event) -> None:
        delay = min(max(0.0, deadline - time.time()), MAX_SLEEP_SECS)
        if delay <= 0 or wake.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=delay)


class ManualClock:
    """A clock that moves only when told (:meth:`advance`, :meth:`set`); sleepers wake when it passes them.

    A sleeper is a future per :meth:`sleep_until` call, resolved by the move that passes its deadline,
    so cancelling a sleeper (a stopping scheduler) leaves nothing behind.
    """

    def __init__(self, start: float) -> None:
        self._now = start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float, wake: asyncio.Event) -> None:
        if self._now >= deadline or wake.is_set():
            return
        entry = (deadline, asyncio.get_running_loop().create_future())
        self._sleepers.append(entry)
        waker = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({entry[1], waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waker.cancel()
            self._sleepers.remove(entry)

    async def set(self, when: float) -> None:
        """Move to ``when`` (never backwards) and wake every sleeper whose deadline passed."""
        self._now = max(self._now, when)
        for deadline, moved in self._sleepers:
            if deadline <= self._now and not moved.done():
                moved.set_result(None)
        await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        await self.set(self._now + seconds)
