#!/usr/bin/env python3
"""Spawn to a ``tools/list`` answer: a relay to a running host, next to the in-process servers and the process floor.

    .venv/bin/python benchmarks/relay_start.py [--runs 20] [--cold-runs 8] [--inherit-bytecode]

What an MCP client waits for before it can offer a server's tools, measured the same way for
every server: a raw stdio JSON-RPC driver (write a line, read a line; no SDK on the client
side) spawns the process, sends ``initialize``, waits for its answer, sends
``notifications/initialized`` and ``tools/list`` and stops the clock at the list. Side by side,
interleaved run by run so a load spike hits them alike, under one throwaway HOME and crew home
with the fake kiro-cli:

* ``python -c pass``: spawn to exit of the interpreter, the floor of any Python process;
  ``python -c "import kirocrew_core.relay"``: that floor plus the relay's imports;
* a bare mcp-SDK low-level stdio server with 16 tools (``_bare_mcp_server.py``);
* the echo test server in process over stdio (``_echo_stdio.py``) and ``kirocrew
  mcp-conversations --standalone`` (today's in-process server, its own state directory);
* ``kirocrew mcp-echo`` and ``kirocrew mcp-conversations`` with the host up: relays.

Then where a relay's start goes (``_relay_probe.py``: imports, fingerprint, connect and
welcome, the two round trips, timed inside the process) and the relay's largest imports
(``-X importtime``, median self time). Last, the on-demand start: no host runs, the relay
starts one (``kirocrew serve --background``, every installed plugin) and the clock stops at
the ``tools/list`` answer; the host is stopped between samples.

Python's bytecode cache is on (in a throwaway prefix) as it is for an installed wheel;
``--inherit-bytecode`` keeps the inherited settings instead: under ``PYTHONDONTWRITEBYTECODE=1``
a checkout without ``__pycache__`` files then recompiles every kirocrew module in every process.

How to read it: the target is a relay at most 4x ``python -c pass`` at the median (the Node
SDK reference servers take about 40x); the on-demand figure is paid once per crew home until
the host idles out.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import (
    RawPeer,
    echo_host_environment,
    kirocrew_argv,
    machine_load,
    row,
    start_host,
    stop_host,
    use_environment,
    with_bytecode_cache,
)

TARGET_RATIO = 4.0
HERE = Path(__file__).resolve().parent
FLOOR = "python -c pass (process floor)"


def _row(label: str, samples: list[float], *, fmt: str = "7.1f", extremes: tuple[str, ...] = ("min",)) -> str:
    return row(label, samples, width=62, fmt=fmt, extremes=extremes)


def _spawn_to_list(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(ms to the initialize answer, ms to the tools/list answer, tools listed); the server is closed after."""
    start = time.perf_counter()
    peer = RawPeer(argv, env)
    try:
        peer.initialize()
        initialized = time.perf_counter()
        tools = peer.request("tools/list")["result"]["tools"]
        listed = time.perf_counter()
    finally:
        status = peer.close()
    if status != 0:
        raise SystemExit(f"{argv!r} exited {status}")
    return (initialized - start) * 1000, (listed - start) * 1000, len(tools)


def _spawn_to_exit(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000


def _probe(env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, str(HERE / "_relay_probe.py"), "mcp-echo"], env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True).stdout
    return {name: float(value) for name, value in (pair.split("=") for pair in out.split())}


def _import_self_times(env: dict[str, str]) -> dict[str, int]:
    """``-X importtime`` of the relay: each module's self time (us) in one fresh process."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "import kirocrew_core.relay"], env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, check=True).stderr
    times = {}
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            times[parts[2].strip()] = int(parts[0].split(":")[1])
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="samples per server with the host up")
    parser.add_argument("--cold-runs", type=int, default=8, help="on-demand host starts per relay command")
    parser.add_argument("--inherit-bytecode", action="store_true",
                        help="keep the inherited bytecode settings instead of a throwaway cache")
    args = parser.parse_args()
    kirocrew = kirocrew_argv()
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-") as tmp:
        root = Path(tmp)
        env = echo_host_environment(root)
        if not args.inherit_bytecode:
            env = with_bytecode_cache(env, root)
        use_environment(env)
        load_before = machine_load()
        standalone_env = {**env, "KIRO_CONVERSATIONS_STATE_DIR": str(root / "state-standalone")}
        exits = {FLOOR: [py, "-c", "pass"],
                 "python -c 'import kirocrew_core.relay'": [py, "-c", "import kirocrew_core.relay"]}
        servers = {
            "bare mcp SDK server, 16 tools": ([py, str(HERE / "_bare_mcp_server.py")], env),
            "echo server in process (SDK stdio)": ([py, str(HERE / "_echo_stdio.py")], env),
            "kirocrew mcp-conversations --standalone": ([*kirocrew, "mcp-conversations", "--standalone"],
                                                       standalone_env),
            "relay: kirocrew mcp-echo (host up)": ([*kirocrew, "mcp-echo"], env),
            "relay: kirocrew mcp-conversations (host up)": ([*kirocrew, "mcp-conversations"], env),
        }
        exit_samples: dict[str, list[float]] = {name: [] for name in exits}
        init_samples: dict[str, list[float]] = {name: [] for name in servers}
        list_samples: dict[str, list[float]] = {name: [] for name in servers}
        phases: dict[str, list[float]] = collections.defaultdict(list)
        imports: dict[str, list[int]] = collections.defaultdict(list)
        tool_counts: dict[str, int] = {}
        cold: dict[str, list[float]] = {"echo": [], "conversations": []}
        try:
            pong = start_host()
            for index in range(-1, args.runs):  # run -1 fills the caches and warms the host; not counted
                for name, argv in exits.items():
                    elapsed = _spawn_to_exit(argv, env)
                    if index >= 0:
                        exit_samples[name].append(elapsed)
                for name, (argv, server_env) in servers.items():
                    initialized, listed, count = _spawn_to_list(argv, server_env)
                    tool_counts[name] = count
                    if index >= 0:
                        init_samples[name].append(initialized)
                        list_samples[name].append(listed)
                for phase, ms in _probe(env).items():
                    if index >= 0:
                        phases[phase].append(ms)
                for module, us in _import_self_times(env).items():
                    if index >= 0:
                        imports[module].append(us)
            for _ in range(args.cold_runs):
                for name in cold:
                    stop_host()
                    cold[name].append(_spawn_to_list([*kirocrew, f"mcp-{name}"], env)[1])
        finally:
            stop_host()
        load_after = machine_load()

    floor = statistics.median(exit_samples[FLOOR])
    floor_min = min(exit_samples[FLOOR])
    cache = "inherited bytecode settings" if args.inherit_bytecode else "bytecode cached"
    print(f"spawn -> tools/list answered over raw stdio JSON-RPC, {args.runs} interleaved runs each "
          f"({cache}; host pid {pong.get('pid')} up, every installed plugin loaded)")
    print(f"machine: {load_before} before, {load_after.split(', ', 1)[1]} after")
    for name, samples in exit_samples.items():
        print(_row(f"{name}: exited", samples))
    for name in servers:
        print(_row(f"{name}: initialize", init_samples[name]))
        print(_row(f"{name}: tools/list ({tool_counts[name]} tools)", list_samples[name]))
    print(f"ratio to the python -c pass floor, tools/list: median/median (floor {floor:.1f} ms; the target, "
          f"relay <= {TARGET_RATIO:g}x) and min/min (floor {floor_min:.1f} ms; the least disturbed runs):")
    for name in servers:
        ratio = statistics.median(list_samples[name]) / floor
        verdict = ("  met" if ratio <= TARGET_RATIO else "  MISSED") if name.startswith("relay") else ""
        print(f"  {name:<56} {ratio:5.1f}x  {min(list_samples[name]) / floor_min:5.1f}x{verdict}")
    print("where a relay's start goes, timed inside the relay process (_relay_probe.py, mcp-echo):")
    for phase, samples in phases.items():
        print(_row(f"  {phase}", samples, fmt="7.2f"))
    print("the relay's largest imports, -X importtime self time (median us):")
    ranked = sorted(((statistics.median(times), module) for module, times in imports.items()), reverse=True)
    for median_us, module in ranked[:12]:
        print(f"  {median_us:>8.0f}  {module}")
    print(f"on-demand start (no host: the relay starts one), spawn -> tools/list, {args.cold_runs} runs each")
    for name, samples in cold.items():
        print(_row(f"relay: kirocrew mcp-{name} (no host)", samples, extremes=("min", "max")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
