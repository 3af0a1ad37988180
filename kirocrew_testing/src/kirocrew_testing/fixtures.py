"""pytest fixtures for kirocrew plugin authors (``pytest_plugins = ["kirocrew_testing.fixtures"]``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core.home import RENDERED_AGENT

from kirocrew_testing.homes import IsolatedHomes, isolate_homes, stop_host
from kirocrew_testing.write_guard import install as install_write_guard


@pytest.fixture
def isolated_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[IsolatedHomes]:
    """HOME, KIRO_HOME and KIROCREW_HOME under this test's tmp dir; plugin env switches cleared.

    At teardown it stops the host of that crew home, and of the ``KIROCREW_HOME`` the test
    switched to, if one runs (:func:`kirocrew_testing.homes.stop_host`): a relay the test ran
    starts a host in the background, and no process may outlive its test.
    """
    homes = isolate_homes(monkeypatch, tmp_path)
    yield homes
    for crew_home in dict.fromkeys((str(homes.crew_home), os.environ.get("KIROCREW_HOME") or "")):
        if crew_home:
            stop_host(crew_home)


@pytest.fixture
def write_guard(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Fail the test if anything in this process writes outside the temporary directories."""
    guard = install_write_guard()
    guard.arm(tmp_path, tmp_path_factory.getbasetemp())
    yield guard
    violations = guard.disarm()
    if violations:
        shown = "\n  ".join(violations[:20])
        pytest.fail(f"test wrote outside its temporary directories:\n  {shown}", pytrace=False)


@contextlib.contextmanager
def _as_process_manager(load_entrypoints: bool) -> Iterator[Any]:
    from kirocrew_core import plugins

    pm = plugins.make_plugin_manager(load_entrypoints=load_entrypoints, env={})
    previous = plugins._default_manager
    plugins._default_manager = pm
    try:
        yield pm
    finally:
        plugins._default_manager = previous


@pytest.fixture
def plugin_manager(isolated_homes: IsolatedHomes) -> Iterator[Any]:
    """A fresh manager with core built-ins only, installed as the process-wide default.

    Register test plugins by name, ``plugin_manager.register(MyPlugin(), name="my-plugin")``,
    and ``plugin_manager.unregister(name="my-plugin")``; everything is forgotten
    after the test. Use :func:`kirocrew_core.plugins.make_plugin_manager` directly
    to load the installed entry points too.
    """
    with _as_process_manager(load_entrypoints=False) as pm:
        yield pm


@pytest.fixture
def installed_plugin_manager(isolated_homes: IsolatedHomes) -> Iterator[Any]:
    """A fresh manager with every installed entry-point plugin, as the process-wide default."""
    with _as_process_manager(load_entrypoints=True) as pm:
        yield pm


@pytest.fixture
def gateway_client(plugin_manager: Any) -> Iterator[Any]:
    """A Starlette ``TestClient`` on the gateway, signed in as the owner.

    ``gateway_client.owner_token`` is the token; the client already carries the
    session cookie and sends ``Origin`` like the dashboard does.
    """
    from starlette.testclient import TestClient

    from kirocrew_core.gateway.app import create_app
    from kirocrew_core.gateway.auth import SESSION_COOKIE, load_or_create_token

    token = load_or_create_token()
    app = create_app(plugin_manager)
    base = "http://127.0.0.1"
    with TestClient(app, base_url=base, headers={"Origin": base}) as client:
        client.cookies.set(SESSION_COOKIE, token)
        client.owner_token = token  # type: ignore[attr-defined]
        yield client


def kirocrew_argv(*args: str) -> list[str]:
    """argv of the installed ``kirocrew`` console script (or ``python -m kirocrew_core`` from a bare checkout)."""
    exe = Path(sys.executable).with_name("kirocrew")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "kirocrew_core", *args]


def run_kirocrew(*args: str, env: dict[str, str] | None = None, timeout: float = 60,
                 input: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real ``kirocrew`` console command in a subprocess with the test's environment."""
    return subprocess.run(
        kirocrew_argv(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ if env is None else env),
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        cwd=cwd,
    )


@pytest.fixture
def kirocrew(isolated_homes: IsolatedHomes) -> Any:
    """Call ``kirocrew(*args, env=None, cwd=None)`` to run the real CLI in a subprocess under the isolated homes."""
    return run_kirocrew

from kirocrew_testing.mcp_fixtures import *  # noqa: E402, F403
from kirocrew_testing.browser import (  # noqa: E402, F401 - the dashboard-in-a-browser fixtures
    chromium_path,
    conversations_state_dir,
    dashboard,
    dashboard_demo_env,
    gateway_args,
    gateway_command,
    gateway_env,
    hosted_gateway_env,
    module_chromium,
    module_dashboard,
    module_homes,
    module_hosted_homes,
    module_owner,
    module_root,
    module_served,
    module_served_homes,
    owner_client,
    served_gateway,
)


# -- fake kiro-cli (kirocrew_testing.fake_kiro) -----------------------------------


class FakeKiroCli:
    """The fake ``kiro-cli`` on PATH and in ``KIRO_CLI_PATH`` for one test.

    ``path`` is an executable named ``kiro-cli`` in a tmp bin dir. Switch
    behaviours for every process the test starts with ``switch(launcher="1")``
    (a ``KIRO_FAKE_`` prefix is added, so ``unknown_load="error"`` sets
    ``KIRO_FAKE_UNKNOWN_LOAD``), or build an explicit environment for one spawn
    with ``env(silent="1")``. ``run(*args)`` runs it to completion.
    """

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = path
        self.bin_dir = path.parent
        self._monkeypatch = monkeypatch

    @property
    def sandboxable_path(self) -> Path:
        """The fake as a sandboxed run should launch it: the console script next to this Python if installed.

        The wrapper in ``path`` lives in the test's tmp dir and execs this Python; when the
        checkout itself is under ``/tmp`` (a clean clone there), a sandbox's private ``/tmp``
        re-exposes only the launched file's own tree, so the interpreter the wrapper names would
        be hidden and the fake could not start. The console script lives in the environment it
        runs, so exposing its tree exposes both.
        """
        return fake_kiro_executable(self.bin_dir)

    @staticmethod
    def switch_name(name: str) -> str:
        upper = name.upper()
        return upper if upper.startswith("KIRO_FAKE_") else f"KIRO_FAKE_{upper}"

    def switch(self, **switches: str) -> None:
        for name, value in switches.items():
            self._monkeypatch.setenv(self.switch_name(name), str(value))

    def env(self, **switches: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({self.switch_name(name): str(value) for name, value in switches.items()})
        return env

    def argv(self, *args: str) -> list[str]:
        return [str(self.path), *args]

    def run(self, *args: str, env: dict[str, str] | None = None,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout,
                              env=env if env is not None else dict(os.environ), stdin=subprocess.DEVNULL)


def fake_kiro_wrapper(bin_dir: Path) -> Path:
    """An executable ``kiro-cli`` in ``bin_dir`` that runs the fake with this Python; its path.

    A wrapper rather than a symlink to the console script: it works from a source checkout too.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "kiro-cli"
    if not path.exists():
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kirocrew_testing.fake_kiro "$@"\n')
        path.chmod(0o755)
    return path


def fake_kiro_executable(bin_dir: Path) -> Path:
    """The fake as a host or a sandboxed run should launch it: the console script next to this Python if
    installed, else :func:`fake_kiro_wrapper` in ``bin_dir`` (see :attr:`FakeKiroCli.sandboxable_path`)."""
    console = Path(sys.executable).with_name("fake-kiro-cli")
    return console if console.exists() else fake_kiro_wrapper(bin_dir)


@pytest.fixture
def fake_kiro_cli(isolated_homes: IsolatedHomes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKiroCli:
    """Put the fake kiro-cli first on PATH and in ``KIRO_CLI_PATH`` (see :class:`FakeKiroCli`)."""
    path = fake_kiro_wrapper(tmp_path / "fake-kiro-bin")
    bin_dir = path.parent
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("KIRO_CLI_PATH", str(path))
    from kirocrew_testing.fake_kiro import switches as fake_switches

    for name in (*fake_switches.ALL, fake_switches.ROLE):
        monkeypatch.delenv(name, raising=False)
    return FakeKiroCli(path, monkeypatch)


#: The rendered ``kirocrew`` agent as a render leaves it, without kirocrew's managed MCP servers.
LEAN_KIROCREW_AGENT: dict[str, Any] = {
    "name": RENDERED_AGENT,
    "description": "kiro-cli sessions run by kirocrew (a test's lean render: no MCP servers)",
    "tools": ["*"],
    "includeMcpJson": False,
    "mcpServers": {},
}


def write_lean_kirocrew_agent() -> Path:
    """Write :data:`LEAN_KIROCREW_AGENT` as the rendered agent file of the current Kiro home; its path.

    Every run without a mode runs as ``kirocrew``, and no kiro-cli starts on it unless its file is
    there. A full render (``kirocrew_mcp.render.rebuild_agent_config``) also mounts kirocrew's managed
    servers, whose relays every session then starts, and those start a host: tests about something
    else use this lean file. A host started later renders the managed servers into it.
    """
    import json

    from kirocrew_core import home

    path = home.rendered_agent_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(LEAN_KIROCREW_AGENT, indent=2) + "\n")
    return path


@pytest.fixture
def lean_kirocrew_agent(isolated_homes: IsolatedHomes) -> Path:
    """The rendered ``kirocrew`` agent file, lean (:func:`write_lean_kirocrew_agent`); its path."""
    return write_lean_kirocrew_agent()


ECHO_HOST_PLUGIN_SOURCE = "from kirocrew_testing.servers.hosted_echo import host_mcp_servers, host_services\n"


@pytest.fixture
def echo_host_env(tmp_path: Path, isolated_homes: IsolatedHomes) -> dict[str, str]:
    """An environment whose host also serves the test server ``kirocrew-echo`` (``kirocrew mcp-echo``).

    See :mod:`kirocrew_testing.servers.hosted_echo`. The plugin is a throwaway distribution
    on ``PYTHONPATH``, so hosts started without this environment never serve it.
    """
    from kirocrew_testing.distributions import make_plugin_distribution

    root = make_plugin_distribution(tmp_path / "echo-host-plugin", distribution="kirocrew-echo-host",
                                    module="kirocrew_echo_host_plugin", source=ECHO_HOST_PLUGIN_SOURCE,
                                    entry_point="echo-host")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    return env
