#!/usr/bin/env python3
"""``kiro_wait`` wake-up latency: from a run's end to the waiter holding the answer (target median ≤ 20 ms).

    .venv/bin/python benchmarks/conversations_wait_wakeup.py [--runs 30]

Runs under a throwaway HOME with the fake kiro-cli as ``KIRO_CLI_PATH``. Each round starts
a run ``!sleep 0.3`` then ``!say x`` in one conversation (reused, sequentially, so its worker
is warm) and at once calls ``kiro_wait`` on it (mode ``any``). The latency is the wall-clock
time the waiter received the answer minus the run's ``endedAt`` as the server recorded it
(same machine clock; ``endedAt`` has millisecond resolution, truncated, so a figure may read
up to 1 ms high). It is measured twice:

* over MCP: a real ``kirocrew mcp-conversations`` through the mcp SDK's ``stdio_client``
  (``kiro_spawn`` then ``kiro_wait``); the figure includes the wait's wake-up, its re-reads,
  JSON both ways and stdio;
* in process: ``ConversationsService.start(ServiceConfig(state_dir=...))`` and the same two
  calls through ``service.call``, which separates the orchestrator's own wake-up from the
  MCP transport.

The first round of each is a warm-up (it starts kiro-cli) and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from _bench import fake_kiro_environment, row

CLOSE_GRACE_SECS = 15.0  # see conversations_delegate.py: the SDK client's 2 s kill would orphan workers
MESSAGE = "!sleep 0.3\n!say x"

Call = Callable[..., Awaitable[dict[str, Any]]]


def _row(label: str, samples: list[float]) -> str:
    return row(label, samples, width=34, fmt="7.2f", extremes=("max",))


def _environment(root: Path) -> dict[str, str]:
    return fake_kiro_environment(root)


async def _rounds(call: Call, workspace: str, name: str, runs: int) -> list[float]:
    """``runs`` + 1 spawn/wait rounds in one conversation; the latencies of all but the first."""
    conversation = "new"
    samples = []
    for index in range(runs + 1):
        extra = {"name": name, "workspace": workspace} if conversation == "new" else {}
        spawned = await call("kiro_spawn", conversation=conversation, message=MESSAGE, **extra)
        conversation = spawned["conversationId"]
        waited = await call("kiro_wait", targets=[{"conversationId": conversation, "runId": spawned["runId"]}],
                            mode="any")
        received = time.time()
        run = waited["runs"][0]
        if waited["waitExpired"] or run["status"] != "completed" or (run["reply"] or {}).get("text") != "x":
            raise SystemExit(f"round {index}: the wait returned {waited}")
        if index:
            ended = datetime.fromisoformat(run["endedAt"].replace("Z", "+00:00")).timestamp()
            samples.append((received - ended) * 1000)
    return samples


async def _over_mcp(env: dict[str, str], root: Path, runs: int) -> list[float]:
    import mcp.client.stdio
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import TextContent

    mcp.client.stdio.PROCESS_TERMINATION_TIMEOUT = CLOSE_GRACE_SECS
    kirocrew = str(Path(sys.executable).with_name("kirocrew"))
    params = StdioServerParameters(command=kirocrew, args=["mcp-conversations", "--standalone"],
                                   env={**env, "KIRO_CONVERSATIONS_STATE_DIR": str(root / "state-mcp")},
                                   cwd=str(root))
    with (root / "server.stderr").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
            await client.initialize()

            async def call(tool: str, **arguments: Any) -> dict[str, Any]:
                result = await client.call_tool(tool, arguments)
                if result.is_error:
                    first = result.content[0] if result.content else None
                    raise SystemExit(f"{tool} failed: {first.text if isinstance(first, TextContent) else result}")
                return result.structured_content

            return await _rounds(call, str(root / "workspace"), "over-mcp", runs)


async def _in_process(root: Path, runs: int) -> list[float]:
    from kirocrew_conversations.service import ConversationsService, ServiceConfig

    service = await ConversationsService.start(ServiceConfig(state_dir=root / "state-inproc"))
    try:
        async def call(tool: str, **arguments: Any) -> dict[str, Any]:
            return await service.call(tool, arguments)

        return await _rounds(call, str(root / "workspace"), "in-process", runs)
    finally:
        await service.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env = _environment(root)
        os.environ.update(env)  # the in-process service resolves kiro-cli and its homes from our environment
        over_mcp = asyncio.run(_over_mcp(env, root, args.runs))
        in_process = asyncio.run(_in_process(root, args.runs))

    print(f"run end (server's endedAt) -> waiter has the answer; `{MESSAGE!r}` runs, {args.runs} rounds each, "
          f"one warm conversation, kiro_spawn then kiro_wait (mode any)")
    print(_row("over MCP (real stdio server)", over_mcp))
    print(_row("in process (service.call)", in_process))
    print(f"MCP transport share (median difference): "
          f"{statistics.median(over_mcp) - statistics.median(in_process):+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
