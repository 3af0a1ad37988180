"""App MCP servers in the agent file, and app agents."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, home
from kirocrew_core.contributions import ManagedMcpServer
from kirocrew_core.errors import KirocrewError
from kirocrew_testing.fake_kiro.agents_dirs import parse_spec
from kirocrew_mcp.apps import (
    app_tool_policy,
    install_app_agent,
    register_app_mcp_servers,
    registry_file,
    render_app_agent,
    unregister_app_mcp_servers,
)
from kirocrew_mcp.render import rebuild_agent_config
from kirocrew_testing.plugins import ManagedServers
from kirocrew_testing.policy import write_policy

CORE = ManagedMcpServer("kirocrew-core", ("mcp-core",), may_auto_approve=True)
COMPUTER = ManagedMcpServer("kirocrew-computer", ("mcp-computer",), may_auto_approve=False)
STDIO = {"command": "/bin/sh", "args": ["-c", "exit 0"]}
HTTP = {"url": "http://127.0.0.1:{port}/mcp"}


Managed = ManagedServers


def write(path: Path, document: Any) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (document if isinstance(document, str) else json.dumps(document)).encode()
    path.write_bytes(data)
    return data


def servers() -> dict[str, dict[str, Any]]:
    return json.loads(home.rendered_agent_file().read_text())["mcpServers"]


# -- app servers in the agent file --------------------------------------------


def test_app_servers_are_namespaced_entries_of_the_agent_file_only(plugin_manager):
    kiro = write(home.kiro_global_mcp_file(), {"mcpServers": {}})
    register_app_mcp_servers("notes", {"search": STDIO})
    assert servers()["notes:search"] == STDIO
    assert home.kiro_global_mcp_file().read_bytes() == kiro
    assert stat.S_IMODE(registry_file().stat().st_mode) == 0o600


def test_a_clean_rebuild_keeps_registered_app_servers(plugin_manager):
    register_app_mcp_servers("notes", {"search": STDIO})
    rebuild_agent_config(clean=True)
    assert "notes:search" in servers()


def test_the_registry_is_authoritative_over_a_stale_entry_in_the_file(plugin_manager):
    write_policy(rules=[{"decision": "allow", "tool": "@notes:*"}])  # so the app's grant is the registry's to keep
    register_app_mcp_servers("notes", {"search": {**STDIO, "autoApprove": ["find"]}})
    doc = json.loads(home.rendered_agent_file().read_text())
    doc["mcpServers"]["notes:search"]["args"] = ["hand", "edited"]
    doc["mcpServers"]["notes:gone"] = STDIO
    write(home.rendered_agent_file(), doc)
    rebuild_agent_config()
    assert servers()["notes:search"] == {**STDIO, "autoApprove": ["find"]}
    assert "notes:gone" not in servers()


def test_an_app_server_is_dropped_only_when_its_app_is_confirmed_disabled(plugin_manager):
    write(home.rendered_agent_file(), {"name": "kirocrew", "tools": ["*"],
                                       "mcpServers": {"legacy:srv": STDIO, "notes:old": STDIO}})
    rebuild_agent_config(clean=False)
    assert {"legacy:srv", "notes:old"} <= set(servers())  # the registry has never heard of them: keep
    unregister_app_mcp_servers("legacy")
    assert "legacy:srv" not in servers() and "notes:old" in servers()


def test_unregistering_removes_every_entry_of_the_app(plugin_manager):
    register_app_mcp_servers("notes", {"search": STDIO, "index": STDIO})
    register_app_mcp_servers("mail", {"inbox": STDIO})
    unregister_app_mcp_servers("notes")
    assert set(servers()) == {"mail:inbox"}


def test_a_shared_leftover_never_overrides_an_app_entry(plugin_manager):
    write(home.kiro_global_mcp_file(), {"mcpServers": {"notes:search": {"command": "/bin/true", "args": ["old"]}}})
    write(home.crew_mcp_file(), {"mcpServers": {"notes:search": {"args": ["store"], "autoApprove": ["x"]}}})
    register_app_mcp_servers("notes", {"search": STDIO})
    assert servers()["notes:search"] == STDIO


def test_an_http_server_without_a_live_port_is_not_written_and_its_stale_entry_is_scrubbed(plugin_manager):
    register_app_mcp_servers("notes", {"api": HTTP, "cli": STDIO}, port=43123)
    assert servers()["notes:api"] == {"url": "http://127.0.0.1:43123/mcp"}
    report = register_app_mcp_servers("notes", {"api": HTTP, "cli": STDIO}, port=None)
    assert "notes:api" not in servers() and "notes:cli" in servers()
    assert any("notes:api" in w and "port" in w for w in report.warnings)


def test_a_fixed_url_is_written_as_declared(plugin_manager):
    register_app_mcp_servers("notes", {"remote": {"url": "https://example.invalid/mcp"}})
    assert servers()["notes:remote"] == {"url": "https://example.invalid/mcp"}


def test_a_governed_app_auto_approve_is_stripped_and_an_ungoverned_one_kept(plugin_manager):
    # The owner's policy allows both servers' tools whatever their input; the ceiling still withholds one.
    write_policy(rules=[{"decision": "allow", "tool": "@notes:*"}])
    home.crew_home().mkdir(parents=True, exist_ok=True)
    home.config_file().write_text('[governance]\nceiling = ["@notes:search"]\n')
    register_app_mcp_servers("notes", {"search": {**STDIO, "autoApprove": ["find"]},
                                       "index": {**STDIO, "autoApprove": ["list"]}})
    assert servers()["notes:search"]["autoApprove"] == []
    assert servers()["notes:index"]["autoApprove"] == ["list"]
    withheld = [r for r in audit.tail(100) if r["event"] == "mcp_auto_approve_withheld"]
    assert any("@notes:search/find" in r["fields"]["refs"] and r["fields"]["reason"] == "governance_ceiling"
               for r in withheld)


def test_an_app_grant_the_permission_policy_does_not_allow_whatever_the_input_is_withheld(plugin_manager):
    write_policy(rules=[{"decision": "allow", "tool": "@notes:*"},
                        {"decision": "ask", "tool": "@notes:index/list", "reason": "listing is mine to allow"}])
    register_app_mcp_servers("notes", {"index": {**STDIO, "autoApprove": ["list", "count"]}})
    assert servers()["notes:index"]["autoApprove"] == ["count"]
    withheld = {ref: r["fields"]["reason"] for r in audit.tail(100) if r["event"] == "mcp_auto_approve_withheld"
                for ref in r["fields"]["refs"]}
    assert withheld["@notes:index/list"] == "permission_policy" and "@notes:index/count" not in withheld


@pytest.mark.parametrize(
    ("app", "servers_arg"),
    [
        ("../evil", {"s": STDIO}),
        (".hidden", {"s": STDIO}),
        ("a b", {"s": STDIO}),
        ("x" * 65, {"s": STDIO}),
        ("notes", {"a/b": STDIO}),
        ("notes", {"a:b": STDIO}),
        ("notes", {"s": {"args": ["no command"]}}),
        ("notes", {"s": {"command": "x", "env": {"A": 1}}}),
        ("notes", {"s": {"command": "x", "disabled": "yes"}}),
        ("notes", {"s": "not a spec"}),
    ],
)
def test_bad_registrations_are_refused_and_change_nothing(plugin_manager, app, servers_arg):
    register_app_mcp_servers("keep", {"s": STDIO})
    registry, agent = registry_file().read_bytes(), home.rendered_agent_file().read_bytes()
    with pytest.raises(KirocrewError) as err:
        register_app_mcp_servers(app, servers_arg)
    assert err.value.code == "app_mcp_invalid"
    assert registry_file().read_bytes() == registry and home.rendered_agent_file().read_bytes() == agent


def test_a_malformed_registry_is_left_alone_and_app_keys_are_kept(plugin_manager):
    register_app_mcp_servers("notes", {"search": STDIO})
    broken = write(registry_file(), '{"apps": ')
    with pytest.raises(KirocrewError) as err:
        register_app_mcp_servers("notes", {"other": STDIO})
    assert err.value.code == "app_registry_malformed"
    report = rebuild_agent_config()
    assert registry_file().read_bytes() == broken
    assert "notes:search" in servers()
    assert any("app registry" in w for w in report.warnings)


def test_the_tool_policy_is_kept_for_the_gateway(plugin_manager):
    register_app_mcp_servers("notes", {"s": STDIO}, tool_policy=["@kirocrew-core/conversations_start"])
    assert app_tool_policy("notes") == ["@kirocrew-core/conversations_start"]
    assert app_tool_policy("unknown") == []


# -- app agents ---------------------------------------------------------------


def _template(**extra: Any) -> dict[str, Any]:
    return {"name": "notes-agent", "description": "notes", "tools": ["read", "@kirocrew-core", "@notes:search"],
            "allowedTools": ["read"], "includeMcpJson": True, **extra}


def test_an_app_agent_gets_managed_launch_specs_and_its_own_servers(plugin_manager):
    result = render_app_agent(
        _template(), app="notes", managed_servers={"kirocrew-core": CORE}, app_entries={"notes:search": STDIO}
    )
    spec = result.spec
    assert spec["includeMcpJson"] is False
    assert spec["mcpServers"]["kirocrew-core"]["args"] == ["mcp-core"]
    assert spec["mcpServers"]["kirocrew-core"]["env"]["KIROCREW_HOME"] == str(home.crew_home())
    assert spec["mcpServers"]["notes:search"] == STDIO
    parse_spec(spec, path=Path("notes-agent.json"), source="local")


def test_managed_tool_policy_renders_as_disabled_tools_and_never_reaches_the_file(plugin_manager):
    template = _template(managedToolPolicy={"exclude": ["@kirocrew-core/conversations_start"]})
    spec = render_app_agent(template, app="notes", managed_servers={"kirocrew-core": CORE}).spec
    assert spec["mcpServers"]["kirocrew-core"]["disabledTools"] == ["conversations_start"]
    assert "managedToolPolicy" not in spec and "neutralize" not in spec


def test_a_loosened_policy_reaches_an_installed_agent_and_user_disables_survive(plugin_manager):
    strict = _template(managedToolPolicy={"exclude": ["@kirocrew-core/a", "@kirocrew-core/b"]})
    first = render_app_agent(strict, app="notes", managed_servers={"kirocrew-core": CORE})
    edited = json.loads(json.dumps(first.spec))
    edited["mcpServers"]["kirocrew-core"]["disabledTools"].append("mine")
    loose = _template(managedToolPolicy={"exclude": ["@kirocrew-core/a"]})
    second = render_app_agent(loose, app="notes", existing=edited, previous_policy=first.policy_disabled,
                              managed_servers={"kirocrew-core": CORE})
    assert second.spec["mcpServers"]["kirocrew-core"]["disabledTools"] == ["a", "mine"]


def test_the_users_switches_on_an_app_server_survive_a_re_render_and_its_launch_spec_is_the_registrys(plugin_manager):
    template = _template(tools=["@notes:search"], managedToolPolicy={"exclude": ["@notes:search/a"]})
    entries = {"notes:search": {**STDIO, "disabledTools": ["declared"]}}
    first = render_app_agent(template, app="notes", app_entries=entries)
    edited = json.loads(json.dumps(first.spec))
    edited["mcpServers"]["notes:search"].update(disabled=True, args=["hand", "edited"])
    edited["mcpServers"]["notes:search"]["disabledTools"].append("mine")
    second = render_app_agent(template, app="notes", existing=edited, previous_policy=first.policy_disabled,
                              app_entries=entries)
    assert second.spec["mcpServers"]["notes:search"] == {**STDIO, "disabled": True,
                                                         "disabledTools": ["declared", "a", "mine"]}


def test_a_policy_an_edit_dropped_comes_back(plugin_manager):
    template = _template(managedToolPolicy={"exclude": ["@kirocrew-core/a"]})
    first = render_app_agent(template, app="notes", managed_servers={"kirocrew-core": CORE})
    edited = json.loads(json.dumps(first.spec))
    del edited["mcpServers"]["kirocrew-core"]["disabledTools"]
    edited["includeMcpJson"] = True
    second = render_app_agent(template, app="notes", existing=edited, previous_policy=first.policy_disabled,
                              managed_servers={"kirocrew-core": CORE})
    assert second.spec["mcpServers"]["kirocrew-core"]["disabledTools"] == ["a"]
    assert second.spec["includeMcpJson"] is False


def test_neutralize_redeclares_a_server_with_every_named_tool_disabled_and_unmounts_it(plugin_manager):
    template = _template(tools=["read", "@github", "@github/create_issue"], allowedTools=["@github/list"],
                         neutralize={"github": ["create_issue", "delete_repo"]})
    shadow = {"github": {"command": "gh-mcp", "args": ["serve"], "autoApprove": ["list"]}}
    spec = render_app_agent(template, app="notes", shadow_specs=shadow).spec
    assert spec["mcpServers"]["github"] == {"command": "gh-mcp", "args": ["serve"],
                                            "disabledTools": ["create_issue", "delete_repo"]}
    assert spec["tools"] == ["read"] and spec["allowedTools"] == []


def test_an_app_http_server_without_a_port_is_removed_from_the_app_agent(plugin_manager):
    existing = {"name": "notes-agent", "tools": ["@notes:api"], "mcpServers": {"notes:api": {"url": "http://x:1/"}}}
    spec = render_app_agent({"name": "notes-agent", "tools": ["@notes:api"]}, app="notes", existing=existing,
                            app_entries={}).spec
    assert "notes:api" not in spec["mcpServers"]


def test_a_never_auto_approvable_server_gets_no_grant_in_an_app_agent(plugin_manager):
    template = _template(tools=["@kirocrew-computer"], allowedTools=["@kirocrew-computer"])
    spec = render_app_agent(template, app="notes", managed_servers={"kirocrew-computer": COMPUTER}).spec
    assert spec["allowedTools"] == [] and "autoApprove" not in spec["mcpServers"]["kirocrew-computer"]


@pytest.mark.parametrize(
    "bad",
    [
        {"permissions": {}},
        {"managedToolPolicy": {"exclude": ["@kirocrew-core"]}},
        {"managedToolPolicy": {"include": []}},
        {"neutralize": {"github": []}},
        {"neutralize": {"github": "*"}},
    ],
)
def test_a_bad_app_agent_template_is_refused(plugin_manager, bad):
    with pytest.raises(KirocrewError) as err:
        render_app_agent(_template(**bad), app="notes")
    assert err.value.code == "app_agent_invalid"


def test_install_writes_the_app_agent_where_the_app_keeps_it_and_remembers_the_policy(plugin_manager, tmp_path):
    plugin_manager.register(Managed(CORE), name="managed")
    register_app_mcp_servers("notes", {"search": STDIO})
    target = tmp_path / "app" / ".kiro" / "agents" / "notes-agent.json"
    strict = _template(managedToolPolicy={"exclude": ["@kirocrew-core/a", "@kirocrew-core/b"]})
    install_app_agent("notes", target, strict)
    doc = json.loads(target.read_text())
    parse_spec(doc, path=target, source="local")
    assert doc["mcpServers"]["notes:search"] == STDIO
    assert doc["mcpServers"]["kirocrew-core"]["disabledTools"] == ["a", "b"]
    install_app_agent("notes", target, _template(managedToolPolicy={"exclude": ["@kirocrew-core/b"]}))
    assert json.loads(target.read_text())["mcpServers"]["kirocrew-core"]["disabledTools"] == ["b"]
    assert "notes:search" in servers()  # installing an agent does not disturb the registration


def test_install_backs_up_a_corrupt_app_agent_and_replaces_it(plugin_manager, tmp_path):
    target = tmp_path / "app" / ".kiro" / "agents" / "notes-agent.json"
    corrupt = write(target, '{"name": ')
    install_app_agent("notes", target, _template())
    parse_spec(json.loads(target.read_text()), path=target, source="local")
    from kirocrew_mcp.render import backups_dir

    assert [p.read_bytes() for p in backups_dir().iterdir()] == [corrupt]


def test_install_refuses_the_global_agents_folder(plugin_manager):
    with pytest.raises(KirocrewError) as err:
        install_app_agent("notes", home.kiro_agents_dir() / "notes.json", _template())
    assert err.value.code == "app_agent_location"
    assert not (home.kiro_agents_dir() / "notes.json").exists()
