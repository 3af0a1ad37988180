"""Start a real host (``kirocrew serve``) and talk to its socket with raw lines (tests of the host and relays)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kirocrew_testing.fixtures import kirocrew_argv

# Bounds that only stop a hung test; they never measure anything.
START_TIMEOUT_SECS = 60.0
STOP_TIMEOUT_SECS = 30.0


def socket_path(env: dict[str, str]) -> Path:
    """The host socket for the crew home ``env`` names (computed like the host does)."""
    from unittest import mock

    from kirocrew_core.host import paths

    with mock.patch.dict(os.environ, {"KIROCREW_HOME": env["KIROCREW_HOME"]}):
        return paths.socket_path()


def send_hello(path: Path, **hello: Any) -> socket.socket:
    """A connection to the host at ``path`` whose hello has been sent."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(30)
        sock.connect(str(path))
        sock.sendall(json.dumps({"kirocrew": "hello", "version": 1, **hello}).encode() + b"\n")
    except BaseException:
        sock.close()  # a host not up yet refuses the connect: polling it must not leak a socket per try
        raise
    return sock


def read_line(sock: socket.socket, buffer: bytearray | None = None) -> dict[str, Any] | None:
    """The next JSON line from ``sock``, or ``None`` at EOF (``buffer`` keeps bytes read past it)."""
    buf = buffer if buffer is not None else bytearray()
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf.extend(chunk)
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return json.loads(line)


def ask(path: Path, **hello: Any) -> dict[str, Any] | None:
    """Send one hello and return the host's one answer."""
    with contextlib.closing(send_hello(path, **hello)) as sock:
        return read_line(sock)


def ping(path: Path) -> dict[str, Any] | None:
    try:
        return ask(path, kind="ping")
    except OSError:
        return None


def caller_block(pid: int | None = None, key: str = "") -> dict[str, Any]:
    return {"schemaVersion": 1, "sessionKey": key, "sessionType": "relay",
            "relayPid": pid if pid is not None else os.getpid(), "hostPid": os.getppid()}


class McpLine:
    """A raw MCP session on a host connection (hello sent and welcomed)."""

    def __init__(self, path: Path, server: str = "kirocrew-echo", **hello: Any) -> None:
        hello.setdefault("caller", caller_block())
        self.sock = send_hello(path, kind="mcp", server=server, **hello)
        self.buffer = bytearray()
        self.welcome = read_line(self.sock, self.buffer)
        self.next_id = 0

    def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.sock.sendall(data)

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.response(self.next_id)

    def response(self, request_id: Any) -> dict[str, Any]:
        while True:
            line = read_line(self.sock, self.buffer)
            assert line is not None, "the host closed the connection"
            if line.get("id") == request_id and "method" not in line:
                return line

    def initialize(self) -> dict[str, Any]:
        answer = self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                             "clientInfo": {"name": "raw", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer

    def call(self, tool: str, arguments: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
        return self.request("tools/call", {"name": tool, "arguments": arguments or {}, **params})

    def close(self) -> None:
        self.sock.close()


@contextlib.contextmanager
def running_host(env: dict[str, str], *args: str, log: Path | None = None) -> Iterator[subprocess.Popen[str]]:
    """``kirocrew serve --port 0 *args`` under ``env``, answering pings; stopped (TERM, then KILL) after."""
    path = socket_path(env)
    stderr = log.open("a") if log is not None else subprocess.DEVNULL
    process = subprocess.Popen(kirocrew_argv("serve", "--port", "0", *args), env=env, text=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr)
    try:
        wait_for(lambda: ping(path) is not None or process.poll() is not None, START_TIMEOUT_SECS)
        assert process.poll() is None, f"the host exited {process.returncode}"
        yield process
    finally:
        stop_process(process)
        if log is not None and not isinstance(stderr, int):
            stderr.close()


def stop_process(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def wait_for(condition: Any, timeout: float, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s")
        time.sleep(interval)
