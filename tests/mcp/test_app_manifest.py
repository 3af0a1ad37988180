"""App manifests: the format an app installs under ``<crew home>/apps/<app>/``, checked whole before any write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_core.errors import KirocrewError
from kirocrew_mcp.app_manifest import MAX_MANIFEST_BYTES, load_manifest

STDIO = {"command": "/bin/sh", "args": ["-c", "exit 0"]}


def install(name: str, manifest: Any, files: dict[str, Any] | None = None) -> Path:
    folder = home.apps_dir() / name
    folder.mkdir(parents=True, exist_ok=True)
    for relative, document in (files or {}).items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(json.dumps(document))
    path = folder / "manifest.json"
    path.write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return path


def manifest(name: str = "notes", **fields: Any) -> dict[str, Any]:
    return {"manifestVersion": 1, "name": name, **fields}


def refused(name: str) -> KirocrewError:
    with pytest.raises(KirocrewError) as caught:
        load_manifest(name)
    return caught.value


def test_a_manifest_with_servers_a_backend_and_agents_loads_checked(plugin_manager):
    template = {"name": "notes", "tools": ["@notes:search"], "managedToolPolicy": {"exclude": ["@notes:search/drop"]}}
    install("notes", manifest(
        description="Notes and search",
        mcpServers={"search": STDIO, "web": {"url": "http://127.0.0.1:{port}/mcp"}},
        backend={"portFile": "~/.notes/port"},
        agents=[{"path": "~/Notes/.kiro/agents/notes.json", "template": "agents/notes.json"},
                {"path": "/srv/notes/.kiro/agents/inline.json", "template": {"name": "inline"}}],
    ), {"agents/notes.json": template})

    loaded = load_manifest("notes", pm=plugin_manager)

    assert loaded.servers == {"search": STDIO, "web": {"url": "http://127.0.0.1:{port}/mcp"}}
    assert loaded.backend is not None and loaded.backend.port_file == home.user_home() / ".notes" / "port"
    assert [a.path for a in loaded.agents] == [home.user_home() / "Notes/.kiro/agents/notes.json",
                                               Path("/srv/notes/.kiro/agents/inline.json")]
    assert loaded.agents[0].template == template and loaded.tool_policy() == ["@notes:search/drop"]
    assert loaded.backend_host() == "127.0.0.1"


@pytest.mark.parametrize("name", ["../notes", "a/b", ".hidden", "x:y", "", "n" * 65, "no\nline"])
def test_a_hostile_app_name_is_refused_before_any_path_is_built(name):
    assert refused(name).code == "app_name_invalid"


def test_an_app_that_is_not_installed_is_not_found():
    error = refused("ghost")
    assert error.code == "app_not_found" and "kirocrew apps list" in error.message


def test_malformed_json_and_an_oversized_manifest_are_refused_with_their_own_codes():
    install("broken", "{not json")
    assert refused("broken").code == "app_manifest_malformed"
    install("huge", manifest("huge", description="x" * MAX_MANIFEST_BYTES))
    assert refused("huge").code == "app_manifest_too_large"


@pytest.mark.parametrize(("fields", "says"), [
    ({"extra": 1}, "unknown field(s) 'extra'"),
    ({"mcpServers": {"s": {**STDIO, "shell": True}}}, "mcpServers.s: unknown field(s) 'shell'"),
    ({"mcpServers": {"s": {}}}, "mcpServers.s: needs either command"),
    ({"mcpServers": {"s": {**STDIO, "url": "https://example.com/mcp"}}}, "mcpServers.s: needs either command"),
    ({"mcpServers": {"a:b": STDIO}}, "'a:b' is not allowed"),
    ({"mcpServers": {"../x": STDIO}}, "'../x' is not allowed"),
    ({"mcpServers": {f"s{i}": STDIO for i in range(33)}}, "mcpServers: more than 32 entries"),
    ({"mcpServers": {"s": {"url": "http://example.com/mcp"}}}, "only for a server on this machine"),
    ({"mcpServers": {"s": {"url": "https://example.com:{port}/mcp"}, "x": STDIO}, "backend": {"port": 1}},
     "may stand only for the port"),
    ({"mcpServers": {"s": {"url": "http://127.0.0.1:{port}/mcp"}}}, "needs a backend"),
    ({"backend": {"port": 8000, "portFile": "/tmp/p"}}, "backend: give exactly one of port or portFile"),
    ({"backend": {}}, "backend: give exactly one of port or portFile"),
    ({"description": "x" * 1001}, "description: longer than 1000 characters"),
    ({"agents": [{"path": "/srv/a.json", "template": {}, "mode": "x"}]}, "agents[0]: unknown field(s) 'mode'"),
    ({"agents": [{"path": "relative/agent.json", "template": {}}]}, "must be an absolute path or start with ~/"),
    ({"agents": [{"path": "~/.kiro/agents/notes.json", "template": {}}]}, "app's own .kiro/agents folder"),
    ({"agents": [{"path": "/srv/a.json", "template": "../../outside.json"}]}, "inside the app's folder"),
    ({"agents": [{"path": "/srv/a.json", "template": {"bogus": 1}}]}, "unknown to kiro-cli"),
    ({"agents": [{"path": "/srv/a.json", "template": {"managedToolPolicy": {"exclude": ["@srv"]}}}]},
     "must name one tool as @server/tool"),
    ({"agents": [{"path": "/srv/a.json", "template": {}}, {"path": "/srv/a.json", "template": {}}]}, "named twice"),
])
def test_a_manifest_that_breaks_the_format_is_refused_naming_the_field(plugin_manager, fields, says):
    install("notes", manifest(**fields))
    error = refused("notes")
    assert error.code == "app_manifest_invalid" and says in error.message


def test_a_manifest_named_for_another_app_is_refused():
    install("notes", manifest("other"))
    assert "differs from the app's folder" in refused("notes").message


def test_a_refusal_names_the_field_but_never_echoes_a_value_that_may_be_a_secret():
    install("notes", manifest(mcpServers={"s": {"url": "https://example.com/mcp",
                                                "headers": {"Authorization": ["Bearer s3cret-token"]}}}))
    error = refused("notes")
    assert "mcpServers.s.headers.Authorization" in error.message and "s3cret" not in error.message


def test_an_unreadable_manifest_is_reported_as_such_and_left_alone():
    path = home.apps_dir() / "notes" / "manifest.json"
    path.mkdir(parents=True)  # a folder where the file should be: it exists, and cannot be read as one
    error = refused("notes")
    assert error.code == "app_manifest_unreadable" and error.exit_code == 1 and path.is_dir()
