"""Discovery: every scope read (none written), one row per server, presence for every scope."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import grants, hookimpl, home
from kirocrew_core.contributions import ManagedMcpServer
from kirocrew_testing.mcp_fixtures import stdio_server_argv
from kirocrew_mcp.discovery import discover, list_servers, refresh_probes
from kirocrew_mcp.probe_cache import ProbeCache, default_cache

TIMEOUT = 20.0
STDIO_MODULE = "kirocrew_testing.servers.stdio_server"


@pytest.fixture(autouse=True)
def _manager(plugin_manager: Any) -> Iterator[Any]:
    """Core built-ins only (so no companion unless a test registers it), and a clean default cache."""
    default_cache().clear()
    yield plugin_manager
    default_cache().clear()


@pytest.fixture
def cache() -> ProbeCache:
    return ProbeCache()


def write_servers(path: Path, servers: dict[str, Any], **top: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**top, "mcpServers": servers}, indent=2))
    return path


def kiro_global(servers: dict[str, Any]) -> Path:
    return write_servers(home.kiro_global_mcp_file(), servers)


def crew_store(servers: dict[str, Any]) -> Path:
    return write_servers(home.crew_mcp_file(), servers)


def agent_file(servers: dict[str, Any]) -> Path:
    return write_servers(home.rendered_agent_file(), servers, name="kirocrew", includeMcpJson=False)


def claude_json(servers: dict[str, Any]) -> Path:
    return write_servers(home.user_home() / ".claude.json", servers)


def stdio_spec(*options: str, **extra: Any) -> dict[str, Any]:
    argv = stdio_server_argv(*options)
    return {"command": argv[0], "args": argv[1:], **extra}


def rows_by_name(**kwargs: Any) -> dict[str, Any]:
    return {row.name: row for row in list_servers(**kwargs)}


def register_companion(pm: Any) -> None:
    import kirocrew_companion.plugin

    pm.register(kirocrew_companion.plugin, name="companion")


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: sha256 and mtime (ns)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path)] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
    return out


# -- rows and sources -------------------------------------------------------------


def test_servers_from_the_agent_file_and_every_scope_are_listed_once_each() -> None:
    agent_file({"shared": {"command": "ls"}})
    kiro_global({"shared": {"command": "cat"}, "kiro-only": {"command": "ls"}})
    crew_store({"crew-only": {"command": "ls"}})

    rows = rows_by_name()

    assert sorted(rows) == ["crew-only", "kiro-only", "shared"]
    assert rows["shared"].source == "agent"
    assert rows["kiro-only"].source == "kiro"
    assert rows["crew-only"].source == "kirocrew"


def test_the_agent_file_spec_wins_over_a_scope_spec() -> None:
    agent_file({"srv": {"command": "from-agent", "args": ["a"]}})
    kiro_global({"srv": {"command": "from-global", "args": ["g"]}})

    row = rows_by_name()["srv"]

    assert (row.command, row.args) == ("from-agent", ["a"])


def test_presence_has_a_key_for_every_scope_on_every_row() -> None:
    agent_file({"a": {"command": "ls"}})
    kiro_global({"b": {"command": "ls"}})
    crew_store({"c": {"command": "ls"}})

    rows = list_servers()

    assert [list(row.presence) for row in rows] == [["kirocrew", "kiro"]] * 3
    assert all(isinstance(v, bool) for row in rows for v in row.presence.values())


def test_with_the_companion_its_scope_key_is_on_every_row_and_its_servers_are_listed(plugin_manager: Any) -> None:
    register_companion(plugin_manager)
    kiro_global({"kiro-srv": {"command": "ls"}})
    claude_json({"claude-srv": {"command": "ls"}})

    found = discover()
    rows = {row.name: row for row in found.rows}

    assert [s.id for s in found.scopes] == ["kirocrew", "kiro", "cc"]
    assert rows["kiro-srv"].presence == {"kirocrew": True, "kiro": True, "cc": False}
    assert rows["claude-srv"].presence == {"kirocrew": True, "kiro": False, "cc": True}
    assert rows["claude-srv"].source == "cc"


def test_without_the_companion_claude_json_is_never_read_and_garbage_in_it_breaks_nothing() -> None:
    claude = home.user_home() / ".claude.json"
    claude.write_text("{ this is not json")
    kiro_global({"kiro-srv": {"command": "ls"}})

    found = discover()

    assert [row.name for row in found.rows] == ["kiro-srv"]
    assert found.problems == []
    assert "cc" not in found.rows[0].presence


def test_with_the_companion_the_same_garbage_is_reported(plugin_manager: Any) -> None:
    register_companion(plugin_manager)
    (home.user_home() / ".claude.json").write_text("{ this is not json")
    kiro_global({"kiro-srv": {"command": "ls"}})

    found = discover()

    assert [(p.source, p.state) for p in found.problems] == [("cc", "malformed")]
    assert found.rows[0].presence == {"kirocrew": True, "kiro": True, "cc": None}


# -- the kirocrew badge and disabled rows --------------------------------------------


def test_the_kirocrew_badge_is_what_the_next_render_would_load() -> None:
    kiro_global({"rendered": {"command": "ls"}, "not-rendered-yet": {"command": "ls"},
                 "muted-there": {"command": "ls"}, "no-such-command": {"command": "/nonexistent/server"}})
    agent_file({"rendered": {"command": "ls"}, "muted-there": {"command": "ls", "disabled": True}})
    crew_store({"muted-for-kirocrew": {"command": "ls", "disabled": True}})

    rows = rows_by_name()

    assert rows["rendered"].presence["kirocrew"] is True
    assert rows["not-rendered-yet"].presence["kirocrew"] is True  # no rebuild needed to say so
    assert rows["no-such-command"].presence["kirocrew"] is False  # the render leaves it out
    assert rows["muted-for-kirocrew"].presence["kirocrew"] is False
    assert rows["muted-there"].presence["kirocrew"] is False
    assert rows["muted-there"].disabled is True


def test_a_badge_shows_an_edit_of_a_scope_before_any_rebuild() -> None:
    from kirocrew_mcp.render import rebuild_agent_config

    kiro_global({"srv": stdio_spec(), "other": stdio_spec()})
    assert rows_by_name()["srv"].presence["kirocrew"] is True
    rebuild_agent_config()
    before = home.rendered_agent_file().read_bytes()

    kiro_global({"other": stdio_spec()})  # kiro-cli mcp remove --name srv
    crew_store({"srv": {"disabled": True}})  # and kirocrew told to leave it out, by hand

    assert rows_by_name()["srv"].presence == {"kirocrew": False, "kiro": False}
    assert home.rendered_agent_file().read_bytes() == before  # a view never renders for real


def test_a_crew_store_stub_mutes_the_row_which_keeps_the_full_spec() -> None:
    spec = {"command": "real-command", "args": ["--x"]}
    kiro_global({"srv": spec})
    crew_store({"srv": {"disabled": True}})
    agent_file({"srv": {**spec, "disabled": True}})

    row = rows_by_name()["srv"]

    assert row.disabled is True
    assert row.status == "disabled"
    assert (row.command, row.args) == ("real-command", ["--x"])
    assert row.presence == {"kirocrew": False, "kiro": True}
    assert row.in_crew_store is True
    assert row.disabled_in_shared is False
    assert row.disabled_reason is None


def test_a_mute_in_a_shared_scope_is_marked_as_such() -> None:
    kiro_global({"srv": {"command": "ls", "disabled": True}})

    row = rows_by_name()["srv"]

    assert (row.disabled, row.disabled_in_shared) == (True, True)


@pytest.mark.parametrize("value", ["false", 0, None, "yes"])
def test_a_non_boolean_disabled_value_reads_disabled_with_reason_invalid(value: Any) -> None:
    kiro_global({"srv": {"command": "ls", "disabled": value}})

    row = rows_by_name()["srv"]

    assert row.disabled is True
    assert row.disabled_reason == "invalid"


def test_disabled_tools_come_from_the_first_scope_that_has_the_key_even_if_empty() -> None:
    crew_store({"srv": {"disabledTools": []}})
    kiro_global({"srv": {"command": "ls", "disabledTools": ["drop_all"]}, "other": {"command": "ls",
                 "disabledTools": ["x"]}})
    agent_file({"srv": {"command": "ls", "disabledTools": ["from_agent"]}})

    rows = rows_by_name()

    assert rows["srv"].disabled_tools == []
    assert rows["other"].disabled_tools == ["x"]


def test_the_kiro_global_disabled_tools_outrank_a_seam_scope(plugin_manager: Any) -> None:
    register_companion(plugin_manager)
    kiro_global({"srv": {"command": "ls", "disabledTools": ["from_kiro"]}})
    claude_json({"srv": {"command": "ls", "disabledTools": ["from_claude"]}})

    assert rows_by_name()["srv"].disabled_tools == ["from_kiro"]


def test_a_slash_key_and_its_alias_fold_into_one_row_under_the_alias() -> None:
    kiro_global({"npm:@playwright/mcp": {"command": "npx", "args": ["@playwright/mcp"]}})
    agent_file({"playwright-mcp": {"command": "npx", "args": ["@playwright/mcp"]}})

    rows = list_servers()

    assert [row.name for row in rows] == ["playwright-mcp"]
    assert rows[0].presence == {"kirocrew": True, "kiro": True}
    assert sorted(rows[0].keys) == ["npm:@playwright/mcp", "playwright-mcp"]


# -- managed servers -----------------------------------------------------------------


class ManagedCore:
    @hookimpl
    def managed_mcp_servers(self) -> list[ManagedMcpServer]:
        return [ManagedMcpServer("kirocrew-core", ("mcp-core",), True)]


def test_a_stale_managed_command_is_re_resolved_on_every_call_without_touching_the_file(
    plugin_manager: Any, tmp_path: Path,
) -> None:
    plugin_manager.register(ManagedCore(), name="managed-core")
    path = agent_file({"kirocrew-core": {"command": "/opt/old-install/bin/kirocrew", "args": ["mcp-core"],
                                         "url": "http://stale"}})
    before = path.read_bytes()

    for _ in range(2):
        row = rows_by_name()["kirocrew-core"]
        assert row.managed is True
        assert row.command != "/opt/old-install/bin/kirocrew"
        assert row.command is not None and os.access(row.command, os.X_OK)
        assert row.args[-1] == "mcp-core"
        assert row.url is None

    assert path.read_bytes() == before


# -- reading never writes; problems are reported --------------------------------------


def test_discovery_writes_nothing_not_even_the_files_it_reads(plugin_manager: Any) -> None:
    register_companion(plugin_manager)
    plugin_manager.register(ManagedCore(), name="managed-core")
    kiro = kiro_global({"a": {"command": "ls"}, "npm:@x/y": {"command": "ls"}, "b": {"disabled": "no"}})
    crew_store({"a": {"disabled": True}})
    agent_file({"kirocrew-core": {"command": "/stale/kirocrew", "args": ["mcp-core"]}})
    claude_json({"c": {"url": "https://example.invalid/mcp"}})
    kiro_bytes = kiro.read_bytes()
    before = snapshot(home.user_home())

    discover()
    list_servers()

    assert kiro.read_bytes() == kiro_bytes
    assert snapshot(home.user_home()) == before


def test_a_malformed_scope_is_reported_and_its_presence_is_unknowable_not_false() -> None:
    home.kiro_global_mcp_file().parent.mkdir(parents=True)
    home.kiro_global_mcp_file().write_text('{"mcpServers": {"a": ')
    crew_store({"crew-srv": {"command": "ls"}})

    found = discover()

    [problem] = found.problems
    assert (problem.source, problem.state, problem.path) == ("kiro", "malformed", home.kiro_global_mcp_file())
    assert [row.name for row in found.rows] == ["crew-srv"]
    assert found.rows[0].presence["kiro"] is None


@pytest.mark.parametrize(
    ("content", "error"),
    [('{"mcpServers": []}', "mcpServers is not a JSON object"), ("[1, 2]", "top level is not a JSON object")],
)
def test_a_scope_of_the_wrong_shape_is_reported(content: str, error: str) -> None:
    home.crew_mcp_file().parent.mkdir(parents=True)
    home.crew_mcp_file().write_text(content)

    [problem] = discover().problems

    assert (problem.source, problem.error) == ("kirocrew", error)


def test_entries_that_are_not_objects_are_reported_and_the_rest_listed() -> None:
    kiro_global({"good": {"command": "ls"}, "bad": "ls -l"})

    found = discover()

    assert [row.name for row in found.rows] == ["good"]
    assert [(p.source, p.state) for p in found.problems] == [("kiro", "skipped")]
    assert "bad" in found.problems[0].error


def test_a_malformed_agent_file_leaves_the_kirocrew_badge_unknowable() -> None:
    home.rendered_agent_file().parent.mkdir(parents=True)
    home.rendered_agent_file().write_text("not json")
    kiro_global({"srv": {"command": "ls"}})

    found = discover()

    assert [p.source for p in found.problems] == ["agent"]
    assert found.rows[0].presence == {"kirocrew": None, "kiro": True}


def test_list_servers_logs_the_problems(caplog: pytest.LogCaptureFixture) -> None:
    home.kiro_global_mcp_file().parent.mkdir(parents=True)
    home.kiro_global_mcp_file().write_text("{")

    list_servers()

    assert any(str(home.kiro_global_mcp_file()) in r.getMessage() for r in caplog.records)


# -- probe results on rows -------------------------------------------------------------


def test_probe_results_are_overlaid_on_the_rows(cache: ProbeCache) -> None:
    kiro_global({"fx": stdio_spec("--names", "one,two"), "never": {"command": "ls"}})

    probed = {row.name: row for row in refresh_probes(cache=cache, timeout=TIMEOUT)}
    listed = rows_by_name(cache=cache)

    assert (probed["fx"].status, probed["fx"].tools) == ("ok", ["one", "two"])
    assert (listed["fx"].status, listed["fx"].tools) == ("ok", ["one", "two"])
    assert listed["fx"].server_info["name"] == "fixture"


def test_an_edited_spec_reads_unknown_until_probed_again(cache: ProbeCache) -> None:
    kiro_global({"fx": stdio_spec("--tools", "1")})
    refresh_probes(cache=cache, timeout=TIMEOUT)

    kiro_global({"fx": stdio_spec("--tools", "2")})

    assert rows_by_name(cache=cache)["fx"].status == "unknown"


def test_refresh_probes_never_spawns_a_row_muted_in_another_scope(cache: ProbeCache, tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    spec = {"command": "/bin/sh", "args": ["-c", f'touch "{marker}"; exec "{sys.executable}" -m {STDIO_MODULE}']}
    kiro_global({"fx": spec})  # enabled here...
    crew_store({"fx": {"disabled": True}})  # ...but muted for kirocrew

    [row] = refresh_probes(cache=cache, timeout=TIMEOUT)

    assert row.status == "disabled"
    assert not marker.exists()

    crew_store({})
    [row] = refresh_probes(cache=cache, timeout=TIMEOUT)
    assert row.status == "ok"
    assert marker.exists()


def test_an_oauth_row_needs_auth_and_says_whether_kiro_cli_holds_a_grant(
    cache: ProbeCache, oauth_mcp_server: Any,
) -> None:
    url = oauth_mcp_server.mcp_url
    kiro_global({"oauth": {"url": url}})

    [row] = refresh_probes(cache=cache, timeout=TIMEOUT)
    assert (row.status, row.error, row.auth_challenge, row.auth_grant_present) == ("needs_auth", "", True, False)

    for artifact in grants.artifact_paths(url):
        artifact.parent.mkdir(parents=True, exist_ok=True)
        artifact.write_text("{}")
    assert rows_by_name(cache=cache)["oauth"].auth_grant_present is True


# -- the JSON the dashboard gets -----------------------------------------------------------


def test_a_remote_row_redacts_header_values_and_carries_oauth_hints() -> None:
    kiro_global({"remote": {"url": "https://mcp.example/x", "headers": {"Authorization": "Bearer sk-live-123456"},
                            "scopes": ["read", "write"], "clientId": "client-1"}})

    data = rows_by_name()["remote"].as_dict()

    assert data["headers"] == {"Authorization": "[REDACTED: credential]"}
    assert (data["scopes"], data["clientId"]) == (["read", "write"], "client-1")
    assert "sk-live-123456" not in json.dumps(data)


def test_a_stdio_row_has_no_url_fields_and_never_env_values() -> None:
    kiro_global({"local": {"command": "ls", "args": None, "env": {"API_TOKEN": "t-0987654321"},
                           "scopes": ["ignored"]}})

    data = rows_by_name()["local"].as_dict()

    assert data["args"] == []
    assert data["envKeys"] == ["API_TOKEN"]
    assert not {"url", "headers", "scopes", "clientId"} & set(data)
    assert "t-0987654321" not in json.dumps(data)


def test_a_partly_valid_oauth_scope_list_yields_none_of_it() -> None:
    kiro_global({"remote": {"url": "https://mcp.example/x", "scopes": ["read", 7]}})

    assert rows_by_name()["remote"].as_dict()["scopes"] == []


def test_a_new_row_defaults_to_unknown_with_no_tools() -> None:
    kiro_global({"srv": {"command": "ls"}})

    data = rows_by_name()["srv"].as_dict()

    assert (data["status"], data["tools"], data["error"], data["probedAt"]) == ("unknown", [], "", None)


def test_the_crew_store_spec_outranks_the_kiro_global_when_the_agent_file_has_none() -> None:
    crew_store({"srv": {"command": "from-crew"}})
    kiro_global({"srv": {"command": "from-kiro"}})

    row = rows_by_name()["srv"]

    assert row.command == "from-crew"
    assert row.presence == {"kirocrew": False, "kiro": True}
    assert row.in_crew_store is True


def test_a_disabled_entry_still_carries_its_disabled_tools() -> None:
    kiro_global({"srv": {"command": "ls", "disabled": True, "disabledTools": ["delete_all"]}})

    row = rows_by_name()["srv"]

    assert (row.disabled, row.disabled_tools) == (True, ["delete_all"])


def test_a_scope_path_that_cannot_be_read_is_reported_as_unreadable() -> None:
    home.kiro_global_mcp_file().mkdir(parents=True)  # a directory where the file should be
    crew_store({"srv": {"command": "ls"}})

    found = discover()

    assert [(p.source, p.state) for p in found.problems] == [("kiro", "unreadable")]
    assert found.rows[0].presence["kiro"] is None
