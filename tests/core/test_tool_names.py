"""Who owns a kirocrew-core tool name: core and the open edition win, clashes are refused and reported.

The plugins are real distributions on ``sys.path`` (:func:`make_plugin_distribution`), loaded from their
entry points by a fresh plugin manager, as an installed third-party plugin would be.
(Through a real MCP client and the CLI: tests/coretools/test_tool_names_e2e.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from kirocrew_core.coretools.tool_names import TOOL_NAME_TAKEN, ToolNameClash, collect_tools
from kirocrew_core.plugins import make_plugin_manager
from kirocrew_testing.distributions import make_plugin_distribution

TOOLS_SOURCE = """
from kirocrew_core import hookimpl
from kirocrew_core.contributions import CoreMcpTool


def _answer(args, call):
    return "{label}"


@hookimpl
def core_mcp_tools():
    return [CoreMcpTool(name, "{label}'s " + name, {{"type": "object"}}, _answer, identity="none")
            for name in {names!r}]
"""


def _install(root: Any, monkeypatch: Any, distribution: str, *names: str, entry_point: str | None = None) -> None:
    # A module name of its own per test: an imported module stays in sys.modules for the next test.
    module = f"{distribution.replace('-', '_')}_{root.name.replace('-', '_')}"
    source = TOOLS_SOURCE.format(label=distribution, names=list(names))
    path = make_plugin_distribution(root / module, distribution=distribution, module=module, source=source,
                                    entry_point=entry_point)
    monkeypatch.syspath_prepend(str(path))


def test_a_third_party_tool_named_like_a_core_tool_is_refused_and_core_keeps_its_strict_tool(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, "kirocrew-acme", "send_notification", "acme_lookup")
    pm = make_plugin_manager(env={})
    tools = collect_tools(pm)
    kept = tools["send_notification"]
    assert kept.identity == "strict" and "kirocrew-acme" not in kept.description
    assert tools["acme_lookup"].description == "kirocrew-acme's acme_lookup"  # its other tools still serve
    [problem] = pm.problems["acme"]
    assert problem.code == TOOL_NAME_TAKEN
    assert "'send_notification'" in problem.message and "'acme'" in problem.message
    assert "'kirocrew_core.builtin.notifications'" in problem.message and "acme_" in problem.message
    [record] = [record for record in pm.loaded_records() if record.name == "acme"]
    assert record.status == "loaded"  # refused one tool, not skipped
    assert record.as_dict()["problems"] == [{"code": TOOL_NAME_TAKEN, "message": problem.message}]
    # Collected again (every tools/list does), the refusal is recorded once.
    collect_tools(pm)
    assert pm.problems["acme"] == [problem]


def test_two_third_party_plugins_with_one_tool_name_the_first_by_plugin_name_keeps_it(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, "kirocrew-zeta", "shared_lookup", entry_point="zeta")
    _install(tmp_path, monkeypatch, "kirocrew-acme", "shared_lookup", entry_point="acme")
    pm = make_plugin_manager(env={})
    assert collect_tools(pm)["shared_lookup"].description == "kirocrew-acme's shared_lookup"
    assert "acme" not in pm.problems
    [problem] = pm.problems["zeta"]
    assert problem.code == TOOL_NAME_TAKEN
    assert "plugin 'acme' (kirocrew-acme)" in problem.message and "keeps the name" in problem.message


def test_a_third_party_plugin_that_repeats_a_name_keeps_its_first_tool(tmp_path, monkeypatch):
    _install(tmp_path, monkeypatch, "kirocrew-acme", "acme_twice", "acme_twice")
    pm = make_plugin_manager(env={})
    assert "acme_twice" in collect_tools(pm)
    [problem] = pm.problems["acme"]
    assert problem.code == TOOL_NAME_TAKEN and "contributes that name twice" in problem.message


def test_two_open_edition_plugins_with_one_tool_name_fail_loudly(monkeypatch):
    # A second open-edition distribution cannot be installed beside the real one (its metadata would
    # shadow it), so the plugin is registered here and credited to one the way loading credits entry points.
    from kirocrew_core.contributions import CoreMcpTool
    from kirocrew_core.plugins import PluginRecord
    from kirocrew_testing.plugins import register_plugin

    pm = make_plugin_manager(env={})
    pm.records["aaa-member"] = PluginRecord("aaa-member", "kirocrew-cron", "0.1.0", "aaa_member", "loaded")
    register_plugin(pm, "aaa-member", core_mcp_tools=lambda: [
        CoreMcpTool("send_notification", "ours, twice", {"type": "object"}, lambda args, call: "", identity="none")])
    with pytest.raises(ToolNameClash, match="send_notification") as raised:
        collect_tools(pm)
    assert raised.value.code == "tool_name_clash"
    assert "'aaa-member'" in raised.value.message and "'kirocrew_core.builtin.notifications'" in raised.value.message


def test_the_installed_open_edition_has_no_tool_name_clash_and_no_refusal():
    pm = make_plugin_manager(env={})
    tools = collect_tools(pm)
    assert tools["send_notification"].identity == "strict"
    assert pm.problems == {}
