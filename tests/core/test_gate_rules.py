"""A permission-policy rule: its fields, the checks that refuse a rule that could not work, its text forms."""

from __future__ import annotations

import os

import pytest

from kirocrew_core.gate.rules import MAX_ITEMS, MAX_TEXT, PolicyError, Rule, build_rule, content_id, new_rule_id

AUTHORITIES = ("unrestricted", "read_only", "workspace_write")


def built(**fields) -> Rule:
    return build_rule(fields, tier="owner", source="policy.toml", known_authorities=AUTHORITIES)


def refused(**fields) -> PolicyError:
    with pytest.raises(PolicyError) as caught:
        built(**fields)
    return caught.value


def test_a_rule_keeps_what_it_says_and_where_it_came_from():
    rule = built(id="no-rm", decision="deny", tool="shell", command=["rm", "git  push --force"], reason="ask me",
                 authority="workspace_write", agent="rev*")
    assert (rule.id, rule.decision, rule.tool, rule.commands) == ("no-rm", "deny", "shell", ("rm", "git push --force"))
    assert (rule.authority, rule.agent, rule.workspace, rule.reason) == ("workspace_write", "rev*", None, "ask me")
    assert (rule.tier, rule.source) == ("owner", "policy.toml")
    assert rule.has_input and rule.scoped


@pytest.mark.parametrize(("given", "canonical"), [
    ("fs_write", "write"), ("fs_read", "read"), ("execute_bash", "shell"), ("execute_cmd", "shell"),
    ("shell", "shell"), ("web_fetch", "web_fetch"),
])
def test_kiro_1x_tool_names_are_read_as_their_2x_names(given, canonical):
    assert built(decision="allow", tool=given).tool == canonical


@pytest.mark.parametrize("tool", ["*", "@builtin", "@github", "@github/list_issues", "@git-*", "@srv/read_*", "fs_*",
                                  "read", "tool[12]"])
def test_tool_patterns_name_built_ins_servers_tools_and_globs(tool):
    assert built(decision="allow", tool=tool).tool == tool


@pytest.mark.parametrize("tool", ["", "  ", "a b", "@", "@srv/a/b", "@a@b", "shell;rm", "@srv/"])
def test_a_tool_that_is_no_pattern_is_refused(tool):
    assert refused(decision="allow", tool=tool).field == "tool"


@pytest.mark.parametrize("decision", [None, "Allow", "block", "yes", 1])
def test_a_decision_other_than_allow_ask_or_deny_is_refused(decision):
    assert refused(decision=decision, tool="shell").field == "decision"


def test_an_unknown_field_is_refused_and_named():
    error = refused(decision="deny", tool="shell", commands="rm")
    assert error.field == "commands" and "unknown rule field" in error.message and error.code == "policy_invalid"


def test_a_rule_narrows_its_tool_by_one_kind_of_input_only():
    assert "one of them" in refused(decision="deny", tool="*", command="rm", path="/etc/**").message


@pytest.mark.parametrize(("fields", "field"), [
    ({"command": ""}, "command"),
    ({"command": []}, "command"),
    ({"command": ["git", ""]}, "command"),
    ({"command": "git\nrm"}, "command"),
    ({"command": "x" * (MAX_TEXT + 1)}, "command"),
    ({"command": [f"cmd{i}" for i in range(MAX_ITEMS + 1)]}, "command"),
    ({"path": "src\\**"}, "path"),
    ({"path": 7}, "path"),
    ({"domain": "https://example.com"}, "domain"),
    ({"domain": "exa mple.com"}, "domain"),
    ({"domain": "example.*.com"}, "domain"),
    ({"reason": ""}, "reason"),
    ({"agent": ""}, "agent"),
])
def test_an_input_or_scope_that_cannot_work_is_refused_and_named(fields, field):
    assert refused(decision="deny", tool="*", **fields).field == field


def test_domains_are_kept_lower_case_without_the_trailing_dot():
    assert built(decision="allow", tool="web_fetch", domain=["Example.COM.", "*.Docs.org", "*"]).domains == (
        "example.com", "*.docs.org", "*")


def test_an_authority_nobody_provides_is_refused_so_a_typo_cannot_make_a_dead_rule():
    error = refused(decision="deny", tool="shell", authority="read-only")
    assert error.field == "authority" and "read_only" in error.message
    # Without a list of known authorities (a plugin's backend is checked where it runs), any name is kept.
    rule = build_rule({"decision": "deny", "tool": "shell", "authority": "sandboxed"}, tier="owner", source="x")
    assert rule.authority == "sandboxed"


def test_a_workspace_is_an_absolute_directory_and_a_relative_one_is_refused(isolated_homes):
    assert refused(decision="deny", tool="shell", workspace="projects/a").field == "workspace"
    rule = built(decision="deny", tool="shell", workspace="~/projects/a/")
    assert rule.workspace == os.path.join(str(isolated_homes.user_home), "projects", "a")
    assert built(decision="deny", tool="shell", workspace="/srv/a/../b").workspace == "/srv/b"


@pytest.mark.parametrize("rule_id", ["", "-x", "a b", "x" * 65, "é", 5])
def test_an_id_that_is_not_a_short_name_is_refused(rule_id):
    assert refused(id=rule_id, decision="deny", tool="shell").field == "id"


def test_a_rule_without_an_id_gets_one_from_what_it_says():
    first = built(decision="deny", tool="shell", command="rm")
    again = built(decision="deny", tool="shell", command="rm")
    other = built(decision="deny", tool="shell", command="rmdir")
    assert first.id == again.id == content_id({"decision": "deny", "tool": "shell", "command": "rm"})
    assert first.id.startswith("h-") and other.id != first.id


def test_new_rule_ids_are_fresh():
    ids = {new_rule_id() for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("r-") and len(i) == 10 for i in ids)


def test_a_rule_written_as_a_table_reads_back_as_the_same_rule():
    rule = built(id="r-1", decision="ask", tool="@github/delete_*", reason="destructive", agent="kirocrew")
    assert rule.as_table() == {"id": "r-1", "decision": "ask", "tool": "@github/delete_*", "agent": "kirocrew",
                               "reason": "destructive"}
    assert built(**rule.as_table()) == rule
    paths = built(id="r-2", decision="allow", tool="write", path=["src/**", "docs/*.md"])
    assert paths.as_table()["path"] == ["src/**", "docs/*.md"] and built(**paths.as_table()) == paths


def test_a_rule_describes_itself_in_one_line():
    assert built(decision="deny", tool="shell", command="rm").describe() == "deny shell command rm"
    many = built(decision="allow", tool="shell", command=["a", "b", "c", "d", "e"], authority="read_only")
    assert many.describe() == "allow shell command a, b, c (+2 more) (authority read_only)"
    assert built(decision="ask", tool="@notion").as_dict()["description"] == "ask @notion"


@pytest.mark.parametrize(("fields", "field"), [
    ({"tool": "read", "command": "cat"}, "command"),
    ({"tool": "@github", "command": "rm"}, "command"),
    ({"tool": "write", "domain": "example.com"}, "domain"),
    ({"tool": "shell", "path": "~/.ssh/**"}, "path"),
])
def test_an_input_the_tool_never_carries_is_refused_so_the_rule_is_not_dead(fields, field):
    # A shell rule's paths would never match: a shell line's files are decided as read and write.
    assert refused(decision="deny", **fields).field == field


@pytest.mark.parametrize("fields", [
    {"tool": "*", "command": "rm"}, {"tool": "@builtin", "command": "rm"}, {"tool": "execute_*", "command": "rm"},
    {"tool": "*", "domain": "example.com"}, {"tool": "web_*", "domain": "example.com"},
    {"tool": "*", "path": "~/.ssh/**"}, {"tool": "@files", "path": "/srv/**"}, {"tool": "fs_*", "path": "x"},
])
def test_an_input_on_a_tool_pattern_that_covers_its_tool_is_kept(fields):
    assert built(decision="deny", **fields).has_input
