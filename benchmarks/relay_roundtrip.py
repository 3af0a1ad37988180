#!/usr/bin/env python3
"""A no-op tool call's round trip through a relay, next to the same server in process and a direct host session.

    .venv/bin/python benchmarks/relay_roundtrip.py [--calls 2000] [--warmup 200] [--block 100]

One ``tools/call`` of the echo test server's ``noop`` at a time (write the request line, read
lines to its answer; the same raw JSON-RPC driver for every peer), on a warm session, for:

* ``kirocrew mcp-echo``: client -> relay (stdio) -> host socket -> the SDK server in the host;
* the same server in process (``_echo_stdio.py``): client -> the SDK's stdio transport;
* a direct host session (this process says the relay's hello itself): client -> host socket,
  so ``relay - direct`` is the relay hop alone and ``direct - in process`` the difference
  between the host's socket transport and the SDK's stdio transport.

The peers take turns in blocks of ``--block`` calls so a load spike hits them alike.
How to read it: the target is the relay's extra cost over the in-process server under
0.3 ms at the median; p90 shows the scheduler's noise on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import (
    RawPeer,
    echo_host_environment,
    host_session,
    kirocrew_argv,
    machine_load,
    row,
    start_host,
    stop_host,
    use_environment,
)

TARGET_EXTRA_MS = 0.3
HERE = Path(__file__).resolve().parent
NOOP = {"name": "noop", "arguments": {}}


def _timed_calls(peer: Any, count: int) -> list[float]:
    """``count`` sequential noop calls on ``peer`` (a ``LinePeer``), in ms each: request written to answer read."""
    samples = []
    for _ in range(count):
        request_id, line = peer.request_line("tools/call", NOOP)
        start = time.perf_counter()
        peer.send(line)
        answer = peer.answer(request_id)
        samples.append((time.perf_counter() - start) * 1000)
        if answer["result"].get("isError"):
            raise SystemExit(f"noop failed: {answer}")
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per peer")
    parser.add_argument("--warmup", type=int, default=200, help="untimed calls per peer first")
    parser.add_argument("--block", type=int, default=100, help="calls per peer per turn")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env = echo_host_environment(root)
        use_environment(env)
        load_before = machine_load()
        relay = in_process = None
        sock = None
        try:
            pong = start_host()
            relay = RawPeer([*kirocrew_argv(), "mcp-echo"], env)
            in_process = RawPeer([sys.executable, str(HERE / "_echo_stdio.py")], env)
            sock, direct = host_session("mcp-echo")
            peers = {"relay: kirocrew mcp-echo -> host": relay, "in process: echo over SDK stdio": in_process,
                     "direct host session (no relay)": direct}
            samples: dict[str, list[float]] = {name: [] for name in peers}
            for peer in peers.values():
                peer.initialize()
                _timed_calls(peer, args.warmup)
            done = 0
            while done < args.calls:
                block = min(args.block, args.calls - done)
                for name, peer in peers.items():
                    samples[name] += _timed_calls(peer, block)
                done += block
        finally:
            for spawned in (relay, in_process):
                if spawned is not None:
                    spawned.close()
            if sock is not None:
                sock.close()
            stop_host()
        load_after = machine_load()

    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"no-op tools/call round trip on a warm session, {args.calls} calls per peer after {args.warmup} "
          f"warm-up calls, in turns of {args.block} (host pid {pong.get('pid')})")
    print(f"machine: {load_before} before, {load_after.split(', ', 1)[1]} after")
    for name, values in samples.items():
        print(row(name, values, width=36, fmt="7.3f", extremes=("min", "max")))
    relay_name, in_process_name, direct_name = peers
    extra = medians[relay_name] - medians[in_process_name]
    hop = medians[relay_name] - medians[direct_name]
    print(f"relay's extra cost over the in-process server (median): {extra:+.3f} ms; target < {TARGET_EXTRA_MS} ms "
          f"-> {'met' if extra < TARGET_EXTRA_MS else 'MISSED'}")
    print(f"the relay hop alone (relay - direct host session, median): {hop:+.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
