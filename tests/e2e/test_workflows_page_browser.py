"""The Workflows page in headless Chromium, against one real ``kirocrew serve`` whose host runs workflows.

A run is started with the real ``kirocrew workflow run`` (its process sandboxed by bubblewrap); the page lists
it with a Cancel button, Cancel stops it, and the redrawn table says so; a failed run shows where and why.
Screenshots land in the module's ``screenshots`` folder (run with ``--basetemp`` to keep them).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kirocrew_testing.browser import Dashboard, ServedGateway, pages_for_a_test, shared_dashboard
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.homes import IsolatedHomes
from kirocrew_testing.requirements import executable
from playwright.sync_api import expect

TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def module_served_homes(module_hosted_homes: tuple[ServedGateway, IsolatedHomes]) -> tuple[ServedGateway,
                                                                                          IsolatedHomes]:
    return module_hosted_homes


@pytest.fixture(scope="module")
def module_dashboard(module_served: ServedGateway, module_root: Path, chromium_path: str) -> Iterator[Dashboard]:
    with shared_dashboard(module_served, module_root / "screenshots", chromium_path, "/workflows") as shared:
        yield shared


@pytest.fixture
def dashboard(module_dashboard: Dashboard) -> Iterator[Dashboard]:
    with pages_for_a_test(module_dashboard) as pages:
        yield pages


def _workflow(homes: IsolatedHomes, *args: str) -> subprocess.CompletedProcess[str]:
    """``kirocrew workflow …`` as the owner, in the served homes (so on the module's host)."""
    env = {**os.environ, "HOME": str(homes.user_home), "KIRO_HOME": str(homes.kiro_home),
           "KIROCREW_HOME": str(homes.crew_home)}
    return subprocess.run(kirocrew_argv("workflow", *args), env=env, cwd=homes.root, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_workflows_page_lists_runs_and_cancel_stops_a_running_one(
        dashboard: Dashboard, module_homes: IsolatedHomes, module_owner: httpx.Client, tmp_path: Path) -> None:
    executable("bwrap", apt="bubblewrap")
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text('META = {"name": "sleeper"}\n\nasync def workflow(ctx):\n    await ctx.sleep(3600)\n')
    raiser = tmp_path / "raiser.py"
    raiser.write_text('META = {"name": "raiser"}\n\nasync def workflow(ctx):\n    raise ValueError("no good")\n')
    failed = _workflow(module_homes, "run", str(raiser), "--wait")
    assert failed.returncode == 1, failed.stderr
    started = _workflow(module_homes, "run", str(sleeper))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()

    opened = dashboard.open("/workflows")
    page = opened.page
    rows = page.locator("#workflows tbody tr")
    expect(rows).to_have_count(2)
    running = page.locator(f"#workflows tbody tr[data-id='{run_id}']")
    expect(running.locator("td[data-label='Status']")).to_have_text("running")
    expect(page.locator("#workflows tbody tr", has_text="raiser").locator("td[data-label='Status']")).to_contain_text(
        "where: exec: ValueError: no good")
    dashboard.screenshot(opened, "workflows-page-light")
    running.get_by_role("button", name=f"Cancel {run_id}").click()
    expect(running.locator("td[data-label='Status']")).to_have_text("cancelled", timeout=TIMEOUT_MS)
    expect(page.get_by_role("button", name=f"Cancel {run_id}")).to_have_count(0)
    assert module_owner.get(f"/api/workflows/runs/{run_id}").json()["status"] == "cancelled"
    assert opened.csp_violations() == [] and opened.console_errors == []
    for scheme, width in (("dark", 1280), ("light", 400)):
        shown = dashboard.open("/workflows", color_scheme=scheme, width=width)  # type: ignore[arg-type]
        expect(shown.page.locator("#workflows tbody tr")).to_have_count(2)
        assert shown.page.evaluate("document.documentElement.scrollWidth") <= width  # nothing scrolls sideways
        dashboard.screenshot(shown, f"workflows-page-{scheme}-{width}px")
