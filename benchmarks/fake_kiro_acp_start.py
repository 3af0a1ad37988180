#!/usr/bin/env python3
"""CPU of one whole fake kiro-cli ACP session: initialize, session/new, one prompt, stdin closed.

    .venv/bin/python benchmarks/fake_kiro_acp_start.py [--runs 20] [--source OTHER/kirocrew_testing/src]

The suite starts the fake ``kiro-cli`` about a thousand times, most of them for sessions this
short. Each run spawns ``python -m kirocrew_testing.fake_kiro acp``, speaks raw ACP to it over
its pipes (``initialize``, ``session/new`` without MCP servers, a ``!say hi`` prompt), closes
its stdin and reads the process's whole CPU (user + sys, from ``wait4``, start to exit). It
measures, interleaved:

* this checkout's fake, as the suite runs it;
* the same with ``KIRO_FAKE_STRICT=1`` (every frame checked with the acp SDK's models);
* with ``--source DIR``, the fake of another checkout (``DIR`` is its ``kirocrew_testing/src``,
  put first on ``PYTHONPATH``), e.g. an export of the main branch to compare before and after.

Prints the median/p90/min CPU of each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _bench

CURRENT, STRICT, OTHER = "this checkout", "this checkout, KIRO_FAKE_STRICT=1", "--source"


def _send(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write((json.dumps(message) + "\n").encode())
    process.stdin.flush()


def _answer(process: subprocess.Popen[bytes], request_id: int) -> dict[str, Any]:
    assert process.stdout is not None
    while line := process.stdout.readline():
        message = json.loads(line)
        if message.get("id") == request_id and "method" not in message:
            if "error" in message:
                raise SystemExit(f"the fake refused request {request_id}: {message['error']}")
            return message["result"]
    raise SystemExit(f"the fake exited before answering request {request_id}")


def one_session(env: dict[str, str], cwd: Path) -> float:
    """The fake's CPU seconds for one short session, from spawn to exit."""
    process = subprocess.Popen([sys.executable, "-m", "kirocrew_testing.fake_kiro", "acp"], env=env, cwd=cwd,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    _send(process, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
    _answer(process, 0)
    _send(process, {"jsonrpc": "2.0", "id": 1, "method": "session/new",
                    "params": {"cwd": str(cwd), "mcpServers": []}})
    session_id = _answer(process, 1)["sessionId"]
    _send(process, {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                    "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "!say hi"}]}})
    _answer(process, 2)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.close()
    process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"the fake exited {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--source", type=Path, help="another checkout's kirocrew_testing/src to measure too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fake-kiro-acp-start-") as tmp:
        root = Path(tmp)
        env = _bench.fake_kiro_environment(root)
        envs = {CURRENT: env, STRICT: {**env, "KIRO_FAKE_STRICT": "1"}}
        if args.source is not None:
            if not (args.source / "kirocrew_testing" / "fake_kiro").is_dir():
                raise SystemExit(f"{args.source} holds no kirocrew_testing/fake_kiro")
            envs[OTHER] = {**env, "PYTHONPATH": os.pathsep.join(
                filter(None, [str(args.source.resolve()), env.get("PYTHONPATH", "")]))}
        samples: dict[str, list[float]] = {label: [] for label in envs}
        for label_env in envs.values():  # warm-up: the OS caches and the bytecode
            one_session(label_env, root / "workspace")
        for _ in range(args.runs):
            for label, label_env in envs.items():
                samples[label].append(one_session(label_env, root / "workspace"))
    print(f"fake kiro-cli ACP session (initialize, session/new, one prompt, exit), {args.runs} runs each, "
          f"interleaved ({_bench.machine_load()})")
    for label, cpu in samples.items():
        name = f"--source {args.source}" if label == OTHER else label
        print(_bench.row(f"{name}: CPU", [c * 1000 for c in cpu], width=48, fmt="7.1f"))


if __name__ == "__main__":
    main()
