#!/usr/bin/env python3
"""Cold mint, click to ``waiting``: a dedicated fake kiro-cli minting against the OAuth fixture server.

    .venv/bin/python benchmarks/connections_mint.py [--runs 15] [--init-delay SECS]

Each run is what a Connect click pays before the card can show the approval
link: the mint row is reserved (the POST's answer), then the engine writes the
single-server spec, spawns ``kiro-cli acp --agent <spec>``, runs ``initialize``
and ``session/new``, and waits for ``_kiro.dev/mcp/oauth_request`` (the fake
probes the server, discovers, registers a client and starts its loopback
listener, as kiro-cli does). The clock stops when the row turns ``waiting``;
the row is then cancelled (no consent, so no grant and every run stays cold),
and the cancel → process-and-spec-gone time is printed too.

Fixed delays the fake imitates: none by default. ``KIRO_FAKE_INIT_DELAY``
(``--init-delay``) adds a wait before ``initialize`` is answered, to imitate a
slow kiro-cli start; its other timings (``KIRO_FAKE_MCP_INIT_TIMEOUT`` 10 s, the
600 s consent window, the 5 s server close wait) are deadlines, not delays.
So this measures kirocrew's mint path plus a Python process start and a real
OAuth discovery + registration over loopback, not kiro-cli's own ~7.5 s.

Everything runs under a throwaway HOME / KIRO_HOME / KIROCREW_HOME.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from _bench import row

if TYPE_CHECKING:  # imported inside the functions, after the environment is set up
    from kirocrew_connections.registry import Provider


def _row(label: str, samples: list[float]) -> str:
    return row(label, samples, width=40, fmt="8.1f", extremes=("min", "max"))


def _isolate(root: Path, init_delay: float) -> None:
    for name, sub in (("HOME", "home"), ("KIRO_HOME", "home/.kiro"), ("KIROCREW_HOME", "home/.kirocrew")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(root / sub)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kiro-cli"
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kirocrew_testing.fake_kiro "$@"\n')
    fake.chmod(0o755)
    os.environ["KIRO_CLI_PATH"] = str(fake)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    for name in list(os.environ):
        if name.startswith("KIRO_FAKE_"):
            del os.environ[name]
    if init_delay:
        os.environ["KIRO_FAKE_INIT_DELAY"] = str(init_delay)


async def _runs(provider: Provider, runs: int) -> tuple[list[float], list[float]]:
    from kirocrew_connections.mint import MintEngine

    engine = MintEngine()
    to_waiting: list[float] = []
    to_released: list[float] = []
    try:
        for index in range(runs + 1):  # the first run warms the interpreter's caches and is dropped
            start = time.perf_counter()
            row = engine.start(provider)
            while engine.view(row.slug)["state"] == "minting":
                await asyncio.sleep(0.002)
            waited = time.perf_counter()
            state = engine.view(row.slug)["state"]
            if state != "waiting":
                raise SystemExit(f"run {index}: the mint ended {engine.view(row.slug)}, not waiting")
            await engine.cancel(row.slug, row.token)
            released = time.perf_counter()
            if index:
                to_waiting.append((waited - start) * 1000)
                to_released.append((released - waited) * 1000)
    finally:
        await engine.aclose()
    return to_waiting, to_released


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--init-delay", type=float, default=0.0, metavar="SECS",
                        help="KIRO_FAKE_INIT_DELAY: imitate a slow kiro-cli start")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kc-mint-bench-") as tmp:
        _isolate(Path(tmp), args.init_delay)
        from kirocrew_testing.servers import OAUTH_MODULE, launch

        from kirocrew_connections.registry import load_registry

        server = launch(OAUTH_MODULE, "--port", "0")
        try:
            mcp_url = json.loads(server.ready)["mcp_url"]
            provider = dataclasses.replace(load_registry().get("notion"), slug="bench", mcp_url=mcp_url)
            to_waiting, to_released = asyncio.run(_runs(provider, args.runs))
        finally:
            server.stop()

    print(f"cold mint with the fake kiro-cli ({args.runs} runs, KIRO_FAKE_INIT_DELAY={args.init_delay:g}s)")
    print(_row("click -> waiting (approval URL served)", to_waiting))
    print(_row("cancel -> process and spec released", to_released))


if __name__ == "__main__":
    main()
