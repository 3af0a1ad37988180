"""Sub-agents end to end: a conversation's kiro-cli calls the spawn tools through the relay and the host.

The fake kiro-cli runs each script; the children are real conversations with their own kiro-cli,
their completion messages real runs of the parent. The CLI twins run as real ``kirocrew`` commands.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv


def _mcp(tool: str, **args: Any) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}"


async def _ended_run(conv: Any, rows: Any, conversation_id: str, seq: int) -> dict[str, Any]:
    """The conversation's ``seq``-th run (1-based) once it has ended, as ``kiro_result`` shows it."""
    for _ in range(600):
        found = rows("SELECT id, status FROM runs WHERE conversation_id = ? AND seq = ?", conversation_id, seq)
        if found and found[0][1] not in ("queued", "running", "needs_attention"):
            return dict(await conv.structured("kiro_result", conversationId=conversation_id, runId=found[0][0]))
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {seq} of {conversation_id} did not end")


def test_a_session_spawns_children_that_act_as_themselves_report_back_and_show_on_the_dashboard(
        crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    child_script = _mcp("probe_whoami") + "\n!say child done"
    parent_script = "\n".join([
        _mcp("spawn_sub_agents", agents=[{"prompt": "!say one"}, {"prompt": "!say two"}]),  # blocks: no message
        _mcp("spawn_run", task=child_script),  # reports with a completion message
        "!say spawned"])

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with crew.conversations() as conv:
            parent = await crew.delegate(conv, parent_script, name="parent")
            return parent, await _ended_run(conv, conversations_rows, parent["conversationId"], 2)

    parent, completion = run_async(main())
    parent_id = parent["conversationId"]
    assert parent["status"] == "completed" and parent["reply"]["text"] == "spawned", parent
    children = conversations_rows("SELECT c.id, c.parent_id, c.mode, r.reply_text FROM conversations c JOIN runs r"
                                  " ON r.conversation_id = c.id WHERE c.spawn_batch IS NOT NULL")
    assert {parent_of for _, parent_of, _, _ in children} == {parent_id}
    assert {mode for _, _, mode, _ in children} == {"kirocrew"}  # the parent's agent, so its tools
    by_reply = {reply: cid for cid, _, _, reply in children}
    assert set(by_reply) == {"one", "two", "child done"}
    child_id = by_reply["child done"]
    # spawn_sub_agents returned its two results in the call; only spawn_run's child queued a message,
    # which ran as the parent's next turn (the fake echoes the message it was given)
    assert len(conversations_rows("SELECT id FROM runs WHERE conversation_id = ?", parent_id)) == 2
    text = completion["reply"]["text"]
    assert f"Sub-agent {child_id}" in text and "finished: completed" in text and "child done" in text
    # the child's own strict call resolved to the child, never to its parent
    [seen] = [r for r in crew.probe_records() if r["tool"] == "probe_whoami"]
    assert seen["session"]["targetId"] == child_id
    # the dashboard links them both ways, and kiro_status marks the children
    with crew.owner_http() as owner:
        child_detail = owner.get(f"/api/conversations/{child_id}").json()
        assert child_detail["subagent"] and child_detail["parent"]["conversationId"] == parent_id
        parent_detail = owner.get(f"/api/conversations/{parent_id}").json()
        assert sorted(c["conversationId"] for c in parent_detail["subagents"]) == sorted(by_reply.values())
        assert {c["status"] for c in parent_detail["subagents"]} == {"done"} and parent_detail["parent"] is None
        page = owner.get(f"/conversations/{child_id}").text
        assert f'<a href="/conversations/{parent_id}">parent</a>' in page
        assert f'<a href="/conversations/{child_id}">' in owner.get(f"/conversations/{parent_id}").text
        listed = {c["conversationId"]: c for c in owner.get("/api/conversations").json()["conversations"]}
        assert listed[child_id]["parentConversationId"] == parent_id and listed[child_id]["subagent"]
        assert listed[parent_id]["parentConversationId"] is None and not listed[parent_id]["subagent"]


def test_a_spawn_run_child_runs_on_and_records_its_parents_agent_and_model(
        crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    haiku = "claude-haiku-4.5"

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with crew.conversations() as conv:
            # no mode: the parent runs as kirocrew; its model is a per-run choice, not a conversation default
            parent = await crew.delegate(conv, _mcp("spawn_run", task="!settings") + "\n!say spawned",
                                         name="parent", mode=None, model=haiku)
            [(child_id,)] = conversations_rows("SELECT id FROM conversations WHERE parent_id = ?",
                                               parent["conversationId"])
            return parent, await _ended_run(conv, conversations_rows, child_id, 1)

    parent, child = run_async(main())
    assert (parent["settings"]["mode"], parent["settings"]["model"]) == ("kirocrew", haiku), parent
    assert (child["settings"]["mode"], child["settings"]["model"]) == ("kirocrew", haiku), child
    assert child["reply"]["text"] == f"settings: model={haiku} mode=kirocrew effort=none"


def test_a_plain_client_is_refused_and_the_person_uses_the_cli_twins(
        crew: CrewHarness, run_async: Any, tmp_path: Any) -> None:
    async def plain_client() -> None:
        import anyio

        async with crew.core(KIRO_CONVERSATIONS_MAX_SUBAGENTS="3") as core:  # the host starts with this setting
            listed = {tool.name: tool for tool in (await core.raw.list_tools()).tools}
            assert "At most 3 of your sub-agents" in str(listed["spawn_run"].description)  # the live cap
            names = list(listed)
            assert {"spawn_run", "spawn_list", "spawn_status", "spawn_continue", "spawn_steer", "spawn_release",
                    "spawn_sub_agents", "wait", "task_run"} <= set(names)
            for tool, args in (("spawn_run", {"task": "x"}), ("spawn_list", {}),
                               ("spawn_status", {"agent_id": "conv_x"}), ("task_run", {"spec": "__inline__:x"}),
                               ("spawn_sub_agents", {"agents": [{"prompt": "x"}]})):
                message, code = await core.call(tool, **args)
                assert code == "caller_unverified", (tool, message)
            _, code = await core.call("wait", seconds=5, reason="x")
            assert code == "invalid_arguments"  # 60..1800
            with anyio.move_on_after(1.0) as scope:  # the SDK sends notifications/cancelled
                await core.call("wait", seconds=1800, reason="never")
            assert scope.cancelled_caught
            _, code = await core.call("spawn_list")  # the connection still answers at once
            assert code == "caller_unverified"

    run_async(plain_client())
    def kirocrew(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(kirocrew_argv(*args), env=crew.env, cwd=crew.workspace, capture_output=True,
                              text=True, timeout=120, check=False)

    spawned = kirocrew("spawn", "run", "!say from the cli", "!say twice")
    assert spawned.returncode == 0, spawned.stderr
    assert spawned.stdout.startswith("Spawned 2 sub-agent(s).") and "no parent session" in spawned.stdout
    listed = kirocrew("spawn", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count("parent=-") == 2
    (crew.workspace / "TASK.md").write_text("!say the task ran\n")
    ran = kirocrew("run", "TASK.md", "--wait", "--name", "my-task")
    assert ran.returncode == 0, ran.stderr
    conversation_id, reply = ran.stdout.splitlines()[:2]
    assert conversation_id.startswith("conv_") and reply == "the task ran"
    missing = kirocrew("run", "--name", "x", str(tmp_path / "nothing.md"))
    assert missing.returncode != 0
    no_host = subprocess.run(kirocrew_argv("spawn", "list"), env={**crew.env, "KIROCREW_NO_HOST": "1"},
                             capture_output=True, text=True, timeout=60, check=False)
    assert no_host.returncode != 0 and "error[host_required]" in no_host.stderr
