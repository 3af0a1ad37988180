"""The permission policy's JSON routes on one real ``kirocrew serve`` shared by the module.

Scripts reach them with the owner's Bearer token, as the Policy page's script does with its cookie.
Each test makes its own rules and asserts on those; the answers are compared with what
``kirocrew policy`` prints for the same homes, and every change is looked for in the security
event log. The malformed-file test puts the owner's file back when it ends.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kirocrew_testing.browser import ServedGateway
from kirocrew_testing.fixtures import run_kirocrew
from kirocrew_testing.homes import IsolatedHomes, isolate_homes


@pytest.fixture(scope="module")
def owner(module_owner: httpx.Client) -> httpx.Client:
    return module_owner


@contextlib.contextmanager
def at_served_homes(module_homes: IsolatedHomes) -> Iterator[None]:
    """This process (and the commands it runs) on the served gateway's homes until the block ends."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        yield


def policy_file(module_homes: IsolatedHomes) -> Path:
    return module_homes.crew_home / "policy.toml"


def sel_events(module_homes: IsolatedHomes, event: str) -> list[dict[str, Any]]:
    from kirocrew_core import audit

    return [r for r in audit.tail(10_000, module_homes.crew_home / "audit" / "sel.jsonl") if r.get("event") == event]


def add(owner: httpx.Client, **fields: Any) -> dict[str, Any]:
    answer = owner.post("/api/policy/rules", json=fields)
    assert answer.status_code == 200, answer.text
    rule: dict[str, Any] = answer.json()["rule"]
    return rule


def refusal(answer: httpx.Response) -> tuple[int, str, str | None]:
    body = answer.json()
    return answer.status_code, body["code"], body.get("field")


def test_every_policy_route_refuses_a_caller_without_the_owner_token(module_served: ServedGateway,
                                                                      module_homes: IsolatedHomes) -> None:
    with httpx.Client(base_url=module_served.url, timeout=30) as stranger:
        answers = [stranger.get("/api/policy"), stranger.get("/api/policy/decisions"),
                   stranger.post("/api/policy/rules", json={"decision": "allow", "tool": "*"}),
                   stranger.delete("/api/policy/rules/r-00000000"),
                   stranger.post("/api/policy/check", json={"tool": "shell", "input": {"command": "ls"}}),
                   stranger.get("/policy")]
    assert [(a.status_code, a.json()["code"]) for a in answers[:5]] == [(401, "unauthenticated")] * 5
    assert answers[5].status_code == 401 and "Sign in" in answers[5].text
    assert not any(r.get("fields", {}).get("decision") == "allow" and r.get("fields", {}).get("tool") == "*"
                   for r in sel_events(module_homes, "policy_rule_added"))


def test_a_rule_added_over_the_route_is_listed_in_precedence_order_as_the_cli_lists_it(
        owner: httpx.Client, module_homes: IsolatedHomes) -> None:
    rule = add(owner, decision="deny", tool="shell", command=["rm", "git push"], reason="ask me before deleting")
    assert rule["id"].startswith("r-") and rule["tier"] == "owner" and rule["removable"] is True
    assert (rule["command"], rule["description"]) == (["rm", "git push"], "deny shell command rm, git push")
    assert f'id = "{rule["id"]}"' in policy_file(module_homes).read_text()
    added = [r for r in sel_events(module_homes, "policy_rule_added") if r["fields"]["rule"] == rule["id"]]
    assert len(added) == 1 and added[0]["actor"] == "owner"

    view = owner.get("/api/policy").json()
    tiers = [r["tier"] for r in view["rules"]]
    assert tiers == sorted(tiers, key=["builtin", "owner", "project", "default"].index), "precedence order"
    assert tiers[0] == "builtin" and tiers[-1] == "default"
    listed = next(r for r in view["rules"] if r["id"] == rule["id"])
    assert listed == rule
    assert {r["id"]: r["removable"] for r in view["rules"] if r["tier"] != "owner"} == \
        dict.fromkeys((r["id"] for r in view["rules"] if r["tier"] != "owner"), False)
    protect = next(r for r in view["rules"] if r["id"] == "builtin:protect-secrets")
    assert protect["tools"] == ["read", "glob", "grep"]
    assert view["file"] == {"path": str(policy_file(module_homes)), "state": "ok", "problems": []}
    assert view["fallback"] is None and view["problems"] == []
    assert view["defaults"] == {"unrestricted": "allow", "read_only": "ask", "workspace_write": "ask"}

    with at_served_homes(module_homes):
        listing = run_kirocrew("policy", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    assert [r["id"] for r in json.loads(listing.stdout)["rules"]] == [r["id"] for r in view["rules"]]


@pytest.mark.parametrize(("fields", "expected"), [
    ({"decision": "maybe", "tool": "shell"}, ("policy_invalid", "decision")),
    ({"decision": "deny"}, ("policy_invalid", "tool")),
    ({"decision": "deny", "tool": "shell now"}, ("policy_invalid", "tool")),
    ({"decision": "deny", "tool": "shell", "command": [""]}, ("policy_invalid", "command")),
    ({"decision": "deny", "tool": "shell", "command": "rm", "path": "x/**"}, ("policy_invalid", "command")),
    ({"decision": "deny", "tool": "write", "path": "C:\\x"}, ("policy_invalid", "path")),
    ({"decision": "deny", "tool": "web_fetch", "domain": "not a host"}, ("policy_invalid", "domain")),
    ({"decision": "deny", "tool": "shell", "authority": "root"}, ("policy_invalid", "authority")),
    ({"decision": "deny", "tool": "shell", "agent": 7}, ("policy_invalid", "agent")),
    ({"decision": "deny", "tool": "shell", "workspace": "projects/app"}, ("policy_invalid", "workspace")),
    ({"decision": "deny", "tool": "shell", "reason": "x" * 501}, ("policy_invalid", "reason")),
    ({"decision": "deny", "tool": "shell", "id": "mine"}, ("policy_invalid", "id")),
    ({"decision": "deny", "tool": "shell", "tier": "builtin"}, ("policy_invalid", "tier")),
])
def test_a_rule_that_does_not_check_is_refused_at_its_field_and_changes_nothing(
        owner: httpx.Client, module_homes: IsolatedHomes, fields: dict[str, Any], expected: tuple[str, str]) -> None:
    add(owner, decision="ask", tool="@github/delete_repo")  # the file exists, so "unchanged" means something
    before = policy_file(module_homes).read_bytes()
    events = len(sel_events(module_homes, "policy_rule_added"))
    assert refusal(owner.post("/api/policy/rules", json=fields)) == (400, *expected)
    assert policy_file(module_homes).read_bytes() == before
    assert len(sel_events(module_homes, "policy_rule_added")) == events


def test_a_body_that_is_not_a_json_object_or_is_too_large_is_refused(owner: httpx.Client,
                                                                     module_homes: IsolatedHomes) -> None:
    headers = {"Content-Type": "application/json"}
    for path in ("/api/policy/rules", "/api/policy/check"):
        for body in (b"{not json", b"[1, 2]", b"", b"[" * 100_000):
            assert refusal(owner.post(path, content=body, headers=headers))[:2] == (400, "bad_json"), (path, body[:9])
    huge = json.dumps({"decision": "deny", "tool": "shell", "reason": "x" * 300_000})
    assert refusal(owner.post("/api/policy/rules", content=huge, headers=headers))[:2] == (400, "body_too_large")
    huge = json.dumps({"tool": "write", "input": {"path": "a", "content": "x" * 1_100_000}})
    assert refusal(owner.post("/api/policy/check", content=huge, headers=headers))[:2] == (400, "body_too_large")
    big_write = {"tool": "write", "input": {"path": "notes.txt", "content": "x" * 500_000}}
    assert owner.post("/api/policy/check", json=big_write).status_code == 200, "a write's content fits"


def test_removing_a_rule_records_it_and_an_unknown_or_built_in_id_is_not_found(owner: httpx.Client,
                                                                                module_homes: IsolatedHomes) -> None:
    rule = add(owner, decision="ask", tool="web_fetch", domain="*.example.com")
    answer = owner.delete(f"/api/policy/rules/{rule['id']}")
    assert answer.status_code == 200 and answer.json()["removed"]["id"] == rule["id"]
    assert rule["id"] not in policy_file(module_homes).read_text()
    assert rule["id"] not in [r["id"] for r in owner.get("/api/policy").json()["rules"]]
    removed = [r for r in sel_events(module_homes, "policy_rule_removed") if r["fields"]["rule"] == rule["id"]]
    assert len(removed) == 1 and removed[0]["actor"] == "owner"

    before = policy_file(module_homes).read_bytes()
    for unknown in (rule["id"], "r-nothere", "builtin:protect-secrets", "default:unrestricted"):
        assert refusal(owner.delete(f"/api/policy/rules/{unknown}"))[:2] == (400, "policy_rule_not_found"), unknown
    assert policy_file(module_homes).read_bytes() == before


def test_a_check_answers_the_verdict_kirocrew_policy_check_prints(owner: httpx.Client, module_homes: IsolatedHomes,
                                                                  module_root: Path) -> None:
    rule = add(owner, decision="deny", tool="shell", command="mkfs", reason="no formatting here")
    workspace = module_root / "check-work"
    workspace.mkdir(exist_ok=True)
    body = {"tool": "shell", "input": {"command": "git status; mkfs -t ext4 x"}, "workspace": str(workspace)}
    answer = owner.post("/api/policy/check", json=body)
    assert answer.status_code == 200, answer.text
    verdict = answer.json()
    assert (verdict["decision"], verdict["rule"]["id"], verdict["subject"]) == ("deny", rule["id"], "mkfs -t ext4 x")
    assert "no formatting here" in verdict["reason"]
    assert [(p["label"], p["decision"]) for p in verdict["parts"]] == [("git status", "allow"),
                                                                       ("mkfs -t ext4 x", "deny")]
    with at_served_homes(module_homes):
        printed = run_kirocrew("policy", "check", "--tool", "shell", "--input", json.dumps(body["input"]),
                               "--workspace", str(workspace))
    assert printed.returncode == 1, printed.stderr
    assert json.loads(printed.stdout) == verdict

    read_only = owner.post("/api/policy/check", json={"tool": "@github/create_issue", "input": {},
                                                      "authority": "read_only"}).json()
    assert (read_only["decision"], read_only["rule"]["id"]) == ("ask", "default:read_only")
    read = {"tool": "read", "input": {"path": "README.md"}}
    assert owner.post("/api/policy/check", json={**read, "workspace": str(workspace)}).json()["decision"] == "allow"
    assert owner.post("/api/policy/check", json=read).json()["decision"] == "ask", "no workspace: a relative path"


@pytest.mark.parametrize(("body", "expected"), [
    ({"input": {}}, ("bad_tool", "tool")),
    ({"tool": "@github", "input": {}}, ("bad_tool", "tool")),
    ({"tool": "a/b"}, ("bad_tool", "tool")),
    ({"tool": "shell", "authority": ""}, ("bad_request", "authority")),
    ({"tool": "shell", "agent": ["x"]}, ("bad_request", "agent")),
    ({"tool": "shell", "workspace": "relative/dir"}, ("bad_request", "workspace")),
    ({"tool": "shell", "command": "ls"}, ("bad_request", "command")),
])
def test_a_check_with_bad_fields_is_refused_at_the_field(owner: httpx.Client, body: dict[str, Any],
                                                          expected: tuple[str, str]) -> None:
    assert refusal(owner.post("/api/policy/check", json=body)) == (400, *expected)


def test_a_workspace_adds_its_projects_rules_and_stricter_defaults_to_the_list_and_to_a_check(
        owner: httpx.Client, module_homes: IsolatedHomes, module_root: Path) -> None:
    add(owner, decision="ask", tool="shell", command="npm")  # an owner rule for the project's to follow
    workspace = module_root / "project"
    (workspace / ".kiro" / "crew").mkdir(parents=True, exist_ok=True)
    (workspace / ".kiro" / "crew" / "policy.toml").write_text(
        '[defaults]\nunrestricted = "ask"\n'
        '[[rule]]\nid = "no-publish"\ndecision = "deny"\ntool = "shell"\ncommand = "npm publish"\n'
        '[[rule]]\nid = "loosen"\ndecision = "allow"\ntool = "*"\n')
    view = owner.get("/api/policy", params={"workspace": str(workspace)}).json()
    tiers = {r["id"]: r["tier"] for r in view["rules"]}
    assert tiers["no-publish"] == "project" and "loosen" not in tiers, "a project may not allow"
    ids = list(tiers)
    assert max(i for i, r in enumerate(ids) if tiers[r] == "owner") < ids.index("no-publish") < \
        min(i for i, r in enumerate(ids) if tiers[r] == "default")
    assert view["workspace"] == str(workspace) and any("loosen" in p for p in view["problems"])
    decisions = {r["id"]: r["decision"] for r in view["rules"]}
    assert decisions["default:unrestricted"] == "ask", "a project may make a default stricter"
    elsewhere = {r["id"]: r["decision"] for r in owner.get("/api/policy").json()["rules"]}
    assert "no-publish" not in elsewhere and elsewhere["default:unrestricted"] == "allow"
    assert refusal(owner.get("/api/policy", params={"workspace": "project"})) == (400, "bad_request", "workspace")

    verdict = owner.post("/api/policy/check", json={"tool": "shell", "input": {"command": "npm publish --dry-run"},
                                                    "workspace": str(workspace)}).json()
    assert (verdict["decision"], verdict["rule"]["id"]) == ("deny", "no-publish")
    ls = {"tool": "shell", "input": {"command": "ls"}, "workspace": str(workspace)}
    verdict = owner.post("/api/policy/check", json=ls).json()
    assert (verdict["decision"], verdict["rule"]["id"]) == ("ask", "default:unrestricted")
    with at_served_homes(module_homes):
        printed = run_kirocrew("policy", "check", "--tool", "shell", "--input", '{"command": "ls"}',
                               "--workspace", str(workspace))
    assert printed.returncode == 3 and json.loads(printed.stdout) == verdict, printed.stderr


def test_recent_decisions_come_from_the_security_event_log_newest_first(owner: httpx.Client,
                                                                        module_homes: IsolatedHomes) -> None:
    from kirocrew_core.gate import decisions

    with at_served_homes(module_homes):
        for n in range(3):
            decisions.record("deny" if n == 2 else "allow", rule=f"r-test{n}", tool="shell",
                             fingerprint=f"{n:016x}", conversation=f"conv-{n}")
    newest = owner.get("/api/policy/decisions", params={"limit": 2}).json()["decisions"]
    assert [(d["rule"], d["outcome"], d["conversation"]) for d in newest] == [
        ("r-test2", "deny", "conv-2"), ("r-test1", "allow", "conv-1")]
    assert newest[0]["fingerprint"] == f"{2:016x}" and newest[0]["at"].endswith("Z")
    assert len(owner.get("/api/policy/decisions").json()["decisions"]) >= 3
    for limit in ("0", "501", "ten", "-1"):
        assert refusal(owner.get("/api/policy/decisions", params={"limit": limit})) == (400, "bad_request", "limit")


def test_a_malformed_policy_file_is_reported_and_every_edit_is_refused_without_touching_it(
        owner: httpx.Client, module_homes: IsolatedHomes) -> None:
    kept = add(owner, decision="deny", tool="shell", command="shred")
    owner.get("/api/policy")  # read whole and sound: the last good copy is this file
    good = policy_file(module_homes).read_bytes()
    broken = good + b"\n[[rule]\nthis is not toml\n"
    policy_file(module_homes).write_bytes(broken)
    try:
        events = (len(sel_events(module_homes, "policy_rule_added"))
                  + len(sel_events(module_homes, "policy_rule_removed")))
        view = owner.get("/api/policy").json()
        assert view["file"]["state"] == "malformed" and view["fallback"] == "last_good"
        assert any("not valid TOML" in p for p in view["file"]["problems"])
        assert any("last good policy stays in force" in p for p in view["problems"])
        still = next(r for r in view["rules"] if r["id"] == kept["id"])
        assert still["removable"] is False and "last good copy" in still["source"]

        assert refusal(owner.post("/api/policy/rules", json={"decision": "deny", "tool": "shell"}))[:2] == \
            (400, "policy_file_malformed")
        assert refusal(owner.delete(f"/api/policy/rules/{kept['id']}"))[:2] == (400, "policy_file_malformed")
        assert policy_file(module_homes).read_bytes() == broken
        assert (len(sel_events(module_homes, "policy_rule_added"))
                + len(sel_events(module_homes, "policy_rule_removed"))) == events
        verdict = owner.post("/api/policy/check", json={"tool": "shell", "input": {"command": "shred x"}}).json()
        assert (verdict["decision"], verdict["rule"]["id"]) == ("deny", kept["id"]), "the last good rules apply"
    finally:
        policy_file(module_homes).write_bytes(good)
    assert owner.get("/api/policy").json()["file"]["state"] == "ok"
