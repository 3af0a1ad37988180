"""``kirocrew policy list|add|remove|check``: the real command in a subprocess, its output and exit codes."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

ALLOW, DENY, ASK = 0, 1, 3


@pytest.fixture
def policy_path(isolated_homes: Any) -> Path:
    return isolated_homes.crew_home / "policy.toml"


def check(kirocrew: Any, tool: str, call_input: dict[str, Any], *args: str) -> tuple[int, dict[str, Any], str]:
    done = kirocrew("policy", "check", "--tool", tool, "--input", json.dumps(call_input), *args)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}, done.stderr


def test_list_shows_the_built_in_rules_then_the_defaults_on_a_fresh_home(kirocrew):
    done = kirocrew("policy", "list")
    assert done.returncode == 0, done.stderr
    ids = [line.split()[0] for line in done.stdout.splitlines()]
    assert ids[:2] == ["builtin:protect-secrets", "builtin:protect-kirocrew"]
    assert "default:unrestricted" in ids and ids.index("default:kirocrew-tools") > 1
    listed = json.loads(kirocrew("policy", "list", "--json").stdout)
    tiers = [rule["tier"] for rule in listed["rules"]]
    assert tiers == sorted(tiers, key=["builtin", "owner", "project", "default"].index) and listed["problems"] == []


def test_add_prints_the_new_id_and_the_rule_is_listed_after_the_built_in_ones(kirocrew, policy_path):
    added = kirocrew("policy", "add", "--decision", "deny", "--tool", "shell", "--command", "rm", "--command",
                     "git push --force", "--reason", "ask me first")
    assert added.returncode == 0, added.stderr
    rule_id = added.stdout.strip()
    assert rule_id.startswith("r-") and stat.S_IMODE(policy_path.stat().st_mode) == 0o600
    lines = kirocrew("policy", "list").stdout.splitlines()
    [line] = [line for line in lines if line.startswith(rule_id)]
    assert "owner" in line and "deny shell command rm, git push --force" in line and "ask me first" in line
    assert lines.index(line) == 2
    as_json = kirocrew("policy", "add", "--decision", "allow", "--tool", "@github", "--json")
    assert json.loads(as_json.stdout)["description"] == "allow @github"


def test_add_refuses_a_rule_that_does_not_check_and_writes_nothing(kirocrew, policy_path):
    done = kirocrew("policy", "add", "--decision", "deny", "--tool", "a b")
    assert done.returncode == 2 and "error[policy_invalid]" in done.stderr and not policy_path.exists()
    scoped = kirocrew("policy", "add", "--decision", "deny", "--tool", "shell", "--authority", "root")
    assert scoped.returncode == 2 and "unknown authority 'root'" in scoped.stderr


def test_remove_takes_a_rule_out_and_an_unknown_id_is_an_error(kirocrew, policy_path):
    rule_id = kirocrew("policy", "add", "--decision", "deny", "--tool", "shell", "--command", "rm").stdout.strip()
    removed = kirocrew("policy", "remove", rule_id)
    assert removed.returncode == 0 and removed.stdout.strip() == f"Removed {rule_id}: deny shell command rm"
    assert rule_id not in policy_path.read_text()
    again = kirocrew("policy", "remove", rule_id)
    assert again.returncode == 2 and f"error[policy_rule_not_found]: no rule '{rule_id}'" in again.stderr


def test_check_exits_0_for_allow_1_for_deny_and_3_for_ask(kirocrew, tmp_path):
    kirocrew("policy", "add", "--decision", "allow", "--tool", "shell", "--command", "git status")
    kirocrew("policy", "add", "--decision", "deny", "--tool", "shell", "--command", "rm")
    where = ("--workspace", str(tmp_path), "--authority", "workspace_write")
    code, verdict, _ = check(kirocrew, "shell", {"command": "git status"}, *where)
    assert (code, verdict["decision"]) == (ALLOW, "allow")
    code, verdict, _ = check(kirocrew, "shell", {"command": "git status && rm -rf x"}, *where)
    assert (code, verdict["decision"], verdict["subject"]) == (DENY, "deny", "rm -rf x")
    assert verdict["rule"]["command"] == ["rm"] and "refused `rm -rf x`" in verdict["reason"]
    assert [part["decision"] for part in verdict["parts"]] == ["allow", "deny"]
    code, verdict, _ = check(kirocrew, "shell", {"command": "whoami"}, *where)
    assert (code, verdict["rule"]["id"]) == (ASK, "default:workspace_write")
    code, verdict, _ = check(kirocrew, "fs_read", {"path": "~/.kiro/crew/gateway.token"}, *where)
    assert (code, verdict["rule"]["id"]) == (ASK, "builtin:protect-secrets")
    code, verdict, _ = check(kirocrew, "@github/list_issues", {}, "--authority", "unrestricted")
    assert (code, verdict["tool"]) == (ALLOW, "@github/list_issues")


def test_check_applies_a_projects_rules_and_stricter_defaults(kirocrew, tmp_path):
    project = tmp_path / "repo"
    (project / ".kiro" / "crew").mkdir(parents=True)
    (project / ".kiro" / "crew" / "policy.toml").write_text(
        "[defaults]\nunrestricted = 'ask'\n\n[[rule]]\nid = 'no-docker'\ndecision = 'deny'\ntool = 'shell'\n"
        "command = 'docker'\n\n[[rule]]\nid = 'yes'\ndecision = 'allow'\ntool = '*'\n")
    where = ("--workspace", str(project), "--authority", "unrestricted")
    code, verdict, stderr = check(kirocrew, "shell", {"command": "docker ps"}, *where)
    assert (code, verdict["rule"]["id"], verdict["rule"]["tier"]) == (DENY, "no-docker", "project")
    assert "rule yes ignored" in stderr  # a project's allow rule is reported, never applied
    code, verdict, _ = check(kirocrew, "shell", {"command": "ls"}, *where)
    assert (code, verdict["rule"]["id"]) == (ASK, "default:unrestricted")
    assert check(kirocrew, "shell", {"command": "ls"}, "--workspace", str(tmp_path))[0] == ALLOW


def test_a_malformed_file_is_reported_the_last_good_policy_decides_and_edits_are_refused(kirocrew, policy_path):
    kirocrew("policy", "add", "--decision", "deny", "--tool", "shell", "--command", "rm")
    broken = policy_path.read_text() + "\n[[rule]\n"
    policy_path.write_text(broken)
    listed = kirocrew("policy", "list")
    assert listed.returncode == 0 and "not valid TOML" in listed.stderr
    assert "the last good policy stays in force" in listed.stderr
    code, verdict, stderr = check(kirocrew, "shell", {"command": "rm x"})
    assert code == DENY and "not valid TOML" in stderr
    refused = kirocrew("policy", "add", "--decision", "allow", "--tool", "shell")
    assert refused.returncode == 2 and "error[policy_file_malformed]" in refused.stderr
    assert policy_path.read_text() == broken


@pytest.mark.parametrize(("args", "code"), [
    (("--tool", "shell", "--input", "{not json"), "bad_json"),
    (("--tool", "@github", "--input", "{}"), "bad_tool"),
    (("--tool", "a/b", "--input", "{}"), "bad_tool"),
])
def test_check_refuses_a_call_it_cannot_read(kirocrew, args, code):
    done = kirocrew("policy", "check", *args)
    assert done.returncode == 2 and f"error[{code}]" in done.stderr and done.stdout == ""
