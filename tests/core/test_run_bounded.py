"""``kirocrew_testing.aio.run_bounded``: a coroutine run from a synchronous test, in any order of a module's tests."""

from __future__ import annotations

import asyncio
import threading

import pytest
from kirocrew_testing.aio import run_bounded


async def _thread_name(value: str) -> tuple[str, str]:
    await asyncio.sleep(0)
    return value, threading.current_thread().name


def test_it_runs_on_a_fresh_loop_in_the_tests_own_thread() -> None:
    assert run_bounded(_thread_name("done"), 10) == ("done", threading.current_thread().name)


def test_beside_a_loop_marked_running_on_this_thread_it_runs_in_a_thread_of_its_own() -> None:
    """Where Playwright's sync API keeps its loop marked running, ``asyncio.run`` refuses; run_bounded does not."""

    async def inside_a_running_loop() -> tuple[str, str]:
        refused = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="running event loop"):
            asyncio.run(refused)  # what a test calling asyncio.run would meet
        refused.close()
        return run_bounded(_thread_name("done"), 10)

    value, thread = asyncio.run(inside_a_running_loop())
    assert value == "done" and thread.startswith("run_bounded")


def test_a_hung_coroutine_fails_with_timeout_error() -> None:
    with pytest.raises(TimeoutError):
        run_bounded(asyncio.sleep(60), 0.05)
