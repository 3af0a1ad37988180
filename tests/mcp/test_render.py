"""The rendered agent file: merge order, managed servers, fallback, governance, bad sources."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, hookimpl, home
from kirocrew_core.contributions import ManagedMcpServer, McpScope
from kirocrew_core.errors import KirocrewError
from kirocrew_testing.fake_kiro.agents_dirs import parse_spec
from kirocrew_mcp.render import AGENT_TEMPLATE, rebuild_agent_config, remove_server_from_agent_file
from kirocrew_testing.plugins import ManagedServers
from kirocrew_testing.policy import write_policy

CORE = ManagedMcpServer("kirocrew-core", ("mcp-core",), may_auto_approve=True)
COMPUTER = ManagedMcpServer("kirocrew-computer", ("mcp-computer",), may_auto_approve=False)


# -- helpers ------------------------------------------------------------------


Managed = ManagedServers


class Scopes:
    def __init__(self, *scopes: McpScope) -> None:
        self.scopes = list(scopes)

    @hookimpl
    def extra_mcp_scopes(self) -> list[McpScope]:
        return self.scopes


class Extra:
    def __init__(self, servers: dict[str, dict[str, Any]]) -> None:
        self.servers = servers

    @hookimpl
    def extra_mcp_servers(self) -> dict[str, dict[str, Any]]:
        return self.servers


def write(path: Path, document: Any) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (document if isinstance(document, str) else json.dumps(document, indent=2)).encode()
    path.write_bytes(data)
    return data


def agent() -> dict[str, Any]:
    return json.loads(home.rendered_agent_file().read_text())


def servers() -> dict[str, dict[str, Any]]:
    return agent()["mcpServers"]


def kiro_global(doc: Any) -> bytes:
    return write(home.kiro_global_mcp_file(), doc)


def crew_store(doc: Any) -> bytes:
    return write(home.crew_mcp_file(), doc)


def base(doc: Any) -> bytes:
    """Write the rendered agent file: a JSON value, or raw text (a corrupt file is one of the cases)."""
    return write(home.rendered_agent_file(), doc)


@pytest.fixture
def bin_dir(tmp_path, monkeypatch) -> Path:
    """A folder of executables (``tool-a``, ``tool-b``) put first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("tool-a", "tool-b"):
        exe = folder / name
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return folder


def sel_events(event: str) -> list[dict[str, Any]]:
    return [r for r in audit.tail(1000) if r.get("event") == event]


# -- shape and invariants -----------------------------------------------------


def test_a_fresh_render_is_an_agent_kiro_cli_2_accepts(plugin_manager, bin_dir):
    plugin_manager.register(Managed(CORE), name="managed")
    kiro_global({"mcpServers": {"a": {"command": "tool-a", "args": ["x"]}, "web": {"url": "http://127.0.0.1:1/mcp"}}})
    report = rebuild_agent_config()
    spec = parse_spec(agent(), path=home.rendered_agent_file(), source="global")
    assert report.written and spec.name == "kirocrew"
    assert spec.include_mcp_json is False
    assert set(spec.mcp_servers) == {"a", "web", "kirocrew-core"}
    assert agent()["tools"] == AGENT_TEMPLATE["tools"]


def test_the_kiro_global_is_byte_identical_after_every_rebuild(plugin_manager, bin_dir):
    plugin_manager.register(Managed(CORE), name="managed")
    before = kiro_global({"mcpServers": {"a": {"command": "tool-a"}, "kirocrew-core": {"command": "old"}}})
    crew_store({"mcpServers": {"a": {"args": ["--store"]}, "b": {"command": "tool-b"}}})
    mode = home.kiro_global_mcp_file().stat().st_mode
    for clean in (False, True, False):
        rebuild_agent_config(clean=clean)
        assert home.kiro_global_mcp_file().read_bytes() == before
        assert home.kiro_global_mcp_file().stat().st_mode == mode
    remove_server_from_agent_file("a")
    assert home.kiro_global_mcp_file().read_bytes() == before


def test_include_mcp_json_is_pinned_false_whatever_the_base_says(plugin_manager):
    base({"name": "kirocrew", "includeMcpJson": True, "tools": ["*"], "mcpServers": {}})
    rebuild_agent_config()
    assert agent()["includeMcpJson"] is False


def test_fields_kiro_cli_2_would_refuse_are_dropped_from_the_base(plugin_manager):
    base({"name": "other", "permissions": {"x": 1}, "useLegacyMcpJson": True, "tools": "*", "mcpServers": {}})
    report = rebuild_agent_config()
    doc = agent()
    assert "permissions" not in doc and "useLegacyMcpJson" not in doc
    assert doc["name"] == "kirocrew" and doc["tools"] == ["*"]
    parse_spec(doc, path=home.rendered_agent_file(), source="global")
    assert any("permissions" in w for w in report.warnings)


def test_a_rebuild_that_changes_nothing_does_not_rewrite_the_file(plugin_manager, bin_dir):
    kiro_global({"mcpServers": {"a": {"command": "tool-a"}}})
    assert rebuild_agent_config().written
    inode = home.rendered_agent_file().stat().st_ino
    assert not rebuild_agent_config().written
    assert home.rendered_agent_file().stat().st_ino == inode


# -- merge order --------------------------------------------------------------


def test_the_existing_file_is_the_merge_base_so_hand_added_servers_survive(plugin_manager, bin_dir):
    owner_allows_every_tool()
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {
        "added-by-kiro-cli": {"command": "tool-b", "args": ["mine"]},
        "a": {"command": "tool-a", "autoApprove": ["read_thing"]},
    }})
    kiro_global({"mcpServers": {"a": {"command": "tool-a", "args": ["from-global"]}}})
    rebuild_agent_config()
    got = servers()
    assert got["added-by-kiro-cli"] == {"command": "tool-b", "args": ["mine"]}
    assert got["a"] == {"command": "tool-a", "autoApprove": ["read_thing"]}  # setdefault: the base wins


def test_clean_ignores_the_existing_file(plugin_manager, bin_dir):
    base({"name": "kirocrew", "tools": ["@only"], "mcpServers": {"hand": {"command": "tool-b"}}})
    kiro_global({"mcpServers": {"a": {"command": "tool-a"}}})
    rebuild_agent_config(clean=True)
    assert set(servers()) == {"a"}
    assert agent()["tools"] == ["*"]


def test_the_crew_store_overrides_the_launch_but_user_fields_survive(plugin_manager, bin_dir):
    owner_allows_every_tool()
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"a": {"command": "tool-a", "args": ["old"],
                                                                   "autoApprove": ["t"]}}})
    kiro_global({"mcpServers": {"a": {"command": "tool-a", "args": ["global"]}}})
    crew_store({"mcpServers": {"a": {"command": "tool-a", "args": ["store"]}, "new": {"command": "tool-b"}}})
    rebuild_agent_config()
    got = servers()
    assert got["a"] == {"command": "tool-a", "args": ["store"], "autoApprove": ["t"]}
    assert got["new"] == {"command": "tool-b"}


def test_seam_scopes_only_fill_gaps_the_kiro_global_left(plugin_manager, bin_dir, tmp_path):
    provider = tmp_path / "provider.json"
    write(provider, {"mcpServers": {"a": {"command": "tool-b", "args": ["seam"]}, "s": {"command": "tool-b"}}})
    plugin_manager.register(Scopes(McpScope("prov", provider, None, "Provider")), name="provider-edition")
    kiro_global({"mcpServers": {"a": {"command": "tool-a", "args": ["kiro"]}}})
    rebuild_agent_config()
    got = servers()
    assert got["a"] == {"command": "tool-a", "args": ["kiro"]}
    assert got["s"] == {"command": "tool-b"}


def test_extra_servers_from_plugins_are_add_only(plugin_manager, bin_dir):
    plugin_manager.register(Extra({"a": {"command": "tool-b"}, "extra": {"command": "tool-b"}}), name="tools")
    kiro_global({"mcpServers": {"a": {"command": "tool-a"}}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-a"}
    assert servers()["extra"] == {"command": "tool-b"}


def test_a_narrowed_tools_list_gets_refs_for_servers_new_to_the_render(plugin_manager, bin_dir):
    base({"name": "kirocrew", "tools": ["read", "@old"], "mcpServers": {"old": {"command": "tool-a"}}})
    kiro_global({"mcpServers": {"new": {"command": "tool-b"}}})
    rebuild_agent_config()
    assert agent()["tools"] == ["read", "@old", "@new"]


# -- companion symmetry -------------------------------------------------------


def _register_companion(pm) -> None:
    import kirocrew_companion.plugin

    pm.register(kirocrew_companion.plugin, name="companion")


def test_with_the_companion_claude_json_servers_fill_gaps(plugin_manager, bin_dir, isolated_homes):
    _register_companion(plugin_manager)
    claude = isolated_homes.user_home / ".claude.json"
    before = write(claude, {"mcpServers": {"cc-only": {"command": "tool-b"}, "a": {"command": "tool-b"}},
                            "projects": {}})
    kiro_global({"mcpServers": {"a": {"command": "tool-a"}}})
    rebuild_agent_config()
    assert servers()["cc-only"] == {"command": "tool-b"}
    assert servers()["a"] == {"command": "tool-a"}
    assert claude.read_bytes() == before


def test_without_the_companion_claude_json_is_never_read(plugin_manager, bin_dir, isolated_homes):
    claude = isolated_homes.user_home / ".claude.json"
    write(claude, {"mcpServers": {"cc-only": {"command": "tool-b"}}})
    report = rebuild_agent_config()
    assert "cc-only" not in servers()
    claude.unlink()
    claude.mkdir()  # unreadable as JSON: a scan would have to say so
    report = rebuild_agent_config()
    assert report.skipped_sources == [] and not any(".claude.json" in w for w in report.warnings)


def test_the_installed_companion_makes_its_scope_part_of_the_render(installed_plugin_manager, bin_dir, isolated_homes):
    write(isolated_homes.user_home / ".claude.json", {"mcpServers": {"cc-only": {"command": "tool-b"}}})
    rebuild_agent_config()
    assert "cc-only" in servers()


# -- managed servers ----------------------------------------------------------


def test_managed_servers_are_refreshed_from_the_live_executable(plugin_manager):
    plugin_manager.register(Managed(CORE), name="managed")
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"kirocrew-core": {
        "command": "/gone/kirocrew", "args": ["old"], "url": "http://127.0.0.1:9/mcp", "headers": {"a": "b"},
        "env": {"KIROCREW_HOME": "/elsewhere", "MY_KEY": "kept", "PATH": "/evil", "NODE_OPTIONS": "--x"},
        "autoApprove": ["status"], "timeout": 5000, "disabledTools": ["t"], "mystery": 1,
    }}})
    rebuild_agent_config()
    entry = servers()["kirocrew-core"]
    assert entry["command"] == str(Path(sys.executable).with_name("kirocrew"))
    assert entry["args"] == ["mcp-core"]
    assert entry["env"] == {"MY_KEY": "kept", "KIROCREW_HOME": str(home.crew_home())}
    assert entry["autoApprove"] == ["status"] and entry["timeout"] == 5000 and entry["disabledTools"] == ["t"]
    assert not {"url", "headers", "mystery"} & set(entry)


def test_a_managed_servers_own_timeout_is_written_unless_the_user_set_one(plugin_manager):
    blocking = ManagedMcpServer("kirocrew-core", ("mcp-core",), may_auto_approve=True, timeout_ms=600_000)
    plugin_manager.register(Managed(blocking), name="managed")
    rebuild_agent_config()
    assert servers()["kirocrew-core"]["timeout"] == 600_000
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"kirocrew-core": {"command": "x", "timeout": 5000}}})
    rebuild_agent_config()
    assert servers()["kirocrew-core"]["timeout"] == 5000  # the user's choice wins


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", "-Infinity", "1.5", "true", "-3"])
def test_a_timeout_kiro_cli_cannot_take_is_dropped(plugin_manager, bin_dir, timeout):
    plugin_manager.register(Managed(CORE), name="managed")
    base('{"name": "kirocrew", "tools": ["*"], "mcpServers": {'
         f'"kirocrew-core": {{"command": "x", "timeout": {timeout}}}, '
         f'"a": {{"command": "tool-a", "timeout": {timeout}}}'
         "}}")
    rebuild_agent_config()
    assert "timeout" not in servers()["kirocrew-core"] and "timeout" not in servers()["a"]
    json.loads(home.rendered_agent_file().read_text(), parse_constant=lambda c: pytest.fail(f"wrote {c}"))


def test_a_managed_server_is_never_taken_from_a_scope(plugin_manager, bin_dir):
    plugin_manager.register(Managed(CORE), name="managed")
    kiro_global({"mcpServers": {"kirocrew-core": {"command": "tool-a", "args": ["stale"], "url": "http://x"}}})
    crew_store({"mcpServers": {"kirocrew-core": {"command": "tool-b", "disabledTools": ["conversations_start"]}}})
    rebuild_agent_config()
    entry = servers()["kirocrew-core"]
    assert entry["args"] == ["mcp-core"] and entry["command"].endswith("kirocrew")
    assert entry["disabledTools"] == ["conversations_start"]  # a preference, not a launch spec
    assert "url" not in entry


def test_a_new_managed_server_is_mounted_but_not_auto_approved(plugin_manager):
    plugin_manager.register(Managed(CORE), name="managed")
    rebuild_agent_config()
    assert "autoApprove" not in servers()["kirocrew-core"]
    assert not any("kirocrew-core" in ref for ref in agent()["allowedTools"])


def test_a_user_removed_auto_approve_is_not_re_added(plugin_manager):
    plugin_manager.register(Managed(CORE), name="managed")
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"kirocrew-core": {"command": "x", "autoApprove": ["a"]}}})
    rebuild_agent_config()
    doc = agent()
    del doc["mcpServers"]["kirocrew-core"]["autoApprove"]
    base(doc)
    rebuild_agent_config()
    assert "autoApprove" not in servers()["kirocrew-core"]


def test_a_never_auto_approvable_server_never_carries_a_grant(plugin_manager):
    plugin_manager.register(Managed(CORE, COMPUTER), name="managed")
    base({"name": "kirocrew", "tools": ["*"], "allowedTools": ["read", "*", "@kirocrew-*", "@kirocrew-computer/click",
                                                               "@kirocrew-core/status"],
          "mcpServers": {"kirocrew-computer": {"command": "x", "autoApprove": ["click", "type"]}}})
    crew_store({"mcpServers": {"kirocrew-computer": {"autoApprove": ["click"]}}})
    report = rebuild_agent_config()
    doc = agent()
    assert "autoApprove" not in doc["mcpServers"]["kirocrew-computer"]
    # read is withheld too: the built-in protections ask before kirocrew's secrets are read, so reads reach the gate
    assert doc["allowedTools"] == ["@kirocrew-core/status"]
    assert {"*", "@kirocrew-*", "@kirocrew-computer/click", "read"} <= set(report.withheld)
    records = sel_events("mcp_auto_approve_withheld")
    reasons = {r["fields"]["reason"]: r["fields"]["refs"] for r in records}
    assert "@kirocrew-computer/click" in reasons["never_auto_approvable"] and reasons["permission_policy"] == ["read"]


def test_a_server_its_plugin_stops_managing_is_retracted(plugin_manager):
    plugin = Managed(CORE, COMPUTER)
    plugin_manager.register(plugin, name="managed")
    rebuild_agent_config()
    assert "kirocrew-computer" in servers()
    plugin.servers = [CORE]
    rebuild_agent_config()
    assert "kirocrew-computer" not in servers() and "kirocrew-core" in servers()


def test_a_retracted_managed_server_never_comes_back_from_a_stale_global_copy(plugin_manager):
    plugin = Managed(CORE, COMPUTER)
    plugin_manager.register(plugin, name="managed")
    rebuild_agent_config()
    kiro_global({"mcpServers": {"kirocrew-computer": {"command": "/bin/sh", "args": ["old-install"]}}})
    plugin.servers = [CORE]
    for _ in range(2):
        rebuild_agent_config()
        assert "kirocrew-computer" not in servers()
    plugin.servers = [CORE, COMPUTER]
    rebuild_agent_config()
    assert servers()["kirocrew-computer"]["args"] == ["mcp-computer"]


def test_a_leftover_managed_entry_in_the_kiro_global_does_not_set_its_preferences(plugin_manager):
    plugin_manager.register(Managed(CORE), name="managed")
    kiro_global({"mcpServers": {"kirocrew-core": {"command": "/bin/sh", "disabled": True, "timeout": 1}}})
    rebuild_agent_config()
    assert not {"disabled", "timeout"} & set(servers()["kirocrew-core"])


def test_two_plugins_claiming_one_managed_name_write_nothing(plugin_manager):
    plugin_manager.register(Managed(CORE), name="one")
    plugin_manager.register(Managed(CORE), name="two")
    with pytest.raises(KirocrewError) as err:
        rebuild_agent_config()
    assert err.value.code == "managed_mcp_conflict"
    assert not home.rendered_agent_file().exists()


# -- resolution-aware fallback ------------------------------------------------


def test_the_fallback_adopts_command_args_and_env_as_a_unit(plugin_manager, bin_dir):
    owner_allows_every_tool()
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"a": {"command": "missing-bin", "args": ["s"],
                                                                   "env": {"A": "1"}, "autoApprove": ["t"]}}})
    crew_store({"mcpServers": {"a": {"command": "missing-bin", "args": ["store"], "env": {"S": "1"}}}})
    kiro_global({"mcpServers": {"a": {"command": "tool-a", "args": ["kiro"]}}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-a", "args": ["kiro"], "autoApprove": ["t"]}


def test_the_fallback_prefers_the_crew_store_over_the_kiro_global(plugin_manager, bin_dir):
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"a": {"command": "/gone/tool-a"}}})
    kiro_global({"mcpServers": {"a": {"command": "tool-b", "args": ["kiro"]}}})
    write(home.crew_mcp_file(), {"mcpServers": {}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-b", "args": ["kiro"]}  # a relocated binary is re-resolved


def test_resolution_uses_the_augmented_path_like_the_probe(plugin_manager, isolated_homes, monkeypatch):
    local_bin = isolated_homes.user_home / ".local" / "bin"
    local_bin.mkdir(parents=True)
    exe = local_bin / "only-in-local-bin"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    kiro_global({"mcpServers": {"x": {"command": "only-in-local-bin"}}})
    rebuild_agent_config()
    assert servers()["x"] == {"command": "only-in-local-bin"}


def test_a_shared_server_whose_command_resolves_nowhere_is_left_out_until_it_does(plugin_manager, bin_dir):
    kiro_global({"mcpServers": {"later": {"command": "later-bin"}}})
    report = rebuild_agent_config()
    assert "later" not in servers() and report.dropped == ["later"]
    assert any("command not found: later-bin" in w for w in report.warnings)
    exe = bin_dir / "later-bin"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    rebuild_agent_config()
    assert servers()["later"] == {"command": "later-bin"}


def test_a_server_defined_only_in_the_agent_file_is_kept_when_its_command_is_missing(plugin_manager):
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"mine": {"command": "not-installed-yet"}}})
    report = rebuild_agent_config()
    assert servers()["mine"] == {"command": "not-installed-yet"}
    assert any("'mine'" in w for w in report.warnings)


@pytest.mark.parametrize("entry", [{"type": "registry"}, {"command": None}, {"command": ""}, {"command": "  "},
                                   {"command": "tool-a", "args": "not-a-list"}])
def test_an_entry_kiro_cli_would_refuse_is_never_rendered(plugin_manager, bin_dir, entry):
    kiro_global({"mcpServers": {"bad": entry, "good": {"command": "tool-a"}}})
    report = rebuild_agent_config()
    assert "bad" not in servers() and "bad" in report.dropped
    parse_spec(agent(), path=home.rendered_agent_file(), source="global")


def test_a_scope_entry_without_a_command_does_not_own_one(plugin_manager, bin_dir):
    crew_store({"mcpServers": {"a": {"disabledTools": ["x"]}}})
    kiro_global({"mcpServers": {"a": {"command": "tool-a"}}})
    rebuild_agent_config()
    assert servers()["a"] == {"command": "tool-a", "disabledTools": ["x"]}


# -- disabled -----------------------------------------------------------------


def test_a_server_muted_in_any_scope_renders_disabled_until_unmuted(plugin_manager, bin_dir):
    kiro_global({"mcpServers": {"a": {"command": "tool-a"}}})
    crew_store({"mcpServers": {"a": {"disabled": True}}})
    rebuild_agent_config()
    assert servers()["a"]["disabled"] is True
    crew_store({"mcpServers": {}})
    rebuild_agent_config()
    assert "disabled" not in servers()["a"]


def test_a_non_boolean_disabled_mutes_fail_closed(plugin_manager, bin_dir):
    kiro_global({"mcpServers": {"a": {"command": "tool-a", "disabled": "yes"}}})
    rebuild_agent_config()
    assert servers()["a"]["disabled"] is True


# -- governance ---------------------------------------------------------------


def owner_allows_every_tool() -> None:
    """An owner rule allowing every tool whatever its input: blanket grants are then the merge's to keep or drop
    (the permission policy withholds a grant it could refuse; tests of the merge are not about that)."""
    write_policy(rules=[{"decision": "allow", "tool": "*"}])


def _ceiling(*patterns: str) -> None:
    home.crew_home().mkdir(parents=True, exist_ok=True)
    home.config_file().write_text(f"[governance]\nceiling = {json.dumps(list(patterns))}\n")


def test_the_ceiling_withholds_blanket_grants_and_the_sel_says_so(plugin_manager, bin_dir):
    owner_allows_every_tool()
    _ceiling("@fetch/delete", "@fs_write")
    base({"name": "kirocrew", "tools": ["*", "@fetch"], "allowedTools": ["read", "fs_write", "@fetch", "@other/x"],
          "mcpServers": {"fetch": {"command": "tool-a", "autoApprove": ["get", "delete"]},
                         "other": {"command": "tool-b", "autoApprove": ["x"]}}})
    report = rebuild_agent_config()
    doc = agent()
    assert doc["allowedTools"] == ["@other/x"]  # read: the built-in protections may ask (the policy's doing)
    assert doc["mcpServers"]["fetch"]["autoApprove"] == []
    assert doc["mcpServers"]["other"]["autoApprove"] == ["x"]
    assert doc["tools"] == ["*", "@fetch"]  # mounting is not approving
    assert set(report.withheld) == {"fs_write", "@fetch", "@fetch/get", "@fetch/delete", "read"}
    records = sel_events("mcp_auto_approve_withheld")
    assert {ref for r in records for ref in r["fields"]["refs"]} == set(report.withheld)
    assert all(r["fields"]["source"] == "rebuild_agent_config" for r in records)


def test_a_ceiling_that_cannot_be_read_withholds_every_grant(plugin_manager, bin_dir):
    home.crew_home().mkdir(parents=True, exist_ok=True)
    home.config_file().write_text("[governance\n")
    base({"name": "kirocrew", "tools": ["*"], "allowedTools": ["read"],
          "mcpServers": {"a": {"command": "tool-a", "autoApprove": ["t"]}}})
    rebuild_agent_config()
    assert agent()["allowedTools"] == [] and servers()["a"]["autoApprove"] == []


def test_a_broken_sel_does_not_break_the_rebuild(plugin_manager, bin_dir):
    _ceiling("@a")
    home.audit_log_file().parent.parent.mkdir(parents=True, exist_ok=True)
    home.audit_log_file().parent.write_text("not a folder")
    base({"name": "kirocrew", "tools": ["*"], "allowedTools": ["@a"], "mcpServers": {"a": {"command": "tool-a"}}})
    report = rebuild_agent_config()
    assert report.written and agent()["allowedTools"] == []
    assert any("SEL" in w for w in report.warnings)


# -- bad sources and a bad agent file ----------------------------------------


def test_malformed_sources_are_skipped_and_left_byte_identical(plugin_manager, bin_dir):
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"from-before": {"command": "tool-a"}}})
    kiro = kiro_global('{"mcpServers": {"x": ')
    store = crew_store({"mcpServers": ["not", "an", "object"]})
    report = rebuild_agent_config()
    assert home.kiro_global_mcp_file().read_bytes() == kiro
    assert home.crew_mcp_file().read_bytes() == store
    assert set(report.skipped_sources) == {"kiro", "kirocrew"}
    assert servers()["from-before"] == {"command": "tool-a"}  # unknowable means keep
    from kirocrew_mcp.render import last_rebuild_state

    assert any("mcpServers is not a JSON object" in w for w in last_rebuild_state()["warnings"])


def test_an_unreadable_scope_keeps_its_disabled_mirror(plugin_manager, bin_dir):
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"a": {"command": "tool-a", "disabled": True}}})
    crew_store({"mcpServers": {"a": {"command": "tool-a"}}})
    home.kiro_global_mcp_file().mkdir(parents=True)
    rebuild_agent_config()
    assert servers()["a"]["disabled"] is True


def test_a_corrupt_agent_file_is_kept_as_a_backup_before_a_fresh_render(plugin_manager, bin_dir):
    corrupt = base('{"name": "kirocrew", "mcpServers": {')
    kiro_global({"mcpServers": {"a": {"command": "tool-a"}}})
    report = rebuild_agent_config()
    assert report.backup is not None and report.backup.read_bytes() == corrupt
    assert stat.S_IMODE(report.backup.stat().st_mode) == 0o600
    assert report.backup.parent != home.kiro_agents_dir()  # kiro-cli never sees a second agent file
    assert set(servers()) == {"a"}


def test_a_non_object_agent_file_is_backed_up_too(plugin_manager):
    base([1, 2])
    report = rebuild_agent_config()
    assert report.backup is not None and json.loads(report.backup.read_text()) == [1, 2]
    assert agent()["name"] == "kirocrew"


def test_an_unreadable_agent_file_is_left_alone(plugin_manager):
    home.rendered_agent_file().mkdir(parents=True)
    with pytest.raises(KirocrewError) as err:
        rebuild_agent_config()
    assert err.value.code == "agent_file_unreadable"
    assert home.rendered_agent_file().is_dir()


# -- aliases in the render ----------------------------------------------------


def test_slash_keys_render_under_their_alias_and_refs_follow_idempotently(plugin_manager, bin_dir):
    owner_allows_every_tool()
    base({"name": "kirocrew", "tools": ["@@playwright/mcp"], "allowedTools": ["@@playwright/mcp/click"],
          "mcpServers": {"@playwright/mcp": {"command": "tool-a"}}})
    kiro_global({"mcpServers": {"npm:@playwright/mcp": {"command": "tool-b"}}})
    report = rebuild_agent_config()
    doc = agent()
    assert doc["mcpServers"] == {"playwright-mcp": {"command": "tool-a"}, "playwright-mcp-2": {"command": "tool-b"}}
    assert doc["tools"] == ["@playwright-mcp", "@playwright-mcp-2"]
    assert doc["allowedTools"] == ["@playwright-mcp/click"]
    assert report.renamed == {"@playwright/mcp": "playwright-mcp", "npm:@playwright/mcp": "playwright-mcp-2"}
    first = home.rendered_agent_file().read_bytes()
    assert not rebuild_agent_config().written
    assert home.rendered_agent_file().read_bytes() == first


def test_an_alias_never_takes_a_managed_name(plugin_manager):
    plugin_manager.register(Managed(CORE), name="managed")
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {"kirocrew/core": {"command": "/bin/sh"}}})
    rebuild_agent_config()
    assert servers()["kirocrew-core-2"] == {"command": "/bin/sh"}
    assert servers()["kirocrew-core"]["args"] == ["mcp-core"]


# -- uninstall's targeted delete ----------------------------------------------


def test_removing_a_server_from_the_agent_file_stops_the_merge_resurrecting_it(plugin_manager, bin_dir):
    base({"name": "kirocrew", "tools": ["read", "@a", "@a/x"], "mcpServers": {"a": {"command": "tool-a"}}})
    assert remove_server_from_agent_file("a") is True
    assert remove_server_from_agent_file("a") is False
    rebuild_agent_config()
    assert "a" not in servers() and agent()["tools"] == ["read"]


# -- doctor -------------------------------------------------------------------


def test_doctor_is_happy_with_a_fresh_render(plugin_manager):
    from kirocrew_mcp.health import check_agent_file, check_provider_globals

    plugin_manager.register(Managed(CORE, COMPUTER), name="managed")
    rebuild_agent_config()
    assert check_agent_file().status == "ok"
    assert check_provider_globals().status == "ok"


def test_doctor_fails_a_hand_edit_kiro_cli_would_refuse_or_that_merges_the_global_twice(plugin_manager):
    from kirocrew_mcp.health import check_agent_file

    rebuild_agent_config()
    doc = agent()
    doc["includeMcpJson"] = True
    doc["permissions"] = {}
    base(doc)
    result = check_agent_file()
    assert result.status == "fail" and "includeMcpJson" in result.detail and "permissions" in result.detail


def test_doctor_warns_about_a_stale_managed_command_and_a_skipped_source(plugin_manager):
    from kirocrew_mcp.health import check_agent_file

    plugin_manager.register(Managed(CORE), name="managed")
    kiro_global("{oops")
    rebuild_agent_config()
    doc = agent()
    doc["mcpServers"]["kirocrew-core"]["command"] = "/old/kirocrew"
    base(doc)
    result = check_agent_file()
    assert result.status == "warn"
    assert "stale command" in result.detail and str(home.kiro_global_mcp_file()) in result.detail


def test_doctor_finds_managed_names_left_in_a_shared_global(plugin_manager):
    from kirocrew_mcp.health import check_provider_globals

    plugin_manager.register(Managed(CORE), name="managed")
    kiro_global({"mcpServers": {"kirocrew-core": {"command": "kirocrew", "args": ["mcp-core"]}}})
    result = check_provider_globals()
    assert result.status == "warn" and "kirocrew-core" in result.detail


# -- toolAliases: plugins' renames, the user's own entries -----------------------------------


class Aliases:
    """Implements ``agent_tool_aliases``; records what it was shown."""

    def __init__(self, aliases: Any) -> None:
        self.aliases = aliases
        self.seen: list[set[str]] = []

    @hookimpl
    def agent_tool_aliases(self, servers: Any) -> Any:
        self.seen.append(set(servers))
        if isinstance(self.aliases, Exception):
            raise self.aliases
        return self.aliases


@pytest.fixture
def mcp_hooks(plugin_manager: Any) -> Any:
    import kirocrew_mcp.plugin

    plugin_manager.register(kirocrew_mcp.plugin, name="mcp")
    return plugin_manager


def test_plugin_tool_aliases_for_mounted_servers_are_rendered_and_kiro_cli_accepts_them(mcp_hooks, bin_dir):
    crew_store({"mcpServers": {"a": {"url": "https://a.example/mcp"}, "b": {"url": "https://b.example/mcp"}}})
    renames = Aliases({"@a/list": "a_list", "@b/list": "b_list", "@absent/list": "absent_list"})
    mcp_hooks.register(renames, name="renames")
    report = rebuild_agent_config(pm=mcp_hooks)
    assert agent()["toolAliases"] == {"@a/list": "a_list", "@b/list": "b_list"}  # no unmounted server
    assert report.tool_aliases == {"@a/list": "a_list", "@b/list": "b_list"}
    assert {"a", "b"} <= renames.seen[-1]
    parse_spec(agent(), path=home.rendered_agent_file(), source="global")


def test_a_users_own_tool_alias_is_kept_and_wins_on_the_same_key(mcp_hooks, bin_dir):
    crew_store({"mcpServers": {"a": {"url": "https://a.example/mcp"}}})
    base({"name": "kirocrew", "tools": ["*"], "mcpServers": {},
          "toolAliases": {"@a/list": "mine", "@x/y": "kept"}})
    mcp_hooks.register(Aliases({"@a/list": "a_list", "@a/get": "a_get"}), name="renames")
    rebuild_agent_config(pm=mcp_hooks)
    assert agent()["toolAliases"] == {"@a/list": "mine", "@x/y": "kept", "@a/get": "a_get"}


def test_a_rename_no_plugin_asks_for_any_more_is_retracted_but_a_user_edit_of_it_stays(mcp_hooks, bin_dir):
    crew_store({"mcpServers": {"a": {"url": "https://a.example/mcp"}}})
    renames = Aliases({"@a/list": "a_list", "@a/get": "a_get"})
    mcp_hooks.register(renames, name="renames")
    rebuild_agent_config(pm=mcp_hooks)
    document = agent()
    document["toolAliases"]["@a/get"] = "my_get"  # the user takes this one over
    base(document)
    renames.aliases = {}
    rebuild_agent_config(pm=mcp_hooks)
    assert agent()["toolAliases"] == {"@a/get": "my_get"}
    base({**agent(), "toolAliases": {}})
    rebuild_agent_config(pm=mcp_hooks)
    assert agent()["toolAliases"] == {}  # an empty object the user wrote stays as written
    renames.aliases = {"@a/list": "a_list"}
    rebuild_agent_config(pm=mcp_hooks)
    renames.aliases = {}
    rebuild_agent_config(pm=mcp_hooks)
    assert "toolAliases" not in agent()  # only kirocrew's rename was there: the field goes with it


@pytest.mark.parametrize("answer", [RuntimeError("boom"), ["@a/list"], {"@a/list": 3}])
def test_a_failing_alias_plugin_leaves_its_renames_out_with_a_warning(mcp_hooks, bin_dir, answer):
    crew_store({"mcpServers": {"a": {"url": "https://a.example/mcp"}}})
    mcp_hooks.register(Aliases(answer), name="renames")
    mcp_hooks.register(Aliases({"@a/get": "a_get"}), name="second")
    report = rebuild_agent_config(pm=mcp_hooks)
    assert agent()["toolAliases"] == {"@a/get": "a_get"}
    assert any("renames" in w and "agent_tool_aliases" in w for w in report.warnings)
