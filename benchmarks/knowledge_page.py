#!/usr/bin/env python3
"""The Knowledge page with a 2,000-file folder source, against a real ``kirocrew serve``.

    .venv/bin/python benchmarks/knowledge_page.py [--files 2000] [--runs 20]

Writes ``--files`` Markdown files into a folder of a throwaway home, adds it as a source, starts
``kirocrew serve`` (the host reads it in the background; the run waits until it is ready), and
times, as the server answers them over HTTP: ``GET /api/knowledge-changes`` (the open page's poll),
``GET /api/knowledge/sources``, a search, the Knowledge page and the source's page (100 documents).
Then, in Debian's ``chromium`` through Playwright, navigation → load event of the page, a search and
the source's page (median/p90/min), with each page's HTML size.
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

from _bench import fake_kiro_environment, machine_load, page_load_times, row, serve_gateway


def _fill(root: Path, files: int) -> None:
    for n in range(files):
        folder = root / f"part-{n % 20:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"note-{n:05d}.md").write_text(f"# Note {n}\n\n## Harbour\nThe lighthouse log of day {n}: "
                                                 f"{'calm sea and steady wind ' * 20}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("needs chromium (apt: chromium)", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env = fake_kiro_environment(root)
        os.environ.update({k: env[k] for k in ("HOME", "KIRO_HOME", "KIROCREW_HOME")})
        _fill(root / "library", args.files)
        from kirocrew_core.knowledge.store import shared

        source = shared().add(root / "library").id
        shared().close()
        with serve_gateway(env, root, timeout=300) as client:
            start = time.perf_counter()
            while True:
                state = client.get("/api/knowledge/sources").json()["sources"][0]
                if state["progress"]["state"] == "ready" and state["indexed"]:
                    break
                time.sleep(0.2)
            print(f"host read {state['documents']} files in the background: ready {time.perf_counter() - start:.1f} s "
                  "after the gateway answered")
            server_targets = [("GET /api/knowledge-changes", "/api/knowledge-changes"),
                              ("GET /api/knowledge/sources", "/api/knowledge/sources"),
                              ("GET /api/knowledge/search?q=lighthouse", "/api/knowledge/search?q=lighthouse"),
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
            targets = [("the page (sources, skills)", "/knowledge"), ("a search, 10 hits", "/knowledge?q=lighthouse"),
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
