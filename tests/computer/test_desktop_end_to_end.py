"""The whole path on a real headless desktop: the real CLI (or a relay and the host) → the chokepoint → the X11
driver → the GTK3 app.

``kirocrew computer call --calls`` runs a sequence in one process, so the indices of its
``computer_get_state`` stay valid for the clicks and typing that follow; through the host they stay
valid for the rest of the MCP client's session.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import audit_records, mcp_client, text_of

from kirocrew_testing.fixtures import kirocrew_argv

APP = "fixture-app"
SECRET = "hunter2-secret"


def _kirocrew() -> str:
    return str(Path(sys.executable).with_name("kirocrew"))


def _call(env: dict[str, str], calls: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run([_kirocrew(), "computer", "call", "--json", "--calls", json.dumps(calls)],
                          env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout)


def _index(tree: str, role: str, name: str) -> int:
    match = re.search(rf"^\s*(\d+) {re.escape(role)} \"{re.escape(name)}\"", tree, re.M)
    assert match, f"no {role} {name!r} in:\n{tree}"
    return int(match.group(1))


@pytest.fixture(scope="module")
def fixture_app(desktop: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The GTK3 app, started with the module's desktop (its AT-SPI services start with it)."""
    result = tmp_path_factory.mktemp("fixture") / "result.txt"
    app = desktop.launch_fixture_app(result, rows=20)
    yield result
    app.terminate()
    app.wait(timeout=10)


@pytest.fixture
def session(desktop: Any, fixture_app: Path, tmp_path: Path) -> dict[str, Any]:
    from kirocrew_computer import keystone

    keystone.set_enabled(True)
    env = {**os.environ, **desktop.env, "TMPDIR": str(tmp_path)}
    deadline = time.monotonic() + 20
    while True:  # the app registers on the accessibility bus shortly after it starts
        code, replies = _call(env, [{"tool": "computer_list_apps", "args": {}}])
        if code == 0 and APP in replies[0]["text"]:
            break
        assert time.monotonic() < deadline, replies
        time.sleep(0.2)
    return {"env": env, "result": fixture_app}


def test_get_state_then_click_and_type_by_index_in_one_process(session):
    env, result = session["env"], session["result"]
    code, (state,) = _call(env, [{"tool": "computer_get_state", "args": {"app": APP}}])
    assert code == 0, state
    tree = state["text"]
    assert SECRET not in tree, "a password field's value is never rendered"
    assert "screenshot suppressed: the window contains a password field" in tree
    assert "Screenshot: " not in tree
    button, entry = _index(tree, "push button", "Submit"), _index(tree, "text", "Name")
    code, replies = _call(env, [
        {"tool": "computer_get_state", "args": {"app": APP}},
        {"tool": "computer_click", "args": {"app": APP, "element_index": button}},
        {"tool": "computer_type_text", "args": {"app": APP, "element_index": entry, "text": "typed by kiro"}},
    ])
    assert code == 0, replies
    deadline = time.monotonic() + 10
    while not (result.exists() and "clicked Submit" in result.read_text()):
        assert time.monotonic() < deadline, "the button handler never fired"
        time.sleep(0.1)
    assert "typed by kiro" in replies[-1]["text"], "the refreshed state shows the typed text"


def test_typing_into_the_password_field_is_refused_and_the_cli_exits_non_zero(session):
    env = session["env"]
    code, (state,) = _call(env, [{"tool": "computer_get_state", "args": {"app": APP}}])
    password = _index(state["text"], "password text", "Password")
    code, replies = _call(env, [
        {"tool": "computer_get_state", "args": {"app": APP}},
        {"tool": "computer_type_text", "args": {"app": APP, "element_index": password, "text": "x"}},
    ])
    assert code != 0 and replies[-1]["text"].startswith("Error: ")


def test_an_mcp_client_acts_on_the_desktop_through_a_relay_and_the_host(session, tmp_path):
    """The same path with the driver inside the host: relay → host → the one chokepoint → X11 → the app."""
    env, result = session["env"], session["result"]
    clicks_before = result.read_text().count("clicked Submit")

    async def scenario() -> tuple[str, Any, Any]:
        async with mcp_client(kirocrew_argv("mcp-computer"), tmp_path, env,
                              KIROCREW_SESSION_KEY="agent:desktop:1") as client:
            state = text_of(await client.call_tool("computer_get_state", {"app": APP}))
            button, password = _index(state, "push button", "Submit"), _index(state, "password text", "Password")
            click = await client.call_tool("computer_click", {"app": APP, "element_index": button})
            refused = await client.call_tool("computer_type_text",
                                             {"app": APP, "element_index": password, "text": "x"})
            return state, click, refused

    state, click, refused = asyncio.run(scenario())
    assert SECRET not in state and not click.is_error
    assert refused.is_error and text_of(refused).startswith("error[password_field]: ")
    assert {r["actor"] for r in audit_records()} >= {"agent:desktop:1"}  # the host's chokepoint, the relay's caller
    deadline = time.monotonic() + 10
    while result.read_text().count("clicked Submit") <= clicks_before:
        assert time.monotonic() < deadline, "the button handler never fired"
        time.sleep(0.1)
