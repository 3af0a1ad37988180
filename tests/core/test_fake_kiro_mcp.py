"""The fake kiro-cli's MCP side: real servers (the fixture servers), ``/mcp``, ``/tools``, OAuth."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from kirocrew_core import grants, home
from kirocrew_testing.fake_kiro.harness import FakeKiroProcess, RecordingClient, start_fake_kiro
from kirocrew_testing.mcp_fixtures import stdio_server_argv

INITIALIZED = "kiro.dev/mcp/server_initialized"
FAILED = "kiro.dev/mcp/server_init_failure"
OAUTH_REQUEST = "kiro.dev/mcp/oauth_request"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def stdio_entry(*options: str, **extra: Any) -> dict[str, Any]:
    command, *args = stdio_server_argv(*options)
    return {"command": command, "args": args, **extra}


def write_agent(name: str, document: dict[str, Any]) -> None:
    agents = home.kiro_agents_dir()
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.json").write_text(json.dumps(document))


def acp(fake_kiro_cli: Any, *args: str, env: dict[str, str] | None = None,
        client: RecordingClient | None = None) -> Any:
    return start_fake_kiro(fake_kiro_cli.path, "acp", *args, env=env or dict(os.environ), client=client)


async def started(k: FakeKiroProcess, cwd: Path, mcp_servers: list[dict[str, Any]] | None = None) -> str:
    await k.initialize()
    return (await k.new_session(str(cwd), mcp_servers or []))["sessionId"]


async def settled(k: FakeKiroProcess, *names: str) -> None:
    """Wait until each named server has reported initialized or failed."""
    def done() -> bool:
        seen = {p["serverName"] for m in (INITIALIZED, FAILED) for p in k.client.notified(m)}
        return set(names) <= seen

    await k.client.wait_for(done, timeout=30)


def rows_by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in result["data"]["servers"]}


def mcp_tool_names(result: dict[str, Any], server: str) -> list[str]:
    return [row["name"] for row in result["data"]["tools"] if row["source"] == f"mcp:{server}"]


# -- connecting ---------------------------------------------------------------------


def test_the_agents_servers_connect_and_show_in_mcp_and_tools(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {"fx": stdio_entry("--names", "alpha,beta")}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            await settled(k, "fx")
            available = await k.client.wait_for(lambda: [
                p for p in k.client.notified("kiro.dev/commands/available") if p["mcpServers"][0]["toolCount"]])
            return (sid, k.client.notified(INITIALIZED), await k.execute(sid, "mcp"),
                    await k.execute(sid, "tools"), available[-1])

    sid, initialized, mcp, tools, available = run(scenario())
    assert initialized == [{"sessionId": sid, "serverName": "fx"}]
    assert mcp["success"] is True
    assert mcp["data"]["servers"] == [{"name": "fx", "status": "running", "toolCount": 2}]
    assert mcp_tool_names(tools, "fx") == ["alpha", "beta"]
    assert available["mcpServers"] == [{"name": "fx", "status": "running", "toolCount": 2}]


def test_disabled_servers_and_disabled_tools_are_honoured(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {
        "fx": stdio_entry("--names", "alpha,beta,gamma", disabledTools=["gamma"]),
        "off": stdio_entry("--tools", "1", disabled=True)}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            await settled(k, "fx")
            return await k.execute(sid, "mcp"), await k.execute(sid, "tools"), k.client.notifications

    mcp, tools, notifications = run(scenario())
    assert rows_by_name(mcp) == {"fx": {"name": "fx", "status": "running", "toolCount": 2},
                                 "off": {"name": "off", "status": "disabled", "toolCount": 0}}
    assert mcp_tool_names(tools, "fx") == ["alpha", "beta"]
    assert "off" not in {p.get("serverName") for _, p in notifications}


def test_the_tools_field_decides_what_tools_lists_but_not_what_connects(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("narrow", {"tools": ["read", "@fx/alpha"], "mcpServers": {
        "fx": stdio_entry("--names", "alpha,beta"), "other": stdio_entry("--names", "zeta")}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "narrow") as k:
            sid = await started(k, tmp_path)
            await settled(k, "fx", "other")
            return await k.execute(sid, "mcp"), await k.execute(sid, "tools")

    mcp, tools = run(scenario())
    assert {name: row["toolCount"] for name, row in rows_by_name(mcp).items()} == {"fx": 2, "other": 1}
    assert [(row["name"], row["source"]) for row in tools["data"]["tools"]] == [("read", "built-in"),
                                                                                ("alpha", "mcp:fx")]


def test_a_hanging_server_and_one_dying_in_the_handshake_fail_without_holding_up_the_rest(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {
        "hang": stdio_entry("--hang", timeout=1500), "dies": stdio_entry("--exit-during-handshake"),
        "fine": stdio_entry("--tools", "1"), "nowhere": {"command": str(tmp_path / "no-such-server")}}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            await settled(k, "hang", "dies", "fine", "nowhere")
            response = await k.prompt(sid, "hello")
            return k.client, await k.execute(sid, "mcp"), response

    client, mcp, response = run(scenario())
    assert {p["serverName"] for p in client.notified(FAILED)} == {"hang", "dies", "nowhere"}
    assert {p["serverName"] for p in client.notified(INITIALIZED)} == {"fine"}
    assert {name: row["status"] for name, row in rows_by_name(mcp).items()} == {
        "hang": "failed", "dies": "failed", "fine": "running", "nowhere": "failed"}
    assert response.stop_reason == "end_turn"


def test_the_init_timeout_switch_bounds_every_server_without_its_own_timeout(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {"hang": stdio_entry("--hang")}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew", env=fake_kiro_cli.env(mcp_init_timeout="1")) as k:
            sid = await started(k, tmp_path)
            await settled(k, "hang")
            return k.client.notified(FAILED), sid

    failures, sid = run(scenario())
    assert failures == [{"sessionId": sid, "serverName": "hang"}]


def test_session_mcp_servers_override_the_specs_entry_of_the_same_name(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {"fx": stdio_entry("--names", "from_spec")}})
    command, *args = stdio_server_argv("--names", "from_session")

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path, [{"name": "fx", "command": command, "args": args, "env": []}])
            await settled(k, "fx")
            return await k.execute(sid, "tools")

    assert mcp_tool_names(run(scenario()), "fx") == ["from_session"]


def test_include_mcp_json_brings_in_the_global_mcp_file(fake_kiro_cli: Any, tmp_path: Path) -> None:
    settings = home.kiro_global_mcp_file()
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"mcpServers": {"globalfx": stdio_entry("--tools", "3")}}))
    write_agent("sealed", {"tools": ["*"], "includeMcpJson": False})

    async def servers(*args: str) -> Any:
        async with acp(fake_kiro_cli, *args) as k:
            sid = await started(k, tmp_path)
            return (await k.execute(sid, "mcp"))["data"]["servers"]

    assert run(servers()) == [{"name": "globalfx", "status": "running", "toolCount": 3}]  # kiro_default
    assert run(servers("--agent", "sealed")) == []


# -- calling tools --------------------------------------------------------------------


def test_the_mcp_directive_calls_the_tool_and_allowed_tools_skip_the_prompt(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "allowedTools": ["@fx/alpha"],
                         "mcpServers": {"fx": stdio_entry("--names", "alpha,beta", "--label", "fx")}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            response = await k.prompt(sid, '!mcp fx alpha {"text": "hi"}\n!mcp fx beta {"text": "yo"}')
            return response, k.client

    response, client = run(scenario())
    assert response.stop_reason == "end_turn"
    assert [r["tool_call"].title for r in client.permission_requests] == ["Running beta from fx"]
    outputs = [u.raw_output for u in client.of_kind("tool_call_update") if u.status == "completed"]
    answers = [json.loads(o["content"][0]["text"]) for o in outputs]
    assert [(a["tool"], a["arguments"]["text"]) for a in answers] == [("alpha", "hi"), ("beta", "yo")]
    starts = client.of_kind("tool_call")
    assert starts[0].field_meta == {"kiro": {"toolName": "alpha", "mcpServerName": "fx"}}


def test_calling_a_disabled_tool_fails_the_tool_call_not_the_turn(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {"fx": stdio_entry("--names", "alpha",
                                                                          disabledTools=["alpha"])}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew", "--trust-all-tools") as k:
            sid = await started(k, tmp_path)
            return await k.prompt(sid, "!mcp fx alpha"), k.client.of_kind("tool_call_update")

    response, updates = run(scenario())
    assert response.stop_reason == "end_turn"
    assert updates[-1].status == "failed" and "not available" in updates[-1].raw_output["error"]


def test_the_result_directive_says_what_the_last_mcp_call_returned(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {"fx": stdio_entry("--names", "alpha,beta",
                                                                          disabledTools=["beta"])}})

    async def scenario() -> str:
        async with acp(fake_kiro_cli, "--agent", "crew", "--trust-all-tools") as k:
            sid = await started(k, tmp_path)
            await k.prompt(sid, '!result\n!mcp fx alpha {"text": "hi"}\n!result\n!mcp fx beta\n!result')
            return "".join(k.client.texts("agent_message_chunk", sid))

    first, called, failed = run(scenario()).splitlines()
    assert first == "result: none"
    answer = json.loads(called.removeprefix("result: "))
    assert (answer["tool"], answer["arguments"]) == ("alpha", {"text": "hi"})
    assert failed.startswith("result: ") and "not available" in failed


def test_env_references_in_a_servers_env_are_expanded(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {"fx": stdio_entry(
        "--names", "show", "--expose-env", "PLAIN,BRACED,PREFIXED,UNSET",
        env={"PLAIN": "literal", "BRACED": "${FAKE_SECRET}", "PREFIXED": "x-${env:FAKE_SECRET}",
             "UNSET": "${FAKE_NOT_SET}"})}})

    async def scenario() -> Any:
        env = {**os.environ, "FAKE_SECRET": "s3cret"}
        env.pop("FAKE_NOT_SET", None)
        async with acp(fake_kiro_cli, "--agent", "crew", "--trust-all-tools", env=env) as k:
            sid = await started(k, tmp_path)
            await k.prompt(sid, "!mcp fx show")
            return k.client.of_kind("tool_call_update")[-1].raw_output

    answer = json.loads(run(scenario())["content"][0]["text"])
    assert answer["env"] == {"PLAIN": "literal", "BRACED": "s3cret", "PREFIXED": "x-s3cret",
                             "UNSET": "${FAKE_NOT_SET}"}


def test_header_references_are_expanded_for_an_http_server(
        fake_kiro_cli: Any, tmp_path: Path, start_mcp_http_server: Any) -> None:
    url = start_mcp_http_server("--require-header", "X-Api-Key=k3y", "--names", "remote_tool")
    write_agent("crew", {"tools": ["*"], "mcpServers": {
        "good": {"url": url, "headers": {"X-Api-Key": "${env:FAKE_API_KEY}"}},
        "bad": {"url": url, "headers": {"X-Api-Key": "wrong"}}}})

    async def scenario() -> Any:
        env = {**os.environ, "FAKE_API_KEY": "k3y"}
        async with acp(fake_kiro_cli, "--agent", "crew", env=env) as k:
            sid = await started(k, tmp_path)
            await settled(k, "good", "bad")
            return await k.execute(sid, "mcp"), await k.execute(sid, "tools")

    mcp, tools = run(scenario())
    assert {name: row["status"] for name, row in rows_by_name(mcp).items()} == {"good": "running", "bad": "failed"}
    assert mcp_tool_names(tools, "good") == ["remote_tool"]


def test_streamable_http_and_legacy_sse_servers_are_listed_and_called(
        fake_kiro_cli: Any, tmp_path: Path, start_mcp_http_server: Any) -> None:
    http = start_mcp_http_server("--names", "alpha", "--label", "web")
    sse = start_mcp_http_server("--sse", "--path", "/sse", "--names", "beta", "--label", "old")
    write_agent("crew", {"tools": ["*"], "mcpServers": {"web": {"url": http},
                                                         "old": {"type": "sse", "url": sse}}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew", "--trust-all-tools") as k:
            sid = await started(k, tmp_path)
            await settled(k, "web", "old")
            tools = await k.execute(sid, "tools")
            await k.prompt(sid, '!mcp web alpha {"text": "hi"}\n!mcp old beta {"text": "yo"}')
            return tools, k.client

    tools, client = run(scenario())
    assert (mcp_tool_names(tools, "web"), mcp_tool_names(tools, "old")) == (["alpha"], ["beta"])
    outputs = [u.raw_output for u in client.of_kind("tool_call_update") if u.status == "completed"]
    answers = [json.loads(o["content"][0]["text"]) for o in outputs]
    assert [(a["server"], a["tool"], a["arguments"]["text"]) for a in answers] == [
        ("web", "alpha", "hi"), ("old", "beta", "yo")]


def test_slash_mcp_and_tools_as_prompt_text_answer_with_the_command_result(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["@fx"], "mcpServers": {"fx": stdio_entry("--names", "alpha")}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            await k.prompt(sid, "/mcp")
            await k.prompt(sid, "/tools")
            return [u for _, u in k.client.updates if u.session_update == "agent_message_chunk"]

    mcp_chunk, tools_chunk = run(scenario())
    assert mcp_chunk.content.text == "fx: running (1 tools)"
    # the chunk's own _meta is dropped by the typed layer; the frames carry it (see the raw test below)
    assert tools_chunk.content.text == "alpha [mcp:fx]"


def test_a_slash_command_chunk_carries_the_structured_result_in_meta(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            await k.prompt(sid, "/mcp")
            return [m["params"] for m in k.sent("session/update")
                    if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]

    (params,) = run(scenario())
    assert params["_meta"]["kiro.dev"]["commandResult"] == {
        "success": True, "message": "No MCP servers configured.", "data": {"servers": []}}


# -- OAuth ------------------------------------------------------------------------------


def test_an_oauth_server_is_consented_once_and_the_stored_grant_serves_the_next_session(
        fake_kiro_cli: Any, tmp_path: Path, oauth_mcp_server: Any) -> None:
    url = oauth_mcp_server.mcp_url
    write_agent("crew", {"tools": ["*"], "mcpServers": {"linear": {"url": url}}})
    token_path, registration_path = grants.artifact_paths(url)

    async def first_session() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            (request,) = await k.client.wait_for(lambda: k.client.notified(OAUTH_REQUEST))
            assert not token_path.exists()
            landed = await oauth_mcp_server.aconsent(request["oauthUrl"])
            await settled(k, "linear")
            return sid, request, landed.status_code, await k.execute(sid, "tools"), k.client

    sid, request, landed, tools, client = run(first_session())
    assert request == {"sessionId": sid, "serverName": "linear", "oauthUrl": request["oauthUrl"]}
    assert request["oauthUrl"].startswith(oauth_mcp_server.issuer.rstrip("/"))
    assert landed == 200
    assert [p["serverName"] for p in client.notified(INITIALIZED)] == ["linear"]
    assert mcp_tool_names(tools, "linear") == ["tool_1", "tool_2"]
    assert (token_path.stat().st_mode & 0o777, registration_path.stat().st_mode & 0o777) == (0o600, 0o600)

    async def second_session() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            await settled(k, "linear")
            return await k.execute(sid, "tools"), k.client

    tools, client = run(second_session())
    assert client.notified(OAUTH_REQUEST) == []
    assert mcp_tool_names(tools, "linear") == ["tool_1", "tool_2"]


def test_a_stored_grant_the_server_no_longer_honours_is_deleted_and_consented_afresh(
        fake_kiro_cli: Any, tmp_path: Path, oauth_mcp_server: Any) -> None:
    url = oauth_mcp_server.mcp_url
    write_agent("crew", {"tools": ["*"], "mcpServers": {"linear": {"url": url}}})
    token, registration = grants.artifact_paths(url)

    async def session() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            (request,) = await k.client.wait_for(lambda: k.client.notified(OAUTH_REQUEST))
            await oauth_mcp_server.aconsent(request["oauthUrl"])
            await settled(k, "linear")
            return await k.execute(sid, "mcp"), k.client

    run(session())
    first = json.loads(registration.read_text())["client_id"]
    oauth_mcp_server.revoke_all()  # revokes the access and the refresh token
    mcp, client = run(session())  # kiro-cli deletes the refused token and asks again, as on a first use
    assert rows_by_name(mcp)["linear"]["status"] == "running"
    assert client.notified(FAILED) == []
    assert json.loads(registration.read_text())["client_id"] != first  # registered afresh
    assert token.exists()


def test_with_no_reauth_a_stored_grant_the_server_no_longer_honours_is_an_init_failure(
        fake_kiro_cli: Any, tmp_path: Path, oauth_mcp_server: Any) -> None:
    url = oauth_mcp_server.mcp_url
    write_agent("crew", {"tools": ["*"], "mcpServers": {"linear": {"url": url}}})
    env = dict(os.environ, KIRO_FAKE_OAUTH_NO_REAUTH="1")

    async def session(consent: bool) -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew", env=env) as k:
            sid = await started(k, tmp_path)
            if consent:
                (request,) = await k.client.wait_for(lambda: k.client.notified(OAUTH_REQUEST))
                await oauth_mcp_server.aconsent(request["oauthUrl"])
            await settled(k, "linear")
            return await k.execute(sid, "mcp"), k.client

    run(session(consent=True))
    oauth_mcp_server.revoke_all()  # revokes the access and the refresh token
    mcp, client = run(session(consent=False))
    assert rows_by_name(mcp)["linear"]["status"] == "failed"
    assert [p["serverName"] for p in client.notified(FAILED)] == ["linear"]
    assert client.notified(OAUTH_REQUEST) == []
    assert all(path.exists() for path in grants.artifact_paths(url))


def test_tool_aliases_rename_an_mcp_tool_in_tools(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent("crew", {"tools": ["*"], "mcpServers": {"fx": stdio_entry("--names", "alpha,beta")},
                         "toolAliases": {"@fx/alpha": "fx_alpha", "@other/beta": "nope"}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "crew") as k:
            sid = await started(k, tmp_path)
            await settled(k, "fx")
            return await k.execute(sid, "tools")

    assert mcp_tool_names(run(scenario()), "fx") == ["fx_alpha", "beta"]
