"""kiro-cli's persisted ACP session files, and the one repair we allow on them: a stale lock.

kiro-cli keeps ``<kiro home>/sessions/cli/<id>.{jsonl,json,history,lock}``; the
lock holds ``{"pid": N, "started_at": ...}``. A hard-killed owner leaves its
lock behind and every later ``session/load`` is refused for good, because
kiro-cli reads the lock as durable state, not as a liveness check. We remove a
lock only when its pid is provably dead: a live pid, an unreadable or
malformed lock, or an owner whose liveness cannot be read all mean "keep"
(:func:`kirocrew_core.processes.alive`).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kirocrew_core import home, processes
from kirocrew_core.errors import BadInputError

log = logging.getLogger(__name__)

# kiro-cli's ids are UUIDs; anything that could leave the sessions dir is refused.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
# The largest lock file worth parsing ({"pid":N,"started_at":"..."} is ~60 bytes).
_MAX_LOCK_BYTES = 4096


def check_session_id(session_id: str) -> str:
    """``session_id`` if it is safe to use in a file name, else :class:`BadInputError`."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise BadInputError(f"not a kiro session id: {session_id!r}", code="bad_session_id")
    return session_id


def lock_path(session_id: str, sessions_dir: Path | None = None) -> Path:
    """``<sessions dir>/<id>.lock`` (the sessions dir defaults to :func:`home.kiro_sessions_dir`)."""
    return (sessions_dir or home.kiro_sessions_dir()) / f"{check_session_id(session_id)}.lock"


@dataclass(frozen=True)
class LockInfo:
    """What a session lock says. ``pid`` is None when the file is unreadable or malformed."""

    path: Path
    exists: bool | None  # None: could not tell (EACCES, I/O error)
    pid: int | None = None
    problem: str = ""


def read_lock(session_id: str, sessions_dir: Path | None = None) -> LockInfo:
    """Read ``<id>.lock`` (tri-state existence; a bad file is reported, never rewritten)."""
    path = lock_path(session_id, sessions_dir)
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_LOCK_BYTES + 1)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return LockInfo(path, False)
        return LockInfo(path, None, problem=exc.strerror or str(exc))
    if len(data) > _MAX_LOCK_BYTES:
        return LockInfo(path, True, problem="lock file is implausibly large")
    try:
        payload = json.loads(data)
    except ValueError as exc:
        return LockInfo(path, True, problem=f"not JSON: {exc}")
    pid = payload.get("pid") if isinstance(payload, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return LockInfo(path, True, problem="no pid in lock file")
    return LockInfo(path, True, pid)


class StaleLockOutcome(enum.Enum):
    """What :func:`remove_stale_lock` did, and why."""

    REMOVED = "removed"  # the owner was dead; the lock is gone
    ABSENT = "absent"  # no lock (already cleaned up)
    OWNER_ALIVE = "owner_alive"  # kept: its pid runs
    UNKNOWN = "unknown"  # kept: lock unreadable/malformed, or liveness unknowable


@dataclass(frozen=True)
class StaleLockResult:
    outcome: StaleLockOutcome
    lock: LockInfo

    def describe(self) -> str:
        pid = f"PID {self.lock.pid}" if self.lock.pid else "an unknown process"
        return {
            StaleLockOutcome.REMOVED: f"removed the stale lock of dead {pid}",
            StaleLockOutcome.ABSENT: "no lock file is left",
            StaleLockOutcome.OWNER_ALIVE: f"the lock's owner, {pid}, is still running",
            StaleLockOutcome.UNKNOWN: f"the lock was kept: {self.lock.problem or 'its owner cannot be checked'}",
        }[self.outcome]


def remove_stale_lock(session_id: str, sessions_dir: Path | None = None) -> StaleLockResult:
    """Remove ``<id>.lock`` if and only if the pid it names is dead.

    A dead owner cannot come back, but a new owner could take the lock while we
    look, so the pid is re-read just before the unlink to narrow that window.
    """
    lock = read_lock(session_id, sessions_dir)
    if lock.exists is False:
        return StaleLockResult(StaleLockOutcome.ABSENT, lock)
    if lock.pid is None:
        return StaleLockResult(StaleLockOutcome.UNKNOWN, lock)
    alive = processes.alive(lock.pid)
    if alive is None:
        return StaleLockResult(StaleLockOutcome.UNKNOWN,
                               LockInfo(lock.path, True, lock.pid, "its liveness cannot be read"))
    if alive:
        return StaleLockResult(StaleLockOutcome.OWNER_ALIVE, lock)
    again = read_lock(session_id, sessions_dir)
    if again.exists is False:
        return StaleLockResult(StaleLockOutcome.ABSENT, again)
    if again.pid != lock.pid:
        # Rewritten while we looked: someone else owns it now; the caller's retry will see.
        return StaleLockResult(StaleLockOutcome.UNKNOWN, LockInfo(again.path, True, again.pid, "lock changed owner"))
    try:
        os.unlink(lock.path)
    except FileNotFoundError:
        return StaleLockResult(StaleLockOutcome.ABSENT, lock)
    except OSError as exc:
        return StaleLockResult(StaleLockOutcome.UNKNOWN,
                               LockInfo(lock.path, True, lock.pid, f"cannot remove: {exc.strerror or exc}"))
    log.info("removed stale kiro session lock %s (PID %d is dead)", lock.path, lock.pid)
    return StaleLockResult(StaleLockOutcome.REMOVED, lock)


# The files kiro-cli keeps per session; the lock goes last, so a crash mid-way leaves it (stale, removable).
SESSION_FILE_SUFFIXES = (".jsonl", ".json", ".history")


def session_in_use(session_id: str, sessions_dir: Path | None = None) -> bool:
    """True while ``<id>.lock`` names a live pid, or a lock exists whose owner cannot be checked (keep it)."""
    lock = read_lock(session_id, sessions_dir)
    if lock.exists is False:
        return False
    if lock.pid is None:
        return True
    return processes.alive(lock.pid) is not False


def remove_session_files(session_id: str, sessions_dir: Path | None = None) -> bool:
    """Remove one session's transcript, state and history, then its (stale) lock, under kiro's lock rules.

    Nothing is removed while the lock names a live process (or an owner that cannot be checked):
    returns False then. True once none of the session's files is left.
    """
    directory = sessions_dir or home.kiro_sessions_dir()
    check_session_id(session_id)
    if session_in_use(session_id, directory):
        return False
    for suffix in SESSION_FILE_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / f"{session_id}{suffix}")
    outcome = remove_stale_lock(session_id, directory).outcome
    return outcome in (StaleLockOutcome.REMOVED, StaleLockOutcome.ABSENT)
