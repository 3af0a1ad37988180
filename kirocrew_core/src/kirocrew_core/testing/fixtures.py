"""pytest fixtures for kirocrew plugin authors (``pytest_plugins = ["kirocrew_core.testing.fixtures"]``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core.testing.homes import IsolatedHomes, isolate_homes
from kirocrew_core.testing.write_guard import install as install_write_guard


@pytest.fixture
def isolated_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> IsolatedHomes:
    """HOME, KIRO_HOME and KIROCREW_HOME under this test's tmp dir; plugin env switches cleared."""
    return isolate_homes(monkeypatch, tmp_path)


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


def run_kirocrew(*args: str, env: dict[str, str] | None = None, timeout: float = 60,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real ``kirocrew`` console command in a subprocess with the test's environment."""
    exe = Path(sys.executable).with_name("kirocrew")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core.cli"]
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ if env is None else env),
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
    )


@pytest.fixture
def kirocrew(isolated_homes: IsolatedHomes) -> Any:
    """Call ``kirocrew(*args, env=None)`` to run the real CLI in a subprocess under the isolated homes."""
    return run_kirocrew
