"""``kirocrew_core.host.tool_client`` and ``host.twin``: the standard-library MCP client the twin commands use.

Against one real host per module (``kirocrew serve --background`` serving the echo test server,
:mod:`kirocrew_testing.servers.hosted_echo`), and, for what a real host never sends (a line too
long, garbage, a close in the middle of a call), against a scripted peer on a socket pair.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.host import client, tool_client, twin
from kirocrew_core.host.client import HostError
from kirocrew_core.host.tool_client import ToolSession
from kirocrew_testing.distributions import make_plugin_distribution
from kirocrew_testing.fixtures import ECHO_HOST_PLUGIN_SOURCE
from kirocrew_testing.homes import isolate_homes, stop_host

ECHO = "kirocrew-echo"
# Bounds that only stop a hung test; they measure nothing.
SUBPROCESS_TIMEOUT_SECS = 60


@pytest.fixture(scope="module")
def echo_env(module_root: Path) -> Iterator[dict[str, str]]:
    """One host serving core and the echo test server, shared by this module's tests; its environment."""
    with pytest.MonkeyPatch.context() as patch:
        homes = isolate_homes(patch, module_root)
        plugin = make_plugin_distribution(module_root / "echo-host-plugin", distribution="kirocrew-echo-host",
                                          module="kirocrew_echo_host_plugin", source=ECHO_HOST_PLUGIN_SOURCE,
                                          entry_point="echo-host")
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(plugin), os.environ.get("PYTHONPATH")) if p))
        patch.setenv("KIROCREW_LOAD_PLUGINS", "echo-host")
        patch.delenv(twin.NO_HOST_ENV, raising=False)
        env = dict(os.environ)
        try:
            client.ensure_host(env)
            yield env
        finally:
            stop_host(homes.crew_home)


@pytest.fixture
def hosted(echo_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """This test's process in the module's homes (undone before the test's own homes are cleaned up)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in echo_env.items():
            if os.environ.get(key) != value:
                patch.setenv(key, value)
        patch.delenv(twin.NO_HOST_ENV, raising=False)
        yield echo_env


# -- against the real host --------------------------------------------------------------------------


def test_a_call_reaches_the_hosted_tool_as_a_cli_caller_of_this_process(hosted: dict[str, str]) -> None:
    whoami = json.loads(tool_client.call_text(ECHO, "whoami", {}))
    assert whoami["caller"] == whoami["stamped"] == {
        "schemaVersion": 1, "sessionKey": "", "sessionType": "cli", "relayPid": os.getpid(), "hostPid": os.getppid()}


def test_one_session_makes_several_calls_and_names_its_host(hosted: dict[str, str]) -> None:
    with tool_client.open_session("mcp-echo") as session:  # a server's command names it too
        results = [session.call("noop", {}) for _ in range(3)]
        assert session.host_pid == client.ping()["pid"] != os.getpid()
    assert [(r.structured, r.is_error, r.text) for r in results] == [({}, False, "{}")] * 3


def test_a_refusal_keeps_its_code_and_bad_input_exits_2(hosted: dict[str, str]) -> None:
    with pytest.raises(BadInputError) as refused:
        tool_client.call_text(ECHO, "no_such_tool", {})
    assert refused.value.code == "unknown_tool" and refused.value.exit_code == 2
    assert refused.value.message == "no such tool"


def test_a_notification_mid_call_is_skipped_a_ping_answered_and_another_request_refused(
        hosted: dict[str, str]) -> None:
    answers = json.loads(tool_client.call_text(ECHO, "noop", {"chat": True}))
    assert answers == {"ping": {"result": {}}, "roots": {"error": tool_client.METHOD_NOT_FOUND}}


def test_a_server_the_host_does_not_serve_is_refused_with_unknown_server(hosted: dict[str, str]) -> None:
    with pytest.raises(HostError) as refused:
        tool_client.call_text("kirocrew-nothing", "noop", {})
    assert refused.value.code == "unknown_server" and ECHO in refused.value.message


def test_twin_call_goes_to_the_host_unless_kirocrew_no_host(hosted: dict[str, str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    async def in_process() -> tuple[str, str | None]:
        ran.append("in process")
        return "the person's answer", None

    assert json.loads(twin.call(ECHO, "whoami", {}, in_process))["caller"]["sessionType"] == "cli"
    assert ran == []
    monkeypatch.setenv(twin.NO_HOST_ENV, "1")
    assert twin.call(ECHO, "whoami", {}, in_process) == "the person's answer"
    assert ran == ["in process"]


@pytest.mark.parametrize("code, kind, exit_code", [("invalid_arguments", BadInputError, 2),
                                                   ("job_not_found", KirocrewError, 1)])
def test_an_in_process_refusal_is_raised_like_the_hosts(code: str, kind: type[KirocrewError], exit_code: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(twin.NO_HOST_ENV, "yes")

    async def refused() -> tuple[str, str | None]:
        return "it is wrong", code

    with pytest.raises(KirocrewError) as raised:
        twin.call("kirocrew-never-reached", "tool", {}, refused)
    assert type(raised.value) is kind and raised.value.code == code and raised.value.exit_code == exit_code
    assert raised.value.message == "it is wrong"


_IMPORTED_AT_EXIT = """
import atexit, sys
atexit.register(lambda: print("imported:", *[m for m in ("mcp", "pydantic", "anyio") if m in sys.modules],
                              file=sys.stderr))
"""
_THROUGH_THE_SDK = """
import asyncio
from kirocrew_core.host import mcp_client, tool_client
tool_client.call_text = lambda *call: asyncio.run(mcp_client.call_tool_text(*call))
"""
_ARTIFACT_LIST = """
from kirocrew_core.cli import main
main(["artifact", "list"])
"""


def test_a_twin_command_calls_the_host_without_importing_the_mcp_sdk(hosted: dict[str, str]) -> None:
    def run(script: str) -> tuple[str, list[str]]:
        done = subprocess.run([sys.executable, "-c", script], env=hosted, capture_output=True, text=True,
                              timeout=SUBPROCESS_TIMEOUT_SECS)
        assert done.returncode == 0, done.stderr
        imported = done.stderr.splitlines()[-1].split()
        assert imported[0] == "imported:"
        return done.stdout, imported[1:]

    light, imported = run(_IMPORTED_AT_EXIT + _ARTIFACT_LIST)
    assert imported == []
    # The same command with the SDK's client in its place (as before) imports all three, and prints the same.
    through_sdk, imported = run(_IMPORTED_AT_EXIT + _THROUGH_THE_SDK + _ARTIFACT_LIST)
    assert imported == ["mcp", "pydantic", "anyio"]
    assert through_sdk == light != ""


def test_the_offered_protocol_is_the_mcp_sdk_clients() -> None:
    from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

    assert tool_client.PROTOCOL_VERSION == LATEST_HANDSHAKE_VERSION
    assert set(HANDSHAKE_PROTOCOL_VERSIONS) == tool_client.KNOWN_PROTOCOL_VERSIONS


# -- against a scripted peer ------------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[tuple[ToolSession, socket.socket]]:
    """A session on one end of a socket pair, and the other end, where a test plays the server."""
    ours, theirs = socket.socketpair()
    session = ToolSession(ours, peer="the peer", max_line_bytes=1024)
    with session, theirs:
        theirs.settimeout(5)
        yield session, theirs


def _say(peer: socket.socket, *messages: dict[str, Any] | bytes) -> None:
    for message in messages:
        peer.sendall(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")


def _heard(peer: socket.socket) -> list[dict[str, Any]]:
    """Every line the session sent so far."""
    peer.setblocking(False)
    data = b""
    try:
        while chunk := peer.recv(65536):
            data += chunk
    except BlockingIOError:
        pass
    return [json.loads(line) for line in data.splitlines()]


def _result(request_id: int, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def test_initialize_offers_the_protocol_then_says_initialized(pair: tuple[ToolSession, socket.socket]) -> None:
    session, peer = pair
    _say(peer, _result(1, {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "x"}}))
    assert session.initialize(timeout=5)["protocolVersion"] == "2025-06-18"
    initialize, initialized = _heard(peer)
    assert initialize["method"] == "initialize" and initialize["id"] == 1
    assert initialize["params"]["protocolVersion"] == tool_client.PROTOCOL_VERSION
    assert initialized == {"jsonrpc": "2.0", "method": "notifications/initialized"}


def test_an_unknown_protocol_version_is_refused(pair: tuple[ToolSession, socket.socket]) -> None:
    session, peer = pair
    _say(peer, _result(1, {"protocolVersion": "1999-01-01", "capabilities": {}}))
    with pytest.raises(HostError) as refused:
        session.initialize(timeout=5)
    assert refused.value.code == "host_refused" and "1999-01-01" in refused.value.message


def test_an_unanswered_initialize_times_out_with_host_timeout(pair: tuple[ToolSession, socket.socket]) -> None:
    session, _peer = pair
    with pytest.raises(HostError) as late:
        session.initialize(timeout=0.2)
    assert late.value.code == "host_timeout" and "initialize" in late.value.message


def test_notifications_requests_and_stray_responses_before_the_answer(
        pair: tuple[ToolSession, socket.socket]) -> None:
    session, peer = pair
    _say(peer,
         {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hi"}},
         {"jsonrpc": "2.0", "id": "s1", "method": "ping"},
         {"jsonrpc": "2.0", "id": "s2", "method": "sampling/createMessage", "params": {}},
         _result(99, {"content": []}),  # answers nothing this session asked
         _result(1, {"content": [{"type": "text", "text": "error[job_not_found]: no job j1"}], "isError": True}))
    result = session.call("cron_show", {"id": "j1"})
    assert result.is_error and result.text == "error[job_not_found]: no job j1"
    refusal = result.refusal()
    assert type(refusal) is KirocrewError and refusal.code == "job_not_found" and refusal.message == "no job j1"
    call, pong, refused = _heard(peer)
    assert call["method"] == "tools/call" and call["params"] == {"name": "cron_show", "arguments": {"id": "j1"}}
    assert pong == {"jsonrpc": "2.0", "id": "s1", "result": {}}
    assert refused == {"jsonrpc": "2.0", "id": "s2", "error": {"code": -32601, "message": "Method not found"}}


def test_a_peer_that_closes_mid_call_is_host_disconnected(pair: tuple[ToolSession, socket.socket]) -> None:
    session, peer = pair
    _say(peer, {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    peer.shutdown(socket.SHUT_WR)
    with pytest.raises(HostError) as closed:
        session.call_text("noop", {})
    assert closed.value.code == "host_disconnected"
    assert "closed the connection before it answered tools/call" in closed.value.message


def test_a_line_longer_than_the_bound_is_refused(pair: tuple[ToolSession, socket.socket]) -> None:
    session, peer = pair
    _say(peer, b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"' + b"x" * 2048 + b'"}]}}\n')
    with pytest.raises(HostError) as refused:
        session.call("noop", {})
    assert refused.value.code == "host_refused" and "longer than 1024 bytes" in refused.value.message


@pytest.mark.parametrize("line", [b"not json at all\n", b"[1, 2]\n", b'{"id": 1, "result": {}}\n'])
def test_a_line_that_is_not_json_rpc_is_a_clear_error(pair: tuple[ToolSession, socket.socket], line: bytes) -> None:
    session, peer = pair
    _say(peer, line)
    with pytest.raises(HostError) as refused:
        session.call("noop", {})
    assert refused.value.code == "host_refused" and "not a JSON-RPC message" in refused.value.message


@pytest.mark.parametrize("error, code", [
    ({"code": -32000, "message": "error[host_stopping]: going", "data": {"code": "host_stopping"}}, "host_stopping"),
    ({"code": -32602, "message": "error[invalid_arguments]: no name"}, "invalid_arguments"),
    ({"code": -32603, "message": "boom"}, "host_refused"),
])
def test_a_json_rpc_error_answer_keeps_its_stable_code(pair: tuple[ToolSession, socket.socket],
                                                       error: dict[str, Any], code: str) -> None:
    session, peer = pair
    _say(peer, {"jsonrpc": "2.0", "id": 1, "error": error})
    with pytest.raises(HostError) as refused:
        session.call("noop", {})
    assert refused.value.code == code
