"""The companion edition: one extra MCP scope, present only when installed."""

from __future__ import annotations

from kirocrew_core.contributions import McpScope, flatten
from kirocrew_core.plugins import collect, make_plugin_manager


def test_the_companion_contributes_the_claude_code_scope_under_the_users_home(isolated_homes):
    pm = make_plugin_manager(env={})
    scopes = [c.value for c in flatten(collect(pm, "extra_mcp_scopes"))]
    assert scopes == [McpScope("cc", isolated_homes.user_home / ".claude.json", None, "Claude")]


def test_the_scope_follows_home_at_call_time_not_import_time(isolated_homes, monkeypatch, tmp_path):
    from kirocrew_companion.plugin import claude_code_scope

    monkeypatch.setenv("HOME", str(tmp_path / "other"))
    assert claude_code_scope().global_json == tmp_path / "other" / ".claude.json"


def test_with_only_the_open_edition_the_hook_yields_nothing():
    pm = make_plugin_manager(env={"KIROCREW_DISABLE_PLUGINS": "kirocrew-companion"})
    assert collect(pm, "extra_mcp_scopes") == []
    assert pm.get_plugin("companion") is None


def test_the_companion_is_not_part_of_the_open_edition():
    from importlib.metadata import distribution

    requires = distribution("kirocrew").requires or []
    open_edition = [r for r in requires if "extra ==" not in r]
    assert not any(r.startswith("kirocrew-companion") for r in open_edition)
    assert {r.split("==")[0] for r in open_edition} == {
        "kirocrew-core", "kirocrew-mcp", "kirocrew-connections", "kirocrew-conversations", "kirocrew-computer",
        "kirocrew-cron",
    }
