#!/usr/bin/env python3
"""8 relays x 500 concurrent calls to one host: none lost, none crossed; wall time, calls/s and the host's memory.

    .venv/bin/python benchmarks/relay_concurrency.py [--relays 8] [--calls 500]

Each relay is a real ``kirocrew mcp-echo`` with its own session key (``KIROCREW_SESSION_KEY``)
connected to one host. Once every relay is initialized, each is sent all its ``whoami`` calls
at once (pipelined: every request written before its answers are read, all relays at the same
time from one select loop), then the answers are read. Request ids are unique across relays,
so the checks are exact:

* lost: a request without an answer (or an answer that is an error);
* wrong relay: an answer whose id the relay never sent, or an id answered twice;
* crossed caller: an answer whose caller, as the host verified it and as stamped on the
  request, is not that relay (``relayPid`` is not the relay's pid, or the session key is
  another relay's).

Printed: the wall time from the first request written to the last answer read, calls/s, and
the host's RSS (``VmRSS`` from ``/proc/<pid>/status``) idle, with the relays connected and
after the calls, plus its peak (``VmHWM``). Exits 1 if any check fails. How to read it: the
correctness lines must all say 0; the figures are indicative (both cores are shared by the
client, eight relays and the host).
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import (
    RawPeer,
    echo_host_environment,
    kirocrew_argv,
    machine_load,
    proc_status_kib,
    start_host,
    stop_host,
    use_environment,
)

ID_STRIDE = 1_000_000  # relay k's request ids are k * ID_STRIDE + i: unique across relays


class Pipelined:
    """One relay's pipelined calls: everything to write, the answers read so far and what was wrong with them."""

    def __init__(self, index: int, peer: Any, calls: int) -> None:
        self.index = index
        self.peer = peer
        self.pid: int = peer.proc.pid
        self.session_key = f"bench-relay-{index}"
        self.sent = {index * ID_STRIDE + i for i in range(calls)}
        self.pending = bytearray(b"".join(
            json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                        "params": {"name": "whoami", "arguments": {}}}, separators=(",", ":")).encode() + b"\n"
            for request_id in sorted(self.sent)))
        self.answered: set[int] = set()
        self.errors = 0
        self.wrong_relay = 0
        self.crossed = 0

    def take(self, line: bytes) -> None:
        message = json.loads(line)
        request_id = message.get("id")
        if request_id not in self.sent or request_id in self.answered:
            self.wrong_relay += 1
            return
        self.answered.add(request_id)
        result = message.get("result")
        if not isinstance(result, dict) or result.get("isError"):
            self.errors += 1
            return
        content = result.get("structuredContent") or {}
        for block in (content.get("caller"), content.get("stamped")):
            if not isinstance(block, dict) or block.get("relayPid") != self.pid \
                    or block.get("sessionKey") != self.session_key:
                self.crossed += 1
                break

    @property
    def done(self) -> bool:
        return len(self.answered) + self.wrong_relay >= len(self.sent) or self.peer.read_fd < 0


def _pump(relays: list[Pipelined], timeout: float) -> None:
    """Write every relay's requests and read its answers, all at once, until each has its answers (or EOF)."""
    selector = selectors.DefaultSelector()
    for relay in relays:
        os.set_blocking(relay.peer.write_fd, False)
        selector.register(relay.peer.write_fd, selectors.EVENT_WRITE, relay)
        selector.register(relay.peer.read_fd, selectors.EVENT_READ, relay)
    deadline = time.monotonic() + timeout
    while not all(relay.done for relay in relays):
        if time.monotonic() > deadline:
            raise SystemExit(f"no complete answers within {timeout:g} s")
        for key, events in selector.select(1.0):
            relay = key.data
            if events & selectors.EVENT_WRITE:
                try:
                    written = os.write(key.fd, relay.pending)
                except BlockingIOError:
                    continue
                del relay.pending[:written]
                if not relay.pending:
                    selector.unregister(key.fd)
            else:
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    selector.unregister(key.fd)
                    relay.peer.read_fd = -1  # EOF: the relay is gone; what it did not answer is lost
                    continue
                buffer = relay.peer.buffer
                buffer += chunk
                start = 0
                end = buffer.find(b"\n")
                while end >= 0:
                    relay.take(bytes(buffer[start:end]))
                    start = end + 1
                    end = buffer.find(b"\n", start)
                del buffer[:start]
    selector.close()
    for relay in relays:
        if relay.peer.write_fd >= 0:
            os.set_blocking(relay.peer.write_fd, True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relays", type=int, default=8)
    parser.add_argument("--calls", type=int, default=500, help="pipelined whoami calls per relay")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        env = echo_host_environment(Path(tmp))
        use_environment(env)
        load_before = machine_load()
        peers: list[Any] = []
        try:
            pid = int(start_host()["pid"])
            rss_idle = proc_status_kib(pid)
            relays = []
            for index in range(args.relays):
                peer = RawPeer([*kirocrew_argv(), "mcp-echo"], {**env, "KIROCREW_SESSION_KEY": f"bench-relay-{index}"})
                peers.append(peer)
                peer.initialize()
                relays.append(Pipelined(index, peer, args.calls))
            rss_connected = proc_status_kib(pid)
            start = time.perf_counter()
            _pump(relays, args.timeout)
            wall = time.perf_counter() - start
            rss_after = proc_status_kib(pid)
            rss_peak = proc_status_kib(pid, "VmHWM")
        finally:
            statuses = [peer.close() for peer in peers]
            stop_host()
        load_after = machine_load()

    total = args.relays * args.calls
    lost = sum(len(relay.sent - relay.answered) + relay.errors for relay in relays)
    wrong = sum(relay.wrong_relay for relay in relays)
    crossed = sum(relay.crossed for relay in relays)
    failed_exits = sum(1 for status in statuses if status != 0)
    print(f"{args.relays} relays x {args.calls} pipelined whoami calls = {total} calls to one host (pid {pid})")
    print(f"machine: {load_before} before, {load_after.split(', ', 1)[1]} after")
    print(f"  wall time, first request written -> last answer read: {wall * 1000:8.1f} ms   "
          f"{total / wall:8.0f} calls/s")
    print(f"  lost (unanswered or error):            {lost}")
    print(f"  answered to the wrong relay / twice:   {wrong}")
    print(f"  caller block crossed (pid or session): {crossed}")
    print(f"  relays that exited non-zero:           {failed_exits}")
    print(f"  host RSS: idle {rss_idle / 1024:.1f} MiB, {args.relays} relays connected {rss_connected / 1024:.1f} MiB, "
          f"after the calls {rss_after / 1024:.1f} MiB (peak {rss_peak / 1024:.1f} MiB)")
    ok = not (lost or wrong or crossed or failed_exits)
    print("checks: " + ("all passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
