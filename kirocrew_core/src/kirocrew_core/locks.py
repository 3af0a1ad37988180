"""Named inter-process locks with one fixed order, so nesting cannot deadlock.

Every lock kirocrew takes around a shared file is named in :data:`LOCK_ORDER`.
A thread may hold several at once only if it takes them in that order: asking
for a lock that comes *earlier* than one it already holds raises
``lock_order`` instead of waiting, because two processes taking the same pair
in opposite orders is the classic deadlock, and refusing the second half of it
up front makes the deadlock impossible rather than unlikely.

Locks are re-entrant per thread and exclude other threads and other processes
(``flock`` on a file in :func:`kirocrew_core.home.locks_dir`). A file lock is
blocking I/O: in a coroutine take it inside ``asyncio.to_thread``, never across
an ``await`` on the event loop thread, where every coroutine is the same thread
and would re-enter it.

Adding a lock: put its name in :data:`LOCK_ORDER` at the position that matches
how it nests. A lock taken while holding ``X`` goes after ``X``; ``audit`` stays
last because any code may log a security event while holding any other lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError

#: Every lock name, in the only order a thread may nest them.
LOCK_ORDER: tuple[str, ...] = (
    "config",  # <crew home>/config.toml
    "policy",  # <crew home>/policy.toml, the permission policy
    "crew-mcp",  # <crew home>/mcp.json and the user's Kiro MCP file on an explicit Apply
    "agent-file",  # the rendered <kiro home>/agents/kirocrew.json
    "connections",  # connection records and the OAuth mint bookkeeping
    "conversations",  # conversation state outside SQLite's own locking
    "lessons",  # the lessons store and the lessons file the agent loads
    "hooks",  # the inbound webhooks store (one file); never held across a delivery
    "notifications",  # the notification center's store
    "messages",  # the messages store (sent messages, mutes, file approvals) and its outbox
    "artifacts",  # the artifact library (every artifact's folder and the folder tree)
    "deploys",  # the pending deploys; claimed without holding the library's lock
    "audit",  # the SEL; last, so anyone may log while holding another lock
)
_RANK = {name: index for index, name in enumerate(LOCK_ORDER)}

#: Seconds to wait for a lock before giving up with ``lock_timeout``.
DEFAULT_TIMEOUT = 30.0
LOCK_FILE_MODE = 0o600
LOCKS_DIR_MODE = 0o700

# One FileLock per lock file per process: filelock counts re-entrant holds on
# the object, so a second object for the same file would deadlock its own thread.
# Keyed by path, not name, because the crew home is read from the environment.
_objects: dict[Path, Any] = {}
_objects_guard = threading.Lock()
_held = threading.local()


def _stack() -> list[str]:
    stack: list[str] | None = getattr(_held, "names", None)
    if stack is None:
        stack = _held.names = []
    return stack


def held_locks() -> tuple[str, ...]:
    """The lock names this thread holds, outermost first (re-entries repeat)."""
    return tuple(_stack())


def lock_file(name: str) -> Path:
    """The lock file behind ``name`` (raises ``unknown_lock`` for a name not in the order)."""
    if name not in _RANK:
        known = ", ".join(LOCK_ORDER)
        raise BadInputError(f"unknown lock {name!r}; known locks: {known}", code="unknown_lock")
    return home.locks_dir() / f"{name}.lock"


def _ensure_locks_dir() -> Path:
    home.ensure_crew_home()
    directory = home.locks_dir()
    directory.mkdir(mode=LOCKS_DIR_MODE, exist_ok=True)
    return directory


def _file_lock(path: Path) -> Any:
    from filelock import FileLock

    with _objects_guard:
        lock = _objects.get(path)
        if lock is None:
            # thread_local: each thread has its own hold count and descriptor, so
            # threads exclude each other exactly as processes do.
            lock = _objects[path] = FileLock(path, mode=LOCK_FILE_MODE, thread_local=True)
        return lock


def _check_order(name: str, stack: list[str]) -> None:
    if name in stack:
        return  # a re-entry waits for nothing, whatever was taken since
    later = [held for held in stack if _RANK[held] > _RANK[name]]
    if later:
        raise KirocrewError(
            f"lock {name!r} requested while holding {later[-1]!r}, which comes after it in "
            f"the lock order ({' < '.join(LOCK_ORDER)}); take {name!r} first",
            code="lock_order",
        )


@contextmanager
def named_lock(name: str, timeout: float | None = DEFAULT_TIMEOUT) -> Iterator[None]:
    """Hold the inter-process lock ``name`` for the ``with`` block.

    ``timeout`` is in seconds; ``None`` waits indefinitely. Raises
    :class:`BadInputError` ``unknown_lock`` for a name not in :data:`LOCK_ORDER`,
    :class:`KirocrewError` ``lock_order`` when this thread holds a lock that comes
    later in the order, and ``lock_timeout`` when another holder kept it too long.
    """
    path = lock_file(name)
    stack = _stack()
    _check_order(name, stack)
    if name not in stack:
        _ensure_locks_dir()
    lock = _file_lock(path)
    from filelock import Timeout

    try:
        lock.acquire(timeout=-1 if timeout is None else timeout)
    except Timeout:
        waited = "" if timeout is None else f" after {timeout:g}s"
        raise KirocrewError(
            f"timed out{waited} waiting for the {name!r} lock ({path}); "
            "another kirocrew process is holding it",
            code="lock_timeout",
        ) from None
    stack.append(name)
    try:
        yield
    finally:
        stack.pop()
        lock.release()
