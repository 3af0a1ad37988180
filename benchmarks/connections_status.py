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
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


def _row(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return f"{label:<34} median {statistics.median(ordered):7.2f} ms   p90 {p90:7.2f} ms   min {ordered[0]:7.2f} ms"


def _time(client: object, path: str, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        response = client.get(path)  # type: ignore[attr-defined]
        samples.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
    return samples


def _kirocrew() -> list[str]:
    exe = Path(sys.executable).with_name("kirocrew")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core.cli"]


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

    import httpx

    from kirocrew_core import proc

    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env, total, granted = _setup(root, args.noise)
        stderr_path = root / "serve.stderr"
        with stderr_path.open("w") as stderr:
            gateway = proc.spawn([*_kirocrew(), "serve", "--port", "0"], env=env, stderr=stderr, text=True)
            try:
                line = gateway.stdout.readline().strip()
                if "http://" not in line:
                    print(f"serve printed no URL; stderr:\n{stderr_path.read_text()}", file=sys.stderr)
                    return 1
                url = urlsplit(line[line.index("http://"):])
                token = parse_qs(url.query)["token"][0]
                base = f"{url.scheme}://{url.netloc}"
                headers = {"Authorization": f"Bearer {token}"}
                with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
                    client.get("/api/health").raise_for_status()
                    start = time.perf_counter()
                    first = client.get("/api/connections/status")
                    first_ms = (time.perf_counter() - start) * 1000
                    first.raise_for_status()
                    samples = _time(client, "/api/connections/status", args.requests)
                    floor = _time(client, "/api/health", args.requests)
                    body = client.get("/api/connections/status").json()
            finally:
                proc.terminate(gateway, reason="benchmark done")

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
