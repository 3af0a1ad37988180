#!/usr/bin/env python3
"""The relay (``kirocrew mcp-<server>``) against a real host, side by side in one run.

    .venv/bin/python benchmarks/relay.py [--runs 30] [--calls 2000] [--relays 8] [--concurrent 500]

Uses the test server ``kirocrew-echo`` (``kirocrew mcp-echo``, from kirocrew-testing) in a
throwaway crew home. Prints:

* spawn → ``tools/list`` answer through a relay with the host up, next to ``python -c pass``
  (target: at most 4× the floor);
* spawn → ``tools/list`` with no host yet (the relay starts one: every installed plugin loads);
* a no-op ``tools/call`` round trip through a relay next to the same call on a direct host
  connection, which is the same server in the same host process without the relay (target:
  under 0.3 ms extra at the median);
* ``--relays`` relays × ``--concurrent`` calls in flight each: every call answered exactly once,
  to the relay that sent it, with that relay's caller block; the host's RSS before and after.

Bytecode caching is on (``PYTHONDONTWRITEBYTECODE`` dropped) and one warm-up run goes first, as
an installed kirocrew has its ``.pyc`` files.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import kirocrew_argv, row

TARGET_RATIO = 4.0
TARGET_EXTRA_MS = 0.3
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
HANDSHAKE = b"".join(json.dumps(m).encode() + b"\n" for m in (INIT, INITIALIZED, LIST))


def _environment(root: Path) -> dict[str, str]:
    from kirocrew_testing.distributions import make_plugin_distribution
    from kirocrew_testing.fixtures import ECHO_HOST_PLUGIN_SOURCE

    plugin = make_plugin_distribution(root / "echo-host-plugin", distribution="kirocrew-echo-host",
                                      module="kirocrew_echo_host_plugin", source=ECHO_HOST_PLUGIN_SOURCE,
                                      entry_point="echo-host")
    (root / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "KIROCREW_SESSION_KEY")}
    env.update(HOME=str(root / "home"), KIRO_HOME=str(root / "home" / ".kiro"), KIROCREW_HOME=str(root / "crew"),
               PYTHONPATH=os.pathsep.join(p for p in (str(plugin), env.get("PYTHONPATH", "")) if p))
    return env


class Lines:
    """Newline-framed reads from a file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def next(self, timeout: float = 60.0) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            if not select.select([self.fd], [], [], timeout)[0]:
                raise TimeoutError("no answer")
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise EOFError("closed")
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer[:] = rest
        return json.loads(line)

    def until(self, request_id: Any) -> dict[str, Any]:
        while True:
            message = self.next()
            if message.get("id") == request_id and "method" not in message:
                return message


def _spawn_to_list(env: dict[str, str]) -> float:
    """Milliseconds from spawning a relay to holding its ``tools/list`` answer."""
    start = time.perf_counter()
    relay = subprocess.Popen(kirocrew_argv() + ["mcp-echo"], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert relay.stdin is not None and relay.stdout is not None
    relay.stdin.write(HANDSHAKE)
    relay.stdin.flush()
    answer = Lines(relay.stdout.fileno()).until(2)
    elapsed = (time.perf_counter() - start) * 1000
    assert answer["result"]["tools"], answer
    relay.stdin.close()
    relay.wait(30)
    relay.stdout.close()
    return elapsed


def _time_command(argv: list[str], env: dict[str, str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _stop_host(env: dict[str, str]) -> None:
    probe = ("from kirocrew_core.host import client\n"
             "try:\n    client.request_stop()\nexcept client.HostError:\n    pass\n")
    subprocess.run([sys.executable, "-c", probe], env=env, timeout=60)


def _round_trips(write: Any, lines: Lines, calls: int) -> list[float]:
    samples = []
    for n in range(calls):
        request_id = 1000 + n
        data = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                           "params": {"name": "noop", "arguments": {}}}).encode() + b"\n"
        start = time.perf_counter()
        write(data)
        lines.until(request_id)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _direct_connection(env: dict[str, str]) -> tuple[socket.socket, Lines]:
    """A host connection without a relay: this process says hello itself."""
    os.environ["KIROCREW_HOME"] = env["KIROCREW_HOME"]
    from kirocrew_core.host import client, protocol

    sock = client.connect(None)
    block = protocol.caller_block("bench", protocol.SESSION_TYPE_RELAY, os.getpid(), os.getppid())
    sock.sendall(protocol.hello(protocol.KIND_MCP, server="mcp-echo", fingerprint="", caller=block))
    lines = Lines(sock.fileno())
    welcome = lines.next()
    assert welcome.get("kirocrew") == "welcome", welcome
    sock.sendall(json.dumps(INIT).encode() + b"\n" + json.dumps(INITIALIZED).encode() + b"\n")
    lines.until(1)
    return sock, lines


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def _concurrent(env: dict[str, str], relays: int, per_relay: int) -> tuple[float, int, int]:
    """``relays`` relays with ``per_relay`` whoami calls in flight each; (seconds, lost, crossed)."""
    started = [subprocess.Popen(kirocrew_argv() + ["mcp-echo"], env={**env, "KIROCREW_SESSION_KEY": f"s{i}"},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
               for i in range(relays)]
    readers = []
    for relay in started:
        assert relay.stdin is not None and relay.stdout is not None
        relay.stdin.write(json.dumps(INIT).encode() + b"\n" + json.dumps(INITIALIZED).encode() + b"\n")
        relay.stdin.flush()
        lines = Lines(relay.stdout.fileno())
        lines.until(1)
        readers.append(lines)
    batch = b"".join(json.dumps({"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call",
                                 "params": {"name": "whoami", "arguments": {}}}).encode() + b"\n"
                     for n in range(per_relay))
    start = time.perf_counter()
    for relay in started:
        assert relay.stdin is not None
        relay.stdin.write(batch)
        relay.stdin.flush()
    lost = crossed = 0
    for i, (relay, lines) in enumerate(zip(started, readers, strict=True)):
        pending = set(range(10, 10 + per_relay))
        while pending:
            message = lines.next()
            if message.get("id") not in pending:
                crossed += 1
                continue
            pending.discard(message["id"])
            caller = message["result"]["structuredContent"]["caller"]
            if caller["relayPid"] != relay.pid or caller["sessionKey"] != f"s{i}":
                crossed += 1
        lost += len(pending)
    elapsed = time.perf_counter() - start
    for relay in started:
        assert relay.stdin is not None and relay.stdout is not None
        relay.stdin.close()
        relay.wait(30)
        relay.stdout.close()
    return elapsed, lost, crossed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--relays", type=int, default=8)
    parser.add_argument("--concurrent", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kc-relay-") as tmp:
        env = _environment(Path(tmp))
        try:
            cold = []
            for n in range(max(3, args.runs // 6) + 1):
                sample = _spawn_to_list(env)
                if n:  # the first run writes the bytecode caches
                    cold.append(sample)
                _stop_host(env)
            _spawn_to_list(env)  # a host is up from here on
            floor: list[float] = []
            hot: list[float] = []
            for _ in range(args.runs):  # interleaved, so load on the machine hits both alike
                floor += _time_command([sys.executable, "-c", "pass"], env, 1)
                hot.append(_spawn_to_list(env))

            relay = subprocess.Popen(kirocrew_argv() + ["mcp-echo"], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert relay.stdin is not None and relay.stdout is not None
            stdin = relay.stdin

            def write(data: bytes) -> None:
                stdin.write(data)
                stdin.flush()

            relayed_lines = Lines(relay.stdout.fileno())
            write(json.dumps(INIT).encode() + b"\n" + json.dumps(INITIALIZED).encode() + b"\n")
            relayed_lines.until(1)
            sock, direct_lines = _direct_connection(env)
            relayed: list[float] = []
            direct: list[float] = []
            for _ in range(4):  # interleaved, so load on the machine hits both alike
                relayed += _round_trips(write, relayed_lines, args.calls // 4)
                direct += _round_trips(sock.sendall, direct_lines, args.calls // 4)
            sock.close()
            stdin.close()
            relay.wait(30)
            relay.stdout.close()

            from kirocrew_core.host import client

            host = client.ping()["pid"]
            rss_before = _rss_kib(host)
            seconds, lost, crossed = _concurrent(env, args.relays, args.concurrent)
            rss_after = _rss_kib(host)
        finally:
            _stop_host(env)
    print(row("python -c pass", floor))
    print(row("relay spawn -> tools/list (host up)", hot))
    print(row("relay spawn -> tools/list (no host)", cold))
    ratio = statistics.median(hot) / statistics.median(floor)
    print(f"target: host-up spawn <= {TARGET_RATIO:g}x python -c pass -> {ratio:.2f}x "
          f"{'met' if ratio <= TARGET_RATIO else 'MISSED'}")
    print(row("noop round trip, direct host socket", direct, fmt="7.3f"))
    print(row("noop round trip, through a relay", relayed, fmt="7.3f"))
    extra = statistics.median(relayed) - statistics.median(direct)
    print(f"target: relay extra < {TARGET_EXTRA_MS} ms at the median -> {extra:.3f} ms "
          f"{'met' if extra < TARGET_EXTRA_MS else 'MISSED'}")
    total = args.relays * args.concurrent
    print(f"{args.relays} relays x {args.concurrent} calls in flight: {total} calls in {seconds:.2f} s "
          f"({total / seconds:.0f}/s), lost {lost}, crossed {crossed}; host RSS {rss_before} KiB -> {rss_after} KiB")
    return 0 if lost == crossed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
