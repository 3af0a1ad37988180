"""Every host start brings enabled apps up to date: their agents' framework-owned keys and their backend's port.

Each test enables an app with the real CLI, changes something behind its back, then starts a real
host (what a relay does when none answers) and waits for the host's startup render.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kirocrew_core import home

STDIO = {"command": "/bin/sh", "args": ["-c", "exit 0"]}
WAIT_SECS = 60.0


def install(template: dict[str, Any], **fields: Any) -> None:
    folder = home.apps_dir() / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "agents").mkdir(exist_ok=True)
    (folder / "agents" / "notes.json").write_text(json.dumps(template))
    document = {"manifestVersion": 1, "name": "notes", "mcpServers": {"search": STDIO},
                "agents": [{"path": "~/notes/.kiro/agents/notes.json", "template": "agents/notes.json"}], **fields}
    (folder / "manifest.json").write_text(json.dumps(document))


def template(*excluded: str) -> dict[str, Any]:
    return {"name": "notes", "tools": ["@notes:search"],
            "managedToolPolicy": {"exclude": [f"@notes:search/{tool}" for tool in excluded]}}


def agent_path() -> Path:
    return home.user_home() / "notes" / ".kiro" / "agents" / "notes.json"


def agent() -> dict[str, Any]:
    return json.loads(agent_path().read_text())


def wait_for(what: str, ready: Callable[[], Any]) -> Any:
    """Poll ``ready`` until it is truthy (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + WAIT_SECS
    while not (value := ready()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def start_host_and_wait_for_its_render() -> None:
    from kirocrew_core.host import client

    pong = client.ensure_host()
    assert "mcp.agent-file" in pong["services"]
    wait_for("the host's startup render", lambda: not client.ping()["busy"])


def test_a_tightened_template_reaches_an_enabled_install_at_host_start_and_user_edits_survive(kirocrew):
    install(template("delete_all"))
    assert kirocrew("apps", "enable", "notes").returncode == 0
    edited = agent()
    edited["prompt"] = "my own prompt"
    edited["mcpServers"]["notes:search"]["disabledTools"].append("mine")
    edited["includeMcpJson"] = True  # framework-owned: the refresh takes it back
    agent_path().write_text(json.dumps(edited))
    install(template("delete_all", "purge"))  # the app's update tightens its policy

    start_host_and_wait_for_its_render()

    refreshed = wait_for("the refreshed app agent", lambda: "purge" in json.dumps(agent()) and agent())
    assert refreshed["mcpServers"]["notes:search"]["disabledTools"] == ["delete_all", "mine", "purge"]
    assert refreshed["prompt"] == "my own prompt" and refreshed["includeMcpJson"] is False
    assert "managedToolPolicy" not in refreshed


def test_a_backend_that_came_up_since_the_enable_gets_its_server_at_host_start(kirocrew):
    install(template(), mcpServers={"search": STDIO, "web": {"url": "http://127.0.0.1:{port}/mcp"}},
            backend={"portFile": "~/.notes/port"})
    assert kirocrew("apps", "enable", "notes").returncode == 0
    assert "notes:web" not in json.loads(home.rendered_agent_file().read_text())["mcpServers"]

    with socket.socket() as backend:
        backend.bind(("127.0.0.1", 0))
        backend.listen()
        port = backend.getsockname()[1]
        (home.user_home() / ".notes").mkdir()
        (home.user_home() / ".notes" / "port").write_text(str(port))
        start_host_and_wait_for_its_render()
        servers = json.loads(home.rendered_agent_file().read_text())["mcpServers"]

    assert servers["notes:web"] == {"url": f"http://127.0.0.1:{port}/mcp"} and servers["notes:search"] == STDIO


def test_a_manifest_broken_since_the_enable_is_logged_at_host_start_and_the_app_kept_as_registered(kirocrew):
    from kirocrew_core.host import paths

    install(template("delete_all"))
    assert kirocrew("apps", "enable", "notes").returncode == 0
    before = agent_path().read_bytes()
    (home.apps_dir() / "notes" / "manifest.json").write_text('{"manifestVersion": 1, "name": "notes", "x": 1}')

    start_host_and_wait_for_its_render()

    wait_for("the app's problem in the host log",
             lambda: "app notes at host start: app_manifest_invalid" in paths.log_file().read_text())
    assert json.loads(home.rendered_agent_file().read_text())["mcpServers"]["notes:search"] == STDIO
    assert agent_path().read_bytes() == before
