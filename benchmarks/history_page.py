#!/usr/bin/env python3
"""The History page with 2,000 kiro-cli sessions, in headless Chromium against a real ``kirocrew serve``.

    .venv/bin/python benchmarks/history_page.py [--sessions 2000] [--messages 200] [--runs 20]

Writes the sessions as ``history_index.py`` does (the same corpus: ``kiro_store_files.write_corpus``),
starts ``kirocrew serve`` on them, and times the first ``GET /history`` (it builds the index from
nothing), then, in Debian's ``chromium`` through Playwright, navigation → load event for: the
list's first and 20th page, a search for a rare word and for a common word, and one session's
page (newest 50 of its messages) (median/p90/min), with each page's HTML size.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _bench import page_load_times, fake_kiro_environment, row, serve_gateway


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("needs chromium (apt: chromium)", file=sys.stderr)
        return 2

    from kirocrew_testing.kiro_store_files import vocabulary, write_corpus

    rng = random.Random(29)
    words = vocabulary(rng)
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env = fake_kiro_environment(root)
        write_corpus(Path(env["KIRO_HOME"]), args.sessions, args.messages, rng, words)
        with serve_gateway(env, root, timeout=900) as client:
            start = time.perf_counter()
            client.get("/history").raise_for_status()
            print(f"first GET /history (builds the index of {args.sessions} x {args.messages} messages): "
                  f"{time.perf_counter() - start:.1f} s")
            key = client.get("/history").text.split("?session=", 1)[1].split('"', 1)[0]
            base = str(client.base_url).rstrip("/")
            token = client.headers["authorization"].removeprefix("Bearer ")
            targets = [("list, page 1", "/history"), ("list, page 20", "/history?page=20"),
                       ("search, a rare word", f"/history?q={words[4000]}"),
                       ("search, a common word", f"/history?q={words[0]}"),
                       ("one session (newest 50 messages)", f"/history?session={key}")]
            sizes = {label: len(client.get(path).content) for label, path in targets}
            samples = page_load_times(chromium, base, token, targets, args.runs + 1)
    print(f"\nnavigation → load event in headless chromium, {args.runs} each (first run dropped)")
    for label, measured in samples.items():
        print(f"{row(label, measured[1:], width=36)}   HTML {sizes[label] / 1024:6.1f} KiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
