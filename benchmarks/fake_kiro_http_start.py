#!/usr/bin/env python3
"""CPU of one fake kiro-cli session start with a streamable-HTTP or an OAuth-protected MCP server.

    .venv/bin/python benchmarks/fake_kiro_http_start.py [--runs 10]

The connections tests start the fake ``kiro-cli`` against HTTP MCP servers, most of them behind
OAuth. Each run spawns the fake (``acp --agent <agent>``, ``KIRO_FAKE_EAGER_MCP=1``), runs
``initialize`` and ``session/new``, waits until the agent's one server runs, and reads the fake's
own CPU (user + sys of that process, not of the servers) from psutil. The agents, interleaved:

* no MCP servers: the floor, the fake's own start;
* the streamable-HTTP fixture server (``kirocrew_testing.servers.http_server``, SSE answers);
* the OAuth fixture server with a stored grant (kiro's token files): probe, the held token, connect;
* the OAuth fixture server without one: probe, discovery, registration, PKCE consent (this script
  plays the person: it opens the URL the fake surfaces and clicks Allow), the code exchange.

Prints the median/p90/min of each and its difference to the floor (what that server costs the fake).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _bench

OAUTH_REQUEST = "kiro.dev/mcp/oauth_request"
FLOOR, HTTP, HELD, CONSENT = ("no MCP servers (floor)", "streamable HTTP", "OAuth, stored grant",
                              "OAuth, consent")
AGENTS = {FLOOR: "bare", HTTP: "http", HELD: "oauth", CONSENT: "oauth"}


async def one_start(fake: str, label: str, env: dict[str, str], cwd: Path, oauth: Any) -> tuple[float, float]:
    """(the fake's CPU seconds, wall seconds) from its spawn to its server running."""
    import psutil

    from kirocrew_core import grants
    from kirocrew_testing.fake_kiro.harness import start_fake_kiro

    if label == CONSENT:
        for path in grants.artifact_paths(oauth.mcp_url):
            path.unlink(missing_ok=True)
        await asyncio.to_thread(oauth.reset)
    start = time.perf_counter()
    async with start_fake_kiro(fake, "acp", "--agent", AGENTS[label], env=env, timeout=120) as k:
        await k.initialize()
        session = await k.new_session(str(cwd), [])
        if label == CONSENT:
            (request,) = await k.client.wait_for(lambda: k.client.notified(OAUTH_REQUEST))
            await oauth.aconsent(request["oauthUrl"])

        async def servers() -> list[dict[str, Any]]:
            return (await k.execute(session["sessionId"], "mcp"))["data"]["servers"]

        rows = await servers()
        while any(row["status"] == "loading" for row in rows):
            await asyncio.sleep(0.02)
            rows = await servers()
        wall = time.perf_counter() - start
        if any(row["status"] != "running" for row in rows):
            raise SystemExit(f"a server did not start: {rows}\n{''.join(k.stderr)[-2000:]}")
        times = psutil.Process(k.process.pid).cpu_times()
        return times.user + times.system, wall


def write_agents(env: dict[str, str], http_url: str, oauth_url: str) -> None:
    agents = Path(env["KIRO_HOME"]) / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    for name, servers in (("bare", {}), ("http", {"fixture": {"url": http_url}}),
                          ("oauth", {"fixture": {"url": oauth_url}})):
        (agents / f"{name}.json").write_text(json.dumps({"name": name, "tools": ["*"], "mcpServers": servers,
                                                         "includeMcpJson": False}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    from kirocrew_testing.mcp_fixtures import OAuthMCPServer
    from kirocrew_testing.servers import HTTP_MODULE, OAUTH_MODULE, launch

    with tempfile.TemporaryDirectory(prefix="fake-kiro-http-start-") as tmp:
        root = Path(tmp)
        env = _bench.fake_kiro_environment(root)
        env["KIRO_FAKE_EAGER_MCP"] = "1"
        _bench.use_environment(env)  # the OAuth grant paths follow HOME
        http = launch(HTTP_MODULE, "--port", "0")
        oauth_server = launch(OAUTH_MODULE, "--port", "0")
        try:
            oauth = OAuthMCPServer(oauth_server)
            write_agents(env, http.ready, oauth.mcp_url)
            samples = run_all(env, root / "workspace", args.runs, oauth)
        finally:
            http.stop()
            oauth_server.stop()
    print(f"fake kiro-cli session start, {args.runs} runs each, interleaved ({_bench.machine_load()})")
    for label in AGENTS:
        cpu, wall = samples[label]
        print(_bench.row(f"{label}: fake's CPU", [c * 1000 for c in cpu], width=44, fmt="7.1f"))
        print(_bench.row(f"{label}: spawn → server running", [w * 1000 for w in wall], width=44, fmt="7.1f"))
    floor = statistics.median(samples[FLOOR][0])
    for label in (HTTP, HELD, CONSENT):
        extra = 1000 * (statistics.median(samples[label][0]) - floor)
        print(f"{label} costs the fake {extra:.0f} ms of CPU at the median")


def run_all(env: dict[str, str], cwd: Path, runs: int, oauth: Any) -> dict[str, tuple[list[float], list[float]]]:
    fake = os.fspath(Path(sys.executable).with_name("fake-kiro-cli"))
    samples: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label in AGENTS}

    async def rounds() -> None:
        for label in (FLOOR, HTTP, CONSENT, HELD):  # warm-up; the consent leaves the grant HELD uses
            await one_start(fake, label, env, cwd, oauth)
        for _ in range(runs):
            for label in (FLOOR, HTTP, HELD, CONSENT):  # CONSENT last: it deletes the grant, then writes it
                cpu, wall = await one_start(fake, label, env, cwd, oauth)
                samples[label][0].append(cpu)
                samples[label][1].append(wall)

    asyncio.run(rounds())
    return samples


if __name__ == "__main__":
    main()
