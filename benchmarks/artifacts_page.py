#!/usr/bin/env python3
"""The Artifacts page and its list route with 1,000 artifacts, against a real ``kirocrew serve``.

    .venv/bin/python benchmarks/artifacts_page.py [--library 1000] [--runs 20]

Saves ``--library`` Markdown artifacts (one in ten tagged, in ten folders, one with 200 KiB of
content, three versions and 20 comments) into a throwaway crew home, starts ``kirocrew serve`` on it,
and times, as the server answers them over HTTP: ``GET /api/artifacts`` (every artifact, names
redacted), the same filtered by tag, ``GET /api/artifact-changes`` (the open page's poll), the list
page and one artifact's page. Then, in Debian's ``chromium`` through Playwright, navigation → load
event of the list, a search, and the big artifact's page (median/p90/min), with each page's HTML size.
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

from _bench import page_load_times, fake_kiro_environment, machine_load, row, serve_gateway


def _fill(library: int) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    for n in range(library):
        store.save(store.NewArtifact(f"Weekly note {n}", f"# Note {n}\n\nRevenue grew {n % 7}% this week.\n",
                                     "markdown", slug=f"note-{n}", description=f"The note of week {n}",
                                     tags=("weekly",) if n % 10 == 0 else (), folder=f"/reports/r{n % 10}"), OWNER)
    paragraph = "Revenue grew in every region; the details follow with their sources. " * 10 + "\n\n"
    big = "# The big report\n\n" + paragraph * (200 * 1024 // len(paragraph))
    store.save(store.NewArtifact("The big report", big, "markdown", slug="big-report"), OWNER)
    store.update("big-report", OWNER, content=big + "One more paragraph.\n")
    store.update("big-report", OWNER, content=big.replace("sources", "citations", 40))
    for n in range(20):
        store.post_comment("big-report", OWNER, f"Comment {n}: cite this", quote="The big report" if n % 2 else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", type=int, default=1000)
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
        _fill(args.library)
        with serve_gateway(env, root, timeout=300) as client:
            server_targets = [("GET /api/artifacts", "/api/artifacts"),
                              ("GET /api/artifacts?tag=weekly", "/api/artifacts?tag=weekly"),
                              ("GET /api/artifact-changes", "/api/artifact-changes"),
                              ("GET /api/artifact-changes?slug=", "/api/artifact-changes?slug=big-report"),
                              ("GET /artifacts (list, page 1)", "/artifacts"),
                              ("GET /artifacts/big-report?compare=1", "/artifacts/big-report?compare=1")]
            server: dict[str, list[float]] = {label: [] for label, _ in server_targets}
            for run in range(args.runs + 1):
                for label, path in server_targets:
                    start = time.perf_counter()
                    client.get(path).raise_for_status()
                    if run:
                        server[label].append((time.perf_counter() - start) * 1000)
            count = len(client.get("/api/artifacts").json()["artifacts"])
            base = str(client.base_url).rstrip("/")
            token = client.headers["authorization"].removeprefix("Bearer ")
            targets = [("list, page 1 (100 rows)", "/artifacts"), ("search, one word", "/artifacts?q=week+77"),
                       ("big artifact, diff v1 → v3", "/artifacts/big-report?compare=1")]
            sizes = {label: len(client.get(path).content) for label, path in targets}
            samples = page_load_times(chromium, base, token, targets, args.runs + 1)
    print(f"{machine_load()}; {count} artifacts")
    print(f"\nHTTP round trip to the server, {args.runs} each (first run dropped)")
    for label, measured in server.items():
        print(row(label, measured, width=40))
    print(f"\nnavigation → load event in headless chromium, {args.runs} each (first run dropped)")
    for label, measured in samples.items():
        print(f"{row(label, measured[1:], width=40)}   HTML {sizes[label] / 1024:6.1f} KiB")
    print(f"(median of the list page's load: {statistics.median(samples[targets[0][0]][1:]):.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
