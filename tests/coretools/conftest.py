"""Fixtures for kirocrew-core: the end-to-end harness (:mod:`kirocrew_testing.core_sessions`).

``crew`` is a :class:`~kirocrew_testing.core_sessions.CrewHarness` over the test's isolated
homes with the ``kirocrew`` agent rendered (it mounts ``kirocrew-core``); ``run_async`` runs a
coroutine with a hang bound::

    def test_something(crew, run_async):
        async def main():
            async with crew.conversations() as conv:
                run = await crew.delegate(conv, "!mcp kirocrew-core probe_whoami {}\\n!say done")
            ...
        run_async(main())
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import contextlib

import pytest
from kirocrew_testing.aio import run_bounded
from kirocrew_testing.core_sessions import CrewHarness, ProcessTree, process_tree

T = TypeVar("T")
TEST_TIMEOUT_SECS = 90.0


def run_async(coro: Awaitable[T], timeout: float = TEST_TIMEOUT_SECS) -> T:
    return run_bounded(coro, timeout)


@pytest.fixture(name="run_async")
def _run_async() -> Callable[..., Any]:
    return run_async


@pytest.fixture(name="process_tree")
def _process_tree() -> Any:
    """``process_tree()``: a live :class:`ProcessTree` (``sh`` and its ``sleep``), torn down after the test."""
    with contextlib.ExitStack() as stack:
        def make() -> ProcessTree:
            return stack.enter_context(process_tree())

        yield make


@pytest.fixture
def crew(fake_kiro_cli: Any, tmp_path: Path) -> CrewHarness:
    """The harness: the fake kiro-cli, the probe tools, the ``kirocrew`` agent rendered."""
    import os

    env = dict(os.environ)
    env["KIRO_CLI_PATH"] = str(fake_kiro_cli.sandboxable_path)
    from kirocrew_mcp.render import rebuild_agent_config

    harness = CrewHarness(tmp_path, env, rebuild_agent_config)
    harness.render_agent()
    return harness
