#!/usr/bin/env python3
"""The host's memory while connections push large lines at it: its peak RSS before and after.

    .venv/bin/python benchmarks/host_socket_memory.py [--connections 8] [--mib 64]

Issue 27 measured the host growing from 95 to 607 MB when 8 connections each pushed a 64 MiB
line (no newline) at it: it buffered up to 64 MiB per connection with no total. This starts a
real ``kirocrew serve`` in a throwaway crew home, opens ``--connections`` MCP connections (hello
and ``initialize`` done), pushes ``--mib`` MiB of one unterminated line down each at once (a
thread per connection), and prints the host's RSS before, its peak (``VmHWM``) after, how many
connections the host closed, and the reasons its log gives. Linux only (``/proc``).

How to read it: the peak should stay within ``MAX_HELD_BYTES`` (32 MiB) plus the buffers' slack
above the starting RSS, whatever ``--connections`` and ``--mib`` are.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
from pathlib import Path

from _bench import fake_kiro_environment


def _status_kib(pid: int, field: str) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith(field + ":"):
            return int(row.split()[1])
    raise SystemExit(f"no {field} for pid {pid}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--mib", type=int, default=64)
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit("reads /proc: Linux only")
    from kirocrew_testing.host_lines import McpLine, ping, running_host, socket_path, wait_for

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = fake_kiro_environment(root)
        log = root / "host.log"
        with running_host(env, log=log) as host:
            path = socket_path(env)
            lines = [McpLine(path, server="kirocrew-core") for _ in range(args.connections)]
            for line in lines:
                line.initialize()
            before = _status_kib(host.pid, "VmRSS")
            chunk = b"x" * (1024 * 1024)

            def push(line: McpLine) -> None:
                with contextlib.suppress(OSError):
                    line.sock.sendall(b'{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"_meta":{"p":"')
                    for _ in range(args.mib):
                        line.sock.sendall(chunk)

            threads = [threading.Thread(target=push, args=(line,)) for line in lines]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            wait_for(lambda: ping(path) is not None, 30)
            peak = _status_kib(host.pid, "VmHWM")
            left = ping(path)["connections"]  # type: ignore[index]
            for line in lines:
                line.close()
        reasons = sorted({row.split("closed a connection: ")[1].split(" (")[0].split(", and this")[0]
                          for row in log.read_text().splitlines() if "closed a connection: " in row})
    print(f"{args.connections} connections x {args.mib} MiB unterminated line")
    print(f"host RSS before      {before / 1024:8.1f} MiB")
    print(f"host peak RSS after  {peak / 1024:8.1f} MiB   (+{(peak - before) / 1024:.1f} MiB)")
    print(f"connections closed   {args.connections - left} of {args.connections}")
    for reason in reasons:
        print(f"  reason: {reason}")


if __name__ == "__main__":
    main()
