"""The fake kiro-cli's scripted prompts: what each directive makes it do, permissions, cancel, failures."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_testing.fake_kiro import script
from kirocrew_testing.fake_kiro.harness import FakeKiroProcess, RecordingClient, start_fake_kiro


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def acp(fake_kiro_cli: Any, *args: str, client: RecordingClient | None = None) -> Any:
    return start_fake_kiro(fake_kiro_cli.path, "acp", *args, env=dict(os.environ), client=client)


async def started(k: FakeKiroProcess, cwd: Path) -> str:
    await k.initialize()
    return (await k.new_session(str(cwd)))["sessionId"]


async def one_turn(fake_kiro_cli: Any, cwd: Path, text: str, *args: str,
                   client: RecordingClient | None = None) -> tuple[Any, FakeKiroProcess]:
    async with acp(fake_kiro_cli, *args, client=client) as k:
        sid = await started(k, cwd)
        response = await k.prompt(sid, text)
        return response, k


def tool_updates(client: RecordingClient) -> list[Any]:
    return [u for _, u in client.updates if u.session_update in ("tool_call", "tool_call_update")]


def final_status(client: RecordingClient) -> str:
    return [u.status for u in tool_updates(client) if u.status][-1]


# -- the language itself ------------------------------------------------------------


def test_plain_lines_form_one_text_step_and_directives_cut_them() -> None:
    steps = script.parse("hello\nworld\n!say a\\nb\n!!not a directive")
    assert [(s.kind, s.text) for s in steps] == [("text", "hello\nworld"), ("say", "a\nb"),
                                                 ("text", "!not a directive")]


def test_a_malformed_or_unknown_directive_is_a_script_error() -> None:
    for text in ("!frobnicate", "!sleep soon", "!error oops", "!mcp only-server", "!tool x {not json",
                 "!notify", "!notify _kiro.dev/x/y {not json", "!notify _kiro.dev/x/y [1]"):
        with pytest.raises(script.ScriptError):
            script.parse(text)


def test_say_think_and_write_keep_their_text_verbatim_trailing_whitespace_included() -> None:
    steps = script.parse("!say two trailing  \n!think tab\t\n!write a.txt  indented \n!say   ")
    assert [(s.kind, s.name, s.text) for s in steps] == [
        ("say", "", "two trailing  "), ("think", "", "tab\t"), ("write", "a.txt", " indented "), ("say", "", "  ")]


def test_notify_takes_a_method_as_written_and_an_optional_json_object() -> None:
    steps = script.parse('!notify _kiro.dev/subagent/list_update {"subagents": []}\n!notify _kiro.dev/x/y')
    assert [(s.kind, s.name, s.data) for s in steps] == [
        ("notify", "_kiro.dev/subagent/list_update", {"subagents": []}), ("notify", "_kiro.dev/x/y", {})]


def test_a_prompt_starting_with_a_slash_is_a_command() -> None:
    assert script.slash_command("  /model claude-haiku-4.5\n") == ("model", "claude-haiku-4.5")
    assert script.slash_command("path /tmp is fine") is None


# -- turns --------------------------------------------------------------------------


def test_plain_text_is_echoed_and_both_sides_land_in_the_transcript(fake_kiro_cli: Any, tmp_path: Path) -> None:
    response, k = run(one_turn(fake_kiro_cli, tmp_path, "just chatting"))
    assert response.stop_reason == "end_turn"
    assert k.client.texts() == ["just chatting"]
    sid = k.client.updates[0][0]
    lines = [json.loads(line) for line in (home.kiro_sessions_dir() / f"{sid}.jsonl").read_text().splitlines()]
    assert [(line["version"], line["kind"], line["data"]["content"]) for line in lines] == [
        ("v1", "Prompt", [{"kind": "text", "data": "just chatting"}]),
        ("v1", "AssistantMessage", [{"kind": "text", "data": "just chatting"}])]
    assert all(line["data"]["message_id"] for line in lines)


def test_say_think_plan_and_todo_produce_kiros_updates(fake_kiro_cli: Any, tmp_path: Path) -> None:
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "!say out loud\n!think quietly\n!plan one; two\n!todo x; y"))
    kinds = [u.session_update for _, u in k.client.updates]
    assert kinds[:3] == ["agent_message_chunk", "agent_thought_chunk", "plan"]
    assert [e.content for e in k.client.of_kind("plan")[0].entries] == ["one", "two"]
    todo = k.client.of_kind("tool_call_update")[-1]
    assert todo.raw_output == {"todos": [{"content": "x", "status": "pending"},
                                         {"content": "y", "status": "pending"}]}
    assert k.client.of_kind("tool_call")[0].field_meta == {"kiro": {"toolName": "todo_list"}}


def test_a_said_line_reaches_the_client_with_its_trailing_whitespace(fake_kiro_cli: Any, tmp_path: Path) -> None:
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "!say indented code:  \n!say \tfour  "))
    assert k.client.texts() == ["indented code:  ", "\tfour  "]


def test_notify_sends_any_notification_exactly_as_written_between_the_turns_updates(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    _, k = run(one_turn(fake_kiro_cli, tmp_path, '!say before\n'
                        '!notify _kiro.dev/subagent/list_update {"subagents": [], "pendingStages": []}\n'
                        '!notify _kiro.dev/x/y\n!say after'))
    frames = [m for d, m in k.frames if d == "incoming" and m.get("method") in (
        "session/update", "_kiro.dev/subagent/list_update", "_kiro.dev/x/y")]
    assert [m["method"] for m in frames] == [
        "session/update", "_kiro.dev/subagent/list_update", "_kiro.dev/x/y", "session/update"]
    assert frames[1] == {"jsonrpc": "2.0", "method": "_kiro.dev/subagent/list_update",
                         "params": {"subagents": [], "pendingStages": []}}  # no sessionId added
    assert frames[2]["params"] == {}
    assert k.client.notified("kiro.dev/x/y") == [{}]
    assert k.client.texts() == ["before", "after"]


def test_every_turn_ends_with_kiros_metadata(fake_kiro_cli: Any, tmp_path: Path) -> None:
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "hi"))
    metadata = k.client.notified("kiro.dev/metadata")
    assert len(metadata) == 1
    assert {"sessionId", "contextUsagePercentage", "meteringUsage", "turnDurationMs"} <= set(metadata[0])
    assert metadata[0]["meteringUsage"][0]["unit"] == "credit"


# -- permissions --------------------------------------------------------------------


def test_a_tool_call_asks_permission_with_a_string_uuid_id_and_kiros_options(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    response, k = run(one_turn(fake_kiro_cli, tmp_path, '!tool deploy {"env": "prod"}'))
    assert response.stop_reason == "end_turn"
    frame = k.sent("session/request_permission")[0]
    assert isinstance(frame["id"], str) and uuid.UUID(frame["id"])
    params = frame["params"]
    assert [(o["optionId"], o["kind"]) for o in params["options"]] == [
        ("allow_once", "allow_once"), ("allow_always", "allow_always"), ("reject_once", "reject_once")]
    assert params["_meta"] == {"trustOptions": []}
    assert params["toolCall"]["title"] == "Running deploy"
    start = k.client.of_kind("tool_call")[0]
    assert start.field_meta == {"kiro": {"toolName": "deploy"}} and start.raw_input == {"env": "prod"}
    assert final_status(k.client) == "completed"


def test_a_rejected_write_fails_the_tool_call_and_writes_nothing(fake_kiro_cli: Any, tmp_path: Path) -> None:
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "!write notes.txt hello",
                        client=RecordingClient(permission="reject_once")))
    assert final_status(k.client) == "failed"
    assert not (tmp_path / "notes.txt").exists()


def test_trust_all_tools_suppresses_every_permission_request(fake_kiro_cli: Any, tmp_path: Path) -> None:
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "!tool deploy\n!shell true\n!write a.txt x",
                        "--trust-all-tools", client=RecordingClient(permission="never")))
    assert k.client.permission_requests == []
    assert (tmp_path / "a.txt").read_text() == "x"


def test_trust_tools_trusts_only_the_tools_it_names(fake_kiro_cli: Any, tmp_path: Path) -> None:
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "!shell true\n!write b.txt y", "--trust-tools", "shell,read"))
    assert [r["tool_call"].title for r in k.client.permission_requests] == [f"Creating {tmp_path / 'b.txt'}"]


def test_the_agents_allowed_tools_skip_the_prompt(fake_kiro_cli: Any, tmp_path: Path) -> None:
    agents = home.kiro_agents_dir()
    agents.mkdir(parents=True)
    (agents / "careful.json").write_text(json.dumps({"tools": ["*"], "allowedTools": ["deploy*"]}))
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "!tool deploy_app\n!tool delete_all", "--agent", "careful"))
    assert [r["tool_call"].title for r in k.client.permission_requests] == ["Running delete_all"]


def test_allow_always_is_remembered_for_the_rest_of_the_session(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli, client=RecordingClient(permission="allow_always")) as k:
            sid = await started(k, tmp_path)
            await k.prompt(sid, "!tool deploy")
            await k.prompt(sid, "!tool deploy\n!tool other")
            return [r["tool_call"].title for r in k.client.permission_requests]

    assert run(scenario()) == ["Running deploy", "Running other"]


def test_a_permission_answered_cancelled_cancels_the_turn(fake_kiro_cli: Any, tmp_path: Path) -> None:
    response, _ = run(one_turn(fake_kiro_cli, tmp_path, "!tool deploy\n!say never said",
                               client=RecordingClient(permission="cancelled")))
    assert response.stop_reason == "cancelled"


# -- tools that do things -----------------------------------------------------------


def test_write_creates_a_file_in_the_cwd_with_a_diff_tool_call(fake_kiro_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("before")
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "!write new/file.txt line one\\nline two\n!write old.txt after"))
    assert (tmp_path / "new" / "file.txt").read_text() == "line one\nline two"
    assert (tmp_path / "old.txt").read_text() == "after"
    diffs = [u.content[0] for u in k.client.of_kind("tool_call")]
    assert [(d.type, d.old_text, d.new_text) for d in diffs] == [
        ("diff", None, "line one\nline two"), ("diff", "before", "after")]
    assert diffs[0].path == str(tmp_path / "new" / "file.txt")
    trust = k.client.permission_requests[0]["meta"]["trustOptions"][0]
    assert trust["setting_key"] == "runtime_write_paths"


def test_shell_runs_the_command_in_the_session_cwd(fake_kiro_cli: Any, tmp_path: Path) -> None:
    _, k = run(one_turn(fake_kiro_cli, tmp_path, "!shell pwd; echo oops >&2; exit 3"))
    output = k.client.of_kind("tool_call_update")[-1]
    assert output.status == "failed"
    assert output.raw_output == {"exitStatus": 3, "stdout": f"{tmp_path}\n", "stderr": "oops\n"}


# -- waiting, cancelling, failing -----------------------------------------------------


@pytest.mark.parametrize("text", ["!hang", "!sleep 60", "!shell sleep 60", "!tool deploy"])
def test_session_cancel_ends_a_waiting_turn_as_cancelled(fake_kiro_cli: Any, tmp_path: Path, text: str) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli, client=RecordingClient(permission="never")) as k:
            sid = await started(k, tmp_path)
            turn = asyncio.ensure_future(k.prompt(sid, f"!say started\n{text}\n!say not reached"))
            await k.client.wait_for(lambda: k.client.texts())
            await asyncio.sleep(0.2)
            await k.conn.cancel(session_id=sid)
            response = await turn
            after = await k.prompt(sid, "next turn works")
            return response, k.client.texts(), after

    response, texts, after = run(scenario())
    assert response.stop_reason == "cancelled"
    assert "not reached" not in texts
    assert after.stop_reason == "end_turn"


def test_error_fails_the_prompt_with_that_json_rpc_error(fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            with pytest.raises(RequestError) as failed:
                await k.prompt(sid, "!error -32000 quota exceeded")
            return failed.value

    error = run(scenario())
    assert (error.code, str(error)) == (-32000, "quota exceeded")


def test_refuse_sends_content_filtered_metadata_then_a_bare_internal_error(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            with pytest.raises(RequestError):
                await k.prompt(sid, "!refuse")
            error_frames = [m for d, m in k.frames if d == "incoming" and "error" in m]
            return k.client.notified("kiro.dev/metadata"), error_frames

    metadata, error_frames = run(scenario())
    assert metadata[-1]["stopReason"] == "CONTENT_FILTERED" and "refusal" in metadata[-1]
    assert error_frames[-1]["error"] == {"code": -32603, "message": "Internal error"}


def test_exit_kills_kiro_mid_turn_and_leaves_the_lock(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            with pytest.raises(ConnectionError):
                await k.prompt(sid, "!say bye\n!exit 7")
            return sid, await k.wait_exit(), k.client.texts()

    sid, code, texts = run(scenario())
    assert code == 7 and texts == ["bye"]
    assert (home.kiro_sessions_dir() / f"{sid}.lock").exists()


def test_an_unknown_directive_fails_the_prompt_as_invalid_params_before_doing_anything(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            with pytest.raises(RequestError) as failed:
                await k.prompt(sid, "!say first\n!sya typo")
            return failed.value, k.client.texts()

    error, texts = run(scenario())
    assert error.code == -32602 and "!sya" in str(error)
    assert texts == []


def test_a_slash_command_in_prompt_text_runs_the_command(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            response = await k.prompt(sid, "/model claude-sonnet-4")
            state = json.loads((home.kiro_sessions_dir() / f"{sid}.json").read_text())
            return response, k.client.texts(), state

    response, texts, state = run(scenario())
    assert response.stop_reason == "end_turn"
    assert texts == ["Model changed to claude-sonnet-4"]
    assert state["model"] == "claude-sonnet-4"


# -- eager MCP init (KIRO_FAKE_EAGER_MCP) ----------------------------------------------


def test_with_eager_mcp_session_new_answers_only_after_every_server_has_reported(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    from kirocrew_testing.mcp_fixtures import stdio_server_argv

    def entry(*options: str) -> dict[str, Any]:
        command, *args = stdio_server_argv(*options)
        return {"command": command, "args": args}

    agents = home.kiro_agents_dir()
    agents.mkdir(parents=True)
    (agents / "crew.json").write_text(json.dumps({"tools": ["*"], "mcpServers": {
        "fine": entry("--tools", "2"), "dies": entry("--exit-during-handshake"),
        "off": {**entry("--tools", "1"), "disabled": True}}}))

    async def scenario() -> Any:
        async with start_fake_kiro(fake_kiro_cli.path, "acp", "--agent", "crew",
                                   env=fake_kiro_cli.env(eager_mcp="1")) as k:
            sid = await started(k, tmp_path)
            return sid, [m for d, m in k.frames if d == "incoming"]

    sid, incoming = run(scenario())
    answer = next(i for i, m in enumerate(incoming) if isinstance(m.get("result"), dict) and "sessionId" in m["result"])
    before = {(m["method"], m["params"]["serverName"]) for m in incoming[:answer] if m.get("method", "").startswith(
        "_kiro.dev/mcp/")}
    assert before == {("_kiro.dev/mcp/server_initialized", "fine"), ("_kiro.dev/mcp/server_init_failure", "dies")}
    assert all(m["params"]["sessionId"] == sid for m in incoming[:answer] if m.get("method", "").startswith(
        "_kiro.dev/mcp/"))
