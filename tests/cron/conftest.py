"""Shared kirocrew-cron end-to-end fixtures: a crew whose sessions mount ``kirocrew-cron``, and the person's client.

``cron_crew`` is a :class:`~kirocrew_testing.core_sessions.CrewHarness` over the test's isolated
homes with the ``kirocrew`` agent rendered (it mounts ``kirocrew-core``, ``kirocrew-conversations``
and ``kirocrew-cron``); its relays start the real host on demand. Drive it with::

    def test_something(cron_crew, run_async):
        async def main():
            async with cron_crew.conversations() as conv:
                run = await cron_crew.delegate(conv, cron_line("cron_add", name="n", message="m", every=3600))
            async with person(cron_crew) as owner:          # a kirocrew command on the host socket
                text, code = await owner.call("cron_list", json=True)
            async with cron_crew.relay("mcp-cron") as anyone:  # a plain MCP client, no session
                ...
        run_async(main())

The helpers (``cron_line``, ``person``, ``tool_outcomes``) are in ``cron_e2e.py`` beside this file.
``served`` and ``owner`` are one ``kirocrew serve`` and the owner's HTTP client shared by a module's tests
(the Cron page's), for a module that defines a module-scoped ``module_root``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from kirocrew_testing.aio import run_bounded
from kirocrew_testing.browser import ServedGateway, owner_http_client, serving_in_own_homes
from kirocrew_testing.core_sessions import CrewHarness

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")
TEST_TIMEOUT_SECS = 120.0


def run_async(coro: Awaitable[T], timeout: float = TEST_TIMEOUT_SECS) -> T:
    return run_bounded(coro, timeout)


@pytest.fixture(name="run_async")
def _run_async() -> Callable[..., Any]:
    return run_async


@pytest.fixture
def cron_crew(fake_kiro_cli: Any, tmp_path: Path) -> CrewHarness:
    """The harness: the fake kiro-cli, the ``kirocrew`` agent rendered with every managed server, and the lean
    ``cron-session`` agent (``cron_e2e.SESSION_AGENT``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # as the modules that use it do
    from cron_e2e import cron_harness

    return cron_harness(fake_kiro_cli, tmp_path)


@pytest.fixture(scope="module")
def served(module_root: Path) -> Iterator[ServedGateway]:
    """``kirocrew serve`` in homes of its own under the module's ``module_root`` (a module-scoped fixture the
    module defines), shared by the module's tests: a host costs seconds to start."""
    with serving_in_own_homes(module_root) as (gateway, _):
        yield gateway


@pytest.fixture(scope="module")
def owner(served: ServedGateway) -> Iterator[httpx.Client]:
    """The owner's HTTP client on ``served`` (Bearer token)."""
    with owner_http_client(served) as client:
        yield client
