"""What changed in kiro-cli's session stores since the last answer, from file-change notifications.

While the host runs, a :class:`SessionWatcher` watches kiro-cli's sessions root (the flat
directory, every V3 workspace and session directory under it) and the TUI database's folder
through a :class:`~kirocrew_core.file_watch.FileWatcher`. An answer asks
:meth:`SessionWatcher.changes` and re-reads only what they name, instead of a ``stat`` of every
session file.

**No stale window.** Each answer collects up to a fresh *barrier* (see :mod:`kirocrew_core.file_watch`),
so every change made before the answer began is in it.

**Never silently missed.** :meth:`~SessionWatcher.changes` answers ``everything`` (a full scan) when
the file watcher says so (it (re)started, failed, lost its barrier, a root was replaced or appeared,
:meth:`~SessionWatcher.lost` was called: an update that failed half-way calls it, or its safety-net
period passed). A directory that appeared is looked at again on the next answer too: the watcher
puts its watch on a new directory only after reporting it, so a file made in between shows up only
on that second look.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kirocrew_core import file_watch, kiro_sessions
from kirocrew_core.kiro_sessions import Place


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


class SessionWatcher:
    """Collects changed paths under kiro-cli's session roots; one per host, closed when the host stops.

    ``barriers`` is a folder of our own (in the index's state folder) for the barrier files.
    Thread-safe: :meth:`changes` calls are serialised, :meth:`lost` and :meth:`again` may come from any thread.
    """

    def __init__(self, sessions_root: Path, tui_database: Path, barriers: Path) -> None:
        self.sessions_root = os.fspath(sessions_root)
        self.tui_database = os.fspath(tui_database)
        # The sessions root recursively (new workspace and session folders are watched as they appear); the
        # TUI's folder alone (kiro-cli keeps other things below it).
        self.files = file_watch.FileWatcher(
            [file_watch.Root(self.sessions_root), file_watch.Root(os.path.dirname(self.tui_database), False)],
            barriers, label="kiro-cli's sessions")
        self.barriers = self.files.barriers
        self._pending = Changes()  # what an answer gave back (again())
        self._again: set[Place] = set()  # directories that appeared: looked at once more next time
        self._lock = threading.Lock()  # one changes() at a time
        self._flags = threading.Lock()  # guards _pending against again() from other threads

    @property
    def closed(self) -> bool:
        return self.files.closed

    @property
    def full_scan_seconds(self) -> float:
        return self.files.full_scan_seconds

    @full_scan_seconds.setter
    def full_scan_seconds(self, seconds: float) -> None:
        self.files.full_scan_seconds = seconds

    def start(self) -> bool:
        """Start watching the roots that exist; False (and a full scan at every answer) when it cannot."""
        return self.files.start()

    def close(self) -> None:
        """Stop the watcher's thread; :meth:`changes` answers ``everything`` from now on."""
        self.files.close()

    def lost(self, why: str) -> None:
        """Events may have been lost: the next :meth:`changes` answers ``everything`` (the public signal)."""
        self.files.lost(why)

    def again(self, changes: Changes) -> None:
        """Give ``changes`` back, to be re-read with the next answer's (an answer could not read them all)."""
        with self._flags:
            self._pending.merge(changes)

    def changes(self) -> Changes:
        """Everything that changed since the last call (see the module docstring); never misses a change."""
        with self._lock:
            batch = self.files.changes()
            seen = Changes(everything=batch.everything, why=batch.why)
            for change, path in batch.paths:
                if path.startswith(self.tui_database):  # the database, its -wal, -shm or -journal
                    seen.tui = True
                elif (place := kiro_sessions.place_of(path, self.sessions_root)) is not None:
                    if change == file_watch.ADDED and os.path.isdir(path):
                        place = Place(place.kind, place.name, appeared=True)
                    seen.places.add(place)
            with self._flags:
                found, self._pending = self._pending, Changes()
            found.merge(seen)
            found.places |= self._again
            self._again = {Place(place.kind, place.name) for place in found.places if place.appeared}
            return found
