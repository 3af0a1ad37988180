#!/usr/bin/env python3
"""A no-op tool call answered through the permission gate, next to the same call under ``--trust-all-tools``.

    .venv/bin/python benchmarks/gate_roundtrip.py [--rounds 30] [--calls 50]

Runs under a throwaway HOME with the fake kiro-cli. One in-process orchestrator (the host's, on a
real SQLite store) runs two conversations on warm workers: one whose kiro-cli is started with
``--trust-all-tools`` (kiro asks nothing: the floor, what every run did before the gate), and one
started as every run is now (no trust flag: kiro sends ``session/request_permission`` for each
call, and the orchestrator answers it from the permission policy: flush kiro's pending updates,
rebuild the call, decide it, answer ``allow_once``, queue the SEL record). Each run is ``--calls``
``!tool noop`` steps and ``!say ok``; the rounds alternate the two so a load spike hits both
alike. The figure is the extra time per call, (gated run − trusted run) / calls, per round
(median, p90, min; target ≤ 1 ms at the median). Next to it, the floor: the same turns on a bare
``AcpRuntime`` whose handler answers ``allow_once`` at once (the ACP exchange alone), and the
decision alone. The policy is the default one plus 500 owner
rules about other tools, so the decision has a realistic amount of matching to do.
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

from _bench import fake_kiro_environment, machine_load, row


def _policy_with_rules(count: int) -> None:
    from kirocrew_testing.policy import write_policy

    rules = []
    for index in range(count):
        kind = index % 4
        if kind == 0:
            rules.append({"decision": "allow", "tool": "shell", "command": f"tool{index} run"})
        elif kind == 1:
            rules.append({"decision": "deny", "tool": "shell", "command": f"danger{index}"})
        elif kind == 2:
            rules.append({"decision": "ask", "tool": "write", "path": f"secret{index}/**"})
        else:
            rules.append({"decision": "allow", "tool": f"@server{index}/tool"})
    write_policy(rules=rules)


async def _measure(root: Path, rounds: int, calls: int) -> tuple[list[float], list[float], list[float]]:
    from kirocrew_core.acp_runtime import AcpOptions

    from kirocrew_conversations.orchestrator import Orchestrator
    from kirocrew_conversations.store import Store, Workspace

    store = Store.open(root / "orchestrator.sqlite")
    trusted_ids: set[str] = set()

    def options(conversation: Any, run: Any) -> AcpOptions:
        return AcpOptions(agent=run.mode, trust_all_tools=conversation.id in trusted_ids)

    ids = {}
    for name in ("trusted", "gated"):
        workspace = root / f"ws-{name}"
        workspace.mkdir()
        ids[name] = store.create_conversation(name=name, workspace=Workspace("shared", str(workspace), name)).id
    trusted_ids.add(ids["trusted"])
    message = "!tool noop\n" * calls + "!say ok"
    samples: dict[str, list[float]] = {"trusted": [], "gated": []}
    async with Orchestrator(store, acp_options_factory=options) as orch:
        for name in ids:  # warm: worker, kiro-cli, session, the policy and the parser
            run = await orch.submit(ids[name], message)
            await orch.wait([run.id], timeout=120)
        for index in range(rounds):
            order = ("trusted", "gated") if index % 2 == 0 else ("gated", "trusted")
            for name in order:
                start = time.perf_counter()
                run = await orch.submit(ids[name], message)
                done = (await orch.wait([run.id], timeout=120)).runs[0]
                samples[name].append((time.perf_counter() - start) * 1000)
                if done.status != "completed" or done.reply_text != "ok":
                    raise SystemExit(f"{name} run ended {done.status} ({done.error_code}): {done.error_detail}")
        requests = len(store.permission_requests(run.id))
    store.close()
    if requests:
        raise SystemExit(f"{requests} calls reached the owner: the gate should have allowed every one")
    extra = [(gated - trusted) / calls for trusted, gated in zip(samples["trusted"], samples["gated"], strict=True)]
    return samples["trusted"], samples["gated"], extra


async def _exchange_floor(root: Path, rounds: int, calls: int) -> tuple[list[float], list[float]]:
    """The same turns on a bare ``AcpRuntime``: trusted, and answering every request ``allow_once`` at once.

    The difference is what one ``session/request_permission`` round trip costs by itself (two processes,
    JSON both ways), the part of the gate's cost that no policy can remove.
    """
    from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime

    async def allow(request: Any) -> str | None:
        return request.option_of_kind("allow_once")

    message = "!tool noop\n" * calls + "!say ok"
    workspace = str(root / "ws-gated")
    out: dict[str, list[float]] = {"trusted": [], "asked": []}
    async with AcpRuntime(AcpOptions(trust_all_tools=True)) as trusted, AcpRuntime(AcpOptions()) as asked:
        sessions = {"trusted": await trusted.new_session(workspace),
                    "asked": await asked.new_session(workspace, on_permission=allow)}
        for session in sessions.values():
            await session.prompt(message)
        for index in range(rounds):
            for name in (("trusted", "asked") if index % 2 == 0 else ("asked", "trusted")):
                start = time.perf_counter()
                await sessions[name].prompt(message)
                out[name].append((time.perf_counter() - start) * 1000)
    return out["trusted"], out["asked"]


def _decision_only(root: Path, count: int) -> list[float]:
    from kirocrew_core import home
    from kirocrew_core.gate.answer import decide_call
    from kirocrew_core.gate.calls import Context, ToolCall

    ctx = Context("unrestricted", "kirocrew", str(root / "ws-gated"), str(home.user_home()))
    call = ToolCall("noop", None, {})
    decide_call(call, ctx)
    out = []
    for _ in range(count):
        start = time.perf_counter()
        decide_call(call, ctx)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rules", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        os.environ.update(fake_kiro_environment(root))
        _policy_with_rules(args.rules)
        from kirocrew_testing.fixtures import write_lean_kirocrew_agent

        write_lean_kirocrew_agent()  # runs are the kirocrew agent: its file must be there (no managed servers)
        print(f"{args.rounds} interleaved rounds of {args.calls} no-op tool calls per run, {args.rules} owner rules; "
              f"{machine_load()}")
        trusted, gated, extra = asyncio.run(_measure(root, args.rounds, args.calls))
        bare_trusted, bare_asked = asyncio.run(_exchange_floor(root, args.rounds, args.calls))
        decision = _decision_only(root, 2000)
    exchange = [(a - t) / args.calls for t, a in zip(bare_trusted, bare_asked, strict=True)]
    print(row("run, --trust-all-tools (floor)", trusted, width=44))
    print(row("run, every call through the gate", gated, width=44))
    print(row("extra per call through the gate", extra, width=44, fmt="7.3f"))
    print(row("floor: one permission round trip, bare ACP", exchange, width=44, fmt="7.3f"))
    print(row("the decision alone (decide_call)", decision, width=44, fmt="7.4f"))
    median = statistics.median(extra)
    print(f"target ≤ 1 ms extra per call at the median: {'met' if median <= 1.0 else 'NOT met'} ({median:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
