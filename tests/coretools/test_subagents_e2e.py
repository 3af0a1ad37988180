"""Sub-agents end to end: a conversation's kiro-cli calls the spawn tools through the relay and the host.

The fake kiro-cli runs each script; the children are real conversations with their own kiro-cli,
their completion messages real runs of the parent. The CLI twins run as real ``kirocrew`` commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

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


def test_a_session_spawns_a_child_that_acts_as_itself_and_reports_back(
        crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    child_script = _mcp("probe_whoami") + "\n!say child done"

    async def main() -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
        async with crew.conversations() as conv:
            parent = await crew.delegate(conv, _mcp("spawn_run", task=child_script) + "\n!say spawned",
                                         name="parent")
            children = conversations_rows("SELECT id, parent_id, mode FROM conversations WHERE spawn_batch "
                                          "IS NOT NULL")
            completion = await _ended_run(conv, conversations_rows, parent["conversationId"], 2)
            return parent, completion, children

    parent, completion, children = run_async(main())
    assert parent["status"] == "completed" and parent["reply"]["text"] == "spawned", parent
    [(child_id, parent_id, mode)] = children
    assert parent_id == parent["conversationId"] and mode == "kirocrew"  # the parent's agent, so its tools
    # the completion ran as the parent's next turn (the fake echoes the message it was given)
    assert completion["runId"] != parent["runId"]
    text = completion["reply"]["text"]
    assert f"Sub-agent {child_id}" in text and "finished: completed" in text and "child done" in text
    # the child's own strict call resolved to the child, never to its parent
    [seen] = [r for r in crew.probe_records() if r["tool"] == "probe_whoami"]
    assert seen["session"]["targetId"] == child_id
    # the dashboard links them both ways, and kiro_status marks the child
    with _dashboard(crew) as owner:
        child_detail = owner.get(f"/api/conversations/{child_id}").json()
        assert child_detail["subagent"] and child_detail["parent"]["conversationId"] == parent_id
        parent_detail = owner.get(f"/api/conversations/{parent_id}").json()
        assert [c["conversationId"] for c in parent_detail["subagents"]] == [child_id]
        assert parent_detail["subagents"][0]["status"] == "done" and parent_detail["parent"] is None
        page = owner.get(f"/conversations/{child_id}").text
        assert f'<a href="/conversations/{parent_id}">parent</a>' in page
        assert f'<a href="/conversations/{child_id}">' in owner.get(f"/conversations/{parent_id}").text
        listed = {c["conversationId"]: c for c in owner.get("/api/conversations").json()["conversations"]}
        assert listed[child_id]["parentConversationId"] == parent_id and listed[child_id]["subagent"]
        assert listed[parent_id]["parentConversationId"] is None and not listed[parent_id]["subagent"]


@contextlib.contextmanager
def _dashboard(crew: CrewHarness) -> Iterator[Any]:
    """An owner-authenticated HTTP client on the running host's gateway (``kirocrew dashboard --no-start``)."""
    import httpx

    shown = subprocess.run(kirocrew_argv("dashboard", "--no-start"), env=crew.env, capture_output=True, text=True,
                           timeout=60, check=True).stdout.strip()
    token = parse_qs(urlsplit(shown).query)["token"][0]
    with httpx.Client(base_url=shown.split("/?", 1)[0], headers={"Authorization": f"Bearer {token}"},
                      timeout=60) as client:
        yield client


def test_spawn_sub_agents_blocks_until_the_children_finish_and_nothing_is_queued_after(
        crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    script = _mcp("spawn_sub_agents", agents=[{"prompt": "!say one"}, {"prompt": "!say two"}]) + "\n!say all back"

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv:
            return await crew.delegate(conv, script, name="blocking")

    run = run_async(main())
    assert run["status"] == "completed" and run["reply"]["text"] == "all back", run
    children = conversations_rows("SELECT c.id, r.status, r.reply_text FROM conversations c JOIN runs r"
                                  " ON r.conversation_id = c.id WHERE c.spawn_batch IS NOT NULL")
    assert sorted((status, reply) for _, status, reply in children) == [("completed", "one"), ("completed", "two")]
    parent_runs = conversations_rows("SELECT r.id FROM runs r JOIN conversations c ON c.id = r.conversation_id"
                                     " WHERE c.name = 'blocking'")
    assert len(parent_runs) == 1  # the results came back in the call: no completion message was queued


def test_a_plain_client_without_a_session_is_refused_and_a_cancelled_wait_frees_the_call(
        crew: CrewHarness, run_async: Any) -> None:
    async def main() -> None:
        import anyio

        async with crew.core() as core:
            names = await core.tool_names()
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
            text, code = await core.call("spawn_list")  # the connection still serves at once
            assert code == "caller_unverified"

    run_async(main())


def test_the_cli_twins_spawn_list_and_run_a_task_file(crew: CrewHarness, tmp_path: Any) -> None:
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
