"""``kirocrew mcp-conversations`` as third-party MCP clients see it (with the fake kiro-cli, so calls are real).

Each test runs against the relay (and the host it starts) and against the standalone server.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.fixtures import kirocrew_argv

from kirocrew_conversations.tool_schemas import TOOLS

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_clients import Runner, StdioServer, assert_refused, call_result, text_of

UNKNOWN_ID = "c_00000000000000000000000000"


@pytest.fixture(params=["relay", "standalone"])
def conversations_server(request: pytest.FixtureRequest, fake_kiro_cli: Any, lean_kirocrew_agent: Path,
                         tmp_path: Path) -> StdioServer:
    """A fresh ``kirocrew mcp-conversations`` on the fake kiro-cli and this test's own state dir.

    ``relay``: the bare command, relaying to the test's own host, which it starts with this
    environment; ``standalone``: the in-process server.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("KIRO_CONVERSATIONS_")}
    env["KIRO_CLI_PATH"] = str(fake_kiro_cli.path)
    env["KIRO_CONVERSATIONS_STATE_DIR"] = str(tmp_path / "conversations-state")
    options = ("--standalone",) if request.param == "standalone" else ()
    return StdioServer(kirocrew_argv("mcp-conversations", *options), env, tmp_path, tmp_path / "server.stderr")


def test_every_tool_is_listed_with_an_input_and_output_schema_the_client_compiles(
        mcp_client: Runner, conversations_server: StdioServer) -> None:
    report = mcp_client(conversations_server, [])
    assert [tool["name"] for tool in report["tools"]] == [tool.name for tool in TOOLS]
    assert all("inputSchema" in tool and "outputSchema" in tool for tool in report["tools"])
    assert report["schemaProblems"] == []


def test_a_successful_delegation_passes_the_clients_output_schema_validation(
        mcp_client: Runner, conversations_server: StdioServer, tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    report = mcp_client(conversations_server, [
        {"name": "kiro_delegate", "arguments": {
            "conversation": "new", "name": "greet", "workspace": str(workspace), "message": "!say hello"}},
        # another agent than kirocrew: the run view and the spawn answer carry a warning the client validates too
        {"name": "kiro_delegate", "arguments": {
            "conversation": "new", "name": "other", "workspace": str(workspace), "message": "!say hi",
            "mode": "kiro_default"}},
        {"name": "kiro_spawn", "arguments": {
            "conversation": "new", "name": "spawned", "workspace": str(workspace), "message": "!say hi",
            "mode": "kiro_default"}},
    ])
    result = call_result(report, 0)
    assert result.get("isError") is not True
    assert result["structuredContent"]["run"]["reply"]["text"] == "hello"
    assert result["structuredContent"]["run"]["warnings"] == []
    assert json.loads(text_of(result)) == result["structuredContent"]
    for index, where in ((1, "run"), (2, None)):
        result = call_result(report, index)
        assert result.get("isError") is not True, text_of(result)
        shown = result["structuredContent"][where] if where else result["structuredContent"]
        assert [w["code"] for w in shown["warnings"]] == ["kirocrew_servers_not_mounted"]


def test_error_results_reach_the_client_with_their_code_and_message_as_text(
        mcp_client: Runner, conversations_server: StdioServer, fake_kiro_cli: Any, tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    # No bubblewrap on this server's PATH, so a read_only run is refused as on a machine without it.
    no_bwrap = replace(conversations_server, env={**conversations_server.env, "PATH": str(fake_kiro_cli.bin_dir)})
    report = mcp_client(no_bwrap, [
        {"name": "kiro_delegate", "arguments": {"conversation": "new", "name": "ro", "workspace": str(workspace),
                                                "message": "!say hi", "authority": "read_only"}},
        {"name": "kiro_result", "arguments": {"conversationId": UNKNOWN_ID, "runId": "r_0000000000000000000000"}},
        {"name": "kiro_delegate", "arguments": {"conversation": "new", "name": "x", "workspace": "relative/path",
                                                "message": "hi"}},
        {"name": "kiro_archive", "arguments": {"conversationId": UNKNOWN_ID}},
        {"name": "kiro_teleport", "arguments": {}},
    ])
    expected = ["authority_unavailable", "run_not_found", "invalid_arguments", "conversation_not_found",
                "unknown_tool"]
    for index, code in enumerate(expected):
        result = call_result(report, index)  # the client did not reject it (-32602 before the fix)
        assert result["isError"] is True
        text = text_of(result)
        assert text.startswith(f"error[{code}]: ") and len(text) > len(f"error[{code}]: ")


def test_a_call_the_policy_asks_about_reaches_the_client_as_needs_attention_with_its_rule(
        mcp_client: Runner, conversations_server: StdioServer, tmp_path: Path) -> None:
    from kirocrew_testing.policy import ASK_EVERYTHING, write_policy

    write_policy(defaults=ASK_EVERYTHING, rules=[
        {"id": "ask-deploys", "decision": "ask", "tool": "shell", "command": "./deploy", "reason": "deploys are mine"}])
    workspace = tmp_path / "project"
    workspace.mkdir()
    run = [0, "structuredContent", "run"]
    report = mcp_client(conversations_server, [
        {"name": "kiro_delegate", "arguments": {"conversation": "new", "name": "deploy", "workspace": str(workspace),
                                                "message": "!shell ./deploy prod\n!say after"}},
        {"name": "kiro_permission_decide", "arguments": {
            "conversationId": {"$ref": [*run, "conversationId"]}, "runId": {"$ref": [*run, "runId"]},
            "permissionRequestId": {"$ref": [*run, "attention", "permissionRequestId"]},
            "decision": "reject_once"}},
        {"name": "kiro_wait", "arguments": {"targets": [{"conversationId": {"$ref": [*run, "conversationId"]},
                                                         "runId": {"$ref": [*run, "runId"]}}], "mode": "all"}},
    ])
    asked = call_result(report, 0)["structuredContent"]["run"]
    assert asked["status"] == "needs_attention"
    attention = asked["attention"]
    assert attention["rule"] == {"id": "ask-deploys", "tier": "owner", "decision": "ask",
                                 "description": "ask shell command ./deploy", "reason": "deploys are mine"}
    assert attention["subject"] == "./deploy prod" and attention["options"] == ["allow_once", "reject_once"]
    assert call_result(report, 1)["structuredContent"]["rulesAdded"] == []
    assert call_result(report, 2)["structuredContent"]["runs"][0]["status"] == "completed"


@pytest.mark.parametrize("client", ["typescript", "python"])
def test_a_crew_sessions_client_reads_its_scope_and_the_owner_decision_refusal_by_their_code(
        client: str, node_sdk_problem: str | None, fake_kiro_cli: Any, tmp_path: Path) -> None:
    """The client runs inside a crew session (a shell its kiro-cli started): it sees none of the person's
    conversations and may not answer the person's permission request, and reads both refusals as codes."""
    import asyncio

    from kirocrew_mcp.render import rebuild_agent_config
    from kirocrew_testing.core_sessions import CrewHarness
    from kirocrew_testing.policy import write_policy

    if client == "typescript" and node_sdk_problem:
        from kirocrew_testing.requirements import unavailable

        unavailable(node_sdk_problem)
    crew = CrewHarness(tmp_path, {**os.environ, "KIRO_CLI_PATH": str(fake_kiro_cli.sandboxable_path)},
                       rebuild_agent_config)
    crew.render_agent()
    write_policy(rules=[{"decision": "ask", "tool": "shell", "command": "touch"}])
    plan, report = tmp_path / "plan.json", tmp_path / "report.json"
    runner = Path(__file__).with_name("in_session_client.py")

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with crew.conversations() as person:
            started = await person.structured("kiro_spawn", conversation="new", name="persons",
                                              workspace=str(crew.workspace), message="!shell touch asked\n!say x")
            ref = {"conversationId": started["conversationId"], "runId": started["runId"]}
            [asked] = (await person.structured("kiro_wait", targets=[ref], mode="all"))["runs"]
            assert asked["status"] == "needs_attention", asked
            plan.write_text(json.dumps({"calls": [
                {"name": "kiro_status", "arguments": {"archive": "all"}},
                {"name": "kiro_permission_decide", "arguments": {
                    **ref, "permissionRequestId": asked["attention"]["permissionRequestId"], "decision": "allow_once"}},
                {"name": "kiro_result", "arguments": ref},
            ]}))
            script = f"!shell {sys.executable} {runner} {client} {plan} {report}\n!say ran"
            session = await crew.delegate(person, script, name="session")
            [still] = (await person.structured("kiro_wait", targets=[ref], mode="all"))["runs"]
            return session, still

    session, still = asyncio.run(asyncio.wait_for(main(), 180))
    assert session["status"] == "completed" and report.exists(), session
    shown = json.loads(report.read_text())
    assert shown["schemaProblems"] == []
    listed = call_result(shown, 0)
    assert listed.get("isError") is not True and listed["structuredContent"]["conversations"] == []
    for index, code in ((1, "owner_decision_required"), (2, "conversation_not_found")):
        assert_refused(shown, index, code)  # the client did not reject it
    assert still["status"] == "needs_attention" and not (crew.workspace / "asked").exists()
