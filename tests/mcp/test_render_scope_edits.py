"""Edits to a scope reach the rendered agent on the next rebuild, while the user's own edits of it stay.

Every file here is a real file in the test's own home; the scope files are edited the way
``kiro-cli mcp remove`` / ``add`` and a text editor edit them, and never written by kirocrew.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_mcp.render import rebuild_agent_config
from kirocrew_testing.fake_kiro.agents_dirs import parse_spec
from kirocrew_testing.policy import write_policy


def write(path: Path, document: Any) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(document, indent=2).encode()
    path.write_bytes(data)
    return data


def kiro_global(servers: dict[str, Any]) -> bytes:
    return write(home.kiro_global_mcp_file(), {"mcpServers": servers})


def crew_store(servers: dict[str, Any]) -> bytes:
    return write(home.crew_mcp_file(), {"mcpServers": servers})


def agent() -> dict[str, Any]:
    return json.loads(home.rendered_agent_file().read_text())


def servers() -> dict[str, Any]:
    return agent()["mcpServers"]


def hand_edit(edit: Any) -> None:
    """Edit the rendered agent file as a person (or ``kiro-cli mcp add --agent kirocrew``) would."""
    doc = agent()
    edit(doc["mcpServers"])
    write(home.rendered_agent_file(), doc)


def loaded_servers() -> set[str]:
    """The servers kiro-cli (the fake, which parses like kiro-cli 2.x) would start from the agent file."""
    return set(parse_spec(agent(), path=home.rendered_agent_file(), source="global").mcp_servers)


@pytest.fixture
def tools(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("tool-a", "tool-b", "tool-c"):
        exe = folder / name
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    write_policy(rules=[{"decision": "allow", "tool": "*"}])  # grants are the merge's to keep here
    return folder


def test_a_server_removed_from_the_kiro_global_leaves_the_agent_on_the_next_rebuild(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a"}, "b": {"command": "tool-b"}})
    rebuild_agent_config()
    assert {"a", "b"} <= loaded_servers()
    removed = kiro_global({"b": {"command": "tool-b"}})  # kiro-cli mcp remove --name a
    report = rebuild_agent_config()
    assert "a" not in servers() and "a" not in loaded_servers()
    assert servers()["b"] == {"command": "tool-b"}
    assert report.retracted == ["a"]
    assert home.kiro_global_mcp_file().read_bytes() == removed


def test_a_retracted_server_takes_its_references_with_it(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a"}, "b": {"command": "tool-b"}})
    rebuild_agent_config()
    doc = agent()
    doc["tools"], doc["allowedTools"] = ["read", "@a", "@b"], ["@a/list", "@b/list"]
    write(home.rendered_agent_file(), doc)
    kiro_global({"b": {"command": "tool-b"}})
    rebuild_agent_config()
    assert agent()["tools"] == ["read", "@b"] and agent()["allowedTools"] == ["@b/list"]


def test_an_args_change_in_the_kiro_global_reaches_the_agent(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a", "args": ["--old"], "env": {"K": "1"}}})
    rebuild_agent_config()
    kiro_global({"a": {"command": "tool-a", "args": ["--new"]}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-a", "args": ["--new"]}
    assert not rebuild_agent_config().written  # and it settles


def test_a_server_added_to_the_agent_by_hand_survives_every_scope_edit(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a"}})
    rebuild_agent_config()
    hand_edit(lambda s: s.update({"mine": {"command": "tool-c", "args": ["x"]}}))
    kiro_global({})
    rebuild_agent_config()
    rebuild_agent_config(clean=False)
    assert servers() == {"mine": {"command": "tool-c", "args": ["x"]}}


def test_the_users_own_fields_on_a_scope_server_survive_a_change_there(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a", "args": ["1"], "timeout": 1000}})
    rebuild_agent_config()
    hand_edit(lambda s: s["a"].update({"autoApprove": ["read"], "timeout": 5000}))
    kiro_global({"a": {"command": "tool-a", "args": ["2"], "timeout": 2000}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-a", "args": ["2"], "timeout": 5000, "autoApprove": ["read"]}
    kiro_global({"a": {"command": "tool-a", "args": ["3"], "timeout": 2000}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-a", "args": ["3"], "timeout": 5000, "autoApprove": ["read"]}
    kiro_global({})
    rebuild_agent_config()
    assert "a" not in servers()


def test_a_launch_the_user_changed_by_hand_is_theirs_and_stays(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a", "args": ["global"]}})
    rebuild_agent_config()
    hand_edit(lambda s: s["a"].update({"args": ["mine"]}))
    kiro_global({"a": {"command": "tool-a", "args": ["global", "changed"]}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-a", "args": ["mine"]}
    kiro_global({})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-a", "args": ["mine"]}


def test_an_agent_file_rendered_before_the_record_is_brought_under_it(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a", "args": ["1"]}})
    write(home.rendered_agent_file(), {"name": "kirocrew", "tools": ["*"], "includeMcpJson": False,
                                       "mcpServers": {"a": {"command": "tool-a", "args": ["1"]},
                                                      "hand": {"command": "tool-b"}}})
    kiro_global({"a": {"command": "tool-a", "args": ["2"]}})
    rebuild_agent_config()
    # "a" launched differently from the global, so it is indistinguishable from a hand entry: kept ...
    assert servers()["a"] == {"command": "tool-a", "args": ["1"]}
    kiro_global({"a": {"command": "tool-a", "args": ["1"]}})
    rebuild_agent_config()  # ... until it matches the global again; from then on the global decides
    kiro_global({})
    rebuild_agent_config()
    assert servers() == {"hand": {"command": "tool-b"}}


def test_a_removal_from_the_crew_store_reaches_the_agent_and_the_kiro_global_takes_over(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a", "args": ["global"]}})
    crew_store({"a": {"command": "tool-b", "args": ["store"]}, "only-crew": {"command": "tool-c"}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-b", "args": ["store"]}
    crew_store({})
    rebuild_agent_config()
    assert servers() == {"a": {"command": "tool-a", "args": ["global"]}}


def test_a_scope_that_cannot_be_read_takes_nothing_back(plugin_manager, tools):
    kiro_global({"a": {"command": "tool-a"}})
    crew_store({"c": {"command": "tool-c"}})
    rebuild_agent_config()
    home.crew_mcp_file().write_text("{ not json")
    kiro_global({})
    report = rebuild_agent_config()
    assert set(servers()) == {"a", "c"} and report.retracted == []
    crew_store({"c": {"command": "tool-c"}})
    rebuild_agent_config()  # readable again: the record was kept, so the removal from the global now lands
    assert set(servers()) == {"c"}


def test_a_slash_key_removed_from_the_kiro_global_leaves_under_its_alias(plugin_manager, tools):
    kiro_global({"acme/notes": {"command": "tool-a"}})
    rebuild_agent_config()
    assert "acme-notes" in servers()
    hand_edit(lambda s: s["acme-notes"].update({"autoApprove": ["list"]}))
    kiro_global({"acme/notes": {"command": "tool-b"}})
    rebuild_agent_config()
    assert servers() == {"acme-notes": {"command": "tool-b", "autoApprove": ["list"]}}
    kiro_global({})
    rebuild_agent_config()
    assert servers() == {}
