#!/usr/bin/env python3
"""The Knowledge page with a 2,000-file folder source, against a real ``kirocrew serve``.

    .venv/bin/python benchmarks/knowledge_page.py [--files 2000] [--runs 20]

Writes ``--files`` Markdown files (the notes ``knowledge.py`` ingests, about 1,500 words each) into
a folder of a throwaway home, starts ``kirocrew serve`` and adds the folder through the page's route.
The host reads it in the background and the run waits until it is ready: files/s, and the host's
resident memory before and its peak after, from ``/proc``. Then it times, as the server answers them
over HTTP: ``GET /api/knowledge-changes`` (the open page's poll), ``GET /api/knowledge/sources``, a
search, the Knowledge page and the source's page (100 documents); and in Debian's ``chromium``
through Playwright, navigation → load event of the page, a search and the source's page
(median/p90/min), with each page's HTML size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _bench import fake_kiro_environment, machine_load, page_load_times, row, serve_gateway, vocabulary, write_notes


def _status_mib(pid: int, field: str) -> float:
    """A field of ``/proc/PID/status`` (``VmRSS``: resident now, ``VmHWM``: the peak so far) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no {field} for pid {pid}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("needs chromium (apt: chromium)", file=sys.stderr)
        return 2
    if not sys.platform.startswith("linux"):
        print("reads the host's memory from /proc: Linux only", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env = fake_kiro_environment(root)
        os.environ.update({k: env[k] for k in ("HOME", "KIRO_HOME", "KIROCREW_HOME")})
        write_notes(root / "library", args.files)
        word = vocabulary()[0][300]  # in many notes, not in most
        from kirocrew_testing.host_lines import ping, socket_path

        with serve_gateway(env, root, timeout=300) as client:
            host = (ping(socket_path(env)) or {})["pid"]
            rss_before = _status_mib(host, "VmRSS")
            start = time.perf_counter()
            added = client.post("/api/knowledge/sources", json={"path": str(root / "library")})
            added.raise_for_status()
            source = added.json()["source"]["id"]
            while True:
                state = client.get("/api/knowledge/sources").json()["sources"][0]
                if state["progress"]["state"] == "ready" and state["indexed"]:
                    break
                time.sleep(0.05)
            took = time.perf_counter() - start
            print(f"host read {state['documents']} files in the background: ready {took:.1f} s after the add "
                  f"({state['documents'] / took:.0f} files/s); host RSS {rss_before:.0f} MiB before, "
                  f"peak {_status_mib(host, 'VmHWM'):.0f} MiB")
            server_targets = [("GET /api/knowledge-changes", "/api/knowledge-changes"),
                              ("GET /api/knowledge/sources", "/api/knowledge/sources"),
                              ("GET /api/knowledge/search?q=(a word)", f"/api/knowledge/search?q={word}"),
                              ("GET /knowledge", "/knowledge"),
                              (f"GET /knowledge/sources/{source}", f"/knowledge/sources/{source}")]
            server: dict[str, list[float]] = {label: [] for label, _ in server_targets}
            for run in range(args.runs + 1):
                for label, path in server_targets:
                    began = time.perf_counter()
                    client.get(path).raise_for_status()
                    if run:
                        server[label].append((time.perf_counter() - began) * 1000)
            base = str(client.base_url).rstrip("/")
            token = client.headers["authorization"].removeprefix("Bearer ")
            targets = [("the page (sources, skills)", "/knowledge"), ("a search, 10 hits", f"/knowledge?q={word}"),
                       ("a source (100 of its documents)", f"/knowledge/sources/{source}")]
            sizes = {label: len(client.get(path).content) for label, path in targets}
            samples = page_load_times(chromium, base, token, targets, args.runs + 1)
    print(f"{machine_load()}; one folder source of {args.files} files")
    print(f"\nHTTP round trip to the server, {args.runs} each (first run dropped)")
    for label, measured in server.items():
        print(row(label, measured, width=40))
    print(f"\nnavigation → load event in headless chromium, {args.runs} each (first run dropped)")
    for label, measured in samples.items():
        print(f"{row(label, measured[1:], width=40)}   HTML {sizes[label] / 1024:6.1f} KiB")
    print(f"(median of the page's load: {statistics.median(samples[targets[0][0]][1:]):.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
