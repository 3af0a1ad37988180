#!/usr/bin/env python3
"""The history index over many kiro-cli sessions: build time and peak RSS, search latency, one-message update.

    .venv/bin/python benchmarks/history_index.py [--sessions 2000] [--messages 200] [--searches 200]

Writes ``--sessions`` kiro-cli sessions of ``--messages`` messages each in a throwaway Kiro home
(nine in ten in the 2.x flat form, the rest V3; 20 workspaces; words drawn from a 5,000-word
vocabulary with a Zipf-like skew, so some words are in most sessions and most are rare), then:

* builds the index from nothing (seconds, and this process's peak RSS before and after);
* searches (``HistoryIndex.search``, and ``search_text``: the tool's whole answer with the
  redaction and the snippets) for a rare word, two words, and a common word, over every
  workspace and over one (median/p99);
* appends one message to one session and times indexing it (``update_file_session``: what
  a watched refresh calls for it) and a whole ``refresh`` (the scan every answer runs first
  when no watcher runs: a stat of every session file), next to a ``refresh`` that finds nothing
  changed;
* starts the host's session watcher (``HistoryIndex.watch``: the time, and the inotify watches it
  holds) and times the answer path with it: a ``refresh`` with nothing changed (the barrier round
  trip alone) and one after one appended message, next to the full scan.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import resource
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _bench import row

def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def each(items: list[str], fn: Callable[[str], object]) -> list[float]:
    """Milliseconds of ``fn(item)`` for each item."""
    samples = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _search(index: Any, scope: Any, query: str) -> object:
    return index.search(query, scope, limit=10)


def timed(fn: object, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def quiet(index: Any) -> None:
    report = index.refresh()
    assert (report.full_scan, report.sessions_looked_at) == (False, 0), report


def inotify_watches() -> int:
    """The inotify watches this process holds (Linux: its inotify descriptors' ``fdinfo``), 0 elsewhere."""
    count = 0
    for fd in os.listdir("/proc/self/fdinfo") if os.path.isdir("/proc/self/fdinfo") else []:
        try:
            with open(f"/proc/self/fdinfo/{fd}") as fh:
                count += sum(line.startswith("inotify wd:") for line in fh)
        except OSError:
            continue
    return count


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[int(0.99 * (len(ordered) - 1))]


def line(label: str, samples: list[float]) -> str:
    return f"{row(label, samples, width=44)}   p99 {p99(samples):7.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--searches", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(29)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ.update(HOME=str(root / "home"), KIRO_HOME=str(root / "home" / ".kiro"),
                          KIROCREW_HOME=str(root / "crew"), XDG_DATA_HOME=str(root / "data"))
        from kirocrew_core.history.index import HistoryIndex, Scope
        from kirocrew_core.history.kiro_stores import file_sessions
        from kirocrew_core.history.tools import search_text
        from kirocrew_testing.kiro_store_files import append_flat, vocabulary, write_corpus

        words = vocabulary(rng)
        start = time.perf_counter()
        write_corpus(root / "home" / ".kiro", args.sessions, args.messages, rng, words)
        size = sum(f.stat().st_size for f in (root / "home" / ".kiro" / "sessions").rglob("*.jsonl"))
        print(f"wrote {args.sessions} sessions x {args.messages} messages ({size / 2**20:.0f} MiB of transcripts) "
              f"in {time.perf_counter() - start:.1f} s")

        rss_before = peak_rss_mib()
        index = HistoryIndex(sources=lambda: [])
        start = time.perf_counter()
        report = index.refresh()
        built = time.perf_counter() - start
        print(f"index build: {built:.1f} s for {report.messages_added} messages "
              f"({report.messages_added / built:,.0f} messages/s); peak RSS {rss_before:.0f} MiB before, "
              f"{peak_rss_mib():.0f} MiB after; database {index.path.stat().st_size / 2**20:.0f} MiB "
              f"(+ WAL {Path(str(index.path) + '-wal').stat().st_size / 2**20:.0f} MiB)")

        everything, one = Scope.everything(), Scope(("/srv/workspace-07",))
        queries = {"a rare word": [rng.choice(words[3000:]) for _ in range(args.searches)],
                   "two mid words": [f"{rng.choice(words[200:1000])} {rng.choice(words[200:1000])}"
                                     for _ in range(args.searches)],
                   "a common word": [rng.choice(words[:5]) for _ in range(args.searches)]}
        for name, texts in queries.items():
            for label, scope in (("every workspace", everything), ("one workspace", one)):
                print(line(f"search, {name}, {label}",
                           each(texts, functools.partial(_search, index, scope))))
            print(line(f"search_text, {name}, every workspace",
                       each(texts, lambda q: search_text(index, everything, q, 10, "", ""))))

        print(line("refresh, nothing changed", timed(index.refresh, 20)))
        target = next(s for s in file_sessions() if s.source == "kiro-cli")

        def one_message() -> None:
            append_flat(target.transcript, "user", " ".join(rng.choices(words, k=24)))

        def after_message(runs: int, update: Callable[[], object], check: Callable[[Any], bool]) -> list[float]:
            """Milliseconds of ``update()`` right after one more message, ``runs`` times (each checked)."""
            samples = []
            for _ in range(runs):
                one_message()
                start = time.perf_counter()
                result = update()
                samples.append((time.perf_counter() - start) * 1000)
                assert check(result), result
            return samples

        print(line("update_file_session after one message",
                   after_message(50, lambda: index.update_file_session(target), lambda added: added == 1)))
        print(line("refresh after one message (whole scan)",
                   after_message(20, index.refresh, lambda report: report.messages_added == 1)))

        start = time.perf_counter()
        assert index.watch()
        print(f"watcher start: {(time.perf_counter() - start) * 1000:.1f} ms, {inotify_watches()} inotify watches")
        first = index.refresh()
        assert first.full_scan, first
        print(line("watched refresh, nothing changed", timed(lambda: quiet(index), 200)))
        print(line("watched refresh after one message", after_message(200, index.refresh, lambda report: (
            report.full_scan, report.sessions_looked_at, report.messages_added) == (False, 1, 1))))
        index.unwatch()
        print(f"load average {os.getloadavg()[0]:.1f} (the build is one run: re-run to compare)")
        index.close()
    print(f"python {sys.version.split()[0]}; sqlite {sqlite3.sqlite_version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
