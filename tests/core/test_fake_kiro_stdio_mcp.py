"""The fake kiro-cli's own stdio MCP client, against real servers: the fixture server and scripted ones.

Where the SDK's client is the reference (what goes on the wire, the answers to a server's
requests, the output-schema failures), the same server is driven by both and the results compared.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import processes, proc
from kirocrew_testing.fake_kiro import mcp_session
from kirocrew_testing.fake_kiro.agents_dirs import McpServerSpec
from kirocrew_testing.fake_kiro.mcp_hub import FAILED, RUNNING, McpHub
from kirocrew_testing.fake_kiro.mcp_session import InvalidResult, McpError
from kirocrew_testing.fake_kiro.stdio_mcp import StdioClient
from kirocrew_testing.mcp_fixtures import stdio_server_argv

# One scripted server; its first argument picks the behaviour, its second is a file it may write.
SCRIPTED_SERVER = textwrap.dedent('''
    import json, os, subprocess, sys

    mode, note = sys.argv[1], sys.argv[2]
    lines = iter(sys.stdin)

    def send(message):
        sys.stdout.write(json.dumps(message) + "\\n")
        sys.stdout.flush()

    def answer(request, result):
        send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    TOOLS = [{"name": "probe", "description": "asks the client", "inputSchema": {"type": "object"}},
             {"name": "typed", "inputSchema": {"type": "object"}, "outputSchema": SCHEMA}]
    if mode == "grandchild":
        child = subprocess.Popen(["sleep", "300"])
        with open(note, "w") as out:
            out.write(str(child.pid))
    for line in lines:
        if mode == "record":
            with open(note, "a") as out:
                out.write(line)
        request = json.loads(line)
        method = request.get("method")
        if method == "initialize":
            answer(request, {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                             "serverInfo": {"name": "scripted", "version": "1"}})
        elif method == "tools/list" and mode == "pages":
            cursor = (request.get("params") or {}).get("cursor")
            page = {None: (["one", "two"], "p2"), "p2": (["three"], "p3"), "p3": (["four"], None)}[cursor]
            result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in page[0]]}
            if page[1]:
                result["nextCursor"] = page[1]
            answer(request, result)
        elif method == "tools/list":
            answer(request, {"tools": TOOLS})
        elif method == "tools/call" and mode == "exit":
            sys.exit(3)
        elif method == "tools/call" and request["params"]["name"] == "slow":
            continue  # never answered: the client gives up
        elif method == "tools/call" and mode == "garbage":
            sys.stdout.write("npm notice: not JSON at all\\n\\n[1, 2]\\n" + '{"id": 99}\\n' + "x" * 3_000_000 + "\\n")
            sys.stdout.write('{"jsonrpc": "2.0", "id": 12345, "result": {}}\\n')  # answers nothing we asked
            answer(request, {"content": [{"type": "text", "text": "still here"}]})
        elif method == "tools/call" and mode == "ask":
            message = {"role": "user", "content": {"type": "text", "text": "x"}}
            asks = [("ping", None), ("roots/list", None),
                    ("sampling/createMessage", {"messages": [message], "maxTokens": 5}),
                    ("elicitation/create", {"message": "m", "requestedSchema": {"type": "object", "properties": {}}}),
                    ("no/such", {})]
            for number, (asked, params) in enumerate(asks):
                send({"jsonrpc": "2.0", "id": f"s{number}", "method": asked, **({"params": params} if params else {})})
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}})
            answers = [json.loads(next(lines)) for _ in asks]
            answer(request, {"content": [{"type": "text", "text": json.dumps(answers)}]})
        elif method == "tools/call":
            answer(request, json.loads(request["params"]["arguments"]["reply"]))
''')


@pytest.fixture
def scripted(tmp_path: Path) -> Callable[[str], tuple[list[str], Path]]:
    """``scripted(mode)`` → (argv of the scripted server in that mode, the file it may write)."""
    script = tmp_path / "scripted_server.py"
    script.write_text(SCRIPTED_SERVER)

    def make(mode: str) -> tuple[list[str], Path]:
        note = tmp_path / f"{mode}.note"
        return [sys.executable, str(script), mode, str(note)], note

    return make


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


async def with_client(argv: list[str], body: Callable[[StdioClient], Awaitable[Any]], *,
                      handshake: bool = True) -> Any:
    client = StdioClient(argv[0], argv[1:], env=dict(os.environ), cwd=os.getcwd())
    await client.start()
    try:
        if handshake:
            await client.initialize()
            await client.list_tools()
        return await body(client)
    finally:
        await client.aclose()


async def with_sdk(argv: list[str], body: Callable[[Any], Awaitable[Any]]) -> Any:
    """The same exchange through the mcp SDK's client: the reference."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        return await body(session)


def reply(result: dict[str, Any]) -> dict[str, str]:
    """Arguments that make the scripted server answer ``tools/call`` with ``result``."""
    return {"reply": json.dumps(result)}


def sdk_dump(result: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("resultType")  # the model's default for a later revision, never on a 2025 wire
    return dumped


def test_the_protocol_constants_are_the_sdk_clients() -> None:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

    assert mcp_session.PROTOCOL_VERSION == LATEST_HANDSHAKE_VERSION
    assert frozenset(HANDSHAKE_PROTOCOL_VERSIONS) == mcp_session.HANDSHAKE_PROTOCOL_VERSIONS


def test_the_handshake_and_a_call_go_on_the_wire_as_the_sdk_sends_them(scripted: Any) -> None:
    argv, note = scripted("record")

    async def call(client: Any) -> None:
        await client.call_tool("probe", reply({"content": []}))

    run(with_client(argv, call))
    ours = [json.loads(line) for line in note.read_text().splitlines()]
    note.unlink()
    run(with_sdk(argv, call))
    theirs = [json.loads(line) for line in note.read_text().splitlines()]
    assert ours == theirs
    assert [m.get("method") for m in ours] == ["initialize", "notifications/initialized", "tools/list", "tools/call"]


def test_the_fixture_servers_tools_are_listed_and_called_with_the_sdks_result(tmp_path: Path) -> None:
    argv = stdio_server_argv("--names", "alpha,beta", "--label", "fx")

    async def listed_and_called(client: StdioClient) -> Any:
        return [t.name for t in await client.list_tools()], await client.call_tool("alpha", {"text": "hi"})

    names, result = run(with_client(argv, listed_and_called))
    theirs = run(with_sdk(argv, lambda s: s.call_tool("alpha", {"text": "hi"})))
    assert names == ["alpha", "beta"]
    assert [(b.type, json.loads(b.text or "")["tool"]) for b in result.content] == [("text", "alpha")]
    assert result.is_error is False
    assert result.model_dump(mode="json", by_alias=True, exclude_none=True) == sdk_dump(theirs)


def test_a_result_is_dumped_as_the_sdk_dumps_it(scripted: Any) -> None:
    argv, _ = scripted("plain")
    sent = {"_meta": {"trace": None}, "content": [{"type": "text", "text": "a", "annotations": None},
                                                  {"type": "image", "data": "AAA=", "mimeType": "image/png"},
                                                  {"type": "resource", "resource": {"uri": "file:///x", "text": "t"}}],
            "structuredContent": None, "isError": True}

    async def call(client: Any) -> Any:
        return await client.call_tool("probe", reply(sent))

    ours, theirs = run(with_client(argv, call)), run(with_sdk(argv, call))
    assert ours.is_error is True and [b.text for b in ours.content] == ["a", None, None]
    assert ours.model_dump(mode="json", by_alias=True, exclude_none=True) == sdk_dump(theirs)


def test_a_servers_requests_mid_call_get_the_sdk_clients_default_answers(scripted: Any) -> None:
    argv, _ = scripted("ask")

    async def call(client: Any) -> Any:
        return json.loads((await client.call_tool("probe", {})).content[0].text)

    ours = run(with_client(argv, call))
    assert ours == run(with_sdk(argv, call))
    assert [a.get("result", a.get("error", {}).get("code")) for a in ours] == [{}, -32600, -32600, -32600, -32601]


def test_tools_are_listed_page_after_page(scripted: Any) -> None:
    argv, _ = scripted("pages")

    async def names(client: StdioClient) -> list[str]:
        return [t.name for t in await client.list_tools()]

    assert run(with_client(argv, names)) == ["one", "two", "three", "four"]


def test_a_server_exiting_mid_call_fails_the_call_and_closes_the_connection(scripted: Any) -> None:
    argv, _ = scripted("exit")

    async def call(client: StdioClient) -> tuple[str, bool]:
        with pytest.raises(McpError) as failed:
            await client.call_tool("probe", {})
        await asyncio.wait_for(client.closed.wait(), 30)
        with pytest.raises(McpError):
            await client.call_tool("probe", {})
        return str(failed.value), client.closed.is_set()

    assert run(with_client(argv, call)) == ("Connection closed", True)


def test_garbage_lines_and_a_huge_line_are_skipped(scripted: Any) -> None:
    argv, _ = scripted("garbage")

    async def call(client: StdioClient) -> list[str | None]:
        return [b.text for b in (await client.call_tool("probe", {})).content]

    assert run(with_client(argv, call)) == ["still here"]


def test_structured_content_against_the_output_schema_fails_as_with_the_sdk(scripted: Any) -> None:
    argv, _ = scripted("plain")
    cases = [reply({"content": [], "structuredContent": {"n": "seven"}}),  # violates the schema
             reply({"content": []}),  # no structured content at all
             reply({"content": [], "structuredContent": None})]  # sent, and null

    async def failures(client: Any) -> list[str]:
        messages = []
        for arguments in cases:
            with pytest.raises(RuntimeError) as failed:
                await client.call_tool("typed", arguments)
            messages.append(str(failed.value))
        return messages

    async def passing(client: Any) -> list[Any]:
        return [await client.call_tool("typed", reply({"content": [], "structuredContent": {"n": 7}})),
                await client.call_tool("typed", reply({"content": [], "isError": True}))]  # errors are not checked

    ours = run(with_client(argv, failures))
    assert ours == run(with_sdk(argv, failures))
    assert ours[0].startswith("Invalid structured content returned by tool typed: 'seven' is not of type 'integer'")
    assert ours[1] == "Tool typed has an output schema but did not return structured content"
    good, error = run(with_client(argv, passing))
    assert (good.structured_content, good.is_error, error.is_error) == ({"n": 7}, False, True)


def test_a_malformed_result_fails_the_call_with_what_is_wrong(scripted: Any) -> None:
    argv, _ = scripted("plain")
    cases: dict[str, dict[str, Any]] = {"content": {"content": "text"}, "content[0]": {"content": [{"type": "text"}]},
             "content[1]": {"content": [{"type": "text", "text": "a"}, {"text": "no type"}]},
             "isError": {"content": [], "isError": "yes"}, "unknown type": {"content": [{"type": "video"}]}}

    async def failures(client: StdioClient) -> dict[str, str]:
        found = {}
        for label, sent in cases.items():
            with pytest.raises(InvalidResult) as failed:
                await client.call_tool("probe", reply(sent))
            found[label] = str(failed.value)
        return found

    for label, message in run(with_client(argv, failures)).items():
        assert message.startswith("invalid result of tool probe: ") and label in message, (label, message)


def test_a_call_given_up_tells_the_server_it_is_cancelled(scripted: Any) -> None:
    argv, note = scripted("record")

    async def give_up(client: StdioClient) -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(client.request("tools/call", {"name": "slow", "arguments": {}}), 0.3)
        await client.call_tool("probe", reply({"content": []}))  # the server read the cancel before this

    run(with_client(argv, give_up))
    sent = [json.loads(line) for line in note.read_text().splitlines()]
    cancels = [m for m in sent if m.get("method") == "notifications/cancelled"]
    slow = next(m for m in sent if m.get("params", {}).get("name") == "slow")
    assert cancels == [{"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": slow["id"], "reason": "caller cancelled"}}]


def test_a_server_that_never_answers_initialize_is_given_up_and_stopped(monkeypatch: Any) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 0.5)  # it ignores EOF: the group gets SIGTERM next
    argv = stdio_server_argv("--hang", "--ignore-eof")

    async def hang() -> int | None:
        client = StdioClient(argv[0], argv[1:], env=dict(os.environ), cwd=os.getcwd())
        await client.start()
        pid = client.pid
        try:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(client.initialize(), 0.5)
        finally:
            await client.aclose()
        return pid

    pid = run(hang())
    assert pid is not None and processes.alive(pid) is False


def test_closing_stops_a_grandchild_the_server_started(scripted: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 0.5)
    argv, note = scripted("grandchild")

    async def started(client: StdioClient) -> int:
        return int(note.read_text())

    grandchild = run(with_client(argv, started))
    assert processes.alive(grandchild) is False


def test_a_hub_marks_a_running_stdio_server_that_exits_failed(scripted: Any, tmp_path: Path) -> None:
    argv, _ = scripted("exit")

    async def scenario() -> tuple[str, str, str, str]:
        sent: list[tuple[str, dict[str, Any]]] = []

        async def notify(method: str, params: dict[str, Any]) -> None:
            sent.append((method, params))

        hub = McpHub("s1", {"x": McpServerSpec("x", command=argv[0], args=tuple(argv[1:]))}, cwd=tmp_path,
                     notify=notify, init_timeout=30)
        hub.start()
        try:
            await hub.wait_settled(30)
            running = hub.conns["x"].status
            with pytest.raises(McpError) as failed:
                await hub.call_tool("x", "probe", {})
            task = hub.conns["x"].task
            assert task is not None
            await asyncio.wait_for(asyncio.shield(task), 30)
            return running, str(failed.value), hub.conns["x"].status, hub.conns["x"].error
        finally:
            await hub.close()

    assert run(scenario()) == (RUNNING, "Connection closed", FAILED, "connection closed")


def test_a_hub_fails_a_hung_stdio_server_at_its_deadline(tmp_path: Path) -> None:
    argv = stdio_server_argv("--hang")

    async def scenario() -> tuple[bool, str, list[str]]:
        sent: list[str] = []

        async def notify(method: str, params: dict[str, Any]) -> None:
            sent.append(method)

        hub = McpHub("s1", {"h": McpServerSpec("h", command=argv[0], args=tuple(argv[1:]), timeout_ms=500)},
                     cwd=tmp_path, notify=notify, init_timeout=30)
        hub.start()
        try:
            settled = await hub.wait_settled(30)
            return settled, hub.conns["h"].error, sent
        finally:
            await hub.close()

    settled, error, sent = run(scenario())
    assert settled and error == "timed out while initializing"
    assert sent == ["kiro.dev/mcp/server_init_failure"]
