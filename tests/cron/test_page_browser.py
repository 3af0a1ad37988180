"""The Cron page in headless Chromium against one real ``kirocrew serve`` shared by the module.

A job is added through the form (a refusal shown at its field first), listed with its schedule
in words and next run, paused and resumed, run now (a command job: ``echo``, no kiro-cli needed)
until its history row appears, edited, and removed after the confirmation. Screenshots land in the
test's ``screenshots`` folder (run with ``--basetemp`` to keep them).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from kirocrew_testing.browser import Dashboard, OpenedPage, ServedGateway, pages_for_a_test, shared_dashboard
from playwright.sync_api import expect

TIMEOUT_MS = 30_000
WAIT_SECS = 60


@pytest.fixture(scope="module")
def module_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cron-page-browser")


@pytest.fixture(scope="module")
def module_dashboard(served: ServedGateway, module_root: Path, chromium_path: str) -> Iterator[Dashboard]:
    with shared_dashboard(served, module_root / "screenshots", chromium_path, "/cron") as shared:
        yield shared


@pytest.fixture
def dashboard(module_dashboard: Dashboard) -> Iterator[Dashboard]:
    """The module's browser; every page a test opened is closed when it ends (no renderer outlives it)."""
    with pages_for_a_test(module_dashboard) as pages:
        yield pages


@pytest.fixture(scope="module")
def workspace(module_root: Path) -> Path:
    path = module_root / "work"
    path.mkdir(exist_ok=True)
    return path


def job_named(owner: httpx.Client, name: str) -> dict[str, Any] | None:
    return next((job for job in owner.get("/api/cron/jobs").json()["jobs"] if job["name"] == name), None)


def clean(opened: OpenedPage) -> None:
    """No policy violation, and no console error but the refusals the test provoked on purpose."""
    assert opened.csp_violations() == []
    assert [e for e in opened.console_errors if "status of 400" not in e] == []


def test_a_job_is_added_listed_paused_run_edited_and_removed_on_the_page(
        dashboard: Dashboard, owner: httpx.Client, workspace: Path) -> None:
    for left in owner.get("/api/cron/jobs").json()["jobs"]:  # the host is the module's: other tests may have run
        assert owner.delete(f"/api/cron/jobs/{left['id']}").json()["ok"] is True
    opened = dashboard.open("/cron")
    page = opened.page
    expect(page.get_by_text("No cron jobs yet.")).to_be_visible()
    dashboard.screenshot(opened, "cron-empty-light")

    form = page.locator("#add-form")
    form.get_by_label("Name").fill("disk-report")
    form.get_by_label("Run a shell command (no agent)").check()
    form.get_by_label("Command", exact=True).fill("echo disk-ok")
    form.get_by_label("Interval").fill("2")
    form.get_by_label("Unit").select_option(label="hours")
    page.get_by_text("More settings").click()
    form.get_by_label("Time zone").fill("Mars/Base")
    form.get_by_label("Workspace").fill(str(workspace))
    form.get_by_role("button", name="Add job").click()
    error = page.locator("#add-timezone-error")
    expect(error).to_contain_text("invalid_timezone")
    expect(form.get_by_label("Time zone")).to_have_attribute("aria-invalid", "true")
    dashboard.screenshot(opened, "cron-form-error-light")
    assert job_named(owner, "disk-report") is None, "a refused form stores nothing"

    form.get_by_label("Time zone").fill("")
    form.get_by_role("button", name="Add job").click()
    row = page.locator("#jobs tbody tr", has_text="disk-report")
    expect(row).to_be_visible(timeout=TIMEOUT_MS)
    job = job_named(owner, "disk-report")
    assert job is not None and job["schedule"]["every_secs"] == 7200 and job["workspace"] == str(workspace)
    expect(row).to_contain_text(job["schedule_text"])
    expect(row.locator("td[data-label='Next run']")).to_contain_text(re.compile(r"\(in (1h 5\dm|2h \d+m)\)"))
    expect(form.get_by_label("Name")).to_have_value("")  # the form is ready for the next job

    row.get_by_role("button", name="Pause disk-report").click()
    expect(row.locator("td[data-label='State']")).to_contain_text("paused")
    row.get_by_role("button", name="Resume disk-report").click()
    expect(row.locator("td[data-label='State']")).to_contain_text("active")

    row.get_by_role("link", name="disk-report").click()
    expect(page).to_have_url(re.compile(rf"/cron/{job['id']}$"))
    page.get_by_role("button", name="Run disk-report now").click()
    deadline = time.monotonic() + WAIT_SECS
    while not (h := owner.get(f"/api/cron/jobs/{job['id']}").json()["history"]) or h[0]["status"] == "running":
        assert time.monotonic() < deadline, h
        time.sleep(0.1)
    page.reload()
    history = page.locator("table.history tbody tr")
    expect(history).to_have_count(1)
    expect(history.first).to_contain_text("manual")
    expect(history.first).to_contain_text("success")
    expect(history.first).to_contain_text("disk-ok")

    edit = page.locator("#edit-form")
    edit.get_by_label("Name").fill("disk-report-daily")
    edit.get_by_label("Cron expression").check()
    edit.get_by_label("Expression", exact=True).fill("0 6 * * *")
    edit.get_by_role("button", name="Save changes").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("disk-report-daily", timeout=TIMEOUT_MS)
    changed = owner.get(f"/api/cron/jobs/{job['id']}").json()["job"]
    assert changed["schedule"] == {"kind": "cron", "every_secs": None, "at_ts": None, "cron_expr": "0 6 * * *"}
    expect(page.locator("#job")).to_contain_text(changed["schedule_text"])
    dashboard.screenshot(opened, "cron-job-light")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Remove disk-report-daily").click()
    expect(page).to_have_url(re.compile(r"/cron$"), timeout=TIMEOUT_MS)
    expect(page.locator("#jobs")).not_to_contain_text("disk-report-daily")
    assert job_named(owner, "disk-report-daily") is None
    clean(opened)


def test_an_instant_picked_in_the_browsers_time_zone_becomes_the_jobs_one_shot_time(
        dashboard: Dashboard, owner: httpx.Client, workspace: Path) -> None:
    opened = dashboard.open("/cron")
    page = opened.page
    target = time.time() + 3 * 3600
    local = page.evaluate("""(seconds) => {
        const d = new Date(seconds * 1000), pad = (n) => String(n).padStart(2, "0");
        const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
        return `${day}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
    }""", target)
    form = page.locator("#add-form")
    form.get_by_label("Name").fill("one-shot")
    form.get_by_label("Message").fill("remind me")
    form.get_by_label("At an instant").check()
    form.get_by_label("Instant", exact=True).fill(local)
    form.get_by_role("button", name="Add job").click()
    expect(page.locator("#jobs tbody tr", has_text="one-shot")).to_be_visible(timeout=TIMEOUT_MS)
    job = job_named(owner, "one-shot")
    assert job is not None and job["schedule"]["kind"] == "at"
    assert abs(job["schedule"]["at_ts"] - target) < 60, "the minute picked, in the browser's zone"
    clean(opened)


def test_an_open_page_shows_a_job_made_elsewhere_at_its_next_refresh(
        dashboard: Dashboard, owner: httpx.Client) -> None:
    opened = dashboard.open("/cron", controlled_clock=True)
    page = opened.page
    expect(page.locator("#jobs h2")).to_be_visible()
    assert owner.post("/api/cron/jobs", json={"name": "made-by-the-cli", "command": "true", "every": 600}) \
        .status_code == 200
    page.clock.fast_forward(11_000)
    expect(page.locator("#jobs tbody tr", has_text="made-by-the-cli")).to_be_visible(timeout=TIMEOUT_MS)
    clean(opened)


def test_the_page_reads_well_in_the_dark_scheme_and_on_a_narrow_screen(
        dashboard: Dashboard, owner: httpx.Client, workspace: Path) -> None:
    bodies: list[dict[str, Any]] = [
        {"name": "standup", "message": "Summarise yesterday's commits", "cron_expr": "0 9 * * 1-5",
         "timezone": "Europe/Paris"},
        {"name": "disk", "command": "df -h /", "every": 3600, "cwd": str(workspace)},
        {"name": "a job whose name is long enough to need wrapping in its table cell", "message": "x", "every": 120}]
    for body in bodies:
        assert owner.post("/api/cron/jobs", json=body).status_code == 200
    paused = job_named(owner, bodies[2]["name"])
    assert paused is not None
    owner.post(f"/api/cron/jobs/{paused['id']}/pause", json={})

    def rows(opened: OpenedPage) -> None:
        for body in bodies:
            expect(opened.page.locator("#jobs tbody tr", has_text=body["name"])).to_have_count(1)

    wide = dashboard.open("/cron")
    rows(wide)
    dashboard.screenshot(wide, "cron-page-light")
    views: tuple[tuple[Literal["light", "dark"], int], ...] = (("dark", 1280), ("light", 400))
    for scheme, width in views:
        opened = dashboard.open("/cron", color_scheme=scheme, width=width)
        rows(opened)
        assert opened.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), \
            f"the page scrolls sideways at {width}px"
        dashboard.screenshot(opened, f"cron-page-{scheme}-{width}px")
        clean(opened)
