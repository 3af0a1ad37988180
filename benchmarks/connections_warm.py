#!/usr/bin/env python3
"""Warm against cold Connect through a real ``kirocrew serve --override-origin``, and what warming costs idle.

    .venv/bin/python benchmarks/connections_warm.py [--rounds 5] [--idle-secs 30]

Each of the six visible providers' origins is routed to its own OAuth fixture
server (``kirocrew_testing.servers.oauth_server``); kiro-cli is the fake. A
*click* is what the card does: ``POST /api/connections/mint`` then
``GET /api/connections/mint`` until the approval URL is served; the clock stops
at the first answer that carries ``oauth_url``. Per round, interleaved:

- premint: ``POST /api/connections/premint`` until all six premints are ready
  (the first round spawns the warm kiro-cli; later ones re-activate on it);
- warm click on Notion (adopts the premint), then Cancel;
- cold click on Notion (its premint cancelled first, so nothing is adoptable), then Cancel.

Then a reconnect: Notion's consent is completed, Disconnect removes the grant,
the gateway re-arms Notion on the resident process (timed until its premint is
ready), and a click takes the URL. Last, with all six premints ready, the warm
kiro-cli's processes, RSS and CPU over ``--idle-secs``.

The fake adds no fixed delay: it measures kirocrew's path plus a Python kiro-cli
(start, initialize, discovery and registration over loopback), not kiro-cli's
own seconds. Everything runs under a throwaway HOME / KIRO_HOME / KIROCREW_HOME.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import fake_kiro_environment, machine_load, proc_status_kib, row, serve_gateway

#: slug -> (origin, MCP path) of the six visible providers.
VISIBLE = {
    "notion": ("https://mcp.notion.com", "/mcp"),
    "linear": ("https://mcp.linear.app", "/mcp/readonly"),
    "atlassian": ("https://mcp.atlassian.com", "/v2/mcp"),
    "stripe": ("https://mcp.stripe.com", "/"),
    "vercel": ("https://mcp.vercel.com", "/"),
    "gitlab": ("https://gitlab.com", "/api/v4/mcp"),
}
WAIT_SECS = 120.0


def wait(read: Any, accept: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_SECS
    while True:
        value = read()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"never happened: {what} (last: {value!r})")
        time.sleep(0.005)


def mint_view(client: Any, slug: str) -> dict[str, Any]:
    return dict(client.get("/api/connections/mint", params={"slug": slug}).json())


def premint(client: Any) -> float:
    """Page mount → every premint ready (a shared row waiting; its URL is served to nobody), in ms."""
    start = time.perf_counter()
    answer = client.post("/api/connections/premint", json={}).json()
    if sorted(answer.get("preminting", [])) != sorted(VISIBLE):
        raise SystemExit(f"premint answered {answer}")
    wait(lambda: [mint_view(client, slug)["state"] for slug in VISIBLE],
         lambda states: all(state == "waiting" for state in states), "every premint ready")
    return (time.perf_counter() - start) * 1000


def click(client: Any, slug: str) -> tuple[float, str]:
    """Connect click → the approval URL served, in ms; and the row's token."""
    start = time.perf_counter()
    token = client.post("/api/connections/mint", json={"slug": slug}).json()["token"]
    wait(lambda: mint_view(client, slug), lambda view: "oauth_url" in view or view["state"] in {"failed", "expired"},
         f"{slug}'s approval URL")
    return (time.perf_counter() - start) * 1000, token


def cancel(client: Any, slug: str, token: str | None = None) -> None:
    client.post("/api/connections/cancel", json={"slug": slug, "token": token}).raise_for_status()


def warm_processes(crew_home: str) -> list[int]:
    """The warm kiro-cli processes of this gateway (started on the warm base agent)."""
    from kirocrew_testing.processes import processes_running

    return processes_running(b"kirocrew-mint-warm-base", crew_home)


def cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle-secs", type=float, default=30.0)
    options = parser.parse_args()

    from kirocrew_testing.mcp_fixtures import OAUTH_MODULE, OAuthMCPServer
    from kirocrew_testing.servers import launch

    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-warm-") as tmp:
        root = Path(tmp)
        env = fake_kiro_environment(root)
        os.environ.update(HOME=env["HOME"], KIRO_HOME=env["KIRO_HOME"], KIROCREW_HOME=env["KIROCREW_HOME"])
        servers = {slug: OAuthMCPServer(launch(OAUTH_MODULE, "--port", "0", "--mcp-path", path))
                   for slug, (_origin, path) in VISIBLE.items()}
        args: list[str] = []
        for slug, (origin, _path) in VISIBLE.items():
            args += ["--override-origin", f"{origin}={servers[slug].base_url.rstrip('/')}"]
        try:
            with serve_gateway(env, root, args=args, timeout=WAIT_SECS) as client:
                run(client, servers, env["KIROCREW_HOME"], options)
        finally:
            for server in servers.values():
                server.stop()
    return 0


def run(client: Any, servers: dict[str, Any], crew_home: str, options: argparse.Namespace) -> None:
    print(f"machine: {machine_load()}")
    first_premint: float | None = None
    reactivations, warm, cold = [], [], []
    for _ in range(options.rounds):
        took = premint(client)
        if first_premint is None:
            first_premint = took
        else:
            reactivations.append(took)
        ms, token = click(client, "notion")
        warm.append(ms)
        cancel(client, "notion", token)
        cancel(client, "notion")  # nothing adoptable is left: the next click is cold
        ms, token = click(client, "notion")
        cold.append(ms)
        cancel(client, "notion", token)
        wait(lambda: mint_view(client, "notion")["state"], lambda state: state == "idle", "the cold mint released")

    print(f"premint, first (spawns the warm kiro-cli)      {first_premint:8.1f} ms")
    print(row("premint, re-activation on it", reactivations, width=46, fmt="8.1f"))
    print(row("click → approval URL, warm (adopted)", warm, width=46, fmt="8.1f"))
    print(row("click → approval URL, cold (own kiro-cli)", cold, width=46, fmt="8.1f"))
    ratio = sorted(warm)[len(warm) // 2] / sorted(cold)[len(cold) // 2]
    print(f"warm / cold (medians)                          {ratio * 100:8.2f} %   (target ≤ 5 %)")

    # A reconnect: consent, Disconnect (the grant goes), the re-arm on the resident process, a click.
    premint(client)
    client.post("/api/connections/install", json={"slug": "notion"}).raise_for_status()
    _ms, token = click(client, "notion")
    servers["notion"].consent(mint_view(client, "notion")["oauth_url"])
    wait(lambda: mint_view(client, "notion")["state"], lambda state: state == "granted", "the grant")
    start = time.perf_counter()
    answer = client.post("/api/connections/disconnect", json={"slug": "notion"}).json()
    assert answer["grantRemoved"], answer
    wait(lambda: mint_view(client, "notion")["state"], lambda state: state == "waiting", "notion re-armed")
    rearmed = (time.perf_counter() - start) * 1000
    ms, token = click(client, "notion")
    print(f"reconnect: Disconnect → premint re-armed       {rearmed:8.1f} ms")
    print(f"reconnect: click → approval URL, warm          {ms:8.1f} ms")
    cancel(client, "notion", token)

    premint(client)
    pids = warm_processes(crew_home)
    ticks = {pid: cpu_ticks(pid) for pid in pids}
    rss = sum(proc_status_kib(pid) for pid in pids)
    time.sleep(options.idle_secs)
    spent = sum(cpu_ticks(pid) - ticks[pid] for pid in pids) / os.sysconf("SC_CLK_TCK")
    print(f"idle, six premints held: {len(pids)} warm kiro-cli process(es), RSS {rss / 1024:.1f} MiB, "
          f"CPU {spent / options.idle_secs * 60:.2f} s per minute over {options.idle_secs:g} s")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
