#!/usr/bin/env python3
"""Wall time of ``probe_all`` over 40 stdio fixture servers, next to (40 / concurrency) × one probe.

    .venv/bin/python benchmarks/probe_all.py [--servers 40] [--concurrency 1 5 10] [--singles 5]

Runs under a throwaway HOME. "One probe" is the median of ``--singles``
sequential probes of the same fixture server (spawn, initialize, initialized,
tools/list, teardown). The ideal wall time for N servers at concurrency C is
ceil(N / C) × one probe; the ratio printed says how close bounded concurrency
gets to it on this machine. The fixture server spends most of a probe
importing the mcp SDK (CPU), so with fewer cores than C the floor is
N × one probe / cores instead, printed as "cpu floor".
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", type=int, default=40)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--singles", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as root:
        os.environ.update(HOME=root, KIRO_HOME=f"{root}/.kiro", KIROCREW_HOME=f"{root}/.kiro/crew")
        from kirocrew_testing.mcp_fixtures import stdio_server_argv
        from kirocrew_mcp.probe import probe_server
        from kirocrew_mcp.probe_cache import ProbeCache, probe_all

        argv = stdio_server_argv("--tools", "5")
        spec = {"command": argv[0], "args": argv[1:]}
        probe_server("warm-up", spec, timeout=30)  # page cache, imports

        singles = []
        for _ in range(args.singles):
            start = time.perf_counter()
            result = probe_server("single", spec, timeout=30)
            singles.append(time.perf_counter() - start)
            if result.status != "ok":
                print(f"single probe failed: {result.error}", file=sys.stderr)
                return 1
        one = statistics.median(singles)
        print(f"one probe: median {one * 1000:7.1f} ms over {args.singles} (min {min(singles) * 1000:.1f} ms)")
        cpus = os.cpu_count() or 1
        print(f"cpus: {cpus}; servers: {args.servers}; cpu floor {args.servers * one / cpus:.2f} s")

        servers = [(f"s{i:02d}", spec) for i in range(args.servers)]
        for concurrency in args.concurrency:
            start = time.perf_counter()
            results = probe_all(servers, concurrency=concurrency, cache=ProbeCache(), timeout=60)
            wall = time.perf_counter() - start
            bad = [name for name, r in results if r.status != "ok"]
            ideal = math.ceil(args.servers / concurrency) * one
            print(
                f"concurrency {concurrency:>3}: wall {wall:7.2f} s   "
                f"(N/C) x one probe {ideal:7.2f} s   ratio {wall / ideal:5.2f}"
                + (f"   FAILED: {', '.join(bad)}" if bad else "")
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
