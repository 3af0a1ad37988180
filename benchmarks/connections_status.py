#!/usr/bin/env python3
"""Latency of ``GET /api/connections/status`` against a real ``kirocrew serve``.

    .venv/bin/python benchmarks/connections_status.py [--requests 300] [--noise 2000]

Runs under a throwaway HOME. It creates kiro-cli's paired grant artifacts (token
+ registration, as ``kirocrew_core.grants.artifact_paths`` names them) for every
other provider of the shipped registry (29 providers), adds ``--noise`` unrelated
files to the OAuth cache dir (a real ``~/.aws/sso/cache`` holds SSO tokens too),
starts ``kirocrew serve --port 0`` as a subprocess and talks to it over a real
loopback socket with httpx, authenticated with the owner token. The first read
stamps ``connectedSince`` for every granted row (one locked atomic write, one SEL
event per stamp) and is printed on its own; then ``--requests`` sequential reads
are timed, printing median, p90 and min. A steady read is two stats per listed
provider, one read of the connected-since file, and no write. ``GET
/api/health`` on the same connection is the gateway's floor.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _bench import GatewayFailed, row, serve_gateway, time_gets


def _row(label: str, samples: list[float]) -> str:
    return row(label, samples, width=34, fmt="7.2f")


def _setup(root: Path, noise: int) -> tuple[dict[str, str], int, int]:
    """The environment, the registry size and how many providers got a grant."""
    user = root / "home"
    env = {**os.environ, "HOME": str(user), "KIRO_HOME": str(user / ".kiro"), "KIROCREW_HOME": str(root / "crew")}
    saved = {name: os.environ.get(name) for name in ("HOME", "KIRO_HOME", "KIROCREW_HOME")}
    os.environ.update({name: env[name] for name in saved})
    try:
        from kirocrew_connections.registry import parse_providers, builtin_document
        from kirocrew_core import grants, home

        providers = parse_providers(builtin_document())
        cache = home.oauth_cache_dir()
        cache.mkdir(parents=True)
        granted = 0
        for index, provider in enumerate(providers):
            if index % 2 == 0:
                for path in grants.artifact_paths(provider.mcp_url):
                    path.write_text("{}")
                granted += 1
        for index in range(noise):
            (cache / f"{index:064x}.json").write_text("{}")
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return env, len(providers), granted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--noise", type=int, default=2000, help="unrelated files in the OAuth cache dir")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env, total, granted = _setup(root, args.noise)
        try:
            with serve_gateway(env, root) as client:
                client.get("/api/health").raise_for_status()
                start = time.perf_counter()
                first = client.get("/api/connections/status")
                first_ms = (time.perf_counter() - start) * 1000
                first.raise_for_status()
                samples = time_gets(client, "/api/connections/status", args.requests)
                floor = time_gets(client, "/api/health", args.requests)
                body = client.get("/api/connections/status").json()
        except GatewayFailed as exc:
            print(exc, file=sys.stderr)
            return 1

    rows = body["connections"]
    connected = sum(row["status"] == "connected" for row in rows)
    stamped = sum(row["connectedSince"] is not None for row in rows)
    print(f"GET /api/connections/status via a real `kirocrew serve` subprocess + httpx over loopback; "
          f"registry {total} providers ({granted} with a grant on disk), {len(rows)} rows listed "
          f"({connected} connected, {stamped} with connectedSince), {args.noise} other files in the cache, "
          f"{args.requests} requests")
    print(f"{'first read (stamps + SEL events)':<34} {first_ms:7.2f} ms")
    print(_row("steady GET /api/connections/status", samples))
    print(_row("GET /api/health (the floor)", floor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
