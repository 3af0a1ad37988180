"""The governance ceiling: what keeps a blanket auto-approve, at every granularity, failing closed.

A grant also needs the permission policy to allow the tool whatever its input; every test here starts
with an owner rule allowing every tool, so what it shows is the ceiling's doing.
"""

from __future__ import annotations

import pytest

from kirocrew_core import hookimpl
from kirocrew_core.config import set_value
from kirocrew_core.errors import KirocrewError, MalformedFileError
from kirocrew_core.governance import auto_approve_verdicts, ceiling_patterns, filter_auto_approve, may_auto_approve
from kirocrew_core.home import config_file
from kirocrew_core.plugins import PluginRecord, PluginWarning
from kirocrew_testing.policy import write_policy


@pytest.fixture(autouse=True)
def owner_allows_every_tool() -> None:
    write_policy(rules=[{"decision": "allow", "tool": "*"}])


class Ceiling:
    def __init__(self, *patterns: str) -> None:
        self.patterns = list(patterns)

    @hookimpl
    def governance_ceiling(self) -> list[str]:
        return self.patterns


class RaisingCeiling:
    @hookimpl
    def governance_ceiling(self) -> list[str]:
        raise RuntimeError("policy server unreachable")


class MalformedCeiling:
    @hookimpl
    def governance_ceiling(self) -> list[str]:
        return ["github"]  # no @: not a pattern


def _ceiling(*patterns: str) -> None:
    set_value("governance.ceiling", ",".join(patterns))


def _as_third_party(pm, name: str) -> None:
    pm.records[name] = PluginRecord(name, "kirocrew-acme-policy", "1.0", f"acme:{name}", "loaded")


def test_with_no_ceiling_every_reference_keeps_its_grant(plugin_manager):
    for ref in ("@github", "@github/create_issue", "introspect", "todo_list"):
        assert may_auto_approve(ref)


def test_a_server_pattern_withholds_the_server_and_each_of_its_tools(plugin_manager):
    _ceiling("@github")
    assert not may_auto_approve("@github")
    assert not may_auto_approve("@github/create_issue")
    assert may_auto_approve("@gitlab")
    assert may_auto_approve("@gitlab/create_issue")


def test_a_tool_pattern_withholds_the_whole_server_it_names(plugin_manager):
    _ceiling("@github/delete_repo")
    assert not may_auto_approve("@github")
    assert not may_auto_approve("@github/delete_repo")
    assert not may_auto_approve("@github/create_issue")
    assert may_auto_approve("@gitlab")
    assert may_auto_approve("@gitlab/delete_repo")


def test_matching_ignores_case_on_both_sides(plugin_manager):
    _ceiling("@GitHub/Delete_Repo")
    assert not may_auto_approve("@GITHUB")
    assert not may_auto_approve("@github/delete_REPO")
    assert not may_auto_approve("github")
    assert may_auto_approve("@GitLab")


def test_a_glob_in_the_server_part_governs_every_server_it_matches(plugin_manager):
    _ceiling("@git*", "@slac?/delete_*")
    assert not may_auto_approve("@github/create_issue")
    assert not may_auto_approve("@GitLab")
    assert may_auto_approve("@forgejo")
    assert not may_auto_approve("@slack/post_message")
    assert may_auto_approve("@slackbot")


def test_a_glob_reference_is_withheld_when_it_could_cover_a_governed_server(plugin_manager):
    _ceiling("@github/delete_repo")
    assert not may_auto_approve("@*")
    assert not may_auto_approve("@git*/create_issue")
    assert may_auto_approve("@slack*")
    _ceiling("@git*")
    assert not may_auto_approve("@*hub")  # two globs: assumed to overlap


def test_builtins_and_bare_server_names_are_read_as_at_references(plugin_manager):
    _ceiling("@fs_write", "@github")
    assert not may_auto_approve("fs_write")
    assert not may_auto_approve("github")
    assert may_auto_approve("introspect")


def test_a_reference_that_cannot_be_read_is_never_approved(plugin_manager):
    for ref in ("", "@", "@github/", "/tool"):
        assert not may_auto_approve(ref)


def test_a_plugin_contribution_counts_like_the_config(plugin_manager):
    plugin_manager.register(Ceiling("@Jira/delete_issue"), name="test-ceiling")
    _ceiling("@github")
    assert ceiling_patterns() == ["@github", "@Jira/delete_issue"]
    assert not may_auto_approve("@jira")
    assert not may_auto_approve("@jira/create_issue")
    assert not may_auto_approve("@github/x")
    assert may_auto_approve("@linear")


def test_plugin_patterns_come_sorted_by_plugin_name(plugin_manager):
    plugin_manager.register(Ceiling("@zeta"), name="b-policy")
    plugin_manager.register(Ceiling("@alpha"), name="a-policy")
    assert ceiling_patterns() == ["@alpha", "@zeta"]


def test_filter_splits_references_in_order(plugin_manager):
    _ceiling("@github/delete_repo")
    kept, withheld = filter_auto_approve(["introspect", "@github", "@slack", "@github/delete_repo", "@slack/post"])
    assert kept == ["introspect", "@slack", "@slack/post"]
    assert withheld == ["@github", "@github/delete_repo"]


def test_a_malformed_config_withholds_everything(plugin_manager):
    path = config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[governance]\nceiling = [\n")
    assert not may_auto_approve("fs_read")
    assert not may_auto_approve("@anything")
    assert filter_auto_approve(["fs_read", "@slack"]) == ([], ["fs_read", "@slack"])
    with pytest.raises(MalformedFileError):
        ceiling_patterns()


def test_a_raising_third_party_plugin_withholds_everything_and_says_so(plugin_manager):
    plugin_manager.register(RaisingCeiling(), name="acme-policy")
    _as_third_party(plugin_manager, "acme-policy")
    with pytest.warns(PluginWarning, match="kirocrew-acme-policy.*policy server unreachable"):
        assert not may_auto_approve("fs_read")
    with pytest.warns(PluginWarning):
        assert filter_auto_approve(["@slack"]) == ([], ["@slack"])
    with pytest.warns(PluginWarning), pytest.raises(KirocrewError) as excinfo:
        ceiling_patterns()
    assert excinfo.value.code == "governance_ceiling_unavailable"


def test_a_plugin_returning_something_that_is_not_a_pattern_withholds_everything(plugin_manager):
    plugin_manager.register(MalformedCeiling(), name="sloppy-policy")
    with pytest.warns(PluginWarning, match="@server or @server/tool"):
        assert not may_auto_approve("@slack")


def test_a_ceiling_set_through_the_cli_takes_effect(kirocrew, plugin_manager):
    result = kirocrew("config", "set", "governance.ceiling", '["@github/delete_repo"]')
    assert result.returncode == 0, result.stderr
    assert not may_auto_approve("@github/list_issues")
    assert may_auto_approve("@gitlab/list_issues")


def test_the_permission_policy_withholds_what_a_rule_could_refuse_with_no_ceiling_at_all(plugin_manager):
    write_policy()  # the default policy: no owner rule
    verdicts = dict(auto_approve_verdicts(["fs_read", "execute_bash", "@github/list_issues", "introspect",
                                           "@kirocrew-core"]))
    # reads: the built-in protections may ask; the shell: a line kirocrew cannot read always asks; an MCP tool:
    # read_only's default is ask; introspect and kirocrew's own tools are allowed under every authority.
    assert verdicts == {"fs_read": "permission_policy", "execute_bash": "permission_policy",
                        "@github/list_issues": "permission_policy", "introspect": None, "@kirocrew-core": None}


def test_an_owner_allow_without_input_restores_a_grant_and_an_ask_rule_takes_it_away(plugin_manager):
    write_policy(rules=[{"decision": "allow", "tool": "@github"}])
    assert may_auto_approve("@github/list_issues")
    write_policy(rules=[{"decision": "allow", "tool": "@github"},
                        {"decision": "ask", "tool": "@github/delete_*", "reason": "deletes are mine"}])
    assert may_auto_approve("@github/list_issues")
    assert not may_auto_approve("@github/delete_repo") and not may_auto_approve("@github")
