"""Who may act on which conversation, end to end (issue 27 §1): a real host, real relays, and the fake
kiro-cli running the attacking session's own ``kirocrew-conversations`` calls.

Every conversation's kiro-cli mounts ``kirocrew-conversations`` (the rendered ``kirocrew`` agent), so a
crew session can call its tools. Each script below is what a session's model would do: call a tool
(``!mcp kirocrew-conversations ...``) and read the answer back (``!result``, one ``result: ...`` line of
its reply per call). The person is the test's own relay (started by no session), the CLI twin and the
dashboard's routes.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from kirocrew_testing.core_sessions import CrewHarness, McpClient
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.policy import write_policy

NONTERMINAL = ("queued", "running", "needs_attention")
COLOUR = {"question": "Which colour should the button be?", "options": [{"label": "Blue"}, {"label": "Green"}]}


def call(tool: str, **args: Any) -> str:
    """A session's call of a conversations tool, and its answer read back into the reply."""
    return f"!mcp kirocrew-conversations {tool} {json.dumps(args)}\n!result"


def answers(run: dict[str, Any]) -> list[str]:
    """What each of a run's ``call`` lines got back, in order."""
    return [line.removeprefix("result: ") for line in run["reply"]["text"].splitlines()
            if line.startswith("result: ")]


def code_of(answer: str) -> str | None:
    found = re.match(r"error\[([a-z_]+)\]: ", answer)
    return found.group(1) if found else None


def target(run: dict[str, Any]) -> dict[str, str]:
    return {"conversationId": run["conversationId"], "runId": run["runId"]}


def spawn_new(crew: CrewHarness, name: str, message: str) -> dict[str, Any]:
    return {"conversation": "new", "name": name, "workspace": str(crew.workspace), "message": message}


async def next_turn(crew: CrewHarness, person: McpClient, conversation_id: str, script: str) -> dict[str, Any]:
    """The person sends ``script`` to a conversation and waits for that run to end; its entry."""
    started = await person.structured("kiro_send", conversationId=conversation_id, message=script)
    return await crew.wait(person, started)


async def latest_run(person: McpClient, conversation_id: str, *, attention: bool = False) -> dict[str, Any]:
    """The conversation's latest run as the person sees it; with ``attention``, once it needs attention."""
    for _ in range(40):
        listed = await person.structured("kiro_status", archive="all", limit=100)
        [found] = [c for c in listed["conversations"] if c["conversationId"] == conversation_id]
        latest = found["latestRun"]
        if latest is not None:
            ref = {"conversationId": conversation_id, "runId": latest["runId"]}
            if not attention:
                return await person.structured("kiro_result", **ref)
            [run] = (await person.structured("kiro_wait", targets=[ref], mode="all"))["runs"]
            if run["status"] == "needs_attention":
                return dict(run)
            assert run["status"] in NONTERMINAL, run
    raise AssertionError(f"{conversation_id} has no run{' needing attention' if attention else ''}")


def conversation_named(rows: Any, name: str) -> str:
    [(conversation_id,)] = rows("SELECT id FROM conversations WHERE name = ?", name)
    return str(conversation_id)


def test_a_session_sees_and_acts_on_only_the_conversations_it_created_and_their_descendants(
        crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    grandchild = call("kiro_spawn", **spawn_new(crew, "a-grandchild", "!say grandchild done"))
    child = call("kiro_delegate", **spawn_new(crew, "a-child", f"{grandchild}\n!say child done"))

    async def main() -> dict[str, Any]:
        async with crew.conversations() as person:
            a = await crew.delegate(person, f"{child}\n!say a done", name="a")
            victim = await crew.delegate(person, "!say the victim's secret", name="victim")
            a_child = await latest_run(person, conversation_named(conversations_rows, "a-child"))
            a_grandchild = await latest_run(person, conversation_named(conversations_rows, "a-grandchild"))
            v, c, g = victim["conversationId"], a_child["conversationId"], a_grandchild["conversationId"]
            # B goes after A's tree and the person's own conversation with every tool, ids in hand.
            b = await crew.delegate(person, "\n".join([
                call("kiro_status", archive="all"),
                call("kiro_result", **target(a)),
                call("kiro_result", **target(victim)),
                call("kiro_events", **target(a_child)),
                call("kiro_wait", targets=[target(a_grandchild)], mode="any"),
                call("kiro_send", conversationId=v, message="!say hijacked"),
                call("kiro_spawn", conversation=v, message="!say hijacked"),
                call("kiro_delegate", conversation=c, message="!say hijacked"),
                call("kiro_cancel", **target(a_grandchild)),
                call("kiro_configure", conversationId=v, effort="low"),
                call("kiro_fork", conversationId=v, name="stolen"),
                call("kiro_archive", conversationId=g),
                call("kiro_delete", conversationId=v, confirmName="victim"),
                call("kiro_worktree_inspect", conversationId=v),
                call("kiro_worktree_cleanup", conversationId=v),
                call("kiro_question_answer", conversationId=v, dismissed=True),
                "!say b done"]), name="b")
            # A, on its next turn, sees its child and grandchild, and nothing else.
            a_again = await next_turn(crew, person, a["conversationId"], "\n".join([
                call("kiro_status", archive="all"),
                call("kiro_result", **target(a_grandchild)),
                call("kiro_result", **target(victim)),
            ]))
            everything = await person.structured("kiro_status", archive="all")
            victim_after = await person.structured("kiro_result", **target(victim))
            return {"a": a, "b": b, "a_again": a_again, "everything": everything, "victim_after": victim_after,
                    "ids": {"a": a["conversationId"], "b": b["conversationId"], "victim": v, "a-child": c,
                            "a-grandchild": g}}

    out = run_async(main(), timeout=240)
    ids = out["ids"]
    b, a_again = out["b"], out["a_again"]
    assert b["status"] == "completed" and b["reply"]["text"].endswith("b done"), b
    [listing, *refusals] = answers(b)
    listed = json.loads(listing)
    assert listed["conversations"] == [] and set(listed["counts"].values()) == {0}, "B saw another's conversations"
    assert [code_of(answer) for answer in refusals] == ["conversation_not_found"] * 15, refusals
    assert all("no conversation" in answer for answer in refusals), "a refusal says what an unknown id's says"
    # Nothing B tried happened: the victim ran once and is neither archived, forked nor gone.
    assert out["victim_after"]["reply"]["text"] == "the victim's secret"
    rows = conversations_rows("SELECT name, state, effort FROM conversations ORDER BY name")
    assert [(name, state) for name, state, _ in rows] == [
        ("a", "idle"), ("a-child", "idle"), ("a-grandchild", "idle"), ("b", "idle"), ("victim", "idle")]
    assert conversations_rows("SELECT COUNT(*) FROM runs WHERE conversation_id = ?", ids["victim"]) == [(1,)]
    assert all(effort is None for _, _, effort in rows)
    # A sees its own tree (not itself, not B, not the victim) and reads its grandchild's result.
    assert a_again["status"] == "completed", a_again
    a_listing, grandchild_result, victim_result = answers(a_again)
    assert sorted(c["name"] for c in json.loads(a_listing)["conversations"]) == ["a-child", "a-grandchild"]
    assert json.loads(grandchild_result)["reply"]["text"] == "grandchild done"
    assert code_of(victim_result) == "conversation_not_found"
    # The person sees everything: its relay, the CLI twin and the dashboard's route alike.
    everyone = sorted(ids)
    assert sorted(c["name"] for c in out["everything"]["conversations"]) == everyone
    twin = subprocess.run(kirocrew_argv("conversations", "--json", "status", "--archive", "all"), env=crew.env,
                          capture_output=True, text=True, timeout=60)
    assert twin.returncode == 0, twin.stderr
    assert sorted(c["name"] for c in json.loads(twin.stdout)["conversations"]) == everyone
    with crew.owner_http() as owner:
        shown = owner.get("/api/conversations", params={"archive": "all"}).json()
    assert sorted(c["name"] for c in shown["conversations"]) == everyone


def test_no_session_answers_a_permission_request_not_even_its_own_childs_and_nothing_runs(
        crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    policy = write_policy(rules=[{"id": "ask-touch", "decision": "ask", "tool": "shell", "command": "touch",
                                  "reason": "the owner decides"}])
    rules_before = policy.read_text()
    workspace: Path = crew.workspace

    async def main() -> dict[str, Any]:
        async with crew.conversations() as person:
            started = await person.structured("kiro_spawn", **spawn_new(crew, "victim",
                                                                          "!shell touch victim-ran\n!say v done"))
            victim = await latest_run(person, started["conversationId"], attention=True)
            a = await crew.delegate(person, call("kiro_spawn", **spawn_new(
                crew, "a-child", "!shell touch child-ran\n!say child done")) + "\n!say a done", name="a")
            child = await latest_run(person, conversation_named(conversations_rows, "a-child"), attention=True)

            def deciding(run: dict[str, Any], decision: str, **extra: Any) -> str:
                return call("kiro_permission_decide", **target(run), decision=decision,
                            permissionRequestId=run["attention"]["permissionRequestId"], **extra)

            b = await crew.delegate(person, "\n".join([
                deciding(victim, "allow_once"), deciding(victim, "allow_always", scope="everywhere"),
                "!say b done"]), name="b")
            a_again = await next_turn(crew, person, a["conversationId"], "\n".join([
                deciding(child, "allow_once"), deciding(child, "reject_once"), "!say a again"]))
            still = {name: await latest_run(person, run["conversationId"], attention=True)
                     for name, run in (("victim", victim), ("child", child))}
            # The owner answers: the victim's call runs, the child's is rejected.
            await person.structured("kiro_permission_decide", **target(victim), decision="allow_once",
                                    permissionRequestId=victim["attention"]["permissionRequestId"])
            await person.structured("kiro_permission_decide", **target(child), decision="reject_once",
                                    permissionRequestId=child["attention"]["permissionRequestId"])
            done = {name: await crew.wait(person, run) for name, run in (("victim", victim), ("child", child))}
            return {"victim": victim, "child": child, "b": b, "a_again": a_again, "still": still, "done": done}

    out = run_async(main(), timeout=240)
    for run in (out["b"], out["a_again"]):
        assert run["status"] == "completed", run
        refused = answers(run)
        assert [code_of(answer) for answer in refused] == ["owner_decision_required"] * 2, refused
        assert all("owner" in answer for answer in refused)
    # Nothing ran and nothing was decided until the owner did: the same request was still open.
    for name in ("victim", "child"):
        assert out["still"][name]["attention"]["permissionRequestId"] == \
            out[name]["attention"]["permissionRequestId"]
    assert out["done"]["victim"]["status"] == "completed" and (workspace / "victim-ran").exists()
    assert out["done"]["child"]["status"] == "completed" and not (workspace / "child-ran").exists()
    assert conversations_rows("SELECT COUNT(*) FROM permission_requests WHERE decided_option IS NOT NULL") == [(2,)]
    assert policy.read_text() == rules_before, "a session's allow_always added a rule to the owner's policy"


def test_a_session_answers_its_own_childs_question_card_and_never_anothers(
        crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    asking = f"!mcp kirocrew-core ask_question {json.dumps({'questions': [COLOUR]})}\n!say after"
    blue = [{"question": COLOUR["question"], "answer": "Blue"}]

    async def main() -> dict[str, Any]:
        async with crew.conversations() as person:
            started = await person.structured("kiro_spawn", **spawn_new(crew, "victim", asking))
            victim = await latest_run(person, started["conversationId"], attention=True)
            a = await crew.delegate(person, call("kiro_spawn", **spawn_new(crew, "a-child", asking))
                                    + "\n!say a done", name="a")
            child = await latest_run(person, conversation_named(conversations_rows, "a-child"), attention=True)
            b = await crew.delegate(person, "\n".join([
                call("kiro_question_answer", conversationId=victim["conversationId"], answers=blue),
                call("kiro_question_answer", conversationId=victim["conversationId"],
                     askId=victim["attention"]["question"]["askId"], dismissed=True),
                call("kiro_question_answer", conversationId=child["conversationId"], answers=blue),
                "!say b done"]), name="b")
            still = await latest_run(person, victim["conversationId"], attention=True)
            a_again = await next_turn(crew, person, a["conversationId"], "\n".join([
                call("kiro_question_answer", conversationId=child["conversationId"], answers=blue),
                call("kiro_question_answer", conversationId=victim["conversationId"], answers=blue)]))
            child_done = await crew.wait(person, child)
            await person.structured("kiro_question_answer", conversationId=victim["conversationId"],
                                    answers=[{"question": COLOUR["question"], "answer": "Green"}])
            victim_done = await crew.wait(person, victim)
            return {"victim": victim, "b": b, "still": still, "a_again": a_again, "child_done": child_done,
                    "victim_done": victim_done}

    out = run_async(main(), timeout=240)
    assert [code_of(answer) for answer in answers(out["b"])] == ["conversation_not_found"] * 3
    assert out["still"]["attention"]["question"]["askId"] == out["victim"]["attention"]["question"]["askId"], \
        "the card stayed open for its owner"
    mine, theirs = answers(out["a_again"])
    assert json.loads(mine)["status"] == "answered" and code_of(theirs) == "conversation_not_found"
    assert out["child_done"]["status"] == "completed" and out["child_done"]["reply"]["text"] == "after"
    assert out["victim_done"]["status"] == "completed"


def test_a_claimed_session_key_never_decides_whose_conversations_a_caller_sees(
        crew: CrewHarness, run_async: Any) -> None:
    """The person's relay claiming a session key (a stale one) is still the person: the claim neither narrows nor
    widens what it sees, and the host records the contradiction (by the key's fingerprint, never the key)."""
    from kirocrew_core import audit

    stale_key = "kcs1-" + "0" * 32

    async def main() -> tuple[dict[str, Any], tuple[str, str | None], tuple[str, str | None]]:
        async with crew.conversations() as person:
            victim = await crew.delegate(person, "!say mine", name="victim")
            async with crew.relay("mcp-conversations", session_key=stale_key) as claiming:
                listed = await claiming.call("kiro_status")
                result = await claiming.call("kiro_result", **target(victim))
            return victim, listed, result

    victim, listed, result = run_async(main(), timeout=120)
    assert listed[1] is None and result[1] is None, (listed, result)
    assert [c["conversationId"] for c in json.loads(listed[0])["conversations"]] == [victim["conversationId"]]
    assert json.loads(result[0])["reply"]["text"] == "mine"
    contradicted = [r for r in audit.tail(200) if r["event"] == "host.caller_claim_contradicted"]
    assert contradicted and contradicted[-1]["fields"]["origin"] == "person", contradicted
    assert stale_key not in json.dumps(audit.tail(200))
