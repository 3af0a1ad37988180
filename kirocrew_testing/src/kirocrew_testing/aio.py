"""Running a coroutine from a synchronous test, with a bound that only stops a hung test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


def run_bounded(coro: Awaitable[T], timeout: float) -> T:
    """Run ``coro`` to completion on a fresh event loop, failing (``TimeoutError``) after ``timeout`` seconds.

    The bound never measures anything: it turns a hang into a failure that names where it hung.
    """

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())
