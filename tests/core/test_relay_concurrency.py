"""Many relays pipelining calls into one host at once: every answer reaches its own relay, with its own caller.

Real ``kirocrew mcp-echo`` relays and a real host over raw pipes; the timed version with more
relays and calls is ``benchmarks/relay_concurrency.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from kirocrew_core.host import client
from kirocrew_testing.fixtures import kirocrew_argv

RELAYS = 4
CALLS = 100
# A bound that only stops a hung test; it measures nothing.
ANSWERS_TIMEOUT_SECS = 120.0
INIT_PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}


@pytest.fixture
def host_env(echo_host_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A running host serving the echo test server only (it starts fast); stopped after the test."""
    env = {**echo_host_env, "KIROCREW_LOAD_PLUGINS": "echo-host"}
    client.ensure_host(env=env)
    yield env
    with contextlib.suppress(client.HostError):
        client.request_stop()


class PipedRelay:
    """A ``kirocrew mcp-echo`` relay on raw pipes, with its own session key."""

    def __init__(self, env: dict[str, str], session_key: str) -> None:
        self.session_key = session_key
        self.proc = subprocess.Popen(kirocrew_argv("mcp-echo"), env={**env, "KIROCREW_SESSION_KEY": session_key},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.buffer = bytearray()

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def lines(self, count: int, deadline: float) -> list[dict[str, Any]]:
        """The next ``count`` lines the relay writes, parsed; fails at the deadline or at EOF."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        out: list[dict[str, Any]] = []
        while len(out) < count:
            end = self.buffer.find(b"\n")
            if end >= 0:
                out.append(json.loads(self.buffer[:end]))
                del self.buffer[:end + 1]
                continue
            left = deadline - time.monotonic()
            assert left > 0, f"relay {self.session_key} gave {len(out)} of {count} lines in time"
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                assert chunk, f"relay {self.session_key} closed stdout after {len(out)} of {count} lines"
                self.buffer += chunk
        return out

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(30)
        finally:
            self.proc.stdout.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _request(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode() + b"\n"


def test_relays_pipelining_calls_at_once_each_get_every_answer_with_their_own_caller(host_env) -> None:
    relays = [PipedRelay(host_env, f"session-{index}") for index in range(RELAYS)]
    try:
        deadline = time.monotonic() + ANSWERS_TIMEOUT_SECS
        for relay in relays:
            relay.send(_request(0, "initialize", INIT_PARAMS))
            assert "result" in relay.lines(1, deadline)[0]
            relay.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        # Every relay uses the same ids, as independent MCP clients do: only the relay tells them apart.
        calls = b"".join(_request(i, "tools/call", {"name": "whoami", "arguments": {}}) for i in range(1, CALLS + 1))
        for relay in relays:
            relay.send(calls)  # all of every relay's calls are in flight before any answer is read
        for relay in relays:
            answers = relay.lines(CALLS, deadline)
            assert Counter(answer.get("id") for answer in answers) == Counter(range(1, CALLS + 1))
            for answer in answers:
                assert "result" in answer and not answer["result"].get("isError"), answer
                content = answer["result"]["structuredContent"]
                for block in (content["caller"], content["stamped"]):
                    assert block["relayPid"] == relay.proc.pid, answer
                    assert block["sessionKey"] == relay.session_key, answer
        assert [relay.close() for relay in relays] == [0] * RELAYS
    finally:
        for relay in relays:
            relay.kill()
