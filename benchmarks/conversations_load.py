#!/usr/bin/env python3
"""8 conversations × 20 runs through a real ``kirocrew mcp-conversations``: throughput and memory.

    .venv/bin/python benchmarks/conversations_load.py [--conversations 8] [--runs 20] [--max-workers 4]

Runs under a throwaway HOME with the fake kiro-cli as ``KIRO_CLI_PATH``, talking to the server
through the mcp SDK's ``stdio_client``. Timed from the first call, it starts each conversation
with ``kiro_spawn`` (``!sleep 0.01`` then ``!say <conversation>.0``), queues the other runs of
each with ``kiro_send`` (``... !say <conversation>.<n>``), then waits with ``kiro_wait`` on
the last run of every conversation (at most 8 targets a call, mode ``all``) until no wait
expired. At most ``--max-workers`` conversations hold a kiro-cli at once; the others wait FIFO
for a slot, so with the default 4 the second half starts when the first half is done.

Printed: wall time from the first spawn to all done and runs per second; the server's peak
RSS (``VmHWM`` read from ``/proc`` just before closing) and CPU time; from ``/proc`` sampled
every 100 ms in a thread, the peak combined RSS of the server's descendants (kiro-cli
workers), the most of them alive at once and the CPU time they used. Every run is then read
back with ``kiro_result``: anything not ``completed`` with its own reply makes the script fail
loudly, since figures over broken runs are worthless.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _bench import fake_kiro_environment

CLOSE_GRACE_SECS = 30.0  # see conversations_delegate.py: the SDK client's 2 s kill would orphan workers
SAMPLE_SECS = 0.1


def _environment(root: Path) -> dict[str, str]:
    return fake_kiro_environment(root, state_dir=True)


# -- /proc -----------------------------------------------------------------------------------------
def _status_kib(pid: int, field: str) -> int | None:
    """``field`` (``VmRSS``, ``VmHWM``) of ``/proc/<pid>/status`` in KiB; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _cpu_secs(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far (its threads included); None once gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _parents() -> dict[int, int]:
    """pid → parent pid of every live process (zombies left out: they hold no memory)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
        if fields[0] != "Z":
            found[int(entry.name)] = int(fields[1])
    return found


def _descendants(root: int, parents: dict[int, int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def _server_pid() -> int:
    """Our child whose command line names ``mcp-conversations``: the server the SDK client started."""
    for pid in _descendants(os.getpid(), _parents()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"mcp-conversations" in handle.read():
                    return pid
        except OSError:
            continue
    raise SystemExit("found no child process running mcp-conversations")


class _Sampler(threading.Thread):
    """The server's descendants (kiro-cli workers), sampled every 100 ms.

    Peak combined RSS (KiB), peak count alive, and the CPU seconds each was last seen to have
    used (a worker's last < 100 ms before it exits are missed).
    """

    def __init__(self, server: int) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.peak_kib = 0
        self.peak_count = 0
        self.cpu_secs: dict[int, float] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(SAMPLE_SECS):
            pids = _descendants(self.server, _parents())
            sizes = [size for pid in pids if (size := _status_kib(pid, "VmRSS")) is not None]
            self.peak_kib = max(self.peak_kib, sum(sizes))
            self.peak_count = max(self.peak_count, len(sizes))
            for pid in pids:
                if (used := _cpu_secs(pid)) is not None:
                    self.cpu_secs[pid] = used


# -- the load --------------------------------------------------------------------------------------
async def _load(env: dict[str, str], root: Path, conversations: int, runs: int,
                max_workers: int) -> dict[str, Any]:
    import mcp.client.stdio
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.types import TextContent

    mcp.client.stdio.PROCESS_TERMINATION_TIMEOUT = CLOSE_GRACE_SECS
    kirocrew = str(Path(sys.executable).with_name("kirocrew"))
    params = StdioServerParameters(command=kirocrew, env=env, cwd=str(root),
                                   args=["mcp-conversations", "--standalone", "--max-workers", str(max_workers)])
    workspace = str(root / "workspace")
    with (root / "server.stderr").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            server = _server_pid()
            sampler = _Sampler(server)
            sampler.start()

            async def call(tool: str, **arguments: Any) -> dict[str, Any]:
                result = await client.call_tool(tool, arguments)
                if result.is_error:
                    first = result.content[0] if result.content else None
                    raise SystemExit(f"{tool} failed: {first.text if isinstance(first, TextContent) else result}")
                return result.structured_content

            def message(conversation: int, index: int) -> str:
                return f"!sleep 0.01\n!say {conversation}.{index}"

            # The first spawn resolves the default model (one `kiro-cli chat --list-models`); every
            # later one uses the cache. That is part of a real first call, so it is inside the figure.
            start = time.perf_counter()
            ids: list[tuple[str, str, str]] = []  # (conversation id, run id, expected reply)
            for c in range(conversations):
                out = await call("kiro_spawn", conversation="new", name=f"load-{c}", workspace=workspace,
                                 message=message(c, 0))
                ids.append((out["conversationId"], out["runId"], f"{c}.0"))
            for c in range(conversations):
                cid = ids[c][0]
                for n in range(1, runs):
                    out = await call("kiro_send", conversationId=cid, message=message(c, n))
                    ids.append((cid, out["runId"], f"{c}.{n}"))
            queued_s = time.perf_counter() - start
            last = {cid: rid for cid, rid, _ in ids}  # each conversation's last run
            targets = [{"conversationId": cid, "runId": rid} for cid, rid in last.items()]
            waits = 0
            for batch in (targets[i:i + 8] for i in range(0, len(targets), 8)):
                while True:
                    waits += 1
                    if not (await call("kiro_wait", targets=batch, mode="all"))["waitExpired"]:
                        break
            wall_s = time.perf_counter() - start
            sampler.stopping.set()
            sampler.join()
            server_hwm = _status_kib(server, "VmHWM")
            server_cpu = _cpu_secs(server)

            bad = []
            for cid, rid, expected in ids:
                run = await call("kiro_result", conversationId=cid, runId=rid)
                reply = (run.get("reply") or {}).get("text")
                if run["status"] != "completed" or reply != expected:
                    bad.append(f"{rid}: {run['status']} reply {reply!r} error {run['error']}")
            if bad:
                raise SystemExit(f"{len(bad)} of {len(ids)} runs did not complete as asked:\n" + "\n".join(bad[:20]))
    return {"runs": len(ids), "queued_s": queued_s, "wall_s": wall_s, "waits": waits, "server_hwm": server_hwm,
            "server_cpu": server_cpu, "children_kib": sampler.peak_kib, "children": sampler.peak_count,
            "children_cpu": sum(sampler.cpu_secs.values()), "processes_seen": len(sampler.cpu_secs)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--runs", type=int, default=20, help="runs per conversation")
    parser.add_argument("--max-workers", type=int, default=4, choices=range(1, 9))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        out = asyncio.run(_load(_environment(root), root, args.conversations, args.runs, args.max_workers))

    mib = 1024
    print(f"{args.conversations} conversations x {args.runs} runs (`!sleep 0.01` + `!say`), --max-workers "
          f"{args.max_workers}, real `kirocrew mcp-conversations` over stdio; all {out['runs']} runs completed")
    print(f"{'all spawned and queued after':<38} {out['queued_s'] * 1000:8.0f} ms")
    print(f"{'first spawn -> all done':<38} {out['wall_s']:8.2f} s   ({out['waits']} kiro_wait calls)")
    print(f"{'throughput':<38} {out['runs'] / out['wall_s']:8.1f} runs/s")
    hwm = "n/a" if out["server_hwm"] is None else f"{out['server_hwm'] / mib:8.1f} MiB"
    print(f"{'server peak RSS (VmHWM)':<38} {hwm}")
    print(f"{'kiro-cli workers: peak combined RSS':<38} {out['children_kib'] / mib:8.1f} MiB   "
          f"(at most {out['children']} alive at once, sampled every {SAMPLE_SECS * 1000:.0f} ms)")
    print(f"{'CPU used: server / kiro-cli workers':<38} {out['server_cpu'] or 0:8.2f} s / {out['children_cpu']:.2f} s "
          f"({out['processes_seen']} kiro-cli processes seen, probes included; {os.cpu_count()} CPUs here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
