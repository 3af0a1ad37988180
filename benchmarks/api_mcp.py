#!/usr/bin/env python3
"""Latency of ``GET /api/mcp`` on a warm probe cache, against a real ``kirocrew serve``.

    .venv/bin/python benchmarks/api_mcp.py [--servers 40] [--requests 200]

Runs under a throwaway HOME. It writes ``--servers`` stdio fixture servers
spread over the crew store, the Kiro global and (when the companion edition is
installed) ``~/.claude.json``, renders the agent file, starts ``kirocrew serve
--port 0`` as a subprocess, and talks to it over a real loopback socket with
httpx, authenticated with the owner token as a script would be. It warms the
gateway's probe cache with one ``POST /api/mcp/probe {"all": true}`` (every
fixture server really started and listed), checks that a page load then finds
nothing left to probe, and times ``--requests`` sequential ``GET /api/mcp``
calls, printing median, p90 and min. The figure includes HTTP on loopback,
authentication, discovery (every scope file and the agent file read and
parsed), the cache overlay and JSON encoding. ``GET /api/health`` on the same
connection is printed too: it is the gateway's floor, so the difference is
what the MCP endpoint itself costs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _bench import (
    GatewayFailed,
    fake_kiro_environment,
    rebuild_agent_file,
    row,
    serve_gateway,
    time_gets,
    warm_probe_cache,
    write_fixture_mcp_servers,
)


def _row(label: str, samples: list[float]) -> str:
    return row(label, samples, width=34, fmt="7.2f")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=40)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env = fake_kiro_environment(root)
        write_fixture_mcp_servers(env, args.servers)
        rebuild_agent_file(env)
        try:
            with serve_gateway(env, root, timeout=600) as client:
                start = time.perf_counter()
                cold = client.get("/api/mcp")
                cold_ms = (time.perf_counter() - start) * 1000
                # The cold load started a background probe; wait for it, then probe all for a full cache.
                probe_s, _ = warm_probe_cache(client)
                statuses = {row["status"] for row in client.get("/api/mcp").json()["servers"]}
                warm = client.get("/api/mcp").json()
                samples = time_gets(client, "/api/mcp", args.requests)
                floor = time_gets(client, "/api/health", args.requests)
                response = client.get("/api/mcp")
        except GatewayFailed as exc:
            print(exc, file=sys.stderr)
            return 1

    body_kib = len(response.content) / 1024
    print(f"GET /api/mcp via a real `kirocrew serve` subprocess + httpx over loopback; "
          f"{len(warm['servers'])} servers ({body_kib:.1f} KiB of JSON), {args.requests} requests")
    print(f"{'cold first load (starts the probe)':<34} {cold_ms:7.2f} ms   status {cold.status_code}")
    print(f"{'warming: POST /api/mcp/probe all':<34} {probe_s:7.2f} s    statuses {sorted(statuses)}")
    print(f"{'warm load starts a probe?':<34} {warm['backgroundProbe']['started']}")
    print(_row("warm GET /api/mcp", samples))
    print(_row("GET /api/health (the floor)", floor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
