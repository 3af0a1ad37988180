#!/usr/bin/env python3
"""``computer_get_state`` cost on Linux: X11 backend snapshot latency and reply size.

    .venv/bin/python benchmarks/computer_get_state.py [--runs 30]

Starts the tests' headless desktop (tests/computer/desktop.py: Xvfb, a session bus,
the AT-SPI bus, openbox) under a throwaway directory, then the GTK3 fixture app twice:
with its usual 50-row list, and with a 2,000-row list that the default caps (1,200
nodes, depth 64, 500 characters) cut short. For each it times ``X11Backend.snapshot``
(helper round trip + AT-SPI walk) and the foundation's ``render_state`` text, and
prints median/p90 latency, nodes walked, whether the walk was truncated and the reply
size. Needs the Debian packages the tests need; prints why and exits 2 when absent.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CAPS = {"max_nodes": 1200, "max_depth": 64, "text_limit": 500}


def _desktop_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kirocrew_test_desktop", ROOT / "tests/computer/desktop.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    spec.loader.exec_module(module)
    return module


def _p90(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.9 * len(values)) - 1)]


def _measure(backend: Any, app: str, runs: int) -> None:
    from kirocrew_computer.render import assign_indices, render_state

    walk_ms, render_ms = [], []
    for i in range(runs + 2):
        started = time.perf_counter()
        state = backend.snapshot(app, **CAPS)
        walked = time.perf_counter()
        text = render_state(assign_indices(state), text_limit=CAPS["text_limit"])
        done = time.perf_counter()
        if i >= 2:  # the first walks warm libatspi's cache
            walk_ms.append((walked - started) * 1000)
            render_ms.append((done - walked) * 1000)
    total = [w + r for w, r in zip(walk_ms, render_ms, strict=True)]
    print(f"  nodes {len(state.nodes)}, truncated {state.truncated}, reply {len(text):,} chars "
          f"({len(text.encode()):,} bytes), {text.count(chr(10)) + 1} lines")
    print(f"  snapshot   median {statistics.median(walk_ms):7.1f} ms   p90 {_p90(walk_ms):7.1f} ms")
    print(f"  render     median {statistics.median(render_ms):7.1f} ms   p90 {_p90(render_ms):7.1f} ms")
    print(f"  get_state  median {statistics.median(total):7.1f} ms   p90 {_p90(total):7.1f} ms   ({runs} runs)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    desktop = _desktop_module()
    reason = desktop.missing()
    if reason:
        print(f"skipped: {reason}", file=sys.stderr)
        return 2
    from kirocrew_testing.process_guard import become_subreaper
    from kirocrew_computer.x11.backend import X11Backend

    become_subreaper()
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp, \
            desktop.running_desktop(Path(tmp)) as running:
        backend = X11Backend(env=running.env)
        try:
            for rows in (50, 2000):
                started = time.perf_counter()
                app = running.launch_fixture_app(Path(tmp) / f"result-{rows}.txt", rows=rows)
                while not any(a.pid == app.pid for a in backend.list_apps()):
                    time.sleep(0.1)
                print(f"fixture app, {rows} rows (up in {time.perf_counter() - started:.1f} s):")
                _measure(backend, str(app.pid), args.runs)
        finally:
            backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
