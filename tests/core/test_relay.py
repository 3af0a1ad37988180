"""The relay (``kirocrew mcp-<server>``) for real: relay processes, a real host, raw pipes and the mcp SDK client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core.host import client, paths, protocol
from kirocrew_testing.distributions import make_plugin_distribution
from kirocrew_testing.fixtures import kirocrew_argv

# Bounds that only stop a hung test; they measure nothing.
ANSWER_TIMEOUT_SECS = 60.0
EXIT_TIMEOUT_SECS = 30.0
INIT_PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


@pytest.fixture
def host_env(echo_host_env: dict[str, str]) -> dict[str, str]:
    """Core plus the echo test server only (a host that starts fast), with a session key for the caller."""
    return {**echo_host_env, "KIROCREW_LOAD_PLUGINS": "echo-host", "KIROCREW_SESSION_KEY": "session-a"}


class Relay:
    """``kirocrew mcp-echo`` (or another command) driven over raw pipes, one JSON line at a time."""

    def __init__(self, env: dict[str, str], stderr: Path, command: str = "mcp-echo") -> None:
        self.stderr_path = stderr
        with stderr.open("ab") as errlog:
            self.proc = subprocess.Popen(kirocrew_argv(command), env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=errlog)
        self.buffer = bytearray()
        self.next_id = 0

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def line(self, timeout: float = ANSWER_TIMEOUT_SECS) -> dict[str, Any] | None:
        """The next line the relay writes, or None at EOF."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, f"no line from the relay within {timeout} s; stderr: {self.stderr()}"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer[:] = rest
        return json.loads(line)

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.next_id

    def answer(self, request_id: Any) -> dict[str, Any]:
        while True:
            line = self.line()
            assert line is not None, f"the relay closed stdout; stderr: {self.stderr()}"
            if line.get("id") == request_id and "method" not in line:
                return line

    def call(self, tool: str, arguments: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
        return self.answer(self.request("tools/call", {"name": tool, "arguments": arguments or {}, **params}))

    def initialize(self) -> dict[str, Any]:
        answer = self.answer(self.request("initialize", INIT_PARAMS))
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def close(self) -> int:
        """Close stdin and return the exit status."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(EXIT_TIMEOUT_SECS)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@pytest.fixture
def relays(tmp_path: Path) -> Iterator[Any]:
    """``relays(env, command="mcp-echo")`` starts a :class:`Relay`; all are killed after the test."""
    started: list[Relay] = []

    def start(env: dict[str, str], command: str = "mcp-echo") -> Relay:
        relay = Relay(env, tmp_path / f"relay-{len(started)}.stderr", command)
        started.append(relay)
        return relay

    yield start
    for relay in started:
        relay.kill()


def structured(answer: dict[str, Any]) -> dict[str, Any]:
    assert "result" in answer, answer
    return answer["result"]["structuredContent"]


def error_data(answer: dict[str, Any]) -> dict[str, Any]:
    assert "error" in answer, answer
    return answer["error"]["data"]


def host_pid() -> int:
    return int(client.ping()["pid"])


# -- the launcher ------------------------------------------------------------------------------------


def test_the_relay_and_the_launcher_import_only_the_standard_library() -> None:
    probe = ("import sys\nbefore = set(sys.modules)\nfrom kirocrew_core import launcher, relay\n"
             "print('\\n'.join(sorted(set(sys.modules) - before)))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded = done.stdout.split()
    assert "kirocrew_core.relay" in loaded
    foreign = [name for name in loaded if name.split(".")[0] not in sys.stdlib_module_names
               and not name.startswith("kirocrew_core")]
    assert foreign == []
    # A relay whose host is up never starts a process, so it does not pay for subprocess either;
    # typing and dataclasses cost milliseconds at every MCP server start.
    assert {"subprocess", "typing", "dataclasses"}.isdisjoint(loaded)
    assert "kirocrew_core.cli" not in loaded


def test_a_server_the_host_does_not_serve_falls_back_to_the_full_cli(isolated_homes, host_env) -> None:
    done = subprocess.run(kirocrew_argv("mcp-nosuch"), env=host_env, capture_output=True, text=True,
                          timeout=ANSWER_TIMEOUT_SECS, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert "No such command 'mcp-nosuch'" in done.stderr


def test_a_server_command_with_options_goes_to_the_cli_not_the_relay(isolated_homes, host_env) -> None:
    done = subprocess.run(kirocrew_argv("mcp-echo", "--help"), env=host_env, capture_output=True, text=True,
                          timeout=ANSWER_TIMEOUT_SECS, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert "No such command 'mcp-echo'" in done.stderr
    assert not paths.run_lock_file().exists()  # nothing tried to reach a host


def test_python_dash_m_kirocrew_core_runs_the_cli(isolated_homes, host_env) -> None:
    version = subprocess.run([sys.executable, "-m", "kirocrew_core", "--version"], env=host_env,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("kirocrew, version")


def test_the_invocation_rendered_for_a_source_checkout_is_the_relay_too(isolated_homes, host_env) -> None:
    from kirocrew_core.contributions import ManagedMcpServer
    from kirocrew_mcp.managed import managed_invocation

    # No console script (executable ""): the agent file names this interpreter with -m kirocrew_core.
    command, args = managed_invocation(ManagedMcpServer("kirocrew-echo", ("mcp-echo",), True), executable="")
    assert (command, args) == (sys.executable, ["-m", "kirocrew_core", "mcp-echo"])
    done = subprocess.run([command, *args], env=host_env, capture_output=True, timeout=ANSWER_TIMEOUT_SECS,
                          input=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                            "params": INIT_PARAMS}).encode() + b"\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["serverInfo"]["name"] == "kirocrew-echo"


# -- through an MCP SDK client -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def sdk_session(env: dict[str, str], errlog: Path) -> AsyncIterator[Any]:
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    argv = kirocrew_argv("mcp-echo")
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    with errlog.open("a") as log:
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(ANSWER_TIMEOUT_SECS):
                await session.initialize()
            yield session


def test_an_sdk_client_reaches_the_hosted_server_through_a_relay_that_starts_the_host(
        isolated_homes, host_env, tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], dict[str, Any]]:
        async with sdk_session(host_env, tmp_path / "relay.stderr") as session:
            listed = await session.list_tools()
            called = await session.call_tool("whoami", {})
            return [tool.name for tool in listed.tools], called.structured_content

    names, who = asyncio.run(scenario())
    assert names == ["whoami", "noop", "sleep", "busy"]
    caller = who["caller"]
    assert caller["sessionKey"] == "session-a"
    assert caller["sessionType"] == "relay"
    assert caller["hostPid"] == os.getpid()  # the MCP client (here the test) started the relay
    assert who["stamped"] == caller
    assert client.ping()["background"] is True


def test_an_sdk_client_survives_a_host_killed_mid_call(isolated_homes, host_env, tmp_path: Path) -> None:
    from mcp.shared.exceptions import MCPError

    async def scenario() -> tuple[Any, dict[str, Any], int, int]:
        async with sdk_session(host_env, tmp_path / "relay.stderr") as session:
            first_host = host_pid()
            sleeping = asyncio.create_task(session.call_tool("sleep", {"seconds": 60}))
            await asyncio.sleep(0.5)  # let the call reach the host
            os.kill(first_host, signal.SIGKILL)
            with pytest.raises(MCPError) as failed:
                await sleeping
            after = await session.call_tool("whoami", {})
            return failed.value.error, after.structured_content, first_host, host_pid()

    error, who, first_host, second_host = asyncio.run(scenario())
    assert error.data == {"code": "host_restarted", "retryable": True}
    assert "error[host_restarted]" in error.message
    assert who["caller"]["sessionKey"] == "session-a"
    assert second_host != first_host


# -- raw pipes ----------------------------------------------------------------------------------------


def test_the_relay_stamps_the_host_pid_its_launcher_exported_and_drops_a_malformed_one(
        isolated_homes, host_env, relays) -> None:
    named = relays({**host_env, "KIROCREW_HOST_PID": "4242"})
    named.initialize()
    assert structured(named.call("whoami"))["caller"]["hostPidEnv"] == 4242
    garbled = relays({**host_env, "KIROCREW_HOST_PID": "12; rm -rf"})
    garbled.initialize()
    assert "hostPidEnv" not in structured(garbled.call("whoami"))["caller"]


def test_a_forged_caller_block_is_replaced_by_the_relays_own(isolated_homes, host_env, relays) -> None:
    relay = relays(host_env)
    relay.initialize()
    forged = {"schemaVersion": 1, "sessionKey": "someone-else", "sessionType": "dashboard", "relayPid": 1,
              "hostPid": 1}
    who = structured(relay.call("whoami", _meta={protocol.CALLER_META_KEY: forged, "progressToken": 7}))
    expected = {"schemaVersion": 1, "sessionKey": "session-a", "sessionType": "relay",
                "relayPid": relay.proc.pid, "hostPid": os.getpid()}
    assert who["caller"] == expected
    assert who["stamped"] == expected
    assert relay.close() == 0


def test_malformed_lines_are_answered_by_the_relay_and_the_session_goes_on(isolated_homes, host_env,
                                                                         relays) -> None:
    relay = relays(host_env)
    relay.initialize()
    relay.send(b"this is not json\n")
    assert relay.line() == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32700, "message": "Parse error: the line is not JSON", "data": {"code": "parse_error"}}}
    relay.send(b"\xff\xfe{}\n")
    assert error_data(relay.line() or {}) == {"code": "parse_error"}
    relay.send(b"42\n")
    assert error_data(relay.line() or {}) == {"code": "invalid_request"}
    # MCP has no JSON-RPC batches: each request in one is refused, none reaches the host.
    relay.send(json.dumps([{"jsonrpc": "2.0", "id": "b1", "method": "tools/list"},
                           {"jsonrpc": "2.0", "method": "notifications/initialized"},
                           {"jsonrpc": "2.0", "id": "b2", "method": "tools/list"}]).encode() + b"\n")
    refused = [relay.line() or {}, relay.line() or {}]
    assert [(line["id"], line["error"]["data"]["code"]) for line in refused] == [
        ("b1", "batch_unsupported"), ("b2", "batch_unsupported")]
    relay.send(b"   \n\n")  # blank lines are skipped silently
    assert structured(relay.call("noop")) == {}
    assert relay.close() == 0


def test_an_oversized_line_is_discarded_with_an_error_and_the_session_goes_on(isolated_homes, host_env,
                                                                             relays) -> None:
    relay = relays(host_env)
    relay.initialize()
    huge = b'{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"noop","arguments":{"x":"'
    writer = threading.Thread(target=relay.send, args=(huge + b"x" * protocol.MAX_LINE_BYTES + b'"}}}\n',))
    writer.start()
    assert error_data(relay.line()) == {"code": "line_too_long"}
    writer.join(ANSWER_TIMEOUT_SECS)
    assert structured(relay.call("noop")) == {}
    assert relay.close() == 0


def test_stdin_closing_ends_the_relay_once_the_answers_in_flight_are_written(isolated_homes, host_env,
                                                                           relays) -> None:
    relay = relays(host_env)
    relay.initialize()
    request_id = relay.request("tools/call", {"name": "sleep", "arguments": {"seconds": 0.3}})
    assert relay.close() == 0
    assert structured(relay.answer(request_id)) == {"slept": 0.3}
    assert relay.line() is None


def test_after_stdin_closes_a_call_that_does_not_end_is_given_up_so_the_relay_exits(isolated_homes, host_env,
                                                                                    relays) -> None:
    relay = relays(host_env)
    relay.initialize()
    relay.request("tools/call", {"name": "sleep", "arguments": {"seconds": 600}})
    assert relay.close() == 0  # after EOF_DRAIN_SECS, not 600 s
    assert "1 request(s) still unanswered" in relay.stderr()


def test_the_host_killed_mid_call_fails_that_call_retryably_and_the_next_call_reaches_a_fresh_host(
        isolated_homes, host_env, relays) -> None:
    relay = relays(host_env)
    relay.initialize()
    assert structured(relay.call("noop")) == {}
    first_host = host_pid()
    sleeping = relay.request("tools/call", {"name": "sleep", "arguments": {"seconds": 60}})
    _wait_until(lambda: any("in flight" in reason for reason in client.ping()["busy"]))
    os.kill(first_host, signal.SIGKILL)
    failed = relay.line()  # only the call in flight is answered: the ones answered before are not
    assert failed is not None and failed["id"] == sleeping
    assert failed["error"]["code"] == protocol.RELAY_ERROR_CODE
    assert failed["error"]["data"] == {"code": "host_restarted", "retryable": True}
    # The next call reconnects, replays the client's initialize (its answer never reaches the client) and works.
    again = relay.request("tools/call", {"name": "noop", "arguments": {}})
    answer = relay.line()  # the replayed initialize's answer never shows: the next line is this call's
    assert answer is not None and answer["id"] == again and structured(answer) == {}
    assert host_pid() != first_host
    assert "lost the kirocrew host" in relay.stderr()
    assert relay.close() == 0


def test_relays_racing_to_start_the_host_share_exactly_one(isolated_homes, host_env, relays) -> None:
    from kirocrew_core import proc

    racing = [relays(host_env) for _ in range(4)]
    for relay in racing:
        relay.initialize()
    pids = {structured(relay.call("whoami"))["caller"]["relayPid"] for relay in racing}
    assert pids == {relay.proc.pid for relay in racing}  # and no caller crossed to another relay
    hosts = [pid for pid, cmd in proc.live_descendants().items() if "serve --background" in cmd]
    assert hosts == [host_pid()]
    for relay in racing:
        assert relay.close() == 0


def test_a_host_of_other_code_retires_once_idle_and_relays_move_to_a_fresh_one(isolated_homes, host_env,
                                                                              relays, tmp_path: Path) -> None:
    # Real code on sys.path that the test then "upgrades": the fingerprint digests kirocrew* packages.
    package = tmp_path / "code" / "kirocrew_upgraded"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VERSION = 1\n")
    env = {**host_env, "PYTHONPATH": os.pathsep.join((str(package.parent), host_env["PYTHONPATH"]))}
    veteran = relays(env)
    veteran.initialize()
    old = client.ping()
    assert structured(veteran.call("busy", {"busy": True})) == {"busy": True}  # holds the host

    (package / "__init__.py").write_text("VERSION = 22\n")  # the upgrade
    newcomer = relays(env)
    newcomer.initialize()
    assert "runs other code and retires once idle" in newcomer.stderr()
    assert client.ping()["retiring"]
    sleeping = veteran.request("tools/call", {"name": "sleep", "arguments": {"seconds": 1}})
    _wait_until(lambda: any("in flight" in reason for reason in client.ping()["busy"]))
    assert structured(newcomer.call("busy", {"busy": False})) == {"busy": False}
    # A request in flight on the retiring host still gets its answer; then the host exits.
    assert structured(veteran.answer(sleeping)) == {"slept": 1}
    assert client.wait_gone(old["pid"], ANSWER_TIMEOUT_SECS)

    # Both relays move to one fresh host of the new code (neither retires it again).
    assert structured(veteran.call("noop")) == {}
    assert structured(newcomer.call("noop")) == {}
    fresh = client.ping()
    assert fresh["pid"] != old["pid"] and fresh["fingerprint"] != old["fingerprint"]
    assert not fresh["retiring"] and fresh["connections"] == 2
    assert veteran.close() == 0 and newcomer.close() == 0


def test_a_long_crew_home_path_works(isolated_homes, host_env, relays, tmp_path: Path, monkeypatch) -> None:
    crew_home = tmp_path / ("a-crew-home-with-a-long-name-" * 4) / "crew"
    monkeypatch.setenv("KIROCREW_HOME", str(crew_home))  # so isolated_homes stops this host too
    assert len(os.fsencode(crew_home / "host" / "host.sock")) > 108
    relay = relays({**host_env, "KIROCREW_HOME": str(crew_home)})
    relay.initialize()
    assert structured(relay.call("noop")) == {}
    assert Path(client.ping()["socket"]).parent != paths.host_dir()
    assert relay.close() == 0


def test_a_host_that_cannot_start_fails_each_request_with_host_unavailable(isolated_homes, host_env,
                                                                         relays) -> None:
    relay = relays({**host_env, "KIROCREW_HOST_IDLE_SECS": "soon"})
    first = relay.answer(relay.request("initialize", INIT_PARAMS))
    assert first["error"]["data"] == {"code": "host_unavailable", "retryable": True}
    assert "KIROCREW_HOST_IDLE_SECS must be a positive number" in first["error"]["message"]
    # It keeps trying on each request instead of giving up.
    again = relay.answer(relay.request("tools/list"))
    assert again["error"]["data"]["code"] == "host_unavailable"
    assert relay.close() == 0


REFUSING_PLUGIN = """
from kirocrew_core import hookimpl
from kirocrew_core.contributions import HostedMcpServer
from kirocrew_core.errors import KirocrewError


def _refuse():
    raise KirocrewError("the refusing service is down for this test", code="refusing_down")


@hookimpl
def host_mcp_servers():
    return [HostedMcpServer("kirocrew-refusing", "mcp-refusing", _refuse)]
"""


def test_a_refused_connection_answers_the_first_request_with_its_code_and_exits_1(isolated_homes, host_env,
                                                                                relays, tmp_path: Path) -> None:
    root = make_plugin_distribution(tmp_path / "refusing-plugin", distribution="kirocrew-refusing",
                                    module="kirocrew_refusing_plugin", source=REFUSING_PLUGIN, entry_point="refusing")
    env = {**host_env, "PYTHONPATH": os.pathsep.join((str(root), host_env["PYTHONPATH"])),
           "KIROCREW_LOAD_PLUGINS": "refusing"}
    relay = relays(env, "mcp-refusing")
    relay.send({"jsonrpc": "2.0", "method": "notifications/initialized"})  # notifications get no answer
    answer = relay.answer(relay.request("initialize", INIT_PARAMS))
    assert answer["error"]["data"] == {"code": "refusing_down", "retryable": False}
    assert "the refusing service is down" in answer["error"]["message"]
    assert relay.proc.wait(EXIT_TIMEOUT_SECS) == 1
    assert "error[refusing_down]" in relay.stderr()


def test_a_client_that_never_reads_cannot_grow_the_relay_without_bound(isolated_homes, host_env, relays) -> None:
    relay = relays(host_env)
    relay.initialize()
    # 2 MB of lines the relay answers itself, each with a 130-byte error: 130 MB if it kept reading.
    writer = threading.Thread(target=_write_quietly, args=(relay, b"x\n" * 1_000_000), daemon=True)
    writer.start()
    writer.join(3)
    assert writer.is_alive(), "the relay took every request although nobody reads its answers"
    rss_kib = _rss_kib(relay.proc.pid)
    assert rss_kib < 120_000, f"the relay holds {rss_kib} KiB"
    # The host still serves everyone else meanwhile.
    other = relays(host_env)
    other.initialize()
    assert structured(other.call("noop")) == {}
    assert other.close() == 0
    relay.kill()


def _wait_until(condition: Any, timeout: float = ANSWER_TIMEOUT_SECS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s"
        time.sleep(0.02)


def _write_quietly(relay: Relay, data: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):
        relay.send(data)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_many_calls_in_flight_on_several_relays_are_each_answered_once_to_their_own_caller(
        isolated_homes, host_env, relays) -> None:
    per_relay = 200
    racing = [relays({**host_env, "KIROCREW_SESSION_KEY": f"session-{n}"}) for n in range(4)]
    for relay in racing:
        relay.initialize()
    batch = b"".join(json.dumps({"jsonrpc": "2.0", "id": f"call-{n}", "method": "tools/call",
                                 "params": {"name": "whoami", "arguments": {}}}).encode() + b"\n"
                     for n in range(per_relay))
    for relay in racing:
        relay.send(batch)
    for n, relay in enumerate(racing):
        seen: list[str] = []
        while len(seen) < per_relay:
            line = relay.line()
            assert line is not None
            seen.append(line["id"])
            assert line["result"]["structuredContent"]["caller"] == {
                "schemaVersion": 1, "sessionKey": f"session-{n}", "sessionType": "relay",
                "relayPid": relay.proc.pid, "hostPid": os.getpid()}
        assert sorted(seen) == sorted(f"call-{i}" for i in range(per_relay))
    for relay in racing:
        assert relay.close() == 0
        assert relay.line() is None  # nothing more: no call answered twice


def test_a_relay_started_on_a_terminal_says_what_it_is_and_ends_with_the_terminal(isolated_homes, host_env,
                                                                                tmp_path: Path) -> None:
    import pty

    controller, terminal = pty.openpty()
    with (tmp_path / "relay.stderr").open("wb") as errlog:
        relay = subprocess.Popen(kirocrew_argv("mcp-echo"), env=host_env, stdin=terminal,
                                 stdout=subprocess.DEVNULL, stderr=errlog)
    os.close(terminal)
    try:
        _wait_until(lambda: b"press Ctrl-D" in (tmp_path / "relay.stderr").read_bytes())
        assert (tmp_path / "relay.stderr").read_text().startswith(
            "kirocrew mcp-echo: speaks MCP on stdin/stdout and is meant to be launched by an MCP client")
    finally:
        os.close(controller)  # the terminal goes away: the relay reads EOF
    assert relay.wait(EXIT_TIMEOUT_SECS) == 0
