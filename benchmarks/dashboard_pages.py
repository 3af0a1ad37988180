#!/usr/bin/env python3
"""Dashboard pages in headless Chromium: navigation → usable, and the bytes each page sends.

    .venv/bin/python benchmarks/dashboard_pages.py [--runs 30] [--servers 200]

Runs under a throwaway HOME with the fake kiro-cli (the Overview's doctor checks ask it for its
version), every installed plugin, and the example page plugin ``kirocrew_testing.dashboard_demo``
(``/demo/echo``, a page with a module that imports ``shell.js``). ``--servers`` stdio fixture
servers are spread over the crew store, the Kiro global and ``~/.claude.json`` and probed once
before timing (a warm probe cache, as a dashboard is after its first minutes); the connections
registry is the built-in one (29 providers). It starts a real ``kirocrew serve --port 0`` and
Debian's ``chromium`` through Playwright (``executable_path``), signs in once, and measures every
page the navigation links to (so a plugin's new page is measured without editing this script),
and the sign-in page a stranger gets (no session).

For each page it times ``--runs`` navigations, interleaved, reading the browser's own Navigation
Timing from navigation start: response start (TTFB), DOMContentLoaded and load. A page is
*usable* at DOMContentLoaded (module scripts have run by then), or, when its scripts mark a
region ``aria-busy="true"`` while they fetch, once no such mark is left (polled from here every
few ms, so that figure can be late by one poll). A *first visit* is a fresh browser context
(empty cache, the session cookie copied in); a *repeat visit* is the same tab again, where the
static files are revalidated (304). The server's time to answer each page over httpx (the Overview's
doctor checks included; kiro-cli's version is cached briefly, so only the warm-up spawns it) is
printed next to ``GET /api/health``, so a slow page shows whether the time goes to the server or
the browser. Bytes are the bodies as sent on a first visit (the gateway does not
compress): the document, its scripts, its stylesheets, the JSON its scripts fetch, and the icon.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import (
    GatewayFailed,
    fake_kiro_environment,
    machine_load,
    rebuild_agent_file,
    row,
    serve_gateway,
    time_gets,
    warm_probe_cache,
    write_fixture_mcp_servers,
)

DEMO_PAGE = ("Echo /demo/echo (example plugin)", "/demo/echo")
NAV_LINKS = """Array.from(document.querySelectorAll("nav a[href^='/']"),
  a => [a.textContent.trim(), a.getAttribute("href")])"""
TIMING = """(() => {
  const n = performance.getEntriesByType("navigation")[0];
  const busy = document.querySelector('[aria-busy="true"]') !== null;
  if (!n) return {ttfb: 0, dcl: 0, load: 0, now: 0, busy, bytes: {icon: 0}};
  const bytes = {html: n.encodedBodySize, js: 0, css: 0, data: 0, icon: 0};
  for (const r of performance.getEntriesByType("resource")) {
    const path = new URL(r.name).pathname;
    const kind = path.endsWith(".js") ? "js" : path.endsWith(".css") ? "css"
      : ["fetch", "xmlhttprequest", "other"].includes(r.initiatorType) && path.startsWith("/api/") ? "data" : "icon";
    bytes[kind] += r.encodedBodySize;
  }
  const since = end => end > 0 ? end - n.startTime : 0;
  return {ttfb: n.responseStart - n.startTime, dcl: since(n.domContentLoadedEventEnd),
          load: since(n.loadEventEnd), now: performance.now() - n.startTime, busy, bytes};
})()"""


def _environment(root: Path, servers: int) -> dict[str, str]:
    from kirocrew_testing.browser import DEMO_PLUGIN_SOURCE
    from kirocrew_testing.distributions import make_plugin_distribution

    env = fake_kiro_environment(root)
    plugin = make_plugin_distribution(root / "demo-plugin", distribution="kirocrew-dashboard-demo",
                                      module="kirocrew_dashboard_demo_plugin", source=DEMO_PLUGIN_SOURCE)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin), env.get("PYTHONPATH", "")) if p)
    write_fixture_mcp_servers(env, servers)
    rebuild_agent_file(env)
    return env


def _navigate(page: Any, url: str) -> dict[str, Any]:
    page.goto(url, wait_until="commit")
    # Polled from the commit on, so a region a script marks busy is seen before it clears; loadEventEnd
    # is written just after the load event's handlers and the icon loads after it, so wait for both
    # (page.wait_for_function would need eval, which the CSP refuses).
    deadline = time.monotonic() + 30
    busy_seen, usable = False, None
    while time.monotonic() < deadline:
        sample = page.evaluate(TIMING)
        if sample["busy"]:
            busy_seen = True
        elif usable is None and sample["dcl"] > 0:
            usable = sample["now"] if busy_seen else sample["dcl"]
        if usable is not None and sample["load"] > 0 and sample["bytes"]["icon"] > 0:
            return {**sample, "usable": usable}
        time.sleep(0.003)
    raise RuntimeError(f"{url}: the page never finished loading")


def _bytes_line(label: str, sample: dict[str, Any]) -> str:
    b = sample["bytes"]
    total = b["html"] + b["js"] + b["css"]
    return (f"{label:<40} HTML {b['html']:>6} B   JS {b['js']:>5} B   CSS {b['css']:>5} B   "
            f"total {total:>6} B   (JSON fetched: {b['data']} B; icon: {b['icon']} B)")


def _provider_count(client: Any) -> str:
    """``N providers in the registry, M with a status row`` (the Connections page's cards come from the rows)."""
    from kirocrew_connections.registry import builtin_document

    response = client.get("/api/connections/status")
    rows = len(response.json()["connections"]) if response.status_code == 200 else 0
    return f"{len(builtin_document())} providers in the registry, {rows} with a status row"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--servers", type=int, default=200, help="MCP fixture servers to seed (probed once)")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("needs chromium (apt: chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    print(machine_load())
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        try:
            with serve_gateway(_environment(root, args.servers), root, timeout=900) as client:
                base = str(client.base_url).rstrip("/")
                token = client.headers["authorization"].removeprefix("Bearer ")
                client.get("/").raise_for_status()  # warm-up: kiro-cli asked for its version once
                probe_secs, probed = warm_probe_cache(client)
                providers = _provider_count(client)
                server_health = time_gets(client, "/api/health", args.runs)
                with sync_playwright() as playwright:
                    browser = playwright.chromium.launch(executable_path=chromium)
                    signed_in = browser.new_page()
                    signed_in.goto(f"{base}/?token={token}")
                    stranger = browser.new_page()
                    cookies: Any = signed_in.context.cookies()
                    pages = [(f"{name} {path}", path) for name, path in signed_in.evaluate(NAV_LINKS)]
                    if DEMO_PAGE[1] not in {path for _, path in pages}:
                        pages.append(DEMO_PAGE)
                    server = {label: time_gets(client, path, args.runs) for label, path in pages}
                    targets = [(label, signed_in, base + path) for label, path in pages]
                    targets.append(("sign-in page (no session)", stranger, base + "/"))
                    for _, page, url in targets:  # warm-up, not counted
                        _navigate(page, url)
                    repeat: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in targets}
                    first: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in targets}
                    for _ in range(args.runs):
                        for label, page, url in targets:
                            repeat[label].append(_navigate(page, url))
                            context = browser.new_context()
                            if page is signed_in:
                                context.add_cookies(cookies)
                            first[label].append(_navigate(context.new_page(), url))
                            context.close()
                    browser.close()
        except GatewayFailed as exc:
            print(exc, file=sys.stderr)
            return 1

    print(f"\n{probed} MCP servers (probed once in {probe_secs:.1f} s before timing); {providers}")
    print(f"\nserver: GET over httpx, {args.runs} each")
    for label, samples in server.items():
        print(row(f"GET {label}", samples, width=44))
    print(row("GET /api/health (floor)", server_health, width=44))
    for label in first:
        print(f"\n{label}: {args.runs} navigations each in headless chromium")
        for visit, samples in (("first visit", first), ("repeat visit", repeat)):
            for key, name in (("ttfb", "response start"), ("dcl", "DOMContentLoaded"), ("usable", "usable"),
                              ("load", "load")):
                print(row(f"  {visit}: {name}", [r[key] for r in samples[label]], width=44))
    print("\nbytes sent per page on a first visit (bodies, uncompressed)")
    for label, runs in first.items():
        print(_bytes_line(label, runs[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
