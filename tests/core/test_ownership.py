"""Process-lifetime ownership locks (kirocrew_core.ownership) between real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kirocrew_core import ownership

HOLDER = """
import sys, time
from pathlib import Path
from kirocrew_core import ownership
held = ownership.acquire(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_owner_is_refused_naming_the_first_and_the_lock_dies_with_it(tmp_path: Path) -> None:
    path = tmp_path / "owner.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(ownership.OwnershipHeldError) as refused:
            ownership.acquire(path)
        assert refused.value.owner == str(holder.pid)
        assert path.read_text().strip() == str(holder.pid)  # the contender never wrote it
    finally:
        holder.kill()
        holder.wait()
        if holder.stdin is not None:
            holder.stdin.close()
        if holder.stdout is not None:
            holder.stdout.close()
    held = ownership.acquire(path)  # the kernel dropped the dead owner's lock
    try:
        assert held.held and path.read_text().strip().isdigit()
    finally:
        held.release()
    assert not held.held
