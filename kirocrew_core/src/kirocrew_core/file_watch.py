"""Changed paths under a few roots, from file-change notifications: the host's one watcher kind.

A :class:`FileWatcher` watches its roots through ``watchfiles`` (inotify on Linux, FSEvents on
macOS; its Rust backend keeps one native thread that collects changed paths). Its users map the
paths to what they keep: the history index (:mod:`kirocrew_core.history.watch`) to kiro-cli's
sessions, the knowledge library (:mod:`kirocrew_core.knowledge.service`) to its sources.

Two ways to ask. :meth:`~FileWatcher.changes` answers at once with everything that changed before
the call: it first creates a *barrier* file in a folder of our own that the same watcher watches,
and collects until the barrier's own notification is among them (the kernel queues one watcher's
events in order). :meth:`~FileWatcher.wait` blocks until something changes, a timeout, or a stop.

**Never silently missed.** A :class:`Batch` says ``everything`` (look at it all) when the watcher
(re)started, reported an error, gave no barrier back, when a root was replaced or a missing one
appeared, after :meth:`~FileWatcher.lost` (the public lost-events signal), and when the last such
answer is older than ``full_scan_seconds``: ``watchfiles`` drops the kernel's queue-overflow notice
(notify's ``Rescan`` event carries no path), so an overflow cannot be told from quiet.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from watchfiles._rust_notify import RustNotify

log = logging.getLogger(__name__)

#: How long :meth:`FileWatcher.changes` waits for its barrier before it gives up on the watcher.
BARRIER_SECONDS = 2.0
#: A watcher that could not start is not tried again before this many seconds (each try walks the tree).
RESTART_BACKOFF_SECONDS = 60.0
#: An answer says ``everything`` when the last such answer is older than this (see the module docstring).
FULL_SCAN_SECONDS = 600.0
#: :meth:`FileWatcher.wait` returns once changes have been quiet this long, or at most this much after the first.
QUIET_MS = 100
GROUP_MS = 500
ADDED, MODIFIED = 1, 2  # watchfiles.Change


class Stop(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Root:
    """A watched path: a folder (with what is below it when ``recursive``) or a file."""

    path: str
    recursive: bool = True


@dataclass
class Batch:
    """What the watcher saw: ``everything`` to look at (``why`` says why), and the changed ``(kind, path)``s."""

    everything: bool = False
    why: str = ""
    paths: list[tuple[int, str]] = field(default_factory=list)

    def lose(self, why: str) -> None:
        if not self.everything:
            self.everything, self.why = True, why


class _Deadline:
    """``watchfiles``' stop event: set once the barrier is overdue."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def is_set(self) -> bool:
        return time.monotonic() > self.at


class FileWatcher:
    """Collects changed paths under ``roots``; one per user, closed when the host stops.

    ``barriers`` is a folder of our own for the barrier files; ``label`` names what is watched in the
    log. Thread-safe: :meth:`changes` and :meth:`wait` calls are serialised, :meth:`lost` may come from
    any thread.
    """

    def __init__(self, roots: Sequence[Root], barriers: str | os.PathLike[str], *, label: str) -> None:
        self.roots = tuple(roots)
        self.barriers = os.fspath(barriers)
        self.label = label
        self._paths = tuple(root.path for root in self.roots) + (self.barriers,)
        self._notify: list[RustNotify] | None = None  # None: not watching
        self._identities: dict[str, tuple[int, int] | None] = {}
        self._pending = Batch()
        self._next_try = 0.0
        self._root_event: str | None = None  # a watched root itself was removed or renamed
        self._files: set[str] = set()  # the roots that are files: written to, they are still watched
        self._last_full = time.monotonic()
        self.full_scan_seconds = FULL_SCAN_SECONDS
        self._names = itertools.count()
        self._lock = threading.Lock()  # one changes() or wait() at a time
        self._flags = threading.Lock()  # guards _pending against lost() from other threads
        self.closed = False

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> bool:
        """Start watching the roots that exist; False (and ``everything`` at every answer) when it cannot."""
        with self._lock:
            return self._start("the watcher started")

    def _start(self, why: str) -> bool:
        self._root_event = None
        self._stop_notify()
        self.lost(why)
        from watchfiles._rust_notify import RustNotify  # lazy: a native module, only the host needs it

        try:
            os.makedirs(self.barriers, mode=0o700, exist_ok=True)
            self._identities = {path: _identity(path) for path in self._paths}
            self._files = {root.path for root in self.roots if os.path.isfile(root.path)}
            deep = [root.path for root in self.roots if root.recursive and self._identities[root.path]]
            flat = [root.path for root in self.roots if not root.recursive and self._identities[root.path]]
            # Arguments: no debug output, native notifications (no polling), recursive or not, a folder we
            # may not read skipped. Each watcher also watches the barrier folder: a barrier orders one
            # watcher's events only.
            self._notify = [RustNotify([*deep, self.barriers], False, False, 300, True, True)]
            if flat:
                self._notify.append(RustNotify([*flat, self.barriers], False, False, 300, False, True))
        except (OSError, RuntimeError) as exc:
            log.warning("%s cannot be watched (%s); each look reads it all", self.label, exc)
            self._stop_notify()
            self._next_try = time.monotonic() + RESTART_BACKOFF_SECONDS
            return False
        return True

    def close(self) -> None:
        """Stop the watcher's thread; every answer says ``everything`` from now on."""
        with self._lock:
            self.closed = True
            self._stop_notify()

    def _stop_notify(self) -> None:
        for notify in self._notify or []:
            notify.close()
        self._notify = None

    def lost(self, why: str) -> None:
        """Events may have been lost: the next answer says ``everything`` (the public signal)."""
        with self._flags:
            self._pending.lose(why)

    # --- the questions ---------------------------------------------------------------------------

    def changes(self) -> Batch:
        """Everything that changed since the last answer, at once (see the module docstring)."""
        with self._lock:
            if self._ready():
                self._collect()
            return self._answer()

    def wait(self, seconds: float, stop: Stop) -> Batch:
        """What changes next: returns once something changed (grouped for up to :data:`GROUP_MS`), after
        ``seconds`` (an empty batch), or when ``stop`` is set."""
        with self._lock:
            if self._ready():
                self._gather(seconds, stop)
            else:
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline and not stop.is_set():
                    time.sleep(min(0.05, seconds))
            return self._answer()

    def _ready(self) -> bool:
        """Restart the watcher when it must be (stopped, a root moved); True when it is watching."""
        if self.closed:
            self.lost("the watcher is stopped")
            return False
        if self._notify is None:
            if time.monotonic() < self._next_try:
                self.lost("the watcher could not start")
                return False
            self._start("the watcher restarted")
        elif (moved := self._moved_root()) is not None:
            self._start(f"{moved} was created, removed or replaced")
        return self._notify is not None

    def _answer(self) -> Batch:
        if self._root_event is not None:  # a root's own inode may be reused by its successor
            self._start(f"{self._root_event} was removed or replaced")
        if time.monotonic() - self._last_full >= self.full_scan_seconds:
            self.lost("the periodic full scan")
        with self._flags:
            found, self._pending = self._pending, Batch()
        if found.everything:
            self._last_full = time.monotonic()
        return found

    def _moved_root(self) -> str | None:
        for root, identity in self._identities.items():
            if _identity(root) != identity:
                return root
        return None

    def _collect(self) -> None:
        """Collect the notifications up to a fresh barrier (``everything`` when that fails)."""
        barrier = os.path.join(self.barriers, f"{os.getpid()}-{next(self._names)}")
        try:
            os.close(os.open(barrier, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        except OSError as exc:
            self._start(f"the barrier file could not be made: {exc.strerror or exc}")
            return
        deadline = _Deadline(BARRIER_SECONDS)
        try:
            for notify in self._notify or []:
                while True:
                    # step 0: the barrier comes back within microseconds, and waiting for it in 1 ms sleeps
                    # would cost every answer 2 ms; no timeout (a timeout clears what came in meanwhile).
                    got = notify.watch(20, 0, 0, deadline)
                    if isinstance(got, str):  # "stop" (the barrier is overdue) or "signal": both clear the set
                        self._start(f"the watcher gave no answer ({got})")
                        return
                    if self._record(got, barrier):
                        break
        except (OSError, RuntimeError) as exc:  # WatchfilesRustInternalError: e.g. out of inotify watches
            self._failed(exc)
        finally:
            with contextlib.suppress(OSError):  # a barrier left behind is a few bytes of our own
                os.unlink(barrier)

    def _gather(self, seconds: float, stop: Stop) -> None:
        """Block until a watcher reports (one: on it alone; two: on each in turn, 100 ms at a time)."""
        notifies = self._notify or []
        deadline = time.monotonic() + seconds
        try:
            while (left := int((deadline - time.monotonic()) * 1000)) > 0 and not stop.is_set():
                got_any = False
                for turn, notify in enumerate(notifies):
                    wait_ms = 1 if turn else left if len(notifies) == 1 else min(left, 100)
                    got = notify.watch(GROUP_MS, QUIET_MS, wait_ms, stop)
                    if isinstance(got, set):
                        self._record(got, None)
                        got_any = True
                if got_any:
                    return
        except (OSError, RuntimeError) as exc:
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        log.warning("the watcher of %s failed (%s); the next look reads it all", self.label, exc)
        self._start(f"the watcher failed: {exc}")

    def _record(self, got: set[tuple[int, str]], barrier: str | None) -> bool:
        """Keep what ``got`` names; True once the barrier is among it."""
        seen = False
        paths: list[tuple[int, str]] = []
        for change, path in got:
            if path == barrier:
                seen = True
            elif path in self._paths and change != ADDED and not (change == MODIFIED and path in self._files):
                self._root_event = path
            elif not path.startswith(self.barriers + os.sep):  # an earlier answer's barrier, being removed
                paths.append((change, path))
        with self._flags:
            self._pending.paths += paths
        return seen


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
