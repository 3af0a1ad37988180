"""The library kept current in the host: every source re-read in a worker thread, with its progress.

The host's start never waits for it and the tools never wait on it: they search what is indexed.
A pass re-reads each source (only changed files are read and chunked again: :meth:`Library.reindex`),
then sleeps :data:`INTERVAL_SECS` or until :func:`wake`. :func:`source_states` is what the owner's
views read: each source, its counts, and what the host is doing with it now.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
INTERVAL_SECS = 30.0


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


def index_all(stop: threading.Event) -> None:
    """One pass: re-read each source in turn, its progress kept; a source that fails is logged, the rest go on."""
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.knowledge.store import shared

    library = shared()
    for source in library.sources():
        if stop.is_set():
            return
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
    """The host service: passes of :func:`index_all` in one worker thread until the host stops."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kirocrew-knowledge", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                index_all(self._stop)
            except Exception:  # the host runs on; the next pass tries again
                log.exception("the knowledge library could not be brought up to date")
            self._wake.wait(INTERVAL_SECS)
            self._wake.clear()

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        import asyncio

        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        self._thread = None


ingestor = Ingestor()


def wake() -> None:
    """Start the next pass now (after the owner added a source, say)."""
    ingestor.wake()
