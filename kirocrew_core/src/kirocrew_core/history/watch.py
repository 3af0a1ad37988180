"""What changed in kiro-cli's session stores since the last answer, from file-change notifications.

While the host runs, a :class:`SessionWatcher` watches kiro-cli's sessions root (the flat
directory, every V3 workspace and session directory under it) and the TUI database's folder
through ``watchfiles`` (inotify on Linux, FSEvents on macOS; its Rust backend keeps one native
thread that collects changed paths). An answer asks :meth:`SessionWatcher.changes` and re-reads
only what they name, instead of a ``stat`` of every session file.

**No stale window.** Notifications arrive asynchronously, so each :meth:`~SessionWatcher.changes`
first creates a *barrier* file in a folder of our own that the same watcher watches, and collects
until the barrier's own notification is among them: the kernel queues one watcher's events in order,
so every change made before the answer began has been collected by then.

**Never silently missed.** :meth:`~SessionWatcher.changes` answers ``everything`` (a full scan) when
the watcher (re)started, when it reported an error, when the barrier did not come back, when a
watched root was replaced or a missing one appeared, and after :meth:`~SessionWatcher.lost` (the
public lost-events signal: an update that failed half-way calls it). A directory that appeared is
looked at again on the next answer too: the watcher puts its watch on a new directory only after
reporting it, so a file made in between shows up only on that second look. ``watchfiles`` does
not report the kernel's queue-overflow notice (notify's ``Rescan`` event carries no path and it
drops such events), so an overflow cannot be told apart from quiet: the safety net is a full scan
when the last one is older than :data:`FULL_SCAN_SECONDS`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kirocrew_core import kiro_sessions
from kirocrew_core.kiro_sessions import Place

if TYPE_CHECKING:
    from watchfiles._rust_notify import RustNotify

log = logging.getLogger(__name__)

#: How long an answer waits for its barrier before it gives up on the watcher and scans everything.
BARRIER_SECONDS = 2.0
#: A watcher that could not start is not tried again before this many seconds (each try walks the tree).
RESTART_BACKOFF_SECONDS = 60.0
#: An answer scans everything again when the last full scan is older than this: the safety net for what
#: no notification says (watchfiles drops the kernel's queue-overflow notice), at one scan per period.
FULL_SCAN_SECONDS = 600.0
_ADDED = 1  # watchfiles.Change.added


@dataclass
class Changes:
    """What one answer must re-read: everything (``why`` says why), or the places and the TUI database."""

    everything: bool = False
    why: str = ""
    places: set[Place] = field(default_factory=set)
    tui: bool = False

    def merge(self, other: Changes) -> None:
        self.everything = self.everything or other.everything
        self.why = self.why or other.why
        self.places |= other.places
        self.tui = self.tui or other.tui


class _Deadline:
    """``watchfiles``' stop event: set once the barrier is overdue."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def is_set(self) -> bool:
        return time.monotonic() > self.at


class SessionWatcher:
    """Collects changed paths under kiro-cli's session roots; one per host, closed when the host stops.

    ``barriers`` is a folder of our own (in the index's state folder) for the barrier files.
    Thread-safe: :meth:`changes` calls are serialised, :meth:`lost` may come from any thread.
    """

    def __init__(self, sessions_root: Path, tui_database: Path, barriers: Path) -> None:
        self.sessions_root = os.fspath(sessions_root)
        self.tui_database = os.fspath(tui_database)
        self.barriers = os.fspath(barriers)
        self._roots = (self.sessions_root, os.path.dirname(self.tui_database), self.barriers)
        self._notify: list[RustNotify] | None = None  # None: not watching
        self._identities: dict[str, tuple[int, int] | None] = {}
        self._pending = Changes()
        self._again: set[Place] = set()  # directories that appeared: looked at once more next time
        self._next_try = 0.0
        self._root_event: str | None = None  # a watched root itself was removed or renamed
        self._last_full = time.monotonic()
        self.full_scan_seconds = FULL_SCAN_SECONDS
        self._names = itertools.count()
        self._lock = threading.Lock()  # one changes() at a time
        self._flags = threading.Lock()  # guards _pending against lost()/again() from other threads
        self.closed = False

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> bool:
        """Start watching the roots that exist; False (and a full scan at every answer) when it cannot."""
        with self._lock:
            return self._start("the watcher started")

    def _start(self, why: str) -> bool:
        self._root_event = None
        self._stop_notify()
        self._lose(why)
        from watchfiles._rust_notify import RustNotify  # lazy: a native module, only the host needs it

        sessions_root, tui_folder, _ = self._roots
        try:
            os.makedirs(self.barriers, mode=0o700, exist_ok=True)
            self._identities = {root: _identity(root) for root in self._roots}
            # Arguments: no debug output, native notifications (no polling), recursive or not, a folder we
            # may not read skipped. The sessions root recursively (new workspace and session folders are
            # watched as they appear); the TUI's folder alone (kiro-cli keeps other things below it). Each
            # watcher also watches the barrier folder: a barrier orders one watcher's events only.
            self._notify = [RustNotify([sessions_root, self.barriers] if self._identities[sessions_root]
                                       else [self.barriers], False, False, 300, True, True)]
            if self._identities[tui_folder] is not None:
                self._notify.append(RustNotify([tui_folder, self.barriers], False, False, 300, False, True))
        except (OSError, RuntimeError) as exc:
            log.warning("history: kiro-cli's sessions cannot be watched (%s); every answer scans them all", exc)
            self._stop_notify()
            self._next_try = time.monotonic() + RESTART_BACKOFF_SECONDS
            return False
        return True

    def close(self) -> None:
        """Stop the watcher's thread; :meth:`changes` answers ``everything`` from now on."""
        with self._lock:
            self.closed = True
            self._stop_notify()

    def _stop_notify(self) -> None:
        for notify in self._notify or []:
            notify.close()
        self._notify = None

    # --- signals ---------------------------------------------------------------------------------

    def lost(self, why: str) -> None:
        """Events may have been lost: the next :meth:`changes` answers ``everything`` (the public signal)."""
        self._lose(why)

    def _lose(self, why: str) -> None:
        with self._flags:
            if not self._pending.everything:
                self._pending.everything, self._pending.why = True, why

    def again(self, changes: Changes) -> None:
        """Give ``changes`` back, to be re-read with the next answer's (an answer could not read them all)."""
        with self._flags:
            self._pending.merge(changes)

    # --- the answer's question -------------------------------------------------------------------

    def changes(self) -> Changes:
        """Everything that changed since the last call (see the module docstring); never misses a change."""
        with self._lock:
            if self.closed:
                return Changes(everything=True, why="the watcher is stopped")
            if self._notify is None:
                if time.monotonic() < self._next_try:
                    return Changes(everything=True, why="the watcher could not start")
                self._start("the watcher restarted")
            elif (moved := self._moved_root()) is not None:
                self._start(f"{moved} was created, removed or replaced")
            if self._notify is not None:
                self._collect()
            if self._root_event is not None:  # a root's own inode may be reused by its successor
                self._start(f"{self._root_event} was removed or replaced")
            if time.monotonic() - self._last_full >= self.full_scan_seconds:
                self._lose("the periodic full scan")
            with self._flags:
                found, self._pending = self._pending, Changes()
            if found.everything:
                self._last_full = time.monotonic()
            found.places |= self._again
            self._again = {Place(place.kind, place.name) for place in found.places if place.appeared}
            return found

    def _moved_root(self) -> str | None:
        for root, identity in self._identities.items():
            if _identity(root) != identity:
                return root
        return None

    def _collect(self) -> None:
        """Collect the notifications up to a fresh barrier into ``_pending`` (``everything`` when that fails)."""
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
            log.warning("history: the session watcher failed (%s); the next answers scan everything", exc)
            self._start(f"the watcher failed: {exc}")
        finally:
            with contextlib.suppress(OSError):  # a barrier left behind is a few bytes of our own
                os.unlink(barrier)

    def _record(self, got: set[tuple[int, str]], barrier: str) -> bool:
        """Mark what ``got`` names; True once the barrier is among it."""
        seen = False
        found = Changes()
        for change, path in got:
            if path == barrier:
                seen = True
            elif path in self._roots and change != _ADDED:
                self._root_event = path
            elif path.startswith(self.tui_database):  # the database, its -wal, -shm or -journal
                found.tui = True
            elif (place := kiro_sessions.place_of(path, self.sessions_root)) is not None:
                if change == _ADDED and os.path.isdir(path):
                    place = Place(place.kind, place.name, appeared=True)
                found.places.add(place)
        with self._flags:
            self._pending.merge(found)
        return seen


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
