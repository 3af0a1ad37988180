"""A third-party plugin made by ``kirocrew plugin new``, installed from its wheel into a fresh environment.

The module writes ``acme`` with every contribution, builds its wheel with hatchling (as ``pip wheel`` would,
offline), makes a virtual environment that sees this suite's installed packages (the open edition; a
``.pth`` file adds their folder) and installs the wheel there, nothing else. Then: the wheel carries the
page's files; the plugin passes its own generated tests under that environment's Python; a host run by that
Python shows the page in Chromium and serves the tool and the plugin's own server to real MCP clients.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.aio import run_bounded
from kirocrew_testing.browser import Dashboard, ServedGateway, pages_for_a_test, serving_in_own_homes
from kirocrew_testing.core_sessions import McpClient, stdio_session
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.homes import IsolatedHomes
from playwright.sync_api import expect

NAME = "acme"
EVERY_SEAM = ("page", "tool", "server", "doctor")
#: Bounds a build, an install or the plugin's own test run (each takes seconds): a hang fails, nothing is timed.
STEP_TIMEOUT_SECS = 600


@dataclass(frozen=True)
class Installed:
    """The generated plugin's folder, its wheel, and the fresh environment's Python it is installed in."""

    source: Path
    wheel: Path
    python: Path

    def kirocrew(self, *args: str) -> list[str]:
        """argv of ``kirocrew`` run by the fresh environment (it has no console script: ``python -m``)."""
        return [str(self.python), "-m", "kirocrew_core", *args]


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_TIMEOUT_SECS, env=env)
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def module_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scaffolded-plugin")


@pytest.fixture(scope="module")
def installed(module_root: Path) -> Installed:
    """``acme`` written by ``kirocrew plugin new``, built as a wheel and installed (``--no-deps --no-index``)
    into a fresh virtual environment."""
    # Homes of the module's own (this runs before any test's isolation): the CLI's command index and pip's
    # cache and config stay in the module's folder, never the real home.
    homes = module_root / "cli-home"
    env = {**os.environ, "HOME": str(homes), "KIRO_HOME": str(homes / ".kiro"),
           "KIROCREW_HOME": str(homes / ".kiro" / "crew"), "PIP_NO_CACHE_DIR": "1", "PIP_NO_INPUT": "1"}
    source = module_root / "kirocrew-acme"
    _run(kirocrew_argv("plugin", "new", NAME, *(f"--{seam}" for seam in EVERY_SEAM), "--dir", str(source)), env=env)
    wheels = module_root / "wheels"
    # The suite's hatchling builds it (no build isolation): offline, and the backend the pyproject names.
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
          "--wheel-dir", str(wheels), str(source)], env=env)
    [wheel] = wheels.glob("kirocrew_acme-*.whl")
    venv = module_root / "fresh-venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site_packages = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                         .stdout.strip())
    # addsitedir, not a bare path: the suite's folder holds .pth files of its own (the editable members).
    (site_packages / "_kirocrew_suite.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel)], env=env)
    where = _run([str(python), "-c", "import kirocrew_acme; print(kirocrew_acme.__file__)"]).stdout.strip()
    assert Path(where).is_relative_to(site_packages), where  # the wheel's copy, not the source folder
    return Installed(source, wheel, python)


@pytest.fixture(scope="module")
def module_served_homes(installed: Installed, module_root: Path) -> Iterator[tuple[ServedGateway, IsolatedHomes]]:
    """One ``kirocrew serve`` run by the fresh environment's Python, in homes of its own."""
    with serving_in_own_homes(module_root, command=installed.kirocrew()) as pair:
        yield pair


def test_the_wheel_carries_the_pages_template_and_script_and_the_entry_point(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        [entry_points] = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
        declared = wheel.read(entry_points).decode()
    assert {"kirocrew_acme/templates/acme.html", "kirocrew_acme/static/acme.js", "kirocrew_acme/plugin.py"} <= names
    assert '[kirocrew.plugins]\nacme = kirocrew_acme.plugin' in declared


def test_the_plugin_passes_its_own_tests_in_the_fresh_environment(installed: Installed) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    ran = subprocess.run([str(installed.python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         cwd=installed.source, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_SECS)
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-3000:]
    # Every generated test ran: the page's two, the tool's, the server's two, the doctor check's.
    assert re.search(r"\b6 passed\b", ran.stdout), ran.stdout[-2000:]


def test_its_page_greets_in_chromium(module_dashboard: Dashboard) -> None:
    with pages_for_a_test(module_dashboard) as pages:
        opened = pages.open("/acme", width=400)
        page = opened.page
        expect(page.get_by_role("heading", name="Acme", level=1)).to_be_visible()
        expect(page.get_by_role("link", name="Acme")).to_have_attribute("aria-current", "page")
        page.get_by_label("Name").fill("Ada")
        page.get_by_role("button", name="Greet").click()
        expect(page.get_by_role("status", name="Greeting")).to_have_text("Hello, Ada, from acme.")
        expect(page.locator("#announcer")).to_have_text("Hello, Ada, from acme.")  # the shell's live region
        pages.screenshot(opened, "acme-page-400px")
        page.get_by_label("Name").fill("   ")
        page.get_by_role("button", name="Greet").click()
        expect(page.get_by_role("alert")).to_have_text(re.compile(r"a name is 1 to 80 characters \(acme_bad_name\)"))
        refused = ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]
        assert opened.csp_violations() == [] and opened.console_errors == refused


def test_its_tools_answer_real_mcp_clients_through_the_host(installed: Installed,
                                                            module_served_homes: tuple[ServedGateway,
                                                                                       IsolatedHomes],
                                                            tmp_path: Path) -> None:
    gateway, homes = module_served_homes

    async def call(command: str, tool: str, **arguments: str) -> tuple[list[str], tuple[str, str | None]]:
        stderr = tmp_path / f"{command}.stderr"
        async with stdio_session(installed.kirocrew(command), gateway.env, tmp_path, stderr) as opened:
            client = McpClient(opened.session, opened.initialize_result, stderr)
            return await client.tool_names(), await client.call(tool, **arguments)

    # run_bounded works beside the event loop Playwright's sync API keeps on this thread once a page test ran.
    core_tools, greeted = run_bounded(call("mcp-core", "acme_hello", name="Grace"), 120)
    own_tools, echoed = run_bounded(call("mcp-acme", "acme_echo", text="ping"), 120)
    assert "acme_hello" in core_tools and "send_notification" in core_tools
    assert greeted == ("Hello, Grace, from acme.", None)
    assert (own_tools, echoed) == (["acme_echo"], ("ping", None))
    # The host's startup render (in the background, so waited for) mounts the server for every crew session.
    assert _rendered_entry(homes, "kirocrew-acme")["args"][-1:] == ["mcp-acme"]


def _rendered_entry(homes: IsolatedHomes, server: str) -> dict[str, Any]:
    agent = homes.kiro_home / "agents" / "kirocrew.json"
    for _ in range(600):  # a bound on a hang, not a measurement
        servers = json.loads(agent.read_text()).get("mcpServers", {}) if agent.exists() else {}
        if server in servers:
            return dict(servers[server])
        time.sleep(0.1)
    raise AssertionError(f"{agent} never mounted {server}")
