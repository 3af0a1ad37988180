#!/usr/bin/env python3
"""Cold start of ``kirocrew mcp-conversations --standalone`` (in process): spawn to ``tools/list``, over stdio.

    .venv/bin/python benchmarks/conversations_cold_start.py [--runs 15]

What an MCP client waits for before it can offer the tools: each run spawns the server through
the mcp SDK's ``stdio_client``, initializes a ``ClientSession`` and lists the tools, with a fresh
state directory (so the database is created and migrated every time) under a throwaway HOME and
the fake kiro-cli as ``KIRO_CLI_PATH``. Next to it, the same measurement for a bare mcp-SDK
low-level stdio server with 16 trivial tools (the floor any Python MCP server on this SDK pays),
and ``python -c pass``. Also printed: the time from closing stdin to the process having exited,
which real SDK clients allow 2 s before they signal the server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _bench import row

BARE_SERVER = '''
import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [types.Tool(name=f"tool_{i}", description="A trivial tool.",
                    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
                    output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}})
         for i in range(16)]


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text='{"ok":true}')],
                                structured_content={"ok": True})


async def main():
    server = Server("bare", version="0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
'''


def _row(label: str, samples: list[float]) -> str:
    return row(label, samples, width=51, fmt="7.1f")


async def _one(command: str, args: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, float, int]:
    """(ms to the initialize answer, ms to the tools/list answer, ms from closing stdin to exit, tools)."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
    with open(os.devnull, "w") as errlog:
        start = time.perf_counter()
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                initialized = time.perf_counter()
                tools = await session.list_tools()
                listed = time.perf_counter()
            closing = time.perf_counter()
        closed = time.perf_counter()
    return ((initialized - start) * 1000, (listed - start) * 1000, (closed - closing) * 1000, len(tools.tools))


def _measure(servers: dict[str, tuple[str, list[str], Callable[[int], dict[str, str]]]], runs: int,
             cwd: str) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """Run the servers in turn, ``runs`` times each, interleaved so a load spike hits them alike."""
    from kirocrew_conversations.tool_schemas import TOOLS

    samples: dict[str, tuple[list[float], list[float], list[float]]] = {name: ([], [], []) for name in servers}
    # The bare server's 16 tools, and ours: every tool the conversations server declares.
    expected = {name: 16 if name.startswith("bare") else len(TOOLS) for name in servers}
    for index in range(-1, runs):  # run -1 warms the page cache and is not counted
        for name, (command, args, env_for_run) in servers.items():
            initialized, listed, closed, count = asyncio.run(_one(command, args, env_for_run(index), cwd))
            if count != expected[name]:
                raise SystemExit(f"{name} listed {count} tools, not {expected[name]}")
            if index >= 0:
                for bucket, value in zip(samples[name], (initialized, listed, closed), strict=True):
                    bucket.append(value)
    return samples


def _python_pass(env: dict[str, str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, capture_output=True, check=True)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    kirocrew = Path(sys.executable).with_name("kirocrew")
    fake_kiro = Path(sys.executable).with_name("fake-kiro-cli")
    if not kirocrew.exists() or not fake_kiro.exists():
        print(f"no kirocrew/fake-kiro-cli next to {sys.executable}; run with the project's .venv python",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        base = {key: value for key, value in os.environ.items() if not key.startswith("KIRO_CONVERSATIONS_")}
        base.update(HOME=str(root / "home"), KIRO_HOME=str(root / "home" / ".kiro"),
                    KIROCREW_HOME=str(root / "crew"), KIRO_CLI_PATH=str(fake_kiro))

        def fresh_state(index: int) -> dict[str, str]:
            return {**base, "KIRO_CONVERSATIONS_STATE_DIR": str(root / f"state-{index}")}

        bare = root / "bare_server.py"
        bare.write_text(BARE_SERVER)
        floor = _python_pass(base, args.runs)
        measured = _measure({
            "bare": (sys.executable, [str(bare)], lambda _index: base),
            "ours": (str(kirocrew), ["mcp-conversations", "--standalone"], fresh_state),
        }, args.runs, tmp)
        bare_init, bare_list, bare_close = measured["bare"]
        ours_init, ours_list, ours_close = measured["ours"]

    print(f"spawn -> answer over real stdio via the mcp SDK client, {args.runs} interleaved runs each "
          f"(fresh state dir per run for kirocrew)")
    print(_row("python -c pass (process floor)", floor))
    print(_row("bare mcp SDK server: initialize answered", bare_init))
    print(_row("bare mcp SDK server: tools/list answered", bare_list))
    print(_row("mcp-conversations --standalone: initialize", ours_init))
    print(_row("mcp-conversations --standalone: tools/list", ours_list))
    print(_row("bare mcp SDK server: stdin closed -> exited", bare_close))
    print(_row("mcp-conversations --standalone: stdin closed -> exited", ours_close))
    over = statistics.median(ours_list) - statistics.median(bare_list)
    print(f"kirocrew's own cost over the bare SDK server (median tools/list): {over:+.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
