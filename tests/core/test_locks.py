"""Named inter-process locks: real processes and threads contending for real lock files."""

from __future__ import annotations

import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.jsonfile import read_json, write_json_atomic
from kirocrew_core.locks import LOCK_ORDER, held_locks, named_lock
from kirocrew_testing.processes import release_together

# Reads the counter, sleeps, writes it back: without the lock, two of these
# interleaving lose increments.
INCREMENT_CHILD = """
import sys, time
from kirocrew_core.jsonfile import read_json, write_json_atomic
from kirocrew_core.locks import named_lock
path, rounds = sys.argv[1], int(sys.argv[2])
sys.stdin.readline()  # wait for "go" so both children contend from the start
for _ in range(rounds):
    with named_lock("config"):
        count = read_json(path).object_or_empty().get("count", 0)
        time.sleep(0.005)
        write_json_atomic(path, {"count": count + 1})
"""

HOLD_CHILD = """
import sys
from kirocrew_core.locks import named_lock
with named_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""

TRY_CHILD = """
import sys
from kirocrew_core.errors import KirocrewError
from kirocrew_core.locks import named_lock
try:
    with named_lock(sys.argv[1], timeout=float(sys.argv[2])):
        print("acquired")
except KirocrewError as exc:
    print(exc.code)
"""


def _python(script: str, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kwargs,
    )


def _increment(path: Path, rounds: int) -> None:
    for _ in range(rounds):
        with named_lock("config"):
            count = read_json(path).object_or_empty().get("count", 0)
            write_json_atomic(path, {"count": count + 1})


def test_two_processes_doing_locked_read_modify_writes_lose_no_increment(tmp_path: Path) -> None:
    counter = tmp_path / "counter.json"
    children = [_python(INCREMENT_CHILD, str(counter), "20") for _ in range(2)]
    release_together(children)
    assert read_json(counter).document == {"count": 40}


def test_two_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    counter = tmp_path / "counter.json"
    threads = [threading.Thread(target=_increment, args=(counter, 20)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert read_json(counter).document == {"count": 40}


def test_a_lock_held_by_another_process_times_out_with_a_code_naming_the_lock() -> None:
    holder = _python(HOLD_CHILD, "connections")
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(KirocrewError) as info, named_lock("connections", timeout=0.2):
            pass
        assert info.value.code == "lock_timeout"
        assert "'connections'" in info.value.message
        assert held_locks() == ()
    finally:
        holder.stdin.write("release\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    with named_lock("connections", timeout=60):
        assert held_locks() == ("connections",)


def test_taking_a_lock_out_of_order_is_refused_and_leaves_it_free() -> None:
    with named_lock("audit"):
        with pytest.raises(KirocrewError) as info, named_lock("config"):
            pass
        assert info.value.code == "lock_order"
        assert held_locks() == ("audit",)
        # The refused lock was never taken: another process gets it at once.
        probe = subprocess.run([sys.executable, "-c", TRY_CHILD, "config", "10"],
                               capture_output=True, text=True, timeout=60)
        assert probe.stdout.strip() == "acquired"
    assert held_locks() == ()


def test_locks_nest_in_order_and_re_enter_freely() -> None:
    with named_lock("config"), named_lock("agent-file"), named_lock("audit"):
        # Re-entering an outer lock waits for nothing, so it cannot deadlock.
        with named_lock("config"):
            assert held_locks() == ("config", "agent-file", "audit", "config")
        assert held_locks() == ("config", "agent-file", "audit")
    assert held_locks() == ()


def test_the_lock_order_is_tracked_per_thread() -> None:
    outcome: list[str] = []

    def take_config() -> None:
        try:
            with named_lock("config", timeout=30):
                outcome.append("acquired")
        except KirocrewError as exc:
            outcome.append(exc.code)

    with named_lock("audit"):
        worker = threading.Thread(target=take_config)
        worker.start()
        worker.join(timeout=60)
    assert outcome == ["acquired"]


def test_an_unknown_lock_name_is_bad_input_and_creates_nothing() -> None:
    with pytest.raises(BadInputError) as info, named_lock("everything"):
        pass
    assert info.value.code == "unknown_lock"
    assert "config" in info.value.message
    assert not home.locks_dir().exists()


def test_lock_files_live_in_an_owner_only_locks_dir() -> None:
    with named_lock("crew-mcp"):
        directory = home.locks_dir()
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE(home.crew_home().stat().st_mode) == 0o700
        assert (directory / "crew-mcp.lock").exists()


def test_audit_comes_last_in_the_lock_order() -> None:
    assert LOCK_ORDER[-1] == "audit"
    assert len(set(LOCK_ORDER)) == len(LOCK_ORDER)
