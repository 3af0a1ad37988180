"""The MCP servers page in a real headless Chromium (Playwright, Debian's chromium) against a real `kirocrew serve`.

Every flow is checked where it lands: the scope files on disk (byte for byte when nothing may
change) and, for Apply & Restart, the kiro-cli process of a real conversation worker in the host.
The served gateway loads every installed plugin, so the companion's Claude scope is on the page
too. Elements are found by role and accessible name. The tests share one ``kirocrew serve`` and its
homes (a host costs seconds to start); each starts with the files it may change as a fresh install
has them: no scope file, and the agent file (and the render's record of it) the host wrote at its start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.browser import Dashboard, ServedGateway
from kirocrew_testing.fixtures import run_kirocrew
from kirocrew_testing.homes import IsolatedHomes, isolate_homes
from kirocrew_testing.host_lines import wait_for
from kirocrew_testing.mcp_fixtures import stdio_server_argv

from kirocrew_core import home
from kirocrew_core.host import client as host_client
from kirocrew_mcp.hosted import SERVICE_NAME

WAIT_SECS = 60.0  # a bound on waiting for a process to exit, never a timing assertion
RECORD_PID = "!shell echo $PPID >> kiro.pids\n"


def files_a_test_may_change() -> tuple[Path, ...]:
    """The scope files, the rendered agent file and the render's record of it, in the current homes."""
    from kirocrew_mcp import render

    return (home.kiro_global_mcp_file(), home.crew_mcp_file(), home.user_home() / ".claude.json",
            home.rendered_agent_file(), render.state_file())


@pytest.fixture(scope="module")
def as_the_host_started(module_hosted_homes: tuple[ServedGateway, IsolatedHomes]) -> dict[Path, bytes | None]:
    """What :func:`files_a_test_may_change` held when the module's host had started and rendered (None: absent).

    The host answers before its startup render (in the background) has written the agent file: read too soon,
    the agent file would be put back as absent before every test, and a session on it refused."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in module_hosted_homes[0].env.items():
            patch.setenv(key, value)
        isolate_homes(patch, module_hosted_homes[1].root)
        wait_for(lambda: not any(reason.startswith(SERVICE_NAME) for reason in host_client.ping()["busy"]), WAIT_SECS)
        started = {path: path.read_bytes() if path.exists() else None for path in files_a_test_may_change()}
        assert started[home.rendered_agent_file()] is not None, "the host's startup render wrote no agent file"
    return started


@pytest.fixture
def gateway_env(module_hosted_homes: tuple[ServedGateway, IsolatedHomes]) -> dict[str, str]:
    """The served host's environment: a ``kirocrew`` command run with it asks that host."""
    return module_hosted_homes[0].env


@pytest.fixture
def dashboard(module_chromium: Any, module_hosted_homes: tuple[ServedGateway, IsolatedHomes],
              as_the_host_started: dict[Path, bytes | None], tmp_path: Path) -> Iterator[Dashboard]:
    """Pages of the module's gateway, with this process (and the CLI it runs) in the served environment,
    and the files a test may change put back as they were when the host had started."""
    served = module_hosted_homes[0]
    environment = {key: value for key, value in served.env.items() if key != "PYTEST_CURRENT_TEST"}
    with pytest.MonkeyPatch.context() as patch:
        for key in set(os.environ) - set(environment) - {"PYTEST_CURRENT_TEST"}:
            patch.delenv(key)
        for key, value in environment.items():
            patch.setenv(key, value)
        for path, data in as_the_host_started.items():
            if path.is_dir():
                shutil.rmtree(path)  # a test turns the agent file into a directory
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(data)
        with Dashboard(module_chromium, served, tmp_path / "screenshots") as pages:
            yield pages


def fixture_spec() -> dict[str, Any]:
    argv = stdio_server_argv()
    return {"command": argv[0], "args": argv[1:]}


def write(path: Path, document: Any) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (document if isinstance(document, str) else json.dumps(document, indent=2) + "\n").encode()
    path.write_bytes(data)
    return data


def rebuild() -> None:
    """Render the agent file as the host does at start (the files were written after it started)."""
    done = run_kirocrew("mcp", "rebuild")
    assert done.returncode == 0, done.stderr


def snapshot() -> dict[str, bytes | None]:
    paths = [home.crew_mcp_file(), home.kiro_global_mcp_file(), home.user_home() / ".claude.json"]
    return {str(p): p.read_bytes() if p.exists() else None for p in paths}


def badge(page: Any, server: str, label: str) -> Any:
    return page.get_by_role("button", name=re.compile(rf"^{re.escape(server)} in {re.escape(label)}($| \()"))


def status_says(page: Any, text: str) -> None:
    page.locator("#announcer").filter(has_text=text).wait_for()


def open_mcp(dashboard: Any, **kwargs: Any) -> Any:
    opened = dashboard.open("/mcp", **kwargs)
    assert opened.page.get_by_role("heading", name="MCP servers", level=1).is_visible()
    return opened


def row(page: Any, name: str) -> Any:
    return page.locator(f'tr[data-name="{name}"]')


def two_servers_in_the_kiro_global() -> dict[str, bytes | None]:
    """``srv`` and ``keep`` declared in the Kiro global file (beside a key kirocrew must keep); the snapshot before."""
    write(home.kiro_global_mcp_file(), {"theme": "dark", "mcpServers": {"srv": fixture_spec(), "keep": fixture_spec()}})
    rebuild()
    return snapshot()


def test_a_staged_badge_click_is_discarded_without_a_write_then_applied_to_the_kiro_global(dashboard) -> None:
    before = two_servers_in_the_kiro_global()
    opened = open_mcp(dashboard)
    page = opened.page
    kiro = badge(page, "srv", "Kiro")
    assert kiro.get_attribute("aria-pressed") == "true"
    assert badge(page, "srv", "Claude").get_attribute("aria-pressed") == "false"  # the seam scope, from the list

    kiro.click()
    changes = page.get_by_role("region", name="1 staged change")
    changes.wait_for()
    assert "srv: remove it from Kiro." in changes.inner_text()
    assert "the preservation rule" in changes.inner_text()  # kirocrew keeps srv, no other file declares it
    assert badge(page, "srv", "Kiro").get_attribute("aria-pressed") == "false"
    dashboard.screenshot(opened, "mcp-staged-light")

    page.get_by_role("button", name="Discard").click()
    status_says(page, "Discarded 1 staged change; nothing was written")
    assert snapshot() == before  # byte for byte
    assert changes.is_hidden()
    assert badge(page, "srv", "Kiro").get_attribute("aria-pressed") == "true"

    badge(page, "srv", "Kiro").click()
    page.get_by_role("button", name="Apply", exact=True).click()
    status_says(page, "Applied: 1 of 1 change applied")
    on_disk = json.loads(home.kiro_global_mcp_file().read_text())
    assert on_disk["theme"] == "dark" and set(on_disk["mcpServers"]) == {"keep"}  # the user's other keys kept
    assert json.loads(home.crew_mcp_file().read_text())["mcpServers"]["srv"] == fixture_spec()  # preserved
    assert "Kept for kirocrew" in row(page, "srv").inner_text()
    assert badge(page, "srv", "Kiro").get_attribute("aria-pressed") == "false"
    assert badge(page, "srv", "kirocrew").get_attribute("aria-pressed") == "true"
    assert opened.csp_violations() == [] and opened.console_errors == []


def test_a_tool_toggle_is_staged_and_applied_as_disabled_tools(dashboard) -> None:
    write(home.crew_mcp_file(), {"mcpServers": {"echo": fixture_spec()}})
    opened = open_mcp(dashboard)
    page = opened.page
    page.get_by_role("button", name="Probe echo").click()
    status_says(page, "Probed echo: Online")
    page.get_by_text("2 tools", exact=True).click()
    tool = page.get_by_role("button", name=re.compile(r"^echo tool tool_1"))
    assert tool.get_attribute("aria-pressed") == "true"
    tool.click()
    assert "turn tool tool_1 off" in page.get_by_role("region", name="1 staged change").inner_text()
    page.get_by_role("button", name="Apply", exact=True).click()
    status_says(page, "Applied: 1 of 1 change applied")
    assert json.loads(home.crew_mcp_file().read_text())["mcpServers"]["echo"]["disabledTools"] == ["tool_1"]
    assert "2 tools (1 off)" in row(page, "echo").inner_text()
    assert opened.console_errors == []


def test_a_custom_server_is_refused_at_its_field_then_added(dashboard) -> None:
    opened = open_mcp(dashboard)
    page = opened.page
    name = page.get_by_label("Name", exact=True)
    name.fill("bad name!")
    page.get_by_label("Command", exact=True).fill("/bin/cat")
    page.get_by_role("button", name="Add server").click()
    page.get_by_role("alert").filter(has_text="Not added").wait_for()
    assert name.get_attribute("aria-invalid") == "true"
    assert name.evaluate("e => e === document.activeElement")
    described = name.evaluate("e => e.getAttribute('aria-describedby').split(' ')"
                              ".map(id => document.getElementById(id).textContent).join(' ')")
    assert "Use letters, digits" in described
    assert not home.crew_mcp_file().exists()

    name.fill("notes")
    page.get_by_label("Talks to a URL (http)").check()
    url = page.get_by_label("URL", exact=True)
    url.fill("http://mcp.example.com/mcp")  # passes the page's check; the API refuses plain http off this machine
    page.get_by_role("button", name="Add server").click()
    page.get_by_role("alert").filter(has_text="plain http://").wait_for()
    assert url.get_attribute("aria-invalid") == "true" and name.get_attribute("aria-invalid") is None
    assert "plain http:// is allowed only" in page.locator("#add-url-error").inner_text()
    assert not home.crew_mcp_file().exists()

    url.fill("https://mcp.example.com/mcp")
    page.get_by_label("Headers", exact=True).fill("X-Team: crew")
    page.get_by_role("button", name="Add server").click()
    status_says(page, "Added notes")
    stored = json.loads(home.crew_mcp_file().read_text())["mcpServers"]["notes"]
    assert stored == {"url": "https://mcp.example.com/mcp", "headers": {"X-Team": "crew"}}
    assert row(page, "notes").is_visible()
    assert page.get_by_label("Name", exact=True).input_value() == ""  # the form was reset
    assert opened.csp_violations() == []


def test_uninstall_asks_first_and_then_removes_the_server_from_every_scope(dashboard) -> None:
    before = two_servers_in_the_kiro_global()
    opened = open_mcp(dashboard)
    page = opened.page
    page.get_by_role("button", name="Uninstall srv").click()
    dialog = page.get_by_role("dialog", name="Uninstall srv?")
    dialog.wait_for()
    dashboard.screenshot(opened, "mcp-uninstall-light", full_page=False)
    dialog.get_by_role("button", name="Cancel").click()
    assert dialog.is_hidden() and snapshot() == before

    page.get_by_role("button", name="Uninstall srv").click()
    dialog.get_by_role("button", name="Uninstall", exact=True).click()
    status_says(page, "Uninstalled srv: 1 of 1 change applied")
    on_disk = json.loads(home.kiro_global_mcp_file().read_text())
    assert on_disk["theme"] == "dark" and set(on_disk["mcpServers"]) == {"keep"}
    assert row(page, "srv").count() == 0 and row(page, "keep").is_visible()


def test_kirocrew_servers_left_in_the_kiro_global_are_named_and_removed_from_the_page(dashboard) -> None:
    write(home.kiro_global_mcp_file(), {"theme": "dark", "mcpServers": {
        "kirocrew-core": {"command": "/old/install/kirocrew", "args": ["mcp-core"]},
        "kirocrew-cron": {"command": "/old/install/kirocrew", "args": ["mcp-cron"]},
        "keep": fixture_spec()}})
    opened = open_mcp(dashboard)
    page = opened.page
    section = page.get_by_role("region", name="kirocrew's own servers in a shared file")
    text = section.inner_text()
    assert ".kiro/settings/mcp.json" in text and "kirocrew-core" in text and "kirocrew-cron" in text
    dashboard.screenshot(opened, "mcp-stale-managed-light", full_page=False)
    narrow = open_mcp(dashboard, color_scheme="dark", width=400)
    assert narrow.page.evaluate("document.documentElement.scrollWidth") <= 400
    dashboard.screenshot(narrow, "mcp-stale-managed-dark-400", full_page=False)

    page.get_by_role("button", name="Remove them").click()
    status_says(page, "Removed kirocrew-core, kirocrew-cron from")
    on_disk = json.loads(home.kiro_global_mcp_file().read_text())
    assert on_disk == {"theme": "dark", "mcpServers": {"keep": fixture_spec()}}
    assert section.count() == 0  # the page was re-read: nothing stale is left to offer
    assert opened.csp_violations() == [] and opened.console_errors == []


def test_a_malformed_scope_file_is_shown_as_a_problem_and_left_alone(dashboard) -> None:
    broken = write(home.kiro_global_mcp_file(), '{"mcpServers": {"half": ')
    write(home.crew_mcp_file(), {"mcpServers": {"mine": fixture_spec()}})
    opened = open_mcp(dashboard)
    page = opened.page
    problem = page.get_by_role("alert").filter(has_text="Problems")
    assert "is malformed" in problem.inner_text() and ".kiro/settings/mcp.json" in problem.inner_text()
    assert badge(page, "mine", "Kiro").count() == 0  # an unknowable scope offers no button to stage a removal
    assert home.kiro_global_mcp_file().read_bytes() == broken


def test_apply_and_restart_closes_an_idle_conversation_worker(dashboard, gateway_env, tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    done = run_kirocrew("conversations", "--json", "delegate", "--name", "idle", "--workspace", str(workspace),
                        RECORD_PID + "!say idle", env=gateway_env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert host_client.ping()["pid"] == dashboard.gateway.process.pid  # the served gateway is the host
    [pid] = [int(line) for line in (workspace / "kiro.pids").read_text().split()]
    assert not host_client.pid_gone(pid), "the worker keeps its kiro-cli while idle"

    opened = open_mcp(dashboard)
    page = opened.page
    page.get_by_role("button", name="Apply & Restart").click()
    status_says(page, "Restarted: 1 kiro-cli session closed or replaced")
    assert "Restarted: 1" in page.locator("#restart-result").inner_text()
    deadline = time.monotonic() + WAIT_SECS
    while not host_client.pid_gone(pid):
        assert time.monotonic() < deadline, "the idle worker's kiro-cli did not exit after the restart"
        time.sleep(0.05)
    assert opened.console_errors == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_page_reads_well_in_light_and_dark_and_at_400_px(dashboard, scheme) -> None:
    write(home.kiro_global_mcp_file(), {"mcpServers": {"github": {"url": "https://api.githubcopilot.com/mcp/"},
                                                       "notes": fixture_spec()}})
    write(home.crew_mcp_file(), {"mcpServers": {"echo": {**fixture_spec(), "disabledTools": ["tool_2"]},
                                                "broken": {"command": "/nonexistent/server"}}})
    rebuild()
    opened = open_mcp(dashboard, color_scheme=scheme)
    page = opened.page
    page.get_by_role("button", name="Probe MCP servers").click()
    status_says(page, "Probed")
    page.get_by_text("2 tools (1 off)", exact=True).click()
    badge(page, "notes", "Claude").click()
    dashboard.screenshot(opened, f"mcp-{scheme}")
    assert opened.csp_violations() == [] and opened.console_errors == []
    narrow = open_mcp(dashboard, color_scheme=scheme, width=400)
    assert narrow.page.evaluate("document.documentElement.scrollWidth") <= 400
    dashboard.screenshot(narrow, f"mcp-{scheme}-400")


def test_a_change_refused_at_apply_is_shown_with_its_code_at_its_row_and_nothing_is_written(dashboard) -> None:
    write(home.kiro_global_mcp_file(), {"mcpServers": {"srv": fixture_spec()}})
    rebuild()
    opened = open_mcp(dashboard)
    page = opened.page
    kiro = badge(page, "srv", "Kiro")
    kiro.focus()
    page.keyboard.press("Space")  # a badge stages from the keyboard too
    assert "srv: remove it from Kiro." in page.get_by_role("region", name="1 staged change").inner_text()
    # The crew store breaks after the page loaded: the preservation copy would have to go there.
    write(home.crew_mcp_file(), '{"mcpServers": [')
    before = snapshot()
    page.get_by_role("button", name="Apply", exact=True).click()
    page.locator("#alerts").filter(has_text="refused: srv (scope_file_malformed)").wait_for()
    assert "Refused (scope_file_malformed)" in row(page, "srv").inner_text()
    assert snapshot() == before
    assert page.get_by_role("alert").filter(has_text="Problems").is_visible()  # the re-read list says why


def test_apply_and_restart_applies_the_staged_changes_first_and_reports_a_failed_render(dashboard) -> None:
    write(home.kiro_global_mcp_file(), {"theme": "dark", "mcpServers": {"srv": fixture_spec()}})
    rebuild()
    opened = open_mcp(dashboard)
    page = opened.page
    badge(page, "srv", "Claude").click()
    agent = home.rendered_agent_file()
    agent.unlink()
    agent.mkdir()  # the render after the apply cannot read it: the restart goes ahead and says so
    page.get_by_role("button", name="Apply & Restart").click()
    result = page.locator("#restart-result")
    result.filter(has_text="rendering the MCP servers failed").wait_for()
    assert "(agent_file_unreadable)" in result.inner_text()
    assert json.loads((home.user_home() / ".claude.json").read_text())["mcpServers"]["srv"] == fixture_spec()
    assert json.loads(home.kiro_global_mcp_file().read_text())["theme"] == "dark"
