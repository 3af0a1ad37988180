"""The fake kiro-cli's own streamable-HTTP MCP client, against real servers over loopback.

The SDK fixture server (``kirocrew_testing.servers.http_server``) is the reference for the
ordinary exchange, in both its answer forms (an event stream, plain JSON). Edge cases the SDK
server never produces (paged tool lists, errors at HTTP statuses, a stream that ends without
the answer, a server request inside a stream) come from a scripted server: a real HTTP server
on 127.0.0.1 in a thread, answering each JSON-RPC method as the test says and recording every
request it saw.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Coroutine, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kirocrew_testing.fake_kiro.http_mcp import MAX_EVENT_BYTES, HttpClient, SseClient
from kirocrew_testing.fake_kiro.mcp_session import CONNECTION_CLOSED, PROTOCOL_VERSION, McpError, Tool

INITIALIZE_RESULT = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                     "serverInfo": {"name": "scripted", "version": "1"}}

# What the scripted server answers: (status, content type, body) for a JSON-RPC method; the
# body may be a callable of the request's message. None for the content type sends no body.
Answer = tuple[int, str | None, Any]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def result(message: dict[str, Any], value: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": value}).encode()


def events(*messages: dict[str, Any] | str) -> bytes:
    """An event stream carrying ``messages`` (a str is sent as raw lines)."""
    parts = [m if isinstance(m, str) else f"event: message\ndata: {json.dumps(m)}\n\n" for m in messages]
    return "".join(parts).encode()


class Scripted:
    """A scripted streamable-HTTP MCP server: ``answers[method]`` says what each method gets."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = {"initialize": (200, "application/json", lambda m: result(m, INITIALIZE_RESULT)),
                        "notifications/initialized": (202, None, b""), **answers}
        self.seen: list[dict[str, Any]] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_DELETE(self) -> None:
                scripted.seen.append({"http": "DELETE", "session": self.headers.get("mcp-session-id")})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                key = message.get("method") or f"answer:{message.get('id')}"
                scripted.seen.append({"http": "POST", "rpc": key, "message": message,
                                      "headers": {k.lower(): v for k, v in self.headers.items()}})
                status, content_type, body = scripted.answers.get(key, (202, None, b""))
                data = body(message) if callable(body) else body
                self.send_response(status)
                if key == "initialize":
                    self.send_header("Mcp-Session-Id", "scripted-session")
                if content_type is not None:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def rpc(self) -> list[str]:
        return [s["rpc"] for s in self.seen if s["http"] == "POST"]


@pytest.fixture
def scripted() -> Iterator[Callable[[dict[str, Answer]], Scripted]]:
    started: list[Scripted] = []

    def start(answers: dict[str, Answer]) -> Scripted:
        server = Scripted(answers)
        server.thread.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.server.shutdown()
        server.server.server_close()


async def session(url: str, scenario: Callable[[Any], Coroutine[Any, Any, Any]], *,
                  transport: type[HttpClient] = HttpClient, **kwargs: Any) -> Any:
    client = transport(url, **kwargs)
    await client.start()
    try:
        return await scenario(client)
    finally:
        await client.aclose()


# -- the SDK fixture server ---------------------------------------------------------------


@pytest.mark.parametrize("options", [(), ("--json-response",)], ids=["event-stream", "json"])
def test_the_handshake_lists_and_calls_tools_on_the_sdk_server(start_mcp_http_server: Any,
                                                               options: tuple[str, ...]) -> None:
    url = start_mcp_http_server("--tools", "3", "--label", "web", *options)

    async def scenario(client: HttpClient) -> Any:
        info = await client.initialize()
        tools = await client.list_tools()
        called = await client.call_tool("tool_2", {"text": "hi"})
        return info, client.session_id, client.protocol_version, tools, called

    info, session_id, version, tools, called = run(session(url, scenario))
    assert info["serverInfo"]["name"] == "web"
    assert session_id and version == PROTOCOL_VERSION
    assert [t.name for t in tools] == ["tool_1", "tool_2", "tool_3"]
    assert json.loads(called.content[0].text) == {"server": "web", "tool": "tool_2", "arguments": {"text": "hi"}}
    assert called.is_error is False


def test_a_stateless_server_needs_no_session_id(start_mcp_http_server: Any) -> None:
    url = start_mcp_http_server("--stateless", "--json-response")

    async def scenario(client: HttpClient) -> Any:
        await client.initialize()
        return client.session_id, await client.list_tools()

    session_id, tools = run(session(url, scenario))
    assert session_id is None and [t.name for t in tools] == ["tool_1", "tool_2"]


def test_the_entry_headers_ride_on_every_request_and_a_plain_401_fails_the_handshake(
        start_mcp_http_server: Any) -> None:
    url = start_mcp_http_server("--require-header", "X-Team=crew")
    statuses: list[int] = []

    async def watch(response: Any) -> None:
        statuses.append(response.status_code)

    async def handshake(client: HttpClient) -> list[Tool]:
        await client.initialize()
        return await client.list_tools()

    with pytest.raises(McpError) as refused:
        run(session(url, handshake, on_response=watch))
    assert str(refused.value) == "Server returned an error response" and statuses == [401]
    tools = run(session(url, handshake, headers={"X-Team": "crew"}))
    assert [t.name for t in tools] == ["tool_1", "tool_2"]


# -- scripted edge cases ------------------------------------------------------------------


def test_a_paged_tool_list_is_followed_to_its_last_page(scripted: Any) -> None:
    pages = {None: (["a", "b"], "p2"), "p2": (["c"], "p3"), "p3": (["d"], None)}

    def page(message: dict[str, Any]) -> bytes:
        names, cursor = pages[(message.get("params") or {}).get("cursor")]
        listed: dict[str, Any] = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]}
        if cursor:
            listed["nextCursor"] = cursor
        return events({"jsonrpc": "2.0", "id": message["id"], "result": listed})

    server = scripted({"tools/list": (200, "text/event-stream", page)})

    async def scenario(client: HttpClient) -> list[Tool]:
        await client.initialize()
        return await client.list_tools()

    tools = run(session(server.url, scenario))
    assert [t.name for t in tools] == ["a", "b", "c", "d"]
    cursors = [(s["message"].get("params") or {}).get("cursor") for s in server.seen if s.get("rpc") == "tools/list"]
    assert cursors == [None, "p2", "p3"]


def test_every_request_after_initialize_carries_the_session_and_the_revision(scripted: Any) -> None:
    server = scripted({"tools/list": (200, "application/json", lambda m: result(m, {"tools": []}))})

    async def scenario(client: HttpClient) -> None:
        await client.initialize()
        await client.list_tools()

    run(session(server.url, scenario))
    posts = [s for s in server.seen if s["http"] == "POST"]
    assert [p["rpc"] for p in posts] == ["initialize", "notifications/initialized", "tools/list"]
    assert all(p["headers"]["accept"] == "application/json, text/event-stream" for p in posts)
    assert "mcp-session-id" not in posts[0]["headers"] and "mcp-protocol-version" not in posts[0]["headers"]
    assert {(p["headers"]["mcp-session-id"], p["headers"]["mcp-protocol-version"]) for p in posts[1:]} == {
        ("scripted-session", "2025-06-18")}
    assert server.seen[-1] == {"http": "DELETE", "session": "scripted-session"}  # aclose ends the session


def test_a_server_request_inside_the_stream_is_answered_and_the_result_still_arrives(scripted: Any) -> None:
    def stream(message: dict[str, Any]) -> bytes:
        ping = {"jsonrpc": "2.0", "id": "srv-1", "method": "ping"}
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": []}}
        # the answer's data split over two data lines, joined by a newline as SSE says
        split = json.dumps(answer).replace(', "result"', ',\ndata: "result"', 1)
        return events(ping, note, ": a comment\n\n", f"data: {split}\n\n")

    server = scripted({"tools/list": (200, "text/event-stream; charset=utf-8", stream)})

    async def scenario(client: HttpClient) -> list[Tool]:
        await client.initialize()
        tools = await client.list_tools()
        for _ in range(200):  # the answer to the ping is posted in the background
            if "answer:srv-1" in server.rpc():
                break
            await asyncio.sleep(0.01)
        return tools

    assert run(session(server.url, scenario)) == []
    (answer,) = [s["message"] for s in server.seen if s.get("rpc") == "answer:srv-1"]
    assert answer == {"jsonrpc": "2.0", "id": "srv-1", "result": {}}


@pytest.mark.parametrize(("answer", "code", "message"), [
    ((400, "application/json", lambda m: json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32602, "message": "bad cursor"}}).encode()), -32602, "bad cursor"),
    ((500, "text/plain", b"boom"), -32603, "Server returned an error response"),
    ((404, "text/plain", b"gone"), -32600, "Session terminated"),
    ((202, None, b""), -32600, "server answered a request with 202 Accepted"),
    ((200, "text/plain", b"hello"), -32600, "Unexpected content type: text/plain"),
    ((200, "application/json", b"{not json"), -32700, "Failed to parse JSON response"),
    ((200, "text/event-stream", events({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})),
     CONNECTION_CLOSED, "SSE stream ended without a response"),
    ((307, "text/plain", b""), -32600, "the redirect was not followed"),
], ids=["rpc-error-at-400", "500", "404-session", "202", "content-type", "bad-json", "stream-ends", "redirect"])
def test_a_request_the_server_does_not_answer_fails_with_the_sdks_error(
        scripted: Any, answer: Answer, code: int, message: str) -> None:
    server = scripted({"tools/list": answer})

    async def scenario(client: HttpClient) -> None:
        await client.initialize()
        await client.list_tools()

    with pytest.raises(McpError) as failed:
        run(session(server.url, scenario))
    assert failed.value.code == code and message in str(failed.value)


def test_an_oversized_event_fails_the_request(scripted: Any) -> None:
    big = "x" * (MAX_EVENT_BYTES + 1)
    server = scripted({"tools/list": (200, "text/event-stream", f"data: {big}\n\n".encode())})

    async def scenario(client: HttpClient) -> None:
        await client.initialize()
        await client.list_tools()

    with pytest.raises(McpError, match="SSE event larger than"):
        run(session(server.url, scenario))


def test_a_server_that_is_not_listening_fails_the_handshake_at_once(scripted: Any) -> None:
    server = scripted({})
    server.server.shutdown()
    server.server.server_close()

    async def scenario(client: HttpClient) -> None:
        await client.initialize()

    import httpx2

    with pytest.raises(httpx2.ConnectError):
        run(session(server.url, scenario))


def test_connecting_over_http_with_the_oauth_probe_loads_no_mcp_sdk(mcp_http_server: str) -> None:
    """The point of this client: a fake process talking to an HTTP server never imports the SDK."""
    script = textwrap.dedent('''
        import asyncio, json, sys
        from kirocrew_testing import fake_kiro_oauth
        from kirocrew_testing.fake_kiro.http_mcp import HttpClient

        async def main(url):
            client = HttpClient(url)
            await client.start()
            try:
                auth = await fake_kiro_oauth.prepare_auth(url, on_authorization_url=print, http_client=client.http)
                await client.initialize()
                return auth, [tool.name for tool in await client.list_tools()]
            finally:
                await client.aclose()

        auth, names = asyncio.run(main(sys.argv[1]))
        sdk = sorted(name for name in sys.modules if name.split(".")[0] in ("mcp", "mcp_types"))
        print(json.dumps({"auth": auth is not None, "tools": names, "sdk": sdk}))
    ''')
    done = subprocess.run([sys.executable, "-c", script, mcp_http_server], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == {"auth": False, "tools": ["tool_1", "tool_2"], "sdk": []}


# -- legacy HTTP+SSE ------------------------------------------------------------------------


def test_a_legacy_sse_server_is_spoken_to_through_its_event_stream(start_mcp_http_server: Any) -> None:
    url = start_mcp_http_server("--sse", "--path", "/sse", "--tools", "2", "--label", "old")

    async def scenario(client: SseClient) -> Any:
        await client.initialize()
        tools = await client.list_tools()
        called = await client.call_tool("tool_1", {"text": "hi", "number": 3})
        return tools, called, client.closed.is_set()

    tools, called, closed = run(session(url, scenario, transport=SseClient))
    assert [t.name for t in tools] == ["tool_1", "tool_2"] and closed is False
    assert json.loads(called.content[0].text) == {"server": "old", "tool": "tool_1",
                                                  "arguments": {"text": "hi", "number": 3}}


def answer_get_with(server: Scripted, stream: bytes) -> None:
    """Make ``server`` answer a GET with ``stream`` as an event stream, then end it."""
    def get(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Content-Length", str(len(stream)))
        handler.end_headers()
        handler.wfile.write(stream)

    server.server.RequestHandlerClass.do_GET = get  # type: ignore[attr-defined]


def test_a_legacy_sse_endpoint_on_another_origin_is_refused(scripted: Any) -> None:
    elsewhere, server = scripted({}), scripted({})
    answer_get_with(server, f"event: endpoint\ndata: {elsewhere.url}?session_id=1\n\n".encode())

    async def scenario(client: SseClient) -> None:
        await client.initialize()

    with pytest.raises(ValueError, match="Endpoint origin does not match"):
        run(session(server.url, scenario, transport=SseClient))
    assert elsewhere.seen == [] and server.seen == []


def test_a_legacy_sse_stream_that_ends_closes_the_session(scripted: Any) -> None:
    server = scripted({})
    answer_get_with(server, b"event: endpoint\ndata: /messages?session_id=1\n\n")

    async def scenario(client: SseClient) -> None:
        await client.initialize()

    with pytest.raises(McpError, match="Connection closed"):
        run(session(server.url, scenario, transport=SseClient))
