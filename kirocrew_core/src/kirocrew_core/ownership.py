"""Process-lifetime ownership of something on disk (a crew home's host, a state directory).

An OS file lock (``flock``) that the kernel drops when the process dies, so a crashed owner
never leaves a stale lock behind. The lock file records the owner's pid, written only by the
holder, so a refused contender can name the owner. The descriptor is close-on-exec: children
never inherit the lock and keep it alive after the owner exits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE_MODE = 0o600


class OwnershipHeldError(OSError):
    """Another live process owns it; ``owner`` is its pid as recorded, or ``"unknown"``."""

    def __init__(self, path: Path, owner: str) -> None:
        super().__init__(f"{path} is held by pid {owner}")
        self.path = path
        self.owner = owner


class Ownership:
    """A held ownership lock; :meth:`release` gives it up (normally only at exit, which does it anyway)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def read_owner(fd: int) -> str:
    try:
        raw = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return raw if raw.isdigit() else "unknown"


def acquire(path: Path) -> Ownership:
    """Take the lock at ``path`` without waiting; :class:`OwnershipHeldError` naming the owner if taken.

    ``OSError`` from opening the file (a missing or unwritable directory) propagates.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = read_owner(fd)
        os.close(fd)
        raise OwnershipHeldError(path, owner) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return Ownership(path, fd)
