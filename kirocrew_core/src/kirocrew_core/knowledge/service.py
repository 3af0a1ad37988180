"""The library kept current in the host: sources re-read in a worker thread when their files change.

The host's start never waits for it and the tools never wait on it: they search what is indexed.
A pass re-reads sources (only changed files are read and chunked again: :meth:`Library.reindex`).
Between passes the worker waits on a :class:`~kirocrew_core.file_watch.FileWatcher` over the folder
and file sources: a change re-reads the sources it touched within about a second. Every source is
re-read anyway after :data:`INTERVAL_SECS` without one (the safety net for what sends no notification,
a network share say, and the pace when no watcher can start), and at once after :func:`wake`.
:func:`source_states` is what the owner's views read: each source, its counts, and what the host is
doing with it now.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kirocrew_core.file_watch import FileWatcher
    from kirocrew_core.knowledge.store import Source

log = logging.getLogger(__name__)
#: Every source is re-read at least this often, whatever the watcher said.
INTERVAL_SECS = 30.0
#: The watcher's barrier folder, in the library's state folder.
BARRIERS = "watch"


@dataclass
class Progress:
    """A source's state in this process: ``waiting``, ``indexing`` (``done`` of ``total`` files), ``ready``,
    ``failed`` (``detail`` says why)."""

    state: str = "waiting"
    done: int = 0
    total: int = 0
    detail: str = ""


_progress: dict[int, Progress] = {}
_progress_lock = threading.Lock()


def _set(source: int, **changes: Any) -> None:
    with _progress_lock:
        current = _progress.setdefault(source, Progress())
        for name, value in changes.items():
            setattr(current, name, value)


def progress_snapshot(source: int | None = None) -> dict[int, dict[str, Any]]:
    """The live progress of every source (or of one) this process knows, as plain values."""
    with _progress_lock:
        return {sid: dict(p.__dict__) for sid, p in _progress.items() if source in (None, sid)}


def source_states() -> list[dict[str, Any]]:
    """Every source as a dict: what the library holds (counts, last indexed, problem) and its live progress."""
    from kirocrew_core.knowledge.store import shared

    states = []
    for source in shared().sources():
        with _progress_lock:
            live = _progress.get(source.id)
            progress = Progress(**live.__dict__) if live is not None else Progress("ready" if source.indexed else
                                                                                    "waiting")
        if source.problem and progress.state != "indexing":  # the source itself could not be read
            progress.state, progress.detail = "failed", source.problem
        states.append(source.as_dict() | {"progress": dict(progress.__dict__)})
    return states


def index_all(stop: threading.Event, only: set[int] | None = None) -> None:
    """One pass: re-read each source (those in ``only``, when given) in turn, its progress kept; a source that
    fails is logged, the rest go on."""
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.knowledge.store import shared

    library = shared()
    for source in library.sources():
        if stop.is_set():
            return
        if only is not None and source.id not in only:
            continue
        _set(source.id, state="indexing", done=0, total=0, detail="")

        def progress(done: int, total: int, sid: int = source.id) -> None:
            _set(sid, done=done, total=total)

        try:
            report = library.reindex(str(source.id), stop, progress=progress)
        except KirocrewError as exc:
            _set(source.id, state="failed", detail=exc.message)
            log.warning("knowledge: %s could not be read: %s", source.location, exc.message)
            continue
        _set(source.id, state="ready", detail=f"{report.rechunked} file(s) read again, {len(report.skipped)} skipped")


class Ingestor:
    """The host service: passes of :func:`index_all` in one worker thread until the host stops, each after
    a change the watcher saw, :data:`INTERVAL_SECS` or :meth:`wake`."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._watcher: FileWatcher | None = None

    async def start(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kirocrew-knowledge", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        todo: set[int] | None = None  # None: every source
        try:
            while not self._stop.is_set():
                try:
                    self._watch(todo is None)
                    index_all(self._stop, todo)
                except Exception:  # the host runs on; the next pass tries again
                    log.exception("the knowledge library could not be brought up to date")
                todo = self._next()
        finally:
            if self._watcher is not None:
                self._watcher.close()
            self._watcher = None

    def _watch(self, full_pass: bool) -> None:
        """Watch the folder and file sources there are now (a new watcher when they changed).

        A new watcher's first answer says "everything": dropped when a full pass follows anyway.
        """
        from kirocrew_core import file_watch
        from kirocrew_core.knowledge.store import database_path, shared

        # A file source through its folder (not below it): an editor's save often replaces the file, and a
        # watch on the replaced file would see nothing more.
        roots = tuple(sorted({file_watch.Root(s.location) if s.kind == "folder" else
                              file_watch.Root(os.path.dirname(s.location), recursive=False)
                              for s in shared().sources() if s.kind in ("folder", "file")},
                             key=lambda root: (root.path, root.recursive)))
        if self._watcher is not None and self._watcher.roots == roots:
            return
        if self._watcher is not None:
            self._watcher.close()
        self._watcher = None
        if roots:
            self._watcher = file_watch.FileWatcher(roots, database_path().parent / BARRIERS,
                                                   label="the knowledge sources")
            self._watcher.start()
            if full_pass:
                self._watcher.changes()

    def _next(self) -> set[int] | None:
        """Wait for the next pass: the ids of the sources a change touched, or None (every source)."""
        from kirocrew_core.knowledge.store import shared

        deadline = time.monotonic() + INTERVAL_SECS
        woken = _Either(self._stop, self._wake)
        while (left := deadline - time.monotonic()) > 0 and not woken.is_set():
            if self._watcher is None:
                self._wake.wait(left)
                break
            try:
                batch = self._watcher.wait(left, woken)
                if batch.everything:
                    break
                touched = touched_sources(shared().sources(), (path for _, path in batch.paths))
            except Exception:  # the library could not be read: a full pass says why
                log.exception("the knowledge sources' changes could not be read")
                break
            if touched:
                return touched
        self._wake.clear()
        return None

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        import asyncio

        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        self._thread = None


class _Either:
    """Set when either event is (``watchfiles``' stop event)."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(event.is_set() for event in self.events)


def touched_sources(sources: Iterable[Source], paths: Iterable[str]) -> set[int]:
    """The ids of the folder and file sources that hold one of ``paths`` (the library's own files excepted)."""
    from kirocrew_core.knowledge.store import database_path

    own = str(database_path().parent) + os.sep
    wanted = [(s.id, s.location, s.kind == "folder") for s in sources if s.kind in ("folder", "file")]
    found: set[int] = set()
    for path in paths:
        if path.startswith(own):  # the library's database and the barriers: a pass writes them
            continue
        found.update(sid for sid, location, folder in wanted
                     if path == location or (folder and path.startswith(location.rstrip(os.sep) + os.sep)))
    return found


ingestor = Ingestor()


def wake() -> None:
    """Start the next pass now (after the owner added a source, say)."""
    ingestor.wake()
