#!/usr/bin/env python3
"""``kiro_delegate`` round trip on a warm worker, next to a direct ACP prompt to the same fake kiro-cli.

    .venv/bin/python benchmarks/conversations_delegate.py [--runs 40] [--max-workers 4] [--turn-ms 0,50,250]

Runs under a throwaway HOME with the fake kiro-cli as ``KIRO_CLI_PATH``. It starts a real
``kirocrew mcp-conversations`` through the mcp SDK's ``stdio_client`` and, in the same event
loop, a direct ACP client: ``AcpRuntime(AcpOptions(trust_all_tools=True))`` with one session.
Both are warmed untimed (one ``kiro_delegate`` creating the conversation, so its worker,
kiro-cli process and ACP session exist, and one direct prompt), then ``--runs`` rounds are
timed, interleaved so a load spike hits both alike: a ``kiro_delegate`` of ``!say ok``
continuing that conversation (spawn + wait to the end of the run, the reply checked), and a
direct ``session.prompt("!say ok")`` whose reply chunks are collected. The overhead ratio is
delegate median / direct median (target ≤ 1.2), printed for each ``--turn-ms``: ``0`` is the fake's
no-op turn (``!say ok``, about 1.5 ms — the pure overhead, which an MCP round trip alone exceeds),
larger values add ``!sleep`` so the turn itself takes that long, as any real model turn does
(seconds). ``kiro_result`` on the last run is timed
too: a pure read over MCP (schema validation, two SQLite reads, JSON both ways, stdio), so
what is transport and what is orchestration can be told apart.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import fake_kiro_environment, row

# The SDK's stdio client kills a server still running 2 s after stdin closed; closing kiro
# workers may take longer on a loaded machine, and the kill would orphan them.
CLOSE_GRACE_SECS = 15.0


def _row(label: str, samples: list[float]) -> str:
    return row(label, samples, width=40, fmt="7.2f")


def _environment(root: Path) -> dict[str, str]:
    return fake_kiro_environment(root, state_dir=True)


async def _call(session: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise SystemExit(f"{tool} failed: {result.content[0].text if result.content else result}")
    return result.structured_content


def _check_completed(run: dict[str, Any], text: str) -> None:
    reply = (run.get("reply") or {}).get("text")
    if run["status"] != "completed" or reply != text:
        raise SystemExit(f"run {run['runId']} ended {run['status']} with reply {reply!r} (error {run['error']})")


def _message(turn_ms: int) -> str:
    return f"!sleep {turn_ms / 1000}\n!say ok" if turn_ms else "!say ok"


async def _measure(env: dict[str, str], root: Path, runs: int, max_workers: int,
                   turn_ms: int) -> dict[str, list[float]]:
    import mcp.client.stdio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime

    mcp.client.stdio.PROCESS_TERMINATION_TIMEOUT = CLOSE_GRACE_SECS
    kirocrew = str(Path(sys.executable).with_name("kirocrew"))
    params = StdioServerParameters(command=kirocrew, env=env, cwd=str(root),
                                   args=["mcp-conversations", "--standalone", "--max-workers", str(max_workers)])
    workspace = str(root / "workspace")
    samples: dict[str, list[float]] = {"delegate": [], "direct": [], "result": []}
    chunks: list[str] = []

    async def collect(session_id: str, update: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            chunks.append(update.content.text)

    with (root / "server.stderr").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client, \
                AcpRuntime(AcpOptions(trust_all_tools=True, env=env)) as runtime:
            await client.initialize()
            warm = await _call(client, "kiro_delegate", conversation="new", name="bench", workspace=workspace,
                               message="!say warm")
            _check_completed(warm["run"], "warm")
            conversation = warm["run"]["conversationId"]
            session = await runtime.new_session(workspace, on_update=collect)
            await session.prompt("!say warm")
            for _ in range(runs):
                start = time.perf_counter()
                out = await _call(client, "kiro_delegate", conversation=conversation, message=_message(turn_ms))
                samples["delegate"].append((time.perf_counter() - start) * 1000)
                _check_completed(out["run"], "ok")
                chunks.clear()
                start = time.perf_counter()
                result = await session.prompt(_message(turn_ms))
                samples["direct"].append((time.perf_counter() - start) * 1000)
                if result.stop_reason != "end_turn" or "".join(chunks) != "ok":
                    raise SystemExit(f"direct prompt ended {result.stop_reason} with {''.join(chunks)!r}")
            last = out["run"]["runId"]
            for _ in range(runs):
                start = time.perf_counter()
                await _call(client, "kiro_result", conversationId=conversation, runId=last)
                samples["result"].append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--max-workers", type=int, default=4)
    parser.add_argument("--turn-ms", default="0,50,250", help="comma-separated turn lengths to measure")
    args = parser.parse_args()
    print(f"warm worker, {args.runs} interleaved rounds per turn length; real `kirocrew mcp-conversations` over "
          f"stdio (mcp SDK client) vs AcpRuntime to the same fake kiro-cli")
    for turn_ms in (int(part) for part in args.turn_ms.split(",")):
        with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
            root = Path(tmp)
            env = _environment(root)
            os.environ.update(env)  # the direct runtime resolves kiro-cli and its homes from our environment
            samples = asyncio.run(_measure(env, root, args.runs, args.max_workers, turn_ms))
        delegate = statistics.median(samples["delegate"])
        direct = statistics.median(samples["direct"])
        print(f"\n-- turn: {_message(turn_ms)!r}")
        print(_row("kiro_delegate (spawn + wait, via MCP)", samples["delegate"]))
        print(_row("direct ACP session.prompt", samples["direct"]))
        print(_row("kiro_result (a read, via MCP)", samples["result"]))
        print(f"overhead ratio (delegate median / direct median): {delegate / direct:.2f}  (target <= 1.2)")
        print(f"delegate - direct - kiro_result (orchestration beyond one MCP round trip): "
              f"{delegate - direct - statistics.median(samples['result']):+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
