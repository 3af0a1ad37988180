"""Running a coroutine from a synchronous test, with a bound that only stops a hung test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def run_bounded(coro: Awaitable[T], timeout: float) -> T:
    """Run ``coro`` to completion on a fresh event loop, failing (``TimeoutError``) after ``timeout`` seconds.

    The bound never measures anything: it turns a hang into a failure that names where it hung. Where the
    test's thread already has a loop marked running (Playwright's sync API marks its own so between calls,
    for as long as a module keeps its browser open), the fresh loop runs in a thread of its own instead.
    """

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    with ThreadPoolExecutor(1, thread_name_prefix="run_bounded") as thread:
        return thread.submit(asyncio.run, bounded()).result()
