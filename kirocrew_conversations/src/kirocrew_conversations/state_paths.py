"""Where the conversations server keeps its state, and who owns it.

One process (the host, or a standalone server) owns a state directory for its
whole life: the runs it supervises are its children, so a second owner opening
the same database would mark them ``interrupted`` or start duplicate workers.
The ownership lock (:mod:`kirocrew_core.ownership`) is dropped by the kernel
when the process dies, so a crashed owner never leaves a stale lock behind and
restart recovery can run.
"""

from __future__ import annotations

import os
from pathlib import Path

from kirocrew_core import ownership, sqlite_db
from kirocrew_core.home import user_home
from kirocrew_core.ownership import Ownership

from kirocrew_conversations.errors import conversation_error

STATE_DIR_ENV = "KIRO_CONVERSATIONS_STATE_DIR"
STATE_DIR_MODE = 0o700
DATABASE_MODE = sqlite_db.DATABASE_MODE
DATABASE_NAME = "orchestrator-v1.sqlite"
LOCK_NAME = "owner.lock"


def state_dir() -> Path:
    """``$KIRO_CONVERSATIONS_STATE_DIR``, default ``~/.local/state/kiro-conversations-mcp``."""
    value = os.environ.get(STATE_DIR_ENV, "").strip()
    if value:
        return Path(value).expanduser()
    return user_home() / ".local" / "state" / "kiro-conversations-mcp"


def database_file(directory: Path | None = None) -> Path:
    """The SQLite database inside ``directory`` (default :func:`state_dir`)."""
    return (directory or state_dir()) / DATABASE_NAME


def lock_file(directory: Path | None = None) -> Path:
    """The ownership lock file inside ``directory`` (default :func:`state_dir`)."""
    return (directory or state_dir()) / LOCK_NAME


def ensure_state_dir(directory: Path | None = None) -> Path:
    """Create the state directory owner-only (0700), tightening an existing one."""
    directory = directory or state_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=STATE_DIR_MODE)
        if (directory.stat().st_mode & 0o777) != STATE_DIR_MODE:
            os.chmod(directory, STATE_DIR_MODE)
    except OSError as exc:
        raise conversation_error(
            "state_dir_unusable", f"cannot create state directory {directory}: {exc.strerror or exc}"
        ) from exc
    return directory


def ensure_private_file(path: Path) -> Path:
    """Create ``path`` empty and owner-only (0600) if missing; tighten it if it exists.

    Done before SQLite opens the file, because SQLite creates its ``-wal`` and
    ``-shm`` files with the database file's mode.
    """
    try:
        sqlite_db.ensure_private_file(path)
    except OSError as exc:
        raise conversation_error(
            "state_dir_unusable", f"cannot secure {path}: {exc.strerror or exc}"
        ) from exc
    return path


class StateDirOwnership:
    """The process-lifetime ownership of one state directory (see the module docstring).

    Held through :mod:`kirocrew_core.ownership`: the lock file records the owner's pid so a
    refused second server can name it, and children never inherit the lock.
    """

    def __init__(self, directory: Path, held: Ownership) -> None:
        self.directory = directory
        self._held = held

    @property
    def held(self) -> bool:
        return self._held.held

    def release(self) -> None:
        """Give the directory up (normally only at process exit, which does it anyway)."""
        self._held.release()


def recorded_owner(directory: Path | None = None) -> int | None:
    """The pid the directory's last owner recorded in its lock file, or ``None`` (no owner yet, unreadable).

    Only a hint: the lock file is never cleared, so the pid may be a dead owner's. A caller
    that knows a live process (the host it is connected to) compares it with that pid.
    """
    try:
        fd = os.open(lock_file(directory), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        owner = ownership.read_owner(fd)
    finally:
        os.close(fd)
    return int(owner) if owner.isdigit() else None


def acquire_ownership(directory: Path | None = None) -> StateDirOwnership:
    """Take the ownership lock of ``directory`` without waiting.

    Raises ``state_dir_in_use`` naming the owner's pid when another process
    holds it; the owner's lock file is only read, never written, in that case.
    """
    directory = ensure_state_dir(directory)
    path = lock_file(directory)
    try:
        held = ownership.acquire(path)
    except ownership.OwnershipHeldError as exc:
        raise conversation_error(
            "state_dir_in_use",
            f"state directory {directory} is owned by another server (pid {exc.owner}); "
            "stop it or set KIRO_CONVERSATIONS_STATE_DIR to another directory",
        ) from None
    except OSError as exc:
        raise conversation_error(
            "state_dir_unusable", f"cannot open lock file {path}: {exc.strerror or exc}"
        ) from exc
    return StateDirOwnership(directory, held)
