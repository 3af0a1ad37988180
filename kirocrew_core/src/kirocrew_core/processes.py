"""Facts about processes, read from the kernel through psutil: alive, parent, start time, ancestry.

The one owner of "what is process N": the session resolver (who a caller is), the host's
pinned callers (has this connection's process exited?), kiro-cli's stale locks and the warm
mint's markers all ask here, never ``/proc`` by hand (psutil reads it on Linux and the
kernel's process table on macOS). :mod:`kirocrew_core.proc` stays the only module that
*signals*; this one only looks.

A pid alone does not name a process: once it exits, the kernel hands its number to the next
one. Everything here that must survive that pairs the pid with its **start time**
(:func:`start_time`: seconds since boot, to the kernel's clock tick), which a reused pid does
not share. It is read as psutil's start time minus the boot time, so a wall-clock step between
two reads does not change it on Linux.

Answers are three-valued where it matters (STYLE: present, absent, unknowable): a process
we may not read is not a process that is gone.

psutil is imported inside the functions: ``kirocrew --help`` and the relay never pay for it
(the relay does not import this module at all).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# How far up from a process an ancestry walk goes before it gives up (kiro-cli, its chat
# child, a shell, a script, the relay… are a handful; a runaway chain is not a caller's).
MAX_ANCESTRY_DEPTH = 64
# Start times are kept to the kernel's clock tick (10 ms on Linux).
_DIGITS = 2


@dataclass(frozen=True)
class ProcessRef:
    """One process: its pid and its start time, which together survive pid reuse."""

    pid: int
    started: float

    def token(self) -> str:
        """The start time as a string, for a file that outlives this process (a marker)."""
        return f"{self.started:.{_DIGITS}f}"


def _psutil() -> Any:
    import psutil

    return psutil


def _started(handle: Any) -> float:
    psutil = _psutil()
    return round(handle.create_time() - psutil.boot_time(), _DIGITS)


def ref(pid: int) -> ProcessRef | None:
    """``pid`` with its start time; None when it is gone, a zombie, or cannot be read."""
    psutil = _psutil()
    if pid <= 0:
        return None
    try:
        handle = psutil.Process(pid)
        if handle.status() == psutil.STATUS_ZOMBIE:
            return None
        return ProcessRef(pid, _started(handle))
    except (psutil.Error, OSError):
        return None


def boot_id() -> str | None:
    """What names this boot of the machine, so a start time recorded before a reboot is never matched after it.

    Linux's random boot id where the kernel offers it (psutil has no reader for it), else the boot time
    to the second; None when neither can be read.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            found = fh.read().strip()
        if found:
            return found
    except OSError:
        pass
    psutil = _psutil()
    try:
        return f"boot-{int(psutil.boot_time())}"
    except (psutil.Error, OSError):
        return None


def start_time(pid: int) -> float | None:
    """When ``pid`` started (seconds since boot), or None when it is gone or cannot be read."""
    found = ref(pid)
    return found.started if found is not None else None


def start_token(pid: int) -> str | None:
    """:func:`start_time` as the string a marker file keeps (:meth:`ProcessRef.token`)."""
    found = ref(pid)
    return found.token() if found is not None else None


def alive(pid: int) -> bool | None:
    """True while ``pid`` runs, False once it is gone or a zombie, None when that cannot be told.

    A zombie counts as gone: it runs nothing and holds nothing, and where nobody reaps
    orphans it can linger indefinitely.
    """
    psutil = _psutil()
    if pid <= 0:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:  # ZombieProcess is a NoSuchProcess too
        return False
    except (psutil.Error, OSError):
        return None


def is_running(process: ProcessRef) -> bool:
    """Whether ``process`` still runs: its pid is alive and started when it did (not a reused pid)."""
    now = ref(process.pid)
    return now is not None and now.started == process.started


def same_process(pid: int, token: str) -> bool | None:
    """Whether ``pid`` still runs the process whose :meth:`ProcessRef.token` is ``token``.

    False when it is gone or now names another process; None when that cannot be proven
    (it cannot be read, or ``token`` is not a start time this module wrote: an older marker).
    """
    try:
        expected = float(token) if "." in token else None
    except ValueError:
        expected = None
    state = alive(pid)
    if state is not True:
        return state
    if expected is None:
        return None
    now = start_time(pid)
    if now is None:
        return None
    return now == round(expected, _DIGITS)


def parent(pid: int) -> int | None:
    """The parent of ``pid``, or None when it cannot be read (gone, or no parent)."""
    psutil = _psutil()
    try:
        found = psutil.Process(pid).ppid()
    except (psutil.Error, OSError, ValueError):
        return None
    return found if found > 0 else None


@dataclass(frozen=True)
class Lineage:
    """A process and its ancestors, nearest first; ``complete`` when the walk reached the top (no parent)."""

    links: tuple[ProcessRef, ...]
    complete: bool


def lineage(pid: int, depth: int = MAX_ANCESTRY_DEPTH) -> Lineage:
    """``pid`` and its ancestors, nearest first, each with its start time.

    The walk stops at the first link it cannot prove: a process that is gone, one it may not
    read, or a parent that started *after* its child (the parent exited between two reads and
    its pid already names another process). Every process returned really is an ancestor;
    ``complete`` says whether the walk reached a process with no parent, so a caller can tell
    "descends from none of these" from "could not see far enough".
    """
    psutil = _psutil()
    chain: list[ProcessRef] = []
    try:
        handle = psutil.Process(pid)
        started = _started(handle)
        while len(chain) < depth:
            chain.append(ProcessRef(handle.pid, started))
            parent_pid = handle.ppid()
            if parent_pid <= 0:
                return Lineage(tuple(chain), True)
            above = psutil.Process(parent_pid)
            above_started = _started(above)
            if above_started > started:
                break
            handle, started = above, above_started
    except (psutil.Error, OSError, ValueError):
        pass
    return Lineage(tuple(chain), False)


def is_ancestor(ancestor: int, pid: int) -> bool:
    """Whether ``ancestor`` is a strict ancestor of ``pid``; False when that cannot be proven."""
    if ancestor <= 1 or pid <= 1 or ancestor == pid:
        return False
    return any(link.pid == ancestor for link in lineage(pid).links[1:])


def group_members(pgid: int) -> list[int] | None:
    """The pids in process group ``pgid`` that run (zombies do not count), or None when the process table
    cannot be listed. A member whose state cannot be read counts: unknowable is not gone."""
    psutil = _psutil()
    try:
        pids = psutil.pids()
    except (psutil.Error, OSError):
        return None
    members = []
    for pid in pids:
        try:
            if os.getpgid(pid) != pgid:
                continue
        except OSError:
            continue  # exited while we looked
        if alive(pid) is not False:
            members.append(pid)
    return members


def session_id(pid: int) -> int | None:
    """The kernel session ``pid`` belongs to (``getsid``), or None when it cannot be read.

    A process is born into its parent's session and can only leave it for a new one of its
    own (``setsid``); nothing can join an existing one. So a session's members are all
    descendants of its leader, even those that were re-parented away from it.
    """
    try:
        return os.getsid(pid)
    except OSError:
        return None


def resident_bytes(pid: int) -> int | None:
    """The resident memory of ``pid`` and its descendants (kiro-cli runs a chat child), or None when ``pid``
    cannot be read; a descendant that exits meanwhile simply does not count."""
    psutil = _psutil()
    try:
        handle = psutil.Process(pid)
        total = int(handle.memory_info().rss)
        children = handle.children(recursive=True)
    except (psutil.Error, OSError):
        return None
    for child in children:
        try:
            total += int(child.memory_info().rss)
        except (psutil.Error, OSError):
            continue
    return total
