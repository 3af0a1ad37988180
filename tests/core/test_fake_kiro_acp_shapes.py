"""The fake kiro-cli speaks ACP without the ``acp`` SDK, yet sends what the SDK sent, and can still be held to it.

The builders in ``fake_kiro/acp_shapes.py`` are compared, byte for byte, with the SDK's
serialization of the models the fake used to build; a whole session is checked to import
neither the SDK nor pydantic; ``KIRO_FAKE_STRICT`` is shown to catch what only the SDK's
models catch, in both directions.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kirocrew_testing.fake_kiro import acp_shapes, strict
from kirocrew_testing.fake_kiro.harness import RecordingClient, start_fake_kiro

HEAVY = ("acp", "pydantic", "pydantic_core")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def sdk_notification(session_id: str, update: Any, **meta: Any) -> str:
    """``session/update`` params as the SDK's ``AgentSideConnection.session_update`` serialized them."""
    from acp.schema import SessionNotification
    from acp.utils import serialize_params

    return dumps(serialize_params(SessionNotification(session_id=session_id, update=update, field_meta=meta or None)))


def test_every_update_the_fake_builds_is_byte_for_byte_the_sdks_serialization() -> None:
    from acp import (
        plan_entry,
        text_block,
        tool_content,
        tool_diff_content,
        update_agent_message_text,
        update_agent_thought_text,
        update_plan,
        update_tool_call,
        update_user_message_text,
    )
    from acp.schema import CurrentModeUpdate, ToolCallLocation, ToolCallStart

    meta = {"kiro.dev": {"commandResult": {"success": True, "message": "m", "data": {"effort": None}}}}
    start = ToolCallStart(session_update="tool_call", tool_call_id="t1", title="Editing /w/a.txt", kind="edit",
                          status="pending", raw_input={"path": "/w/a.txt", "content": None},
                          content=[tool_diff_content("/w/a.txt", "new", "old")],
                          locations=[ToolCallLocation(path="/w/a.txt")],
                          field_meta={"kiro": {"toolName": "write", "mcpServerName": "fx"}})
    pairs = [
        (sdk_notification("s", update_agent_message_text("hi")),
         acp_shapes.session_notification("s", acp_shapes.message_chunk("agent_message_chunk", "hi"))),
        (sdk_notification("s", update_agent_message_text("/mcp"), **meta),
         acp_shapes.session_notification("s", acp_shapes.message_chunk("agent_message_chunk", "/mcp"), meta)),
        (sdk_notification("s", update_user_message_text("u")),
         acp_shapes.session_notification("s", acp_shapes.message_chunk("user_message_chunk", "u"))),
        (sdk_notification("s", update_agent_thought_text("t")),
         acp_shapes.session_notification("s", acp_shapes.message_chunk("agent_thought_chunk", "t"))),
        (sdk_notification("s", update_plan([plan_entry("A"), plan_entry("B")])),
         acp_shapes.session_notification("s", acp_shapes.plan(["A", "B"]))),
        (sdk_notification("s", CurrentModeUpdate(session_update="current_mode_update", current_mode_id="crew")),
         acp_shapes.session_notification("s", acp_shapes.current_mode("crew"))),
        (sdk_notification("s", start),
         acp_shapes.session_notification("s", acp_shapes.tool_call(
             "t1", "Editing /w/a.txt", "edit", raw_input={"path": "/w/a.txt", "content": None},
             content=[acp_shapes.diff_content("/w/a.txt", "new", "old")], locations=[acp_shapes.location("/w/a.txt")],
             meta={"kiro": {"toolName": "write", "mcpServerName": "fx"}}))),
        (sdk_notification("s", ToolCallStart(session_update="tool_call", tool_call_id="t2", title="Creating x",
                                             kind="edit", status="pending",
                                             content=[tool_diff_content("x", "new")], raw_input={})),
         acp_shapes.session_notification("s", acp_shapes.tool_call(
             "t2", "Creating x", "edit", content=[acp_shapes.diff_content("x", "new", None)], raw_input={}))),
        (sdk_notification("s", update_tool_call("t1", status="in_progress")),
         acp_shapes.session_notification("s", acp_shapes.tool_call_update("t1", "in_progress"))),
        (sdk_notification("s", update_tool_call("t1", status="completed", raw_output={"exitStatus": 0, "e": None},
                                                content=[tool_content(text_block("out"))])),
         acp_shapes.session_notification("s", acp_shapes.tool_call_update(
             "t1", "completed", raw_output={"exitStatus": 0, "e": None}, content=[acp_shapes.text_content("out")]))),
    ]
    for sdk, ours in pairs:
        assert dumps(ours) == sdk


def test_a_permission_request_and_a_prompt_answer_are_the_sdks_too() -> None:
    from acp.schema import PermissionOption, PromptResponse, RequestPermissionRequest, ToolCallUpdate
    from acp.utils import serialize_params

    trust = {"trustOptions": [{"label": "Base command", "display": "echo *", "setting_key": "allowedCommands",
                               "patterns": ["echo( .*)?"]}]}
    sdk = RequestPermissionRequest(
        session_id="s", tool_call=ToolCallUpdate(tool_call_id="t", title="echo hi"),
        options=[PermissionOption(option_id="allow_once", name="Yes", kind="allow_once"),
                 PermissionOption(option_id="allow_always", name="Always", kind="allow_always"),
                 PermissionOption(option_id="reject_once", name="No", kind="reject_once")], field_meta=trust)
    assert dumps(acp_shapes.permission_request("s", "t", "echo hi", trust)) == dumps(serialize_params(sdk))
    answer = PromptResponse(stop_reason="cancelled").model_dump(mode="json", by_alias=True, exclude_none=True,
                                                               exclude_unset=True)
    assert acp_shapes.prompt_response("cancelled") == answer


def test_the_strict_check_refuses_a_frame_the_sdk_would_not_have_sent() -> None:
    good = acp_shapes.session_notification("s", acp_shapes.tool_call_update("t", "completed"))
    strict.check_outgoing({"jsonrpc": "2.0", "method": "session/update", "params": good}, None)
    reordered = {"sessionId": "s", "update": {"sessionUpdate": "tool_call_update", "toolCallId": "t",
                                              "status": "completed"}}
    unknown_status = acp_shapes.session_notification("s", acp_shapes.tool_call_update("t", "finished"))
    snake_case = {"sessionId": "s", "update": {"tool_call_id": "t", "status": "completed",
                                               "sessionUpdate": "tool_call_update"}}
    for params in (reordered, unknown_status, snake_case):
        with pytest.raises(strict.StrictViolation):
            strict.check_outgoing({"jsonrpc": "2.0", "method": "session/update", "params": params}, None)
    with pytest.raises(strict.StrictViolation):
        strict.check_outgoing({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "done"}}, "session/prompt")


async def _session(program: list[str], env: dict[str, str], cwd: Path, *prompts: Any) -> tuple[list[Any], str]:
    """initialize, session/new, the prompts (a str is text, a list raw blocks); answers or error codes, stderr."""
    from acp import RequestError

    answers: list[Any] = []
    async with start_fake_kiro(program[0], *program[1:], env=env, cwd=cwd,
                               client=RecordingClient("allow_once")) as k:
        await k.initialize("2025-08-22")
        sid = (await k.new_session(str(cwd)))["sessionId"]
        for prompt in prompts:
            blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else prompt
            try:
                answers.append(await k.request("session/prompt", {"sessionId": sid, "prompt": blocks}))
            except RequestError as exc:
                answers.append((exc.code, exc.data))
        await k.request("session/set_mode", {"sessionId": sid, "modeId": "kiro_default"})
        await k.execute(sid, "tools")
        await k.conn._conn.send_notification("session/cancel", {"sessionId": sid})
        assert k.process.stdin is not None
        k.process.stdin.close()
        assert await k.wait_exit() == 0
        await asyncio.sleep(0.1)  # the last stderr lines
        return answers, "\n".join(k.stderr)


def test_a_whole_session_imports_neither_the_acp_sdk_nor_pydantic(fake_kiro_cli: Any, tmp_path: Path) -> None:
    program = [sys.executable, "-X", "importtime", "-m", "kirocrew_testing.fake_kiro", "acp"]
    answers, stderr = asyncio.run(_session(program, dict(os.environ), tmp_path, "!say hi\n!think t\n!plan a; b\n"
                                           "!write a.txt x\n!read a.txt\n!shell echo hi\n!tool t {}", "/mcp"))
    assert answers == [{"stopReason": "end_turn"}] * 2
    imported = [line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")]
    assert "kirocrew_testing.fake_kiro.turn" in imported  # the report covers the whole session
    assert [name for name in imported if name.split(".")[0] in HEAVY] == []


def test_strict_mode_refuses_what_only_the_sdks_models_reject(fake_kiro_cli: Any, tmp_path: Path) -> None:
    numeric_text = [{"type": "text", "text": 5}]
    program = [str(fake_kiro_cli.path), "acp"]
    lean, _ = asyncio.run(_session(program, fake_kiro_cli.env(), tmp_path, numeric_text))
    checked, stderr = asyncio.run(_session(program, fake_kiro_cli.env(strict="1"), tmp_path, numeric_text,
                                           "!say checked\n!shell echo hi\n!plan a"))
    assert lean == [{"stopReason": "end_turn"}]
    (code, data), after = checked
    assert code == -32602 and [error["loc"] for error in data["errors"]] == [["prompt", 0, "text", "text"]]
    assert "session/prompt params do not validate as the SDK's PromptRequest" in stderr
    assert after == {"stopReason": "end_turn"}  # every frame of that turn passed the SDK's checks
