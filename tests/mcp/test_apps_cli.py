"""``kirocrew apps list | enable | disable``, run as the real CLI in a subprocess under isolated homes."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_testing.scope_files import write_kiro_global

STDIO = {"command": "/bin/sh", "args": ["-c", "exit 0"]}
TEMPLATE = {
    "name": "notes",
    "description": "the notes app's agent",
    "tools": ["@notes:search", "@kirocrew-core"],
    "managedToolPolicy": {"exclude": ["@notes:search/delete_all"]},
}


def install(name: str = "notes", **fields: Any) -> Path:
    folder = home.apps_dir() / name
    folder.mkdir(parents=True, exist_ok=True)
    document = {"manifestVersion": 1, "name": name, "mcpServers": {"search": STDIO},
                "agents": [{"path": str(agent_path(name)), "template": TEMPLATE}], **fields}
    (folder / "manifest.json").write_text(json.dumps(document))
    return folder / "manifest.json"


def agent_path(name: str = "notes") -> Path:
    return home.user_home() / name / ".kiro" / "agents" / f"{name}.json"


def rendered_servers() -> dict[str, Any]:
    return json.loads(home.rendered_agent_file().read_text())["mcpServers"]


def as_json(result: Any) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def audited(kirocrew: Any, event: str) -> list[dict[str, Any]]:
    """The ``fields`` of every ``event`` record in the security event log."""
    records = as_json(kirocrew("audit", "tail", "--json", "-n", "50"))
    return [record["fields"] for record in records if record["event"] == event]


def error_code(result: Any) -> str:
    return result.stderr.split("error[", 1)[1].split("]", 1)[0] if "error[" in result.stderr else ""


@pytest.fixture
def backend() -> Iterator[int]:
    """A real listening socket on 127.0.0.1 standing in for the app's backend; yields its port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


# -- enable --------------------------------------------------------------------------------------------------------


def test_enable_adds_the_app_servers_to_the_agent_file_only_and_writes_its_agent(kirocrew):
    kiro_global = write_kiro_global({})
    install()

    outcome = as_json(kirocrew("apps", "enable", "notes", "--json"))

    assert outcome["already_enabled"] is False and outcome["servers"] == {"notes:search": "rendered"}
    assert rendered_servers()["notes:search"] == STDIO
    assert home.kiro_global_mcp_file().read_bytes() == kiro_global  # the Kiro global is never written
    agent = json.loads(agent_path().read_text())
    assert outcome["agents"] == [str(agent_path())]
    assert agent["includeMcpJson"] is False and "managedToolPolicy" not in agent
    assert agent["mcpServers"]["notes:search"]["disabledTools"] == ["delete_all"]
    assert agent["mcpServers"]["kirocrew-core"]["args"] == ["mcp-core"]  # a managed ref gets its launch spec
    assert audited(kirocrew, "mcp_app_enabled") == [{"app": "notes", "servers": ["notes:search"],
                                                     "agents": [str(agent_path())]}]


def test_a_second_enable_says_so_and_changes_nothing(kirocrew):
    install()
    as_json(kirocrew("apps", "enable", "notes", "--json"))
    before = (home.rendered_agent_file().read_bytes(), agent_path().read_bytes())

    again = kirocrew("apps", "enable", "notes")

    assert again.returncode == 0 and "notes was already enabled" in again.stdout
    assert (home.rendered_agent_file().read_bytes(), agent_path().read_bytes()) == before


@pytest.mark.parametrize(("args", "code"), [
    (("ghost",), "app_not_found"),
    (("../notes",), "app_name_invalid"),
    (("notes:x",), "app_name_invalid"),
])
def test_enabling_an_unknown_or_hostile_name_exits_2_and_writes_nothing(kirocrew, args, code):
    install()
    result = kirocrew("apps", "enable", *args)
    assert result.returncode == 2 and error_code(result) == code
    assert not home.rendered_agent_file().exists() and not agent_path().exists()


def test_a_broken_manifest_is_refused_whole_before_anything_is_written(kirocrew):
    install(agents=[{"path": str(agent_path()), "template": TEMPLATE},
                    {"path": str(home.kiro_agents_dir() / "sneaky.json"), "template": TEMPLATE}])
    result = kirocrew("apps", "enable", "notes")
    assert result.returncode == 2 and error_code(result) == "app_manifest_invalid"
    assert "agents[1].path" in result.stderr
    assert not home.rendered_agent_file().exists() and not agent_path().exists()
    assert not (home.state_dir("mcp") / "apps.json").exists()


def test_an_agent_file_it_cannot_read_refuses_the_enable_before_registering(kirocrew):
    install()
    agent_path().mkdir(parents=True)  # exists, cannot be read as a file
    result = kirocrew("apps", "enable", "notes")
    assert result.returncode == 1 and error_code(result) == "agent_file_unreadable"
    assert not home.rendered_agent_file().exists()


def test_an_http_server_on_the_backend_port_waits_for_the_backend_then_gets_its_live_port(kirocrew, backend):
    port_file = home.user_home() / ".notes" / "port"
    install(mcpServers={"search": STDIO, "web": {"url": "http://127.0.0.1:{port}/mcp"}},
            backend={"portFile": "~/.notes/port"})

    down = as_json(kirocrew("apps", "enable", "notes", "--json"))
    assert down["servers"] == {"notes:search": "rendered", "notes:web": "waiting_for_backend"}
    assert "does not exist" in down["port_note"] and "notes:web" not in rendered_servers()
    listed = as_json(kirocrew("apps", "list", "--json"))["apps"][0]["servers"]
    assert {s["key"]: s["state"] for s in listed}["notes:web"] == "waiting_for_backend"

    port_file.parent.mkdir(parents=True)
    port_file.write_text(f"{backend}\n")
    up = as_json(kirocrew("apps", "enable", "notes", "--json"))
    assert up["already_enabled"] is True and up["servers"]["notes:web"] == "rendered" and up["port"] == backend
    assert rendered_servers()["notes:web"] == {"url": f"http://127.0.0.1:{backend}/mcp"}


def test_a_fixed_port_nothing_listens_on_is_not_written(kirocrew, backend):
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    install(mcpServers={"web": {"url": "http://localhost:{port}/mcp"}}, backend={"port": dead})
    outcome = as_json(kirocrew("apps", "enable", "notes", "--json"))
    assert outcome["servers"] == {"notes:web": "waiting_for_backend"} and "nothing listens" in outcome["port_note"]
    assert "notes:web" not in rendered_servers()


# -- disable and list ----------------------------------------------------------------------------------------------


def test_disable_drops_the_entries_and_leaves_the_apps_files(kirocrew):
    install()
    as_json(kirocrew("apps", "enable", "notes", "--json"))
    agent = agent_path().read_bytes()

    outcome = as_json(kirocrew("apps", "disable", "notes", "--json"))

    assert outcome["already_disabled"] is False and outcome["removed"] == ["notes:search"]
    assert outcome["left"] == [str(agent_path()), str(home.apps_dir() / "notes")]
    assert "notes:search" not in rendered_servers()
    assert agent_path().read_bytes() == agent  # the app's agent file is the app's
    again = kirocrew("apps", "disable", "notes")
    assert again.returncode == 0 and "notes was not enabled; nothing changed" in again.stdout
    assert audited(kirocrew, "mcp_app_disabled") == [{"app": "notes", "servers": ["notes:search"]}]


@pytest.mark.parametrize(("name", "code"), [("ghost", "app_not_found"), ("../ghost", "app_name_invalid")])
def test_disabling_an_app_nobody_installed_or_a_hostile_name_is_refused(kirocrew, name, code):
    result = kirocrew("apps", "disable", name)
    assert result.returncode == 2 and error_code(result) == code


def test_list_shows_each_app_enabled_or_not_with_its_servers_state(kirocrew):
    install()
    install("tasks", agents=[])
    (home.apps_dir() / "broken").mkdir(parents=True)
    (home.apps_dir() / "broken" / "manifest.json").write_text("{")
    assert kirocrew("apps", "list").stdout.strip() != ""
    as_json(kirocrew("apps", "enable", "notes", "--json"))

    rows = {row["app"]: row for row in as_json(kirocrew("apps", "list", "--json"))["apps"]}

    assert rows["notes"]["enabled"] is True and rows["notes"]["agents"] == [str(agent_path())]
    assert rows["notes"]["servers"] == [{"key": "notes:search", "transport": "stdio", "state": "rendered"}]
    assert rows["tasks"]["enabled"] is False and rows["tasks"]["servers"][0]["state"] == "off"
    assert rows["broken"]["manifest"] == "invalid" and rows["broken"]["problem"]["code"] == "app_manifest_malformed"
    text = kirocrew("apps", "list").stdout
    assert "notes  enabled" in text and "notes:search  stdio  rendered" in text and "tasks  disabled" in text


def test_help_lists_the_apps_group(kirocrew):
    assert "apps " in kirocrew("--help").stdout
    sub = kirocrew("apps", "--help").stdout
    assert all(command in sub for command in ("list", "enable", "disable"))


def test_every_apps_command_is_in_the_docs():
    from kirocrew_mcp.apps_cli import apps

    docs = Path(__file__).resolve().parents[2] / "docs"
    mcp_doc, guide = (docs / "mcp.md").read_text(), (docs / "user-guide.md").read_text()
    assert [name for name in apps.commands if f"`kirocrew apps {name}" not in mcp_doc] == []
    assert "`kirocrew apps list" in guide
