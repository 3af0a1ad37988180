"""The real ``kirocrew mcp-conversations`` over stdio, driven by the mcp SDK's client, with the fake kiro-cli."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import proc

from kirocrew_conversations import __version__
from kirocrew_conversations.tool_schemas import TOOLS

NONTERMINAL = ("queued", "running", "needs_attention")


def delegate_args(workspace: Path, name: str, message: str) -> dict[str, Any]:
    return {"conversation": "new", "name": name, "workspace": str(workspace), "message": message}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def test_tools_list_names_the_seventeen_tools_with_their_input_and_output_schemas(
        conversations_client: Any, run_async: Any) -> None:
    async def main() -> tuple[Any, Any]:
        async with conversations_client() as client:
            return client.initialize_result, (await client.raw.list_tools()).tools

    initialized, listed = run_async(main())
    assert initialized.server_info.name == "kirocrew-conversations"
    assert initialized.server_info.version == __version__
    assert "kiro_wait" in initialized.instructions and "kiro_delegate" in initialized.instructions
    assert [tool.name for tool in listed] == [tool.name for tool in TOOLS]
    assert len(listed) == 17
    for served, tool in zip(listed, TOOLS, strict=True):
        assert served.description == tool.description
        assert served.input_schema == tool.input_schema
        assert served.output_schema == tool.output_schema


def test_a_delegated_task_returns_its_reply_as_structured_content_and_the_same_json_as_text(
        conversations_client: Any, run_async: Any, workspace: Path) -> None:
    async def main() -> Any:
        async with conversations_client() as client:
            # The SDK client also validates structuredContent against the tool's output schema.
            return await client.call_result("kiro_delegate", delegate_args(workspace, "greet", "!say hello"))

    result = run_async(main())
    assert result.is_error is False
    out = result.structured_content
    assert out["createdConversation"] is True and out["waitExpired"] is False
    assert out["run"]["status"] == "completed"
    assert out["run"]["reply"]["text"] == "hello"
    assert out["run"]["settings"]["authority"] == "unrestricted"
    [text] = [block.text for block in result.content if block.type == "text"]
    assert json.loads(text) == out
    assert "\n" not in text  # compact JSON


def test_an_invalid_argument_is_an_error_result_with_code_invalid_arguments_that_does_not_echo_it(
        conversations_client: Any, run_async: Any) -> None:
    async def main() -> Any:
        async with conversations_client() as client:
            return await client.call_result("kiro_delegate", {
                "conversation": "new", "name": "x", "workspace": "relative/hunter2-secret", "message": "!say hi"})

    result = run_async(main())
    assert result.is_error is True
    # No structured content: the output schema describes successes (see kirocrew_core.tool_results).
    assert result.structured_content is None
    [text] = [block.text for block in result.content]
    assert text.startswith("error[invalid_arguments]: ")
    assert "workspace" in text
    assert "hunter2" not in text
    assert "Traceback" not in text


def test_an_unknown_tool_is_an_error_result_with_code_unknown_tool(conversations_client: Any, run_async: Any) -> None:
    async def main() -> tuple[Any, Any]:
        async with conversations_client() as client:
            result = await client.call_result("kiro_teleport", {})
            return result, await client.raw.list_tools()  # the session is still usable

    result, listed = run_async(main())
    assert result.is_error is True and result.structured_content is None
    assert result.content[0].text.startswith("error[unknown_tool]: ")
    assert len(listed.tools) == 17


def test_a_wait_with_a_progress_token_gets_progress_notifications_with_increasing_numbers(
        conversations_client: Any, run_async: Any, workspace: Path) -> None:
    received: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        received.append((progress, message))

    async def main() -> dict[str, Any]:
        async with conversations_client("--progress-interval-secs", "0.5") as client:
            spawned = await client.call("kiro_spawn", **delegate_args(workspace, "slow", "!sleep 3\n!say done"))
            target = {"conversationId": spawned["conversationId"], "runId": spawned["runId"]}
            result = await client.call_result("kiro_wait", {"targets": [target], "mode": "all"},
                                              progress_callback=on_progress)
            return result.structured_content

    out = run_async(main())
    assert out["waitExpired"] is False and out["runs"][0]["status"] == "completed"
    assert len(received) >= 2
    numbers = [progress for progress, _ in received]
    assert numbers == sorted(set(numbers))  # strictly increasing
    assert all(message and "waiting on" in message for _, message in received)


def test_a_wait_without_a_progress_token_completes_without_progress_notifications(
        conversations_client: Any, run_async: Any, workspace: Path) -> None:
    async def main() -> tuple[dict[str, Any], list[Any]]:
        async with conversations_client("--progress-interval-secs", "0.5") as client:
            spawned = await client.call("kiro_spawn", **delegate_args(workspace, "slow", "!sleep 2\n!say done"))
            target = {"conversationId": spawned["conversationId"], "runId": spawned["runId"]}
            out = await client.call("kiro_wait", targets=[target], mode="any")
            return out, client.progress_notifications()

    out, progress = run_async(main())
    assert out["runs"][0]["status"] == "completed"
    assert progress == []


def test_a_wait_the_client_cancels_only_detaches_and_the_run_completes(
        conversations_client: Any, run_async: Any, workspace: Path) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any], str]:
        async with conversations_client() as client:
            spawned = await client.call("kiro_spawn", **delegate_args(workspace, "keep", "!sleep 3\n!say survived"))
            target = {"conversationId": spawned["conversationId"], "runId": spawned["runId"]}
            # Cancelling the awaiting task makes the SDK send notifications/cancelled for the request.
            waiting = asyncio.ensure_future(client.call("kiro_wait", targets=[target], mode="all"))
            await asyncio.sleep(1.0)
            assert not waiting.done()
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            right_after = await client.call("kiro_result", **target)
            finished = await client.call("kiro_wait", targets=[target], mode="all")
            return right_after, finished, client.stderr()

    right_after, finished, stderr = run_async(main())
    assert right_after["status"] in NONTERMINAL
    assert finished["runs"][0]["status"] == "completed"
    assert finished["runs"][0]["reply"]["text"] == "survived"
    assert "Traceback" not in stderr


def test_a_second_server_on_the_same_state_dir_exits_1_and_the_first_keeps_answering(
        conversations_client: Any, run_async: Any, fake_kiro_env: dict[str, str]) -> None:
    from kirocrew_testing.fixtures import run_kirocrew

    async def main() -> tuple[subprocess.CompletedProcess[str], Any]:
        async with conversations_client() as client:
            second = await asyncio.to_thread(run_kirocrew, "mcp-conversations", "--standalone", env=fake_kiro_env,
                                             timeout=60)
            return second, await client.raw.list_tools()

    second, listed = run_async(main())
    assert second.returncode == 1
    assert "kirocrew: error[state_dir_in_use]: " in second.stderr
    assert "Traceback" not in second.stderr
    assert second.stdout == ""  # it never spoke MCP
    assert len(listed.tools) == 17


# -- ending the server: stdin EOF and SIGTERM, seen by a plain JSON-RPC client --------------------
class RawServer:
    """``kirocrew mcp-conversations`` on pipes, spoken to frame by frame (no SDK in between)."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        exe = Path(sys.executable).with_name("kirocrew")
        argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core.cli"]
        self.stderr_path = cwd / "raw-server.stderr"
        self._stderr = self.stderr_path.open("w")
        self.process = proc.spawn([*argv, "mcp-conversations", "--standalone"], env=env, cwd=cwd, stderr=self._stderr,
                                  text=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin, self.stdout = self.process.stdin, self.process.stdout
        self._next_id = 0

    def send(self, method: str, params: dict[str, Any] | None = None, *, request: bool = True) -> int | None:
        frame: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if request:
            self._next_id += 1
            frame["id"] = self._next_id
        self.stdin.write(json.dumps(frame) + "\n")
        self.stdin.flush()
        return frame.get("id")

    def answer(self, request_id: int | None) -> dict[str, Any]:
        while True:
            line = self.stdout.readline()
            assert line, f"the server closed stdout; stderr:\n{self.stderr_path.read_text()}"
            frame = json.loads(line)
            if frame.get("id") == request_id:
                return frame

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.answer(self.send(method, params))

    def initialize(self) -> None:
        self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "raw-test", "version": "0"}})
        self.send("notifications/initialized", request=False)

    def wait(self, timeout: float = 60) -> int:
        return self.process.wait(timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            proc.terminate(self.process, reason="test over")
        for stream in (self.stdin, self.stdout, self._stderr):
            with contextlib.suppress(OSError):
                stream.close()


@pytest.mark.parametrize("ending", ["stdin_eof", "sigterm"])
def test_stdin_eof_or_sigterm_closes_the_service_exits_0_and_leaves_the_running_run_interrupted(
        ending: str, fake_kiro_env: dict[str, str], conversations_client: Any, run_async: Any,
        workspace: Path, tmp_path: Path) -> None:
    server = RawServer(fake_kiro_env, tmp_path)
    try:
        server.initialize()
        spawned = server.call("tools/call", {"name": "kiro_spawn", "arguments": delegate_args(
            workspace, "endless", "!say started\n!hang")})["result"]["structuredContent"]
        target = {"conversationId": spawned["conversationId"], "runId": spawned["runId"]}
        deadline = time.monotonic() + 30
        while True:  # until kiro really runs it, so the close has a live worker to stop
            run = server.call("tools/call", {"name": "kiro_result", "arguments": target})["result"]
            if run["structuredContent"]["status"] == "running" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert run["structuredContent"]["status"] == "running"
        # A wait in flight when the server is told to stop: it must detach, not wedge the close.
        server.send("tools/call", {"name": "kiro_wait", "arguments": {"targets": [target], "mode": "all"},
                                   "_meta": {"progressToken": "p"}})
        if ending == "stdin_eof":
            server.stdin.close()
        else:
            os.kill(server.process.pid, signal.SIGTERM)
        returncode = server.wait()
    finally:
        server.close()
    stderr = server.stderr_path.read_text()
    assert returncode == 0, stderr
    assert "Traceback" not in stderr

    async def main() -> dict[str, Any]:
        async with conversations_client() as client:  # the state dir was released: a new server starts
            return await client.call("kiro_result", **target)

    after = run_async(main())
    assert after["status"] == "interrupted"


def test_a_server_whose_stdin_is_dev_null_exits_0_at_once_and_releases_the_state_dir(
        fake_kiro_env: dict[str, str], conversations_state_dir: Path) -> None:
    from kirocrew_testing.fixtures import run_kirocrew

    # /dev/null cannot be polled (epoll refuses it); the server must still see EOF, not hang.
    first = run_kirocrew("mcp-conversations", "--standalone", env=fake_kiro_env, timeout=60)
    second = run_kirocrew("mcp-conversations", "--standalone", env=fake_kiro_env, timeout=60)
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert first.stdout == second.stdout == ""
    assert (conversations_state_dir / "orchestrator-v1.sqlite").is_file()


def test_the_cli_twins_reach_the_running_server_over_its_owner_only_control_socket(
        conversations_client: Any, run_async: Any, fake_kiro_env: dict[str, str],
        conversations_state_dir: Path, workspace: Path) -> None:
    from kirocrew_testing.fixtures import run_kirocrew

    socket_path = conversations_state_dir / "control.sock"

    async def main() -> tuple[dict[str, Any], subprocess.CompletedProcess[str], int]:
        async with conversations_client() as client:
            out = await client.call("kiro_delegate", **delegate_args(workspace, "twin", "!say over the socket"))
            mode = socket_path.stat().st_mode & 0o777
            # The server holds the state dir, so the twin can answer only through the server.
            twin = await asyncio.to_thread(run_kirocrew, "conversations", "result", "--json",
                                           out["run"]["conversationId"], out["run"]["runId"],
                                           env=fake_kiro_env, timeout=60)
            return out, twin, mode

    out, twin, mode = run_async(main())
    assert twin.returncode == 0, twin.stderr
    shown = json.loads(twin.stdout)
    assert shown["runId"] == out["run"]["runId"]
    assert shown["reply"]["text"] == "over the socket"
    assert mode == 0o600
    assert not socket_path.exists()  # removed when the server ended
