"""The sub-agent tools' handlers on a real conversations service (real SQLite, the fake kiro-cli).

The handlers are called as the kirocrew-core server calls them, with a resolved session; how the
server resolves one from a real relay is covered end to end in test_subagents_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.coretools.contract import CrewSession, ToolCall, ToolRefused
from kirocrew_core.errors import KirocrewError
from kirocrew_core.host.caller import CallerContext

from kirocrew_conversations.scope import Viewer
from kirocrew_conversations.subagent_tools import tools
from kirocrew_conversations.service import ConversationsService, ServiceConfig
from kirocrew_conversations.store import Conversation, Store, Workspace

T = TypeVar("T")
BOUND_SECS = 60.0


@pytest.fixture(autouse=True)
def _fake(fake_kiro_cli: Any, lean_kirocrew_agent: Path) -> Any:
    return fake_kiro_cli


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, BOUND_SECS)

    return asyncio.run(bounded())


class Harness:
    """A service, its tools, and sessions standing for conversations that call them."""

    def __init__(self, service: ConversationsService, workspace: Path) -> None:
        self.service = service
        self.workspace = workspace

        async def provider() -> ConversationsService:
            return service

        self.tools: dict[str, CoreMcpTool] = {t.name: t for t in tools(provider, cap=service.config.max_subagents)}

    def parent(self, name: str, authority: str = "unrestricted") -> Conversation:
        ws = Workspace("shared", str(self.workspace), "ws_test")
        return self.service.store.create_conversation(name=name, workspace=ws, authority=authority)

    async def call(self, tool: str, who: Conversation | None, **args: Any) -> str:
        session = None if who is None else CrewSession(f"kcs1-{who.id}", "conversation", who.id)
        caller = None if who is not None else CallerContext("", "cli", 1, None, {})
        spec = self.tools[tool]
        call = ToolCall(tool, session, caller, spec.identity, origin="session" if who is not None else "person")
        return str(await spec.handler(args, call))

    async def refused(self, tool: str, who: Conversation | None, **args: Any) -> str:
        with pytest.raises(ToolRefused) as info:
            await self.call(tool, who, **args)
        return str(info.value.code)

    def children(self, parent: Conversation) -> list[Conversation]:
        return self.service.store.subagents(parent.id)

    async def parent_messages(self, parent: Conversation, count: int) -> list[str]:
        """The replies of the parent's first ``count`` runs (the fake echoes each completion message)."""
        store = self.service.store
        for _ in range(int(BOUND_SECS * 10)):
            runs = store.list_runs(parent.id)
            if len(runs) >= count and all(r.terminal for r in runs[:count]):
                return [r.reply_text or "" for r in runs[:count]]
            await asyncio.sleep(0.1)
        raise AssertionError(f"the parent got {len(store.list_runs(parent.id))} run(s), not {count}")


def with_service(tmp_path: Path, work: Callable[[Harness], Awaitable[None]], **config: Any) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)

    async def main() -> None:
        async with await ConversationsService.start(
                ServiceConfig(state_dir=tmp_path / "state", **config)) as service:
            await work(Harness(service, workspace))

    run(main())


def test_spawned_children_report_to_their_parent_one_completion_message_each(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        out = await h.call("spawn_run", parent, tasks=["!say alpha done", "!say beta done"])
        assert out.startswith("Spawned 2 sub-agent(s).")
        children = h.children(parent)
        assert len(children) == 2 and len({c.spawn_batch for c in children}) == 1
        assert all(c.id in out and c.parent_id == parent.id for c in children)
        replies = await h.parent_messages(parent, 2)
        assert sorted(r.count("[kirocrew sub-agent completion]") for r in replies) == [1, 1]
        for child in children:
            (mine,) = [r for r in replies if child.id in r]
            assert "finished: completed" in mine
        assert {"alpha done", "beta done"} == {line for r in replies for line in r.splitlines()
                                               if line.endswith(" done")}

    with_service(tmp_path, work)


def test_spawn_sub_agents_returns_the_results_and_queues_no_completion(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        out = await h.call("spawn_sub_agents", parent,
                           agents=[{"prompt": "!say one"}, {"prompt": "!error -32603 boom"}])
        entries = [json.loads(block) for block in out.split("\n\n")]
        assert [e["status"] for e in entries] == ["completed", "error"]
        assert entries[0]["text"] == "one" and entries[1]["error"] == "kiro_run_failed"
        await asyncio.sleep(0.5)
        assert h.service.store.list_runs(parent.id) == []  # the call returned them; nothing was queued

    with_service(tmp_path, work)


def test_spawn_sub_agents_stops_waiting_at_the_max_wait_and_later_results_arrive_as_messages(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        out = await h.call("spawn_sub_agents", parent, agents=[{"prompt": "!sleep 2\n!say late"}])
        assert json.loads(out)["status"] == "timed_out"
        (reply,) = await h.parent_messages(parent, 1)
        assert "finished: completed" in reply and "late" in reply

    with_service(tmp_path, work, subagents_max_wait_secs=1)


def test_another_session_cannot_see_steer_continue_or_release_a_child(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent, other = h.parent("parent"), h.parent("other")
        await h.call("spawn_sub_agents", parent, agents=[{"prompt": "!say mine"}])
        (child,) = h.children(parent)
        assert await h.call("spawn_list", other) == "No sub-agents."
        assert child.id in await h.call("spawn_list", parent)
        for tool, args in (("spawn_status", {"agent_id": child.id}),
                           ("spawn_steer", {"agent_id": child.id, "message": "x"}),
                           ("spawn_continue", {"conversation": child.id, "task": "x"}),
                           ("spawn_release", {"conversation": child.id})):
            assert await h.refused(tool, other, **args) == "subagent_not_found"
        # the same answer as an id that exists nowhere, and as a conversation that is no sub-agent
        assert await h.refused("spawn_status", parent, agent_id="conv_nothing") == "subagent_not_found"
        assert await h.refused("spawn_status", parent, agent_id=other.id) == "subagent_not_found"
        assert h.service.store.list_runs(child.id)[-1].reply_text == "mine"  # nothing changed

    with_service(tmp_path, work)


def test_status_pages_and_greps_continue_steer_and_release(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        await h.call("spawn_sub_agents", parent, agents=[{"prompt": "!say a1\\nb2\\na3\\nb4"}])
        (child,) = h.children(parent)
        status = await h.call("spawn_status", parent, agent_id=child.id, limit=2)
        assert "[done]" in status and status.endswith("a1\nb2")
        assert "more available — call again with offset=2" in status
        grepped = await h.call("spawn_status", parent, agent_id=child.id, grep="^a")
        assert grepped.endswith("a1\na3") and "2 line(s) matched grep of 4 total" in grepped
        assert await h.refused("spawn_status", parent, agent_id=child.id, grep="(") == "invalid_grep"

        assert "Continued sub-agent" in await h.call("spawn_continue", parent, conversation=child.id,
                                                     task="!say again")
        (first,) = await h.parent_messages(parent, 1)
        assert "again" in first
        out = await h.call("spawn_continue", parent, conversation=child.id, task="!hang")
        assert "Continued" in out
        assert await h.refused("spawn_continue", parent, conversation=child.id, task="x") == "conversation_busy"
        await asyncio.sleep(0.5)
        steered = await h.call("spawn_steer", parent, agent_id=child.id, message="!say steered")
        assert "current turn was stopped" in steered
        messages = await h.parent_messages(parent, 2)
        assert "steered" in messages[1] and "run_replaced" not in "".join(messages)  # the replaced turn is silent
        assert "Released sub-agent" in await h.call("spawn_release", parent, conversation=child.id)
        assert await h.refused("spawn_continue", parent, conversation=child.id, task="x") == "subagent_released"
        assert "already released" in await h.call("spawn_release", parent, conversation=child.id)
        assert "[released]" in await h.call("spawn_list", parent)

    with_service(tmp_path, work)


def test_a_batch_over_the_cap_spawns_nothing(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        assert "at most 2 of your sub-agents" in h.tools["spawn_run"].description.lower()
        await h.call("spawn_run", parent, task="!hang")
        assert await h.refused("spawn_run", parent, tasks=["!say a", "!say b"]) == "subagent_cap_reached"
        assert len(h.children(parent)) == 1
        await h.call("spawn_run", parent, task="!say fits")  # one more fits
        (hanging,) = [c for c in h.children(parent) if h.service.store.list_runs(c.id)[-1].status == "running"]
        await h.call("spawn_release", parent, conversation=hanging.id)

    with_service(tmp_path, work, max_subagents=2)


def test_cwd_outside_the_workspace_and_roots_is_refused_and_a_root_is_allowed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "ws" / "sub").mkdir(parents=True)

    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        for cwd in (str(tmp_path), "..", str(h.workspace) + "/../elsewhere"):
            assert await h.refused("spawn_run", parent, task="!say x", cwd=cwd) == "cwd_not_allowed"
        assert await h.refused("spawn_run", parent, task="!say x", cwd="missing") == "workspace_not_found"
        assert h.children(parent) == []
        await h.call("spawn_sub_agents", parent, agents=[{"prompt": "!say in sub"}], cwd="sub")
        (child,) = h.children(parent)
        assert child.workspace.path == str((tmp_path / "ws" / "sub").resolve())

    with_service(tmp_path, work)
    with_service(tmp_path, _spawn_in(elsewhere), subagent_roots=(str(elsewhere),))


def _spawn_in(root: Path) -> Callable[[Harness], Awaitable[None]]:
    async def work(h: Harness) -> None:
        parent = h.parent("parent2")
        await h.call("spawn_run", parent, task="!say x", cwd=str(root))
        assert h.children(parent)[0].workspace.path == str(root.resolve())

    return work


def test_a_child_of_a_restricted_parent_runs_under_the_parents_authority(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent", authority="read_only")
        try:
            await h.call("spawn_run", parent, task="!say x")
        except KirocrewError as exc:  # read_only may be unavailable on this machine: then nothing runs unrestricted
            assert exc.code == "authority_unavailable"
            assert h.children(parent) == []
            return
        assert [c.authority for c in h.children(parent)] == ["read_only"]

    with_service(tmp_path, work)


def test_the_person_spawns_and_lists_every_sub_agent_with_its_parent(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        await h.call("spawn_sub_agents", parent, agents=[{"prompt": "!say p"}])
        assert await h.refused("spawn_run", None, task="!say x") == "cwd_required"
        out = await h.call("spawn_run", None, task="!say mine", cwd=str(h.workspace))
        assert "no parent session" in out
        listing = await h.call("spawn_list", None)
        assert f"parent={parent.id}" in listing and "parent=-" in listing
        # the person cannot use the session-only tools (they are strict: the server refuses first)
        assert h.tools["spawn_status"].identity == "strict"

    with_service(tmp_path, work)


def test_task_run_from_a_path_and_inline(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        (h.workspace / "TASK.md").write_text("!say from the file\n")
        out = await h.call("task_run", parent, spec="TASK.md", name="file-task")
        assert out.startswith("Task runner started: conversation conv_")
        inline = await h.call("task_run", parent, spec="__inline__:!say inline")
        store = h.service.store
        for text, expect in ((out, "from the file"), (inline, "inline")):
            cid = text.split("conversation ")[1].split(" ")[0]
            conversation = store.get_conversation(cid)
            assert conversation.parent_id is None and not conversation.subagent
            assert conversation.created_by == parent.id  # in the session's tree: it follows the task
            (done,) = (await h.service.orchestrator.wait([store.list_runs(cid)[0].id], timeout=30)).runs
            assert done.reply_text == expect
            shown = await h.service.call("kiro_result", {"conversationId": cid, "runId": done.id},
                                         viewer=Viewer(parent.id))
            assert shown["reply"]["text"] == expect
        assert await h.refused("task_run", parent, spec="missing.md") == "task_spec_not_found"
        assert await h.refused("task_run", parent, spec=str(tmp_path / "state" / "x")) == "cwd_not_allowed"
        assert await h.refused("task_run", parent, spec="__inline__:  ") == "task_spec_empty"

    with_service(tmp_path, work)


def test_wait_reports_its_reason_and_ends_at_once_when_cancelled(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        spec = h.tools["wait"]
        call = ToolCall("wait", None, None, spec.identity)
        task = asyncio.ensure_future(spec.handler({"seconds": 60, "reason": "build"}, call))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert spec.identity == "none"

    with_service(tmp_path, work)


def test_a_session_without_a_conversation_is_refused_and_so_are_contradicting_arguments(tmp_path: Path) -> None:
    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        for args in ({"task": "a", "tasks": ["b"]}, {}, {"tasks": ["a", "b"], "agents": ["x"]},
                     {"task": "a", "agent": "x", "agents": ["x"]}):
            assert await h.refused("spawn_run", parent, **args) == "invalid_arguments"
        assert h.children(parent) == []
        spec = h.tools["spawn_run"]
        cron = ToolCall("spawn_run", CrewSession("kcs1-c", "cron", "job1"), None, spec.identity)
        with pytest.raises(ToolRefused) as info:
            await spec.handler({"task": "x"}, cron)
        assert info.value.code == "not_a_conversation_session"
        relay = ToolCall("spawn_run", None, CallerContext("", "relay", 1, None, {}), spec.identity, origin="person")
        with pytest.raises(ToolRefused) as info:
            await spec.handler({"task": "x"}, relay)
        assert info.value.code == "caller_unverified"

    with_service(tmp_path, work)


def test_a_long_result_is_cut_at_a_line_end_with_a_pointer_to_spawn_status(tmp_path: Path) -> None:
    from kirocrew_conversations import limits
    from kirocrew_conversations.subagents import completion_message, page_lines, result_entry

    store = Store.open(tmp_path / "db.sqlite")
    try:
        child = store.create_conversation(name="sub-x-1", workspace=Workspace("shared", str(tmp_path), "ws"),
                                          spawn_batch="x")
        run = store.enqueue_run(child.id, "task")
        store.transition_run(run.id, "running")
        lines = [f"line {i:05d} " + "x" * 40 for i in range(200)]  # about 10,000 characters
        ended = store.transition_run(run.id, "completed", reply="\n".join(lines))
    finally:
        store.close()
    message = completion_message(child, ended)
    shown = message.split("Result:\n", 1)[1].split("\n[result truncated", 1)[0]
    assert len(shown) <= limits.COMPLETION_KEEP_CHARS and shown.endswith("\n")  # whole lines only
    next_line = shown.count("\n")
    assert f"call spawn_status with agent_id={child.id} and offset={next_line} for the rest" in message
    # and spawn_status from that offset goes on exactly where the message stopped
    assert page_lines(ended.reply_text or "", offset=next_line, limit=1, grep=None).splitlines()[-1] == \
        lines[next_line]
    entry = result_entry(child, ended)
    assert entry["text"] == shown and f"offset={next_line}" in entry["more"]


def _add_crews(tmp_path: Path) -> Path:
    from kirocrew_core.crews.bindings import Crew, add_crew

    docs = tmp_path / "ws" / "docs"
    docs.mkdir(parents=True)
    add_crew(Crew("writer", kiro_agent="kiro_default", model="claude-haiku-4.5", workspace=str(docs),
                  authority="workspace_write", triggers=("docs",)))
    add_crew(Crew("wide", authority="unrestricted"))
    add_crew(Crew("elsewhere", workspace=str(tmp_path)))
    return docs


def test_a_crew_binds_its_childrens_agent_model_workspace_and_a_narrower_authority(tmp_path: Path) -> None:
    from kirocrew_testing.requirements import executable

    executable("bwrap", apt="bubblewrap")  # the crew's workspace_write authority runs in bubblewrap
    docs = _add_crews(tmp_path)

    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        out = await h.call("spawn_run", parent, task="!say written", crew="writer")
        [child] = h.children(parent)
        assert (child.mode, child.model, child.workspace.path, child.authority) == (
            "kiro_default", "claude-haiku-4.5", str(docs.resolve()), "workspace_write")
        assert f"{child.id} (kiro_default, crew writer): !say written" in out

    with_service(tmp_path, work)


def test_a_crew_with_an_agent_an_unknown_crew_a_foreign_workspace_or_a_wider_authority_is_refused(
        tmp_path: Path) -> None:
    _add_crews(tmp_path)

    async def work(h: Harness) -> None:
        parent = h.parent("parent")
        # agent= with a crew is refused
        assert await h.refused("spawn_run", parent, task="x", crew="writer", agent="kirocrew") == "crew_and_agent"
        assert await h.refused("spawn_run", parent, task="x", crew="writer", agents=["kirocrew"]) == "crew_and_agent"
        with pytest.raises(KirocrewError) as unknown:
            await h.call("spawn_run", parent, task="x", crew="nobody")
        assert unknown.value.code == "unknown_crew" and "available crews: elsewhere, wide, writer" in str(unknown.value)
        # a crew's workspace is checked as cwd is: outside the session's workspace and roots is refused
        assert await h.refused("spawn_run", parent, task="x", crew="elsewhere") == "cwd_not_allowed"
        # a crew never grants more than the spawning session has; nothing is created
        restricted = h.parent("restricted", authority="read_only")
        with pytest.raises(KirocrewError) as escalated:
            await h.call("spawn_run", restricted, task="x", crew="wide")
        assert escalated.value.code == "authority_escalation" and h.children(restricted) == []
        assert h.children(parent) == []

    with_service(tmp_path, work)
