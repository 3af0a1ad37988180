"""``resource_status``: how much room this host has for more kiro-cli workers, and what to do about it.

A session deciding whether to fan work out to sub-agents needs the machine's state, not a guess:
CPU (cores, how busy, load average), memory, the kiro-cli workers running (their count and
resident memory, from the ``worker_load()`` hook: kirocrew-conversations owns them) and the
sub-agent cap. From those it names a posture and its guidance:

- ``critical``: available memory under 10% (or 512 MiB), or a 1-minute load of 2 per core or more;
- ``tight``: available memory under 25% (or 2 GiB), a load of 1 per core or more, or runs waiting
  for a free worker;
- ``ample``: otherwise;
- ``unmeasured``: neither memory nor load could be read.

psutil is imported inside the functions: the tool list is built on every ``tools/list``.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

from kirocrew_core.contributions import CoreMcpTool, WorkerLoad

MIB = 1024 * 1024
GIB = 1024 * MIB
CPU_SAMPLE_SECS = 0.2
CRITICAL_MEMORY_FRACTION, CRITICAL_MEMORY_BYTES, CRITICAL_LOAD_PER_CORE = 0.10, 512 * MIB, 2.0
TIGHT_MEMORY_FRACTION, TIGHT_MEMORY_BYTES, TIGHT_LOAD_PER_CORE = 0.25, 2 * GIB, 1.0
POSTURES = ("critical", "tight", "ample", "unmeasured")


@dataclass(frozen=True)
class Machine:
    """What the host machine looks like now; ``None`` for what could not be read."""

    cores: int | None
    cpu_percent: float | None
    load: tuple[float, float, float] | None
    memory_total: int | None
    memory_available: int | None

    @property
    def load_per_core(self) -> float | None:
        return self.load[0] / self.cores if self.load is not None and self.cores else None


@dataclass(frozen=True)
class Workers:
    """One ``worker_load()`` answer, with the resident memory of its workers measured."""

    load: WorkerLoad
    resident: int | None


def measure_machine(cpu_sample_secs: float = CPU_SAMPLE_SECS) -> Machine:
    """Read the machine (blocks for ``cpu_sample_secs`` to sample CPU use: call it in a thread)."""
    import psutil

    def read(fn: Any) -> Any:
        try:
            return fn()
        except (psutil.Error, OSError, AttributeError):
            return None

    memory = read(psutil.virtual_memory)
    load = read(os.getloadavg)
    return Machine(
        cores=read(psutil.cpu_count) or None,
        cpu_percent=read(lambda: psutil.cpu_percent(interval=cpu_sample_secs)),
        load=tuple(load) if load is not None else None,
        memory_total=int(memory.total) if memory is not None else None,
        memory_available=int(memory.available) if memory is not None else None,
    )


def posture(machine: Machine, workers: list[Workers]) -> str:
    """``critical``, ``tight``, ``ample`` or ``unmeasured`` (see the module's thresholds)."""
    per_core = machine.load_per_core
    total, available = machine.memory_total, machine.memory_available
    fraction = available / total if total and available is not None else None
    if per_core is None and fraction is None:
        return "unmeasured"

    def short(share: float, floor: int) -> bool:
        return fraction is not None and available is not None and (fraction < share or available < floor)

    if short(CRITICAL_MEMORY_FRACTION, CRITICAL_MEMORY_BYTES) or (per_core or 0) >= CRITICAL_LOAD_PER_CORE:
        return "critical"
    waiting = any(w.load.runs_in_progress > w.load.max_workers for w in workers)
    if short(TIGHT_MEMORY_FRACTION, TIGHT_MEMORY_BYTES) or (per_core or 0) >= TIGHT_LOAD_PER_CORE or waiting:
        return "tight"
    return "ample"


def guidance(state: str, cap: int | None) -> str:
    room = f", up to the cap of {cap} at once" if cap is not None else ""
    return {
        "critical": "This host is short of memory or CPU: do not spawn sub-agents now. Do the work yourself, one "
                    "step at a time, or wait for running workers to finish before fanning out.",
        "tight": "This host is busy: spawn at most one sub-agent at a time, and do small tasks yourself.",
        "ample": f"This host has room: independent tasks may run as parallel sub-agents{room}.",
        "unmeasured": "This host's load could not be measured: spawn sub-agents sparingly.",
    }[state]


def _size(count: int) -> str:
    return f"{count / GIB:.1f} GiB" if count >= GIB else f"{count // MIB} MiB"


def report(machine: Machine, workers: list[Workers], failed: list[str]) -> str:
    """The tool's text: the summary lines, the sub-agent cap line, then the posture's guidance."""
    state = posture(machine, workers)
    lines = [f"Host resources: {state}"]
    cpu = [f"{machine.cores} cores" if machine.cores else "cores unknown"]
    if machine.cpu_percent is not None:
        cpu.append(f"{machine.cpu_percent:.0f}% busy")
    if machine.load is not None:
        per_core = machine.load_per_core
        cpu.append("load " + " ".join(f"{value:.2f}" for value in machine.load)
                   + (f" ({per_core:.2f} per core)" if per_core is not None else ""))
    lines.append("  CPU: " + ", ".join(cpu))
    if machine.memory_total and machine.memory_available is not None:
        lines.append(f"  Memory: {_size(machine.memory_available)} available of {_size(machine.memory_total)} "
                     f"({100 * machine.memory_available / machine.memory_total:.0f}% free)")
    else:
        lines.append("  Memory: could not be read")
    for found in workers:
        load = found.load
        resident = f", {_size(found.resident)} resident" if found.resident is not None and load.pids else ""
        lines.append(f"  kiro-cli workers ({load.source}): {len(load.pids)} running of at most {load.max_workers}, "
                     f"{load.runs_in_progress} run{'s' if load.runs_in_progress != 1 else ''} in progress{resident}")
    if not workers:
        lines.append("  kiro-cli workers: none reported (no plugin runs kiro-cli workers in this host)")
    for source in failed:
        lines.append(f"  kiro-cli workers ({source}): could not be read")
    caps = [w.load.subagent_cap for w in workers if w.load.subagent_cap is not None]
    cap = min(caps) if caps else None
    lines.append(f"  Concurrent sub-agent cap: {cap if cap is not None else 'none (no plugin spawns sub-agents)'}")
    lines.append(f"Guidance ({state}): {guidance(state, cap)}")
    return "\n".join(lines)


def _reported_loads(pm: Any) -> tuple[list[WorkerLoad], list[str]]:
    from kirocrew_core.contributions import flatten
    from kirocrew_core.plugins import call_hook

    outcome = call_hook(pm, "worker_load", on_error="skip")
    loads = [c.value for c in flatten(outcome.contributions) if isinstance(c.value, WorkerLoad)]
    return sorted(loads, key=lambda load: load.source), sorted({f.plugin for f in outcome.failures})


def _measure(loads: list[WorkerLoad]) -> tuple[Machine, list[Workers]]:
    from kirocrew_core.processes import resident_bytes

    workers = []
    for load in loads:
        sizes = [resident_bytes(pid) for pid in load.pids]
        known = [size for size in sizes if size is not None]
        workers.append(Workers(load, sum(known) if known else None))
    return measure_machine(), workers


async def resource_status(args: dict[str, Any], call: Any) -> str:
    from kirocrew_core.plugins import get_plugin_manager

    loads, failed = _reported_loads(get_plugin_manager())  # on the loop: the workers' owners read their state
    machine, workers = await asyncio.to_thread(_measure, loads)
    return report(machine, workers, failed)


def resource_tools() -> list[CoreMcpTool]:
    return [CoreMcpTool(
        "resource_status",
        "This host's CPU, memory and load, the kiro-cli workers running and the concurrent sub-agent cap, with a "
        "posture (critical, tight, ample) and what it means for spawning sub-agents. Call it before fanning out "
        "work.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        resource_status, read_only=True, identity="none")]
