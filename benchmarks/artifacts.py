#!/usr/bin/env python3
"""The artifact tools' costs, through the real tool handlers (schema checked, caller resolved as the owner).

    .venv/bin/python benchmarks/artifacts.py [--runs 30] [--library 1000]

Under a throwaway crew home: ``artifact_save`` and ``artifact_get`` of a 1 MiB Markdown artifact and an
``artifact_update`` of it (each a new version); then ``artifact_list`` over ``--library`` artifacts (one
``meta.json`` read per artifact, names redacted on the way out) and a filtered list. Median/p90/min in ms,
and the load average. Writes fsync every file, so the disk decides much of the save and update.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _bench import machine_load, row


def _time(runs: int, action: Callable[[int], Any]) -> list[float]:
    action(-1)  # warm caches and imports
    samples = []
    for n in range(runs):
        start = time.perf_counter()
        action(n)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--library", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        os.environ.update(HOME=root, KIRO_HOME=f"{root}/.kiro", KIROCREW_HOME=f"{root}/crew")
        from kirocrew_core.artifacts import store
        from kirocrew_core.artifacts.access import OWNER
        from kirocrew_core.artifacts.tools import artifact_tools
        from kirocrew_core.coretools.server import CoreToolsServer
        from kirocrew_core.host.caller import CallerContext

        core = CoreToolsServer(tool_source=lambda: {t.name: t for t in artifact_tools()})
        caller = CallerContext("", "cli", 0, None, {})

        def call(tool: str, **arguments: Any) -> str:
            text, code = asyncio.run(core.call(tool, arguments, caller, as_person=True))
            assert code is None, text
            return text

        body = ("Revenue grew in every region; the details follow. " * 20 + "\n") * 1024  # ~1 MiB of text
        megabyte = body[: 1024 * 1024]
        saves = _time(args.runs, lambda n: call("artifact_save", name=f"Big {n}", content=megabyte, slug=f"big{n + 1}"))
        gets = _time(args.runs, lambda n: call("artifact_get", slug="big1"))
        updates = _time(args.runs, lambda n: call("artifact_update", slug="big1", content=megabyte + str(n)))
        for n in range(args.library):
            store.save(store.NewArtifact(f"Note {n}", f"# Note {n}", "markdown", slug=f"note-{n}",
                                         tags=("weekly",) if n % 10 == 0 else ()), OWNER)
        total = len(store.listing(OWNER))
        lists = _time(args.runs, lambda n: call("artifact_list"))
        filtered = _time(args.runs, lambda n: call("artifact_list", tag="weekly"))
    print(f"{machine_load()}; list over {total} artifacts")
    print(row("artifact_save, 1 MiB", saves, width=36, fmt="8.2f"))
    print(row("artifact_get, 1 MiB", gets, width=36, fmt="8.2f"))
    print(row("artifact_update, 1 MiB (a version)", updates, width=36, fmt="8.2f"))
    print(row(f"artifact_list, {total}", lists, width=36, fmt="8.2f"))
    print(row(f"artifact_list tag=, {total}", filtered, width=36, fmt="8.2f"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
