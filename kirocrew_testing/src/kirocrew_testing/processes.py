"""Real processes in tests: starting several at the same moment, and whether one still runs."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


def release_together(children: Sequence[subprocess.Popen[str]], *, timeout: float = 120) -> None:
    """Send ``go`` to children blocked reading stdin, then wait for each; assert they all exit 0."""
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        child.communicate(timeout=timeout)
        assert child.returncode == 0, f"child {child.args!r} exited {child.returncode}"


def running(pid: int) -> bool:
    """Whether ``pid`` is a running process; a zombie waiting for its reaper does not count."""
    from kirocrew_core.kiro_sessions import pid_alive

    return pid_alive(pid) is True
