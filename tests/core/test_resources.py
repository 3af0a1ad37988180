"""resource_status's posture: the thresholds the docs promise, and what it says when it cannot measure."""

from __future__ import annotations

import pytest

from kirocrew_core.contributions import WorkerLoad
from kirocrew_core.resources import GIB, Machine, Workers, measure_machine, posture, report


def _machine(load: float | None = 0.5, free: float | None = 8.0, total: float = 16.0) -> Machine:
    return Machine(cores=4, cpu_percent=20.0, load=None if load is None else (load * 4, 0.0, 0.0),
                   memory_total=int(total * GIB) if free is not None else None,
                   memory_available=int(free * GIB) if free is not None else None)


@pytest.mark.parametrize(("machine", "expected"), [
    (_machine(), "ample"),
    (_machine(load=1.0), "tight"),
    (_machine(load=2.0), "critical"),
    (_machine(free=3.9), "tight"),  # under 25%
    (_machine(free=1.5, total=4.0), "tight"),  # 37% free, but under 2 GiB
    (_machine(free=1.5), "critical"),  # under 10%
    (_machine(free=0.4, total=2.0), "critical"),  # 20% free, but under 512 MiB
    (_machine(load=None), "ample"),  # memory alone still measures
    (_machine(load=None, free=None), "unmeasured"),
])
def test_the_posture_follows_the_documented_thresholds(machine, expected):
    assert posture(machine, []) == expected


def test_runs_waiting_for_a_worker_make_an_idle_machine_tight():
    waiting = Workers(WorkerLoad("conversations", (1, 2), 2, 3, 4), None)
    assert posture(_machine(), [waiting]) == "tight"


def test_an_unmeasured_host_says_so_and_still_gives_guidance():
    text = report(_machine(load=None, free=None), [], [])
    assert text.splitlines() == [
        "Host resources: unmeasured",
        "  CPU: 4 cores, 20% busy",
        "  Memory: could not be read",
        "  kiro-cli workers: none reported (no plugin runs kiro-cli workers in this host)",
        "  Concurrent sub-agent cap: none (no plugin spawns sub-agents)",
        "Guidance (unmeasured): This host's load could not be measured: spawn sub-agents sparingly."]


def test_this_machine_is_measured():
    machine = measure_machine(cpu_sample_secs=0.01)
    assert machine.cores and machine.cores >= 1
    assert machine.memory_total and 0 < (machine.memory_available or 0) <= machine.memory_total
