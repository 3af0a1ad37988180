"""The owner's policy.toml, its last good copy and project files: what is in force when a file is absent,
good, broken or unreadable, and editing it without losing a comment."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit
from kirocrew_core.errors import KirocrewError
from kirocrew_core.gate import policy_file
from kirocrew_core.gate.policy_file import (
    PROJECT_FILE,
    add_rule,
    current_policy,
    last_good_file,
    load_policy,
    project_rules,
    read_policy_file,
    remove_rule,
)
from kirocrew_core.gate.protections import AUTHORITY_DEFAULTS
from kirocrew_core.gate.rules import PolicyError

GOOD = """\
# My policy: sessions never delete.
[defaults]
read_only = "deny"  # nothing unexpected in read-only sessions

[[rule]]
id = "no-rm"
decision = "deny"
tool = "shell"
command = "rm"
reason = "sessions never delete; ask me"

# Git is fine.
[[rule]]
decision = "allow"
tool = "shell"
command = ["git status", "git diff"]
"""


@pytest.fixture
def policy_path(isolated_homes: Any) -> Path:
    path = isolated_homes.crew_home / "policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def owner_ids(policy: Any) -> list[str]:
    return [rule.id for rule in policy.owner_rules]


# -- reading -------------------------------------------------------------------------------------------------

def test_an_absent_file_means_the_defaults_and_no_problem(plugin_manager, policy_path):
    policy = load_policy(plugin_manager)
    assert policy.owner_rules == [] and policy.problems == [] and policy.defaults == AUTHORITY_DEFAULTS
    assert read_policy_file().state == "absent" and not last_good_file().exists()


def test_a_good_file_is_in_force_in_file_order_and_kept_as_the_last_good_copy(plugin_manager, policy_path):
    write(policy_path, GOOD)
    policy = load_policy(plugin_manager)
    assert owner_ids(policy)[0] == "no-rm" and owner_ids(policy)[1].startswith("h-")
    assert policy.defaults == {**AUTHORITY_DEFAULTS, "read_only": "deny"} and policy.problems == []
    assert policy.owner_rules[0].source == str(policy_path)
    assert last_good_file().read_text() == GOOD
    assert stat.S_IMODE(last_good_file().stat().st_mode) == 0o600


@pytest.mark.parametrize(("text", "problem"), [
    ("[[rule]\ndecision = 'deny'", "not valid TOML"),
    ("rules = []", "unknown top-level key(s) rules"),
    ("[[rule]]\ndecision = 'deny'\ntool = 'shell'\ncommands = 'rm'", "rule 1: unknown rule field(s): commands"),
    ("[[rule]]\ndecision = 'allow'\ntool = 'shell'\n[[rule]]\ndecision = 'maybe'\ntool = 'shell'",
     "rule 2: decision must be allow, ask or deny"),
    ("[[rule]]\nid = 'a'\ndecision = 'deny'\ntool = 'shell'\n[[rule]]\nid = 'a'\ndecision = 'ask'\ntool = 'read'",
     "rule 2: the id 'a' is used twice"),
    ("[defaults]\nread-only = 'ask'", "[defaults] names an unknown authority 'read-only'"),
    ("[defaults]\nread_only = 'block'", "[defaults] read_only must be allow, ask or deny"),
    ("defaults = 'ask'", "[defaults] must be a table"),
    ("rule = 'deny everything'", "rules are [[rule]] tables"),
    ("[[rule]]\ndecision = 'deny'\ntool = 'shell'\nauthority = 'root'", "unknown authority 'root'"),
])
def test_a_malformed_file_is_reported_and_the_last_good_policy_stays_in_force(plugin_manager, policy_path, text,
                                                                              problem):
    write(policy_path, GOOD)
    load_policy(plugin_manager)  # the good file is read whole: its copy is kept
    write(policy_path, text)
    policy = load_policy(plugin_manager)
    assert any(problem in p and str(policy_path) in p for p in policy.problems), policy.problems
    assert any("last good policy stays in force" in p for p in policy.problems)
    assert owner_ids(policy)[0] == "no-rm"  # the last good rules, not the broken file's
    assert policy.defaults["read_only"] == "deny"
    assert policy.owner_rules[0].source.endswith("(last good copy)")
    assert last_good_file().read_text() == GOOD  # a broken file never replaces the good copy
    assert policy_path.read_text() == text  # and is never rewritten


def test_an_unreadable_file_is_reported_and_the_last_good_policy_stays_in_force(plugin_manager, policy_path):
    write(policy_path, GOOD)
    load_policy(plugin_manager)
    policy_path.unlink()
    policy_path.mkdir()  # a directory where the file should be: reading it fails
    read = read_policy_file()
    assert read.state == "unreadable" and "cannot read it" in read.problems[0]
    policy = load_policy(plugin_manager)
    assert owner_ids(policy)[0] == "no-rm"


def test_a_file_that_is_not_utf8_is_malformed(plugin_manager, policy_path):
    policy_path.write_bytes(b"# caf\xe9\n")
    assert read_policy_file().state == "malformed" and "not UTF-8" in read_policy_file().problems[0]


def test_with_no_good_copy_a_broken_file_makes_every_authority_ask_and_never_allow_all(plugin_manager, policy_path):
    write(policy_path, "[[rule]\n")
    policy = load_policy(plugin_manager)
    assert policy.owner_rules == []
    assert policy.defaults == dict.fromkeys(AUTHORITY_DEFAULTS, "ask")
    assert any("no earlier good policy" in p for p in policy.problems)


def test_removing_the_file_forgets_the_last_good_copy(plugin_manager, policy_path):
    write(policy_path, GOOD)
    load_policy(plugin_manager)
    policy_path.unlink()
    assert load_policy(plugin_manager).owner_rules == [] and not last_good_file().exists()
    write(policy_path, "not toml = = =")
    policy = load_policy(plugin_manager)
    assert policy.owner_rules == [] and policy.defaults["unrestricted"] == "ask"  # old rules are not revived


def test_the_policy_in_force_is_reread_only_when_the_file_changes(plugin_manager, policy_path):
    write(policy_path, GOOD)
    first = current_policy(plugin_manager)
    assert current_policy(plugin_manager) is first
    write(policy_path, GOOD + "\n[[rule]]\nid = 'later'\ndecision = 'ask'\ntool = 'web_fetch'\n")
    assert owner_ids(current_policy(plugin_manager))[-1] == "later"


# -- project files ---------------------------------------------------------------------------------------------

PROJECT = """\
[defaults]
unrestricted = "ask"       # stricter than allow: kept
workspace_write = "allow"  # looser than ask: ignored

[[rule]]
id = "p-deny"
decision = "deny"
tool = "shell"
command = "docker"

[[rule]]
id = "p-ask"
decision = "ask"
tool = "web_fetch"

[[rule]]
id = "p-allow"
decision = "allow"
tool = "*"
"""


def test_a_project_adds_deny_and_ask_rules_and_its_allow_rules_and_looser_defaults_are_reported(tmp_path):
    workspace = tmp_path / "repo"
    write(workspace / PROJECT_FILE, PROJECT)
    rules, defaults, problems = project_rules(str(workspace))
    assert [r.id for r in rules] == ["p-deny", "p-ask"] and all(r.tier == "project" for r in rules)
    assert defaults == {"unrestricted": "ask"}
    assert any("p-allow ignored" in p for p in problems)
    assert any("workspace_write = 'allow' ignored" in p for p in problems)


def test_a_broken_project_file_adds_nothing_and_says_so(tmp_path):
    write(tmp_path / PROJECT_FILE, "[[rule]\n")
    rules, defaults, problems = project_rules(str(tmp_path))
    assert (rules, defaults) == ([], {}) and any("not applied until the file is fixed" in p for p in problems)
    assert project_rules(str(tmp_path / "elsewhere")) == ([], {}, [])
    assert project_rules("") == ([], {}, [])


# -- editing the owner's file --------------------------------------------------------------------------------------

def test_adding_a_rule_keeps_every_comment_and_appends_the_rule(policy_path):
    write(policy_path, GOOD)
    rule = add_rule({"decision": "deny", "tool": "web_fetch", "domain": ["evil.example"], "reason": "no",
                     "command": [], "path": (), "authority": None})
    text = policy_path.read_text()
    assert text.startswith(GOOD.rstrip("\n"))  # the owner's text, comments and layout, exactly as it was
    assert rule.id.startswith("r-") and f'id = "{rule.id}"' in text
    assert [r.id for r in read_policy_file().rules][-1] == rule.id
    assert stat.S_IMODE(policy_path.stat().st_mode) == 0o600
    assert sorted(p.name for p in policy_path.parent.iterdir() if p.name.startswith("policy")) == ["policy.toml"]


def test_adding_to_an_absent_file_creates_it_with_a_header(isolated_homes):
    rule = add_rule({"decision": "allow", "tool": "@github"})
    text = (isolated_homes.crew_home / "policy.toml").read_text()
    assert text.startswith("# kirocrew permission policy") and read_policy_file().rules[0].id == rule.id
    assert stat.S_IMODE((isolated_homes.crew_home / "policy.toml").stat().st_mode) == 0o600


def test_a_given_id_is_replaced_by_a_fresh_one(policy_path):
    assert add_rule({"id": "mine", "decision": "allow", "tool": "@github"}).id != "mine"


def test_a_rule_that_does_not_check_is_refused_and_changes_nothing(policy_path):
    write(policy_path, GOOD)
    with pytest.raises(PolicyError) as caught:
        add_rule({"decision": "sometimes", "tool": "shell"})
    assert caught.value.field == "decision" and policy_path.read_text() == GOOD


@pytest.mark.parametrize("edit", [
    lambda: add_rule({"decision": "deny", "tool": "shell", "command": "rm"}),
    lambda: remove_rule("no-rm"),
], ids=["add", "remove"])
def test_a_malformed_file_is_never_edited(policy_path, edit):
    broken = GOOD + "\n[[rule]\n"
    write(policy_path, broken)
    with pytest.raises(KirocrewError) as caught:
        edit()
    assert caught.value.code == "policy_file_malformed" and "nothing was changed" in caught.value.message
    assert policy_path.read_text() == broken


def test_removing_a_rule_keeps_the_others_and_the_comments(policy_path):
    write(policy_path, GOOD)
    removed = remove_rule("no-rm")
    assert removed.id == "no-rm"
    text = policy_path.read_text()
    assert "no-rm" not in text and "# My policy: sessions never delete." in text
    assert "# Git is fine.\n[[rule]]" in text  # the comment introducing the next rule stays with it
    assert 'read_only = "deny"  # nothing unexpected in read-only sessions' in text
    [left] = read_policy_file().rules
    assert left.commands == ("git status", "git diff")
    assert stat.S_IMODE(policy_path.stat().st_mode) == 0o600


def test_a_hand_written_rule_is_removed_by_its_content_id_and_the_last_removal_leaves_no_rule_key(policy_path):
    write(policy_path, GOOD)
    content_id = read_policy_file().rules[1].id
    remove_rule(content_id)
    remove_rule("no-rm")
    assert read_policy_file().rules == [] and "[[rule]]" not in policy_path.read_text()
    assert read_policy_file().defaults == {"read_only": "deny"}


def test_removing_an_unknown_rule_says_so_and_changes_nothing(policy_path):
    write(policy_path, GOOD)
    with pytest.raises(KirocrewError) as caught:
        remove_rule("r-00000000")
    assert caught.value.code == "policy_rule_not_found" and policy_path.read_text() == GOOD
    with pytest.raises(KirocrewError) as absent:
        policy_path.unlink() or remove_rule("no-rm")
    assert absent.value.code == "policy_rule_not_found"


def test_edits_are_recorded_in_the_security_event_log(policy_path):
    rule = add_rule({"decision": "deny", "tool": "shell", "command": "rm"})
    remove_rule(rule.id)
    events = [(e["event"], e.get("fields", {}).get("rule")) for e in audit.tail(10)]
    assert ("policy_rule_added", rule.id) in events and ("policy_rule_removed", rule.id) in events


def test_the_policy_file_lives_in_the_crew_home(isolated_homes):
    assert policy_file.policy_file() == isolated_homes.crew_home / "policy.toml"
    assert os.path.dirname(last_good_file()).startswith(str(isolated_homes.crew_home))


@pytest.mark.parametrize("text", ["rule = []\n", "# inline\nrule = [{id = 'a', decision = 'ask', tool = 'read'}]\n"])
def test_a_rule_is_added_to_rules_written_as_an_inline_array(policy_path, text):
    write(policy_path, text)
    rule = add_rule({"decision": "deny", "tool": "shell", "command": "rm"})
    assert [r.id for r in read_policy_file().rules][-1] == rule.id
    assert policy_path.read_text().startswith(text.split("rule")[0])


def test_a_project_default_as_strict_as_the_built_in_one_is_kept_for_an_owner_who_loosened_it(tmp_path):
    # The owner may have set read_only = "allow": the project's "ask" is stricter than that, so it must reach decide.
    write(tmp_path / PROJECT_FILE, "[defaults]\nread_only = 'ask'\nworkspace_write = 'deny'\n")
    _, defaults, problems = project_rules(str(tmp_path))
    assert defaults == {"read_only": "ask", "workspace_write": "deny"} and problems == []


def test_an_edit_keeps_the_new_file_as_the_last_good_copy_so_a_later_typo_loses_no_rule(plugin_manager, policy_path):
    # No decision read the file between the edit and the typo: the owner's deny must still deny.
    rule = add_rule({"decision": "deny", "tool": "shell", "command": "rm"})
    assert last_good_file().read_text() == policy_path.read_text()
    policy_path.write_text(policy_path.read_text() + "\n[[rule]\n")
    assert owner_ids(load_policy(plugin_manager)) == [rule.id]
    policy_path.write_text("")
    other = add_rule({"decision": "ask", "tool": "web_fetch"})
    remove_rule(other.id)
    assert last_good_file().read_text() == policy_path.read_text()
