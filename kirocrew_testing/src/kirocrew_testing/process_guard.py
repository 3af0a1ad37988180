"""Fail a test that leaves a child process running.

The test process makes itself a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``),
so a grandchild orphaned by a killed launcher is re-parented to the test process
instead of escaping to init: "no orphan survives" is then something a test can see.
At teardown, any descendant started during the test that is still alive after a
short grace is killed and the test fails, naming it.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Iterator

import pytest

from kirocrew_core import proc

GRACE_SECS = 3.0
_PR_SET_CHILD_SUBREAPER = 36
_subreaper = False
#: Roots of process trees that outlive single tests on purpose (a test module's shared browser).
_shared_roots: set[int] = set()


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process (Linux only); True when in effect."""
    global _subreaper
    if not _subreaper and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            _subreaper = False
    return _subreaper


def share(root: int) -> None:
    """Count ``root`` and its descendants as shared test infrastructure, not as any test's leftovers.

    For a tree started before a module's tests and stopped after them, whose processes come and
    go meanwhile (a browser's helper processes); :func:`unshare` when it is stopped.
    """
    _shared_roots.add(root)


def unshare(root: int) -> None:
    """Stop exempting ``root``'s tree (see :func:`share`)."""
    _shared_roots.discard(root)


def _shared_pids() -> set[int]:
    found: set[int] = set()
    for root in _shared_roots:
        found.add(root)
        found.update(proc.live_descendants(root))
    return found


def leaked_since(before: set[int], grace: float = GRACE_SECS) -> dict[int, str]:
    """Descendants not in ``before`` (nor in a shared tree) still alive after ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while True:
        shared = _shared_pids()
        leaked = {pid: cmd for pid, cmd in proc.live_descendants().items() if pid not in before and pid not in shared}
        if not leaked or time.monotonic() >= deadline:
            return leaked
        time.sleep(0.05)


@pytest.fixture
def process_guard() -> Iterator[None]:
    """Fail the test if a process it started (or an orphan of one) is still running after it."""
    become_subreaper()
    before = set(proc.live_descendants())
    yield
    leaked = leaked_since(before)
    if leaked:
        proc.kill_pids(list(leaked))
        shown = "\n  ".join(f"pid {pid}: {cmd or '?'}" for pid, cmd in sorted(leaked.items()))
        pytest.fail(f"test left {len(leaked)} process(es) running (now killed):\n  {shown}", pytrace=False)
