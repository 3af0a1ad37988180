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
    from kirocrew_core import processes

    return processes.alive(pid) is True


def processes_running(argv_part: bytes, crew_home: str) -> list[int]:
    """Running processes whose command line holds ``argv_part`` and whose ``KIROCREW_HOME`` is ``crew_home``.

    How a test or a benchmark finds the kiro-cli a gateway started for one agent
    (``b"kirocrew-mint-warm-base"``) without counting another worker's.
    """
    import os

    marker = f"KIROCREW_HOME={crew_home}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if argv_part in cmdline and marker in environ and running(int(entry)):
            found.append(int(entry))
    return found
