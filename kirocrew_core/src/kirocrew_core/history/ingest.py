"""Bringing the history index up to date, incrementally: what :meth:`HistoryIndex.refresh` does.

* a kiro-cli transcript is remembered as ``(size, mtime, inode, offset, head hash)``: an
  unchanged file is not opened; a grown one is read from ``offset`` (only the appended tail,
  complete lines only, in chunks); one that shrank, changed inode or changed its first bytes is
  read again from the start. Metadata files are re-read when their size or time changes;
* the TUI database is opened (read only) when it or its WAL changed, and a conversation's
  history is read only when its ``updated_at`` did;
* a ``history_sources()`` session's ``messages()`` are read only when its ``version`` changed;
* a session whose files (or row, or source entry) are gone is dropped.

A corrupt transcript line is skipped and counted (``bad_lines``), never fatal. Each session's
update is one ``BEGIN IMMEDIATE`` transaction that re-reads the remembered state first, so the
host and a ``kirocrew history`` command refreshing at once never index a line twice.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import re
import shlex
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import kiro_sessions, sqlite_db
from kirocrew_core.contributions import HistoryMessage, HistorySession, HistorySource
from kirocrew_core.history import kiro_stores
from kirocrew_core.history.kiro_stores import FLAT, TUI, V3, CorruptLine, FileSession

if TYPE_CHECKING:
    from kirocrew_core.history.index import HistoryIndex
    from kirocrew_core.history.watch import Changes
    from kirocrew_core.kiro_sessions import Place

log = logging.getLogger(__name__)

HEAD_BYTES = 4096
#: Transcripts are read this much at a time; a line longer than MAX_LINE_BYTES (inline images
#: included) is skipped and counted bad rather than held in memory.
READ_CHUNK = 4 * 1024 * 1024
MAX_LINE_BYTES = 32 * 1024 * 1024
#: What a source plugin may call itself: short, stable, and none of kiro-cli's own.
SOURCE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
KIRO_SOURCES = (FLAT, V3, TUI)


@dataclass
class RefreshReport:
    """What one :meth:`HistoryIndex.refresh` did.

    ``full_scan``: every kiro-cli session file was looked at (no watcher, or it said ``everything``:
    ``why``); otherwise only the places the watcher named were. ``sessions_looked_at``: the kiro-cli
    file sessions whose files were stat'ed. ``unread``: a kiro-cli store could not be read this time
    (a watcher gives its changes back, to be read again).
    """

    sessions_changed: int = 0
    messages_added: int = 0
    bad_lines: int = 0
    sessions_dropped: int = 0
    problems: list[str] = field(default_factory=list)
    interrupted: bool = False
    full_scan: bool = True
    why: str = ""
    sessions_looked_at: int = 0
    unread: bool = False


class Ingest:
    """One update of ``index`` (its connection and lock, its roots and sources)."""

    def __init__(self, index: HistoryIndex) -> None:
        self.index = index
        self.conn = index.conn
        self.lock = index.lock

    def refresh(self, stop: threading.Event, changes: Changes | None = None) -> RefreshReport:
        """Everything (``changes`` None or ``everything``), or only what a watcher saw change; then the sources."""
        full = changes is None or changes.everything or any(place.kind == "all" for place in changes.places)
        report = RefreshReport(full_scan=full, why=changes.why if changes is not None else "")
        steps: list[Callable[[RefreshReport, threading.Event], None]] = []
        if full:
            steps.append(self._refresh_files)
        elif changes is not None and changes.places:
            steps.append(functools.partial(self._refresh_places, changes.places))
        if changes is None or changes.everything or changes.tui:
            steps.append(self._refresh_tui)
        steps.append(self._refresh_sources)
        for step in steps:
            step(report, stop)
            if stop.is_set():
                report.interrupted = True
                break
        return report

    def _known_files(self, paths: list[str] | None = None) -> dict[str, tuple[int, int, int]]:
        """What was remembered of every file (of ``paths`` only, when given: a watched refresh's few)."""
        with self.lock:
            if paths is None:
                rows = self.conn.execute("SELECT path, size, mtime_ns, inode FROM files").fetchall()
            else:
                rows = [row for path in paths for row in self.conn.execute(
                    "SELECT path, size, mtime_ns, inode FROM files WHERE path = ?", (path,))]
        return {row[0]: (row[1], row[2], row[3]) for row in rows}

    def _refresh_files(self, report: RefreshReport, stop: threading.Event) -> None:
        known = self._known_files()
        seen: set[tuple[str, str]] = set()
        for session in kiro_stores.file_sessions(self.index.kiro_root):
            if stop.is_set():
                return
            seen.add((session.source, session.native_id))
            self._update_if_changed(known, session, report)
        for source in (FLAT, V3):
            self._drop_missing(source, seen, report)

    def _update_if_changed(self, known: dict[str, tuple[int, int, int]], session: FileSession,
                           report: RefreshReport) -> None:
        report.sessions_looked_at += 1
        if not (_unchanged(known, session.transcript) and _unchanged(known, session.meta_path)):
            self.update_file_session(session, report)

    def _refresh_places(self, places: set[Place], report: RefreshReport, stop: threading.Event) -> None:
        """Only the sessions and V3 workspace folders a watcher saw change; a session gone from them is dropped."""
        top = os.fspath(self.index.kiro_root or kiro_sessions.sessions_root())
        gone: list[str] = []
        found_sessions: dict[str, FileSession] = {}  # a workspace and one of its sessions may both be named
        for kind, name in sorted({(p.kind, p.name) for p in places}):
            if stop.is_set():
                return
            if kind == "session":
                found = kiro_sessions.session_at(top, name)
                sessions = [found] if found is not None else []
                gone += [] if found is not None else [name]
            else:  # a V3 workspace folder: its sessions now, and those indexed from it that may be gone
                sessions = list(kiro_sessions.workspace_session_paths(os.path.join(top, name)))
                prefix = name + "/"
                with self.lock:
                    gone += [row[0] for row in self.conn.execute(
                        "SELECT native_id FROM sessions WHERE source = ? AND substr(native_id, 1, ?) = ?",
                        (V3, len(prefix), prefix)).fetchall()]
            found_sessions.update((paths.name, FileSession.of(paths)) for paths in sessions)
        known = self._known_files([path for session in found_sessions.values()
                                   for path in (session.transcript, session.meta_path)])
        for session in found_sessions.values():
            self._update_if_changed(known, session, report)
        if gone:
            present = {name for name in gone if kiro_sessions.session_at(top, name) is not None}
            with sqlite_db.immediate(self.conn, self.lock) as db:
                cursor = db.executemany("DELETE FROM sessions WHERE source IN (?, ?) AND native_id = ?",
                                        [(FLAT, V3, name) for name in set(gone) - present])
                report.sessions_dropped += max(cursor.rowcount, 0)

    def update_file_session(self, session: FileSession, report: RefreshReport) -> int:
        """Index what changed in one file session (its metadata, its transcript's tail); the messages added."""
        try:
            with sqlite_db.immediate(self.conn, self.lock) as db:
                sid = self._session_id(db, session.source, session.native_id)
                self._update_meta(db, sid, session)
                added, bad = self._update_transcript(db, sid, session.transcript, session.parse)
                self._finish(db, sid, session.transcript)
        except OSError as exc:  # vanished or unreadable mid-way: the next refresh sees it as it is then
            report.problems.append(f"{session.source} session unreadable: {exc.strerror or exc}")
            report.unread = True
            return 0
        report.sessions_changed += 1
        report.messages_added += added
        report.bad_lines += bad
        return added

    def _session_id(self, db: sqlite3.Connection, source: str, native_id: str) -> int:
        row = db.execute("SELECT id FROM sessions WHERE source = ? AND native_id = ?", (source, native_id)).fetchone()
        if row is not None:
            return int(row[0])
        cur = db.execute("INSERT INTO sessions (key, source, native_id) VALUES (?, ?, ?)",
                         (self.index.key_for(source, native_id), source, native_id))
        return int(cur.lastrowid or 0)

    def _update_meta(self, db: sqlite3.Connection, sid: int, session: FileSession) -> None:
        st = _stat(session.meta_path)
        known = db.execute("SELECT size, mtime_ns, inode FROM files WHERE path = ?",
                           (str(session.meta_path),)).fetchone()
        if st is not None and known is not None and tuple(known) == (st.st_size, st.st_mtime_ns, st.st_ino):
            return
        meta = kiro_stores.read_meta(session)
        db.execute("UPDATE sessions SET title = ?, workspace = ?, created = ?, updated = ?, resume = ? WHERE id = ?",
                   (meta.title, meta.workspace, meta.created, meta.updated,
                    kiro_stores.resume_command(meta.workspace,
                                               f"kiro-cli chat --resume-id {shlex.quote(session.resume_id)}"),
                    sid))
        if st is None:
            db.execute("DELETE FROM files WHERE path = ?", (str(session.meta_path),))
        else:
            _remember(db, session.meta_path, sid, st, 0, "")

    def _update_transcript(self, db: sqlite3.Connection, sid: int, path: str,
                           parse: Callable[[bytes], HistoryMessage | None]) -> tuple[int, int]:
        row = db.execute("SELECT size, mtime_ns, inode, offset, head FROM files WHERE path = ?",
                         (str(path),)).fetchone()
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)  # kiro's file, never a link it points at
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            start = 0
            if row is not None and row["inode"] == st.st_ino and st.st_size >= row["offset"]:
                if (row["size"], row["mtime_ns"]) == (st.st_size, st.st_mtime_ns):
                    return 0, 0
                if _head(fh, row["offset"]) == row["head"]:
                    start = row["offset"]
            if start == 0:  # new, shrunk, replaced or rewritten: read it all again
                db.execute("DELETE FROM messages WHERE session = ?", (sid,))
                db.execute("UPDATE sessions SET messages = 0, bad_lines = 0 WHERE id = ?", (sid,))
            fh.seek(start)
            offset, added, bad = self._read_lines(db, sid, fh, start, st.st_size, parse)
            head = _head(fh, offset)
        _remember(db, path, sid, st, offset, head)
        db.execute("UPDATE sessions SET messages = messages + ?, bad_lines = bad_lines + ? WHERE id = ?",
                   (added, bad, sid))
        return added, bad

    def _read_lines(self, db: sqlite3.Connection, sid: int, fh: Any, start: int, size: int,
                    parse: Callable[[bytes], HistoryMessage | None]) -> tuple[int, int, int]:
        """Index the complete lines from ``start`` to ``size`` in chunks; ``(offset after them, added, bad)``.

        A line still being written (no newline yet) is left for next time; a line longer than
        :data:`MAX_LINE_BYTES` is skipped to its end and counted bad, never held in memory whole.
        """
        offset, added, bad = start, 0, 0
        pending, overlong = b"", False
        remaining = size - start
        while remaining > 0 and (chunk := fh.read(min(READ_CHUNK, remaining))):
            remaining -= len(chunk)
            if overlong:
                newline = chunk.find(b"\n")
                if newline < 0:
                    offset += len(chunk)
                    continue
                offset, bad, overlong = offset + newline + 1, bad + 1, False
                chunk = chunk[newline + 1:]
            data = pending + chunk
            end = data.rfind(b"\n") + 1
            more, worse = self._insert_lines(db, sid, data[:end], parse)
            added, bad, offset = added + more, bad + worse, offset + end
            pending = data[end:]
            if len(pending) > MAX_LINE_BYTES:
                offset, pending, overlong = offset + len(pending), b"", True
        return offset, added, bad

    @staticmethod
    def _insert_lines(db: sqlite3.Connection, sid: int, data: bytes,
                      parse: Callable[[bytes], HistoryMessage | None]) -> tuple[int, int]:
        rows: list[tuple[int, str, str, str]] = []
        bad = 0
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                message = parse(line)
            except CorruptLine:
                bad += 1
                continue
            if message is not None:
                rows.append((sid, message.role, message.at, message.text))
        db.executemany("INSERT INTO messages (session, role, at, text) VALUES (?, ?, ?, ?)", rows)
        return len(rows), bad

    def _finish(self, db: sqlite3.Connection, sid: int, transcript: str) -> None:
        """Fill what the metadata left out: a title from the first prompt, a time from the transcript's."""
        row = db.execute("SELECT title, updated, created FROM sessions WHERE id = ?", (sid,)).fetchone()
        if not row["title"]:
            first = db.execute("SELECT text FROM messages WHERE session = ? AND role = 'user' ORDER BY id LIMIT 1",
                               (sid,)).fetchone()
            if first is not None:
                title = kiro_stores.title_from([HistoryMessage("user", first[0])])
                db.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, sid))
        if not row["updated"]:
            st = _stat(transcript)
            stamp = kiro_stores.when(st.st_mtime) if st is not None else ""
            db.execute("UPDATE sessions SET updated = ?, created = CASE WHEN created = '' THEN ? ELSE created END "
                       "WHERE id = ?", (stamp, stamp, sid))

    def _drop_missing(self, source: str, seen: set[tuple[str, str]], report: RefreshReport) -> None:
        with self.lock:
            rows = self.conn.execute("SELECT id, native_id FROM sessions WHERE source = ?", (source,)).fetchall()
        gone = [row[0] for row in rows if (source, row[1]) not in seen]
        if not gone:
            return
        with sqlite_db.immediate(self.conn, self.lock) as db:
            db.executemany("DELETE FROM sessions WHERE id = ?", [(sid,) for sid in gone])
        report.sessions_dropped += len(gone)

    def _refresh_tui(self, report: RefreshReport, stop: threading.Event) -> None:
        database = self.index.tui_database or kiro_sessions.tui_database()
        files = [database, database.with_name(database.name + "-wal")]
        known = self._known_files()
        if all(_unchanged(known, path) for path in files):
            return
        seen: set[tuple[str, str]] = set()
        if _stat(database) is not None:
            try:
                conn, rows = kiro_stores.tui_rows(database)
            except sqlite3.Error as exc:
                report.problems.append(f"the kiro-cli TUI database cannot be read: {exc}")
                report.unread = True
                return  # what was indexed from it stays until it can be read again
            try:
                for row in rows:
                    if stop.is_set():
                        return
                    native = f"tui/{row.conversation_id}"
                    seen.add((TUI, native))
                    resume = kiro_stores.resume_command(row.workspace, "kiro-cli chat --resume")
                    self._replace_if_changed(TUI, native, row.version,
                                             functools.partial(kiro_stores.tui_messages, conn, row.conversation_id),
                                             title="", workspace=row.workspace, created=row.created,
                                             updated=row.updated, resume=resume, report=report)
            finally:
                conn.close()
        self._drop_missing(TUI, seen, report)
        with sqlite_db.immediate(self.conn, self.lock) as db:
            for path in files:
                st = _stat(path)
                if st is None:
                    db.execute("DELETE FROM files WHERE path = ?", (str(path),))
                else:
                    _remember(db, path, None, st, 0, "")

    def _refresh_sources(self, report: RefreshReport, stop: threading.Event) -> None:
        try:
            sources = list(self.index.sources())
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop kiro-cli's history
            report.problems.append(f"the history sources could not be listed: {exc}")
            return
        for source in sources:
            try:
                sessions = list(source.sessions())
            except Exception as exc:  # noqa: BLE001 - its sessions indexed so far are kept
                log.warning("history source %r failed: %s", source.name, exc)
                report.problems.append(f"history source {source.name} could not be read: {exc}")
                continue
            seen = set()
            for session in sessions:
                if stop.is_set():
                    return
                if not isinstance(session, HistorySession):
                    continue
                seen.add((source.name, session.id))
                self._replace_if_changed(source.name, session.id, session.version, session.messages,
                                         title=session.title, workspace=session.workspace, created=session.created,
                                         updated=session.updated, resume=session.resume, report=report)
            self._drop_missing(source.name, seen, report)

    def _replace_if_changed(self, source: str, native_id: str, version: str,
                            messages: Callable[[], Iterable[HistoryMessage]], *, title: str, workspace: str,
                            created: str, updated: str, resume: str, report: RefreshReport) -> None:
        with self.lock:
            row = self.conn.execute("SELECT version FROM sessions WHERE source = ? AND native_id = ?",
                                     (source, native_id)).fetchone()
        if row is not None and row[0] == version:
            return
        try:
            listed = [m for m in messages() if isinstance(m, HistoryMessage) and m.role in ("user", "assistant")]
        except Exception as exc:  # noqa: BLE001 - keep what was indexed; say so
            report.problems.append(f"a {source} session could not be read: {exc}")
            return
        title = title or kiro_stores.title_from(listed)
        with sqlite_db.immediate(self.conn, self.lock) as db:
            sid = self._session_id(db, source, native_id)
            db.execute("DELETE FROM messages WHERE session = ?", (sid,))
            db.executemany("INSERT INTO messages (session, role, at, text) VALUES (?, ?, ?, ?)",
                           [(sid, m.role, m.at, m.text) for m in listed])
            db.execute("UPDATE sessions SET title = ?, workspace = ?, created = ?, updated = ?, messages = ?, "
                       "version = ?, resume = ? WHERE id = ?",
                       (title, workspace, created, updated, len(listed), version, resume, sid))
        report.sessions_changed += 1
        report.messages_added += len(listed)


def plugin_sources() -> list[HistorySource]:
    """Every plugin's ``history_sources()``, named validly and uniquely (the first of a name wins)."""
    from kirocrew_core.contributions import flatten
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    call = call_hook(get_plugin_manager(), "history_sources", on_error="skip")
    out: dict[str, HistorySource] = {}
    for contribution in flatten(call.contributions):
        source = contribution.value
        if not isinstance(source, HistorySource) or not SOURCE_NAME.match(source.name) \
                or source.name in KIRO_SOURCES or source.name in out:
            log.error("plugin %r returned an unusable or duplicate history source: %r", contribution.plugin, source)
            continue
        out[source.name] = source
    return list(out.values())


def _stat(path: str | Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _unchanged(known: dict[str, tuple[int, int, int]], path: str | Path) -> bool:
    st = _stat(path)
    was = known.get(str(path))
    if st is None:
        return was is None
    return was == (st.st_size, st.st_mtime_ns, st.st_ino)


def _head(fh: Any, length: int) -> str:
    """The hash of a file's first bytes (up to :data:`HEAD_BYTES` of its first ``length``): its identity."""
    fh.seek(0)
    return hashlib.sha256(fh.read(min(length, HEAD_BYTES))).hexdigest()[:32]


def _remember(db: sqlite3.Connection, path: str | Path, sid: int | None, st: os.stat_result, offset: int,
              head: str) -> None:
    db.execute("INSERT INTO files (path, session, size, mtime_ns, inode, offset, head) VALUES (?, ?, ?, ?, ?, ?, ?) "
               "ON CONFLICT (path) DO UPDATE SET session = excluded.session, size = excluded.size, "
               "mtime_ns = excluded.mtime_ns, inode = excluded.inode, offset = excluded.offset, head = excluded.head",
               (str(path), sid, st.st_size, st.st_mtime_ns, st.st_ino, offset, head))
