"""Fixtures shared by the connections tests: registry providers from a test plugin, the probe fixture server."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core.contributions import RegistryLoader
from kirocrew_testing.plugins import register_plugin
from kirocrew_testing.mcp_fixtures import OAuthMCPServer
from kirocrew_testing.servers import OAUTH_MODULE, LaunchedServer, launch

from kirocrew_connections.registry import clear_registry_cache

HERE = Path(__file__).parent


@pytest.fixture
def imports_mint_engine() -> Callable[..., bool]:
    """``imports_mint_engine(*modules)``: whether importing ``modules`` in a fresh interpreter imports the mint."""
    import subprocess
    import sys

    def check(*modules: str) -> bool:
        code = f"import sys, {', '.join(modules)}; print('kirocrew_connections.mint' in sys.modules)"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return {"True": True, "False": False}[done.stdout.strip()]

    return check


@pytest.fixture
def connections_plugins(plugin_manager: Any) -> Iterator[Any]:
    """The mcp and connections plugins on the test's manager, before the gateway app is built."""
    import kirocrew_connections.plugin
    import kirocrew_mcp.plugin

    plugin_manager.register(kirocrew_mcp.plugin, name="mcp")
    plugin_manager.register(kirocrew_connections.plugin, name="connections")
    clear_registry_cache()
    yield plugin_manager
    clear_registry_cache()


@pytest.fixture
def providers(plugin_manager: Any) -> Iterator[list[dict[str, Any]]]:
    """Entries appended here are the test's registry providers (read when the command runs)."""
    entries: list[dict[str, Any]] = []
    register_plugin(plugin_manager, "fixture-providers",
                    registry_loaders=lambda: [RegistryLoader("connections.providers", lambda: entries)])
    clear_registry_cache()
    yield entries
    clear_registry_cache()


@pytest.fixture(scope="module")
def _module_oauth_mcp_server() -> Iterator[OAuthMCPServer]:
    """One default OAuth fixture server per module: each start costs about 0.5 CPU-s (the SDK's import)."""
    server = OAuthMCPServer(launch(OAUTH_MODULE, "--port", "0"))
    yield server
    server.stop()


@pytest.fixture
def oauth_mcp_server(_module_oauth_mcp_server: OAuthMCPServer) -> OAuthMCPServer:
    """The kit's ``oauth_mcp_server``, shared by the module and reset before each test (homes are per test)."""
    _module_oauth_mcp_server.reset()
    return _module_oauth_mcp_server


@pytest.fixture
def probe_server() -> Iterator[Callable[[dict[str, Any]], str]]:
    """``probe_server(config)`` starts ``probe_fixture_server.py`` and returns its base URL; all stop after the test."""
    started: list[LaunchedServer] = []

    def start(config: dict[str, Any]) -> str:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
        server = launch("probe_fixture_server", "--config", json.dumps(config), env=env)
        started.append(server)
        return server.ready

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def poll_mint() -> Callable[[Any, str, set[str]], dict[str, Any]]:
    """``poll_mint(client, slug, states)``: ``GET /api/connections/mint`` until the row reaches one of ``states``."""
    import time

    def poll(client: Any, slug: str, states: set[str]) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while True:
            body: dict[str, Any] = client.get("/api/connections/mint", params={"slug": slug}).json()
            if body["state"] in states:
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"the mint of {slug} stayed {body}")
            time.sleep(0.05)

    return poll
