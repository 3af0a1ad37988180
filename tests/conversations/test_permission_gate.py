"""The permission gate end to end: a real host, real relays, the fake kiro-cli running the commands.

kiro-cli runs without ``--trust-all-tools``, so it asks before each tool call and the host answers
from the owner's ``policy.toml``. The fake runs a ``!shell`` command with ``sh -c`` in the
workspace only when the answer allows it, so "nothing was removed" is the real outcome of each
attempt below, not a stub's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import audit, home
from kirocrew_testing.policy import ASK_EVERYTHING, write_policy

# The reference's bypasses of prefix matching: chaining, wrappers, substitution, an env prefix.
BYPASSES = (
    "git status; rm -rf x",
    "git status && rm -rf x",
    'bash -c "rm -rf x"',
    "echo $(rm -rf x)",
    "echo `rm -rf x`",
    "env A=1 rm -rf x",
    "git status & rm -rf x",
    "git status | rm -rf x",
)
# A newline between two commands reads as ";" to the parser (the gate's own tests in tests/core); a script line of
# the fake cannot hold one.
REFUSED = "[kirocrew] The permission policy refused this tool call"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    (path / "x").mkdir(parents=True)
    (path / "x" / "keep.txt").write_text("precious")
    return path


def spawn(workspace: Path, name: str, message: str) -> dict[str, Any]:
    return {"conversation": "new", "name": name, "workspace": str(workspace), "message": message}


def target(out: dict[str, Any]) -> dict[str, str]:
    return {"conversationId": out["conversationId"], "runId": out["runId"]}


def shell_steps(*commands: str) -> str:
    return "".join(f"!shell {command}\n" for command in commands)


def decisions(outcome: str, count: int) -> list[dict[str, Any]]:
    """The SEL's ``policy_decision`` records with ``outcome``, once there are ``count`` (the host writes them in
    batches, a moment after each answer)."""
    deadline = time.monotonic() + 10
    while True:
        found = [e for e in audit.tail(500) if e.get("event") == "policy_decision" and e["outcome"] == outcome]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_no_chain_wrapper_substitution_or_env_prefix_runs_a_denied_command(
        hosted_conversations_client: Any, run_async: Any, workspace: Path) -> None:
    write_policy(defaults=ASK_EVERYTHING, rules=[
        {"id": "allow-status", "decision": "allow", "tool": "shell", "command": "git status"},
        {"id": "no-rm", "decision": "deny", "tool": "shell", "command": "rm", "reason": "sessions never delete"},
    ])

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with hosted_conversations_client() as client:
            out = await client.call("kiro_delegate", **spawn(workspace, "bypasses",
                                                              shell_steps(*BYPASSES) + "!say done"))
            events = await client.call("kiro_events", **target(out["run"]), limit=100)
        return out, events

    out, events = run_async(main())
    run = out["run"]
    assert run["status"] == "completed", run["attention"]
    assert (workspace / "x" / "keep.txt").read_text() == "precious", "a denied rm ran"
    assert run["reply"]["text"].endswith("done")
    # The model was told, by steering the turn, which rule refused and why: once per refused call.
    assert run["reply"]["text"].count(REFUSED) == len(BYPASSES)
    assert "rule no-rm" in run["reply"]["text"] and "sessions never delete" in run["reply"]["text"]
    refused = [e for e in events["events"] if e["kind"] == "permission" and "refused" in e["summary"]]
    assert len(refused) == len(BYPASSES) and all(e["rule"]["id"] == "no-rm" for e in refused)
    denied = decisions("deny", len(BYPASSES))
    assert len(denied) == len(BYPASSES) and {d["fields"]["rule"] for d in denied} == {"no-rm"}
    assert all("rm -rf" not in json.dumps(d) for d in denied), "the SEL keeps a fingerprint, never the input"


def test_a_redirection_is_a_file_write_the_owner_is_asked_about_and_a_reject_writes_nothing(
        hosted_conversations_client: Any, run_async: Any, workspace: Path) -> None:
    write_policy(defaults=ASK_EVERYTHING, rules=[
        {"decision": "allow", "tool": "shell", "command": "git status"},
        {"decision": "deny", "tool": "shell", "command": "rm"},
    ])
    bashrc = home.user_home() / ".bashrc"

    async def main() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with hosted_conversations_client() as client:
            asked = await client.call("kiro_delegate", **spawn(workspace, "redirect",
                                                                "!shell git status > ~/.bashrc\n!say after"))
            attention = asked["run"]["attention"]
            decided = await client.call("kiro_permission_decide", **target(asked["run"]),
                                        permissionRequestId=attention["permissionRequestId"], decision="reject_once")
            done = await client.call("kiro_wait", targets=[target(asked["run"])], mode="all")
        return asked, decided, done

    asked, decided, done = run_async(main())
    run = asked["run"]
    assert run["status"] == "needs_attention"
    attention = run["attention"]
    assert attention["kind"] == "permission" and attention["rule"]["id"] == "default:unrestricted"
    assert attention["subject"].startswith("write ") and attention["subject"].endswith(".bashrc (a redirection)")
    assert decided["decision"] == "reject_once" and decided["rulesAdded"] == []
    assert done["runs"][0]["status"] == "completed" and done["runs"][0]["reply"]["text"] == "after"
    assert not bashrc.exists(), "a rejected redirection wrote the file"


def test_allow_always_adds_a_rule_in_the_workspace_so_the_same_call_runs_unasked_next_time(
        hosted_conversations_client: Any, run_async: Any, workspace: Path) -> None:
    policy = write_policy(defaults=ASK_EVERYTHING)

    async def main() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with hosted_conversations_client() as client:
            first = await client.call("kiro_delegate", **spawn(workspace, "first", "!shell touch made.txt\n!say one"))
            attention = first["run"]["attention"]
            decided = await client.call("kiro_permission_decide", **target(first["run"]),
                                        permissionRequestId=attention["permissionRequestId"],
                                        decision="allow_always", scope="workspace")
            await client.call("kiro_wait", targets=[target(first["run"])], mode="all")
            second = await client.call("kiro_delegate", **spawn(workspace, "second",
                                                                 "!shell touch made.txt\n!say two"))
        return first, decided, second

    first, decided, second = run_async(main())
    attention = first["run"]["attention"]
    assert set(attention["options"]) == {"allow_once", "reject_once", "allow_always"}
    assert attention["reason"] and "touch made.txt" in attention["subject"]
    assert (workspace / "made.txt").exists()
    [rule_id] = decided["rulesAdded"]
    text = policy.read_text()
    assert rule_id in text and 'command = "touch made.txt"' in text and str(workspace.resolve()) in text
    assert second["run"]["status"] == "completed" and second["run"]["attention"] is None
    feed = json.loads((home.state_dir("notifications") / "notifications.json").read_text())
    cards = feed if isinstance(feed, list) else feed.get("notifications", [])
    assert any("Kiro asks to run shell" in card["title"] for card in cards)


def test_reading_kirocrew_secrets_asks_and_cannot_be_allowed_always_and_writing_them_is_denied(
        hosted_conversations_client: Any, run_async: Any, workspace: Path) -> None:
    token = home.gateway_token_file()

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with hosted_conversations_client() as client:
            asked = await client.call("kiro_delegate", **spawn(workspace, "secret",
                                                                f"!shell cat {token}\n!say after"))
            with pytest.raises(client.ToolCallError) as refused:
                await client.call("kiro_permission_decide", **target(asked["run"]),
                                  permissionRequestId=asked["run"]["attention"]["permissionRequestId"],
                                  decision="allow_always")
            assert refused.value.code == "unsupported_permission_option"
            await client.call("kiro_permission_decide", **target(asked["run"]),
                              permissionRequestId=asked["run"]["attention"]["permissionRequestId"],
                              decision="reject_once")
            await client.call("kiro_wait", targets=[target(asked["run"])], mode="all")
            write = await client.call("kiro_delegate", **spawn(workspace, "tamper",
                                                                f"!write {home.crew_home() / 'policy.toml'} "
                                                                "[defaults]\n!say after"))
        return asked, write

    asked, write = run_async(main())
    attention = asked["run"]["attention"]
    assert attention["rule"]["id"] == "builtin:protect-secrets" and "allow_always" not in attention["options"]
    assert write["run"]["status"] == "completed" and REFUSED in write["run"]["reply"]["text"]
    assert not (home.crew_home() / "policy.toml").exists(), "a session wrote the owner's policy"


def test_a_rule_the_owner_adds_reaches_a_tool_the_agent_file_auto_approved_from_the_next_run_on(
        hosted_conversations_client: Any, run_async: Any, workspace: Path) -> None:
    from kirocrew_testing.fixtures import run_kirocrew

    async def first() -> dict[str, Any]:
        async with hosted_conversations_client() as client:
            return await client.call("kiro_delegate", **spawn(workspace, "grants", "!tool introspect\n!say one"))

    async def second(conversation_id: str) -> dict[str, Any]:
        async with hosted_conversations_client() as client:
            return await client.call("kiro_delegate", conversation=conversation_id,
                                     message="!tool introspect\n!say two")

    lean = json.loads(home.rendered_agent_file().read_text())  # the test kit's agent, which the host renders over
    home.rendered_agent_file().write_text(json.dumps({**lean, "allowedTools": ["introspect"]}))
    before = run_async(first())
    agent = json.loads(home.rendered_agent_file().read_text())
    assert "introspect" in agent["allowedTools"], "the default policy lets the render auto-approve introspect"
    assert before["run"]["status"] == "completed" and REFUSED not in before["run"]["reply"]["text"]
    added = run_kirocrew("policy", "add", "--decision", "deny", "--tool", "introspect", "--reason", "not today")
    assert added.returncode == 0, added.stderr
    after = run_async(second(before["run"]["conversationId"]))
    # The worker's kiro-cli (started with the old grants) was replaced, on an agent file rendered anew.
    assert "introspect" not in json.loads(home.rendered_agent_file().read_text())["allowedTools"]
    assert after["run"]["status"] == "completed"
    assert REFUSED in after["run"]["reply"]["text"] and "not today" in after["run"]["reply"]["text"]
