"""The history index: one SQLite database with an FTS5 table over every past session's messages.

Kept in ``<crew home>/state/history/index.sqlite3`` (owner-only, WAL, through
:mod:`kirocrew_core.sqlite_db`) and brought up to date by :meth:`HistoryIndex.refresh`
before each answer, incrementally:

* a kiro-cli transcript is remembered as ``(size, mtime, inode, offset, head hash)``: an
  unchanged file is not opened; a grown one is read from ``offset`` (only the appended tail,
  complete lines only); one that shrank, changed inode or changed its first bytes is read
  again from the start. Metadata files are re-read when their size or time changes;
* the TUI database is opened (read only) when it or its WAL changed, and a conversation's
  history is read only when its ``updated_at`` did;
* a ``history_sources()`` session's ``messages()`` are read only when its ``version`` changed;
* a session whose files (or row, or source entry) are gone is dropped.

A corrupt transcript line is skipped and counted (``bad_lines``), never fatal. Each session's
update is one ``BEGIN IMMEDIATE`` transaction that re-reads the remembered state first, so the
host and a ``kirocrew history`` command refreshing at once never index a line twice.

Sessions are keyed opaquely (:meth:`HistoryIndex.key_for`: an HMAC of the source and its id
under a secret kept next to the index), so a key given to a model names nothing outside it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import hmac
import logging
import os
import re
import secrets
import shlex
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from kirocrew_core import home, sqlite_db
from kirocrew_core.contributions import HistoryMessage, HistorySession, HistorySource
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.history import kiro_stores
from kirocrew_core.history.kiro_stores import FLAT, TUI, V3, CorruptLine, FileSession

log = logging.getLogger(__name__)
_F = TypeVar("_F", bound=Callable[..., Any])

STATE = "history"
INDEX_NAME = "index.sqlite3"
SECRET_NAME = "key"
KEY_PREFIX = "h1-"
KEY_PATTERN = re.compile(r"^h1-[0-9a-f]{24}$")
HEAD_BYTES = 4096
#: Transcripts are read this much at a time; a line longer than MAX_LINE_BYTES (inline images
#: included) is skipped and counted bad rather than held in memory.
READ_CHUNK = 4 * 1024 * 1024
MAX_LINE_BYTES = 32 * 1024 * 1024
#: What a source plugin may call itself: short, stable, and none of kiro-cli's own.
SOURCE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
KIRO_SOURCES = (FLAT, V3, TUI)
#: Words of a query beyond this are ignored (FTS5 AND-ing many words gains nothing).
MAX_QUERY_WORDS = 16
#: A query whose rarest word is in more messages than this walks the sessions newest first instead of
#: collecting every match (which would read most of the index for a word most messages hold).
COMMON_WORD_MESSAGES = 5000

MIGRATIONS: list[list[str]] = [[
    """CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        source TEXT NOT NULL,
        native_id TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        workspace TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL DEFAULT '',
        updated TEXT NOT NULL DEFAULT '',
        messages INTEGER NOT NULL DEFAULT 0,
        bad_lines INTEGER NOT NULL DEFAULT 0,
        version TEXT NOT NULL DEFAULT '',
        resume TEXT NOT NULL DEFAULT '',
        UNIQUE (source, native_id)
    )""",
    "CREATE INDEX sessions_by_updated ON sessions (updated)",
    "CREATE INDEX sessions_by_workspace ON sessions (workspace, updated)",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        session INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        at TEXT NOT NULL DEFAULT '',
        text TEXT NOT NULL
    )""",
    "CREATE INDEX messages_by_session ON messages (session, id)",
    """CREATE TABLE files (
        path TEXT PRIMARY KEY,
        session INTEGER REFERENCES sessions (id) ON DELETE CASCADE,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        inode INTEGER NOT NULL,
        offset INTEGER NOT NULL DEFAULT 0,
        head TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(text, content='messages', content_rowid='id', "
    "tokenize='unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE messages_vocab USING fts5vocab(messages_fts, 'row')",
    """CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
    END""",
    """CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END""",
]]


class HistoryError(KirocrewError):
    """The history index cannot be used (``history_index_unusable``, ``history_index_too_new``)."""


@dataclass(frozen=True)
class Scope:
    """Whose sessions a reader sees: ``workspaces`` (a session's own, and folders inside), or every one (None).

    ``""`` in ``workspaces`` stands for sessions that have no workspace (a caller without one sees only those).
    """

    workspaces: tuple[str, ...] | None

    @classmethod
    def everything(cls) -> Scope:
        return cls(None)

    def clause(self) -> tuple[str, list[Any]]:
        if self.workspaces is None:
            return "1", []
        parts: list[str] = []
        args: list[Any] = []
        for root in self.workspaces:
            if not root:
                parts.append("s.workspace = ''")
                continue
            root = root.rstrip("/") or "/"
            parts.append("(s.workspace = ? OR substr(s.workspace, 1, ?) = ?)")
            prefix = root if root.endswith("/") else root + "/"
            args += [root, len(prefix), prefix]
        return ("(" + " OR ".join(parts) + ")") if parts else "0", args


@dataclass(frozen=True)
class SessionRow:
    """One indexed session as readers see it (its native id stays inside the index)."""

    key: str
    source: str
    title: str
    workspace: str
    created: str
    updated: str
    messages: int
    bad_lines: int
    resume: str

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "source": self.source, "title": self.title, "workspace": self.workspace,
                "created": self.created, "updated": self.updated, "messages": self.messages,
                "badLines": self.bad_lines}


@dataclass(frozen=True)
class StoredMessage:
    """One indexed message: its position in its session (1 = oldest), role, time and text."""

    number: int
    role: str
    at: str
    text: str


@dataclass(frozen=True)
class Hit:
    """A session a search matched, and its matching messages' text, oldest first (at most a few)."""

    session: SessionRow
    texts: tuple[str, ...]


@dataclass
class RefreshReport:
    """What one :meth:`HistoryIndex.refresh` did."""

    sessions_changed: int = 0
    messages_added: int = 0
    bad_lines: int = 0
    sessions_dropped: int = 0
    problems: list[str] = field(default_factory=list)
    interrupted: bool = False


def index_path() -> Path:
    return home.state_dir(STATE) / INDEX_NAME


def fts_query(query: str) -> tuple[str, list[str]]:
    """The FTS5 expression for ``query`` (every word, each quoted: no operator reaches FTS5) and its words."""
    words = re.findall(r"\w+", query)[:MAX_QUERY_WORDS]
    if not words:
        raise BadInputError("query: give at least one word to search for", code="invalid_arguments")
    return " ".join(f'"{w}"' for w in words), words


def _usable(method: _F) -> _F:
    """``method`` with a database failure (damaged, locked past the busy timeout) as :class:`HistoryError`."""

    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"the history index cannot be used now ({exc}); if this persists, move "
                               f"{index_path().parent} away and it is rebuilt", code="history_index_unusable") from exc

    return cast(_F, wrapped)


class HistoryIndex:
    """The index database, open; one per process (:func:`shared`), or one per test with its own roots."""

    def __init__(self, path: Path | None = None, *, kiro_root: Path | None = None, tui_database: Path | None = None,
                 sources: Callable[[], Sequence[HistorySource]] | None = None) -> None:
        self.path = path or index_path()
        self._kiro_root = kiro_root
        self._tui_database = tui_database
        self._sources = sources if sources is not None else plugin_sources
        self._lock = threading.RLock()
        self._conn = self._open()
        self._secret = _secret(self.path.parent / SECRET_NAME)

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            sqlite_db.ensure_private_file(self.path)
        except OSError as exc:
            raise HistoryError(f"cannot create the history index {self.path}: {exc.strerror or exc}",
                               code="history_index_unusable") from exc
        try:
            conn = sqlite_db.connect(self.path)
            try:
                sqlite_db.migrate(conn, MIGRATIONS)
            except BaseException:
                conn.close()
                raise
        except sqlite_db.DatabaseProblem as exc:
            raise HistoryError(str(exc), code=f"history_index_{exc.kind}") from exc
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: {exc}", code="history_index_unusable") from exc
        return conn

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def key_for(self, source: str, native_id: str) -> str:
        digest = hmac.new(self._secret, f"{source}\0{native_id}".encode(), hashlib.sha256).hexdigest()
        return KEY_PREFIX + digest[:24]

    # --- updating ---------------------------------------------------------------------------

    @_usable
    def refresh(self, stop: threading.Event | None = None) -> RefreshReport:
        """Bring the index up to date with every store (see the module docstring); what changed.

        ``stop`` set ends it between two sessions (the host stopping during a first build): what
        was indexed stays, and nothing is dropped as gone on the strength of an unfinished look.
        """
        report = RefreshReport()
        stop = stop or threading.Event()
        for step in (self._refresh_files, self._refresh_tui, self._refresh_sources):
            step(report, stop)
            if stop.is_set():
                report.interrupted = True
                break
        return report

    def _known_files(self) -> dict[str, tuple[int, int, int]]:
        with self._lock:
            rows = self._conn.execute("SELECT path, size, mtime_ns, inode FROM files").fetchall()
        return {row[0]: (row[1], row[2], row[3]) for row in rows}

    def _refresh_files(self, report: RefreshReport, stop: threading.Event) -> None:
        known = self._known_files()
        seen: set[tuple[str, str]] = set()
        for session in kiro_stores.file_sessions(self._kiro_root):
            if stop.is_set():
                return
            seen.add((session.source, session.native_id))
            if _unchanged(known, session.transcript) and _unchanged(known, session.meta_path):
                continue
            self.update_file_session(session, report)
        for source in (FLAT, V3):
            self._drop_missing(source, seen, report)

    def update_file_session(self, session: FileSession, report: RefreshReport | None = None) -> int:
        """Index what changed in one file session (its metadata, its transcript's tail); the messages added."""
        report = report or RefreshReport()
        try:
            with sqlite_db.immediate(self._conn, self._lock) as db:
                sid = self._session_id(db, session.source, session.native_id)
                self._update_meta(db, sid, session)
                added, bad = self._update_transcript(db, sid, session.transcript, session.parse)
                self._finish(db, sid, session.transcript)
        except OSError as exc:  # vanished or unreadable mid-way: the next refresh sees it as it is then
            report.problems.append(f"{session.source} session unreadable: {exc.strerror or exc}")
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
                         (self.key_for(source, native_id), source, native_id))
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
        with self._lock:
            rows = self._conn.execute("SELECT id, native_id FROM sessions WHERE source = ?", (source,)).fetchall()
        gone = [row[0] for row in rows if (source, row[1]) not in seen]
        if not gone:
            return
        with sqlite_db.immediate(self._conn, self._lock) as db:
            db.executemany("DELETE FROM sessions WHERE id = ?", [(sid,) for sid in gone])
        report.sessions_dropped += len(gone)

    def _refresh_tui(self, report: RefreshReport, stop: threading.Event) -> None:
        database = self._tui_database or kiro_stores.tui_database()
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
        with sqlite_db.immediate(self._conn, self._lock) as db:
            for path in files:
                st = _stat(path)
                if st is None:
                    db.execute("DELETE FROM files WHERE path = ?", (str(path),))
                else:
                    _remember(db, path, None, st, 0, "")

    def _refresh_sources(self, report: RefreshReport, stop: threading.Event) -> None:
        try:
            sources = list(self._sources())
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
        with self._lock:
            row = self._conn.execute("SELECT version FROM sessions WHERE source = ? AND native_id = ?",
                                     (source, native_id)).fetchone()
        if row is not None and row[0] == version:
            return
        try:
            listed = [m for m in messages() if isinstance(m, HistoryMessage) and m.role in ("user", "assistant")]
        except Exception as exc:  # noqa: BLE001 - keep what was indexed; say so
            report.problems.append(f"a {source} session could not be read: {exc}")
            return
        title = title or kiro_stores.title_from(listed)
        with sqlite_db.immediate(self._conn, self._lock) as db:
            sid = self._session_id(db, source, native_id)
            db.execute("DELETE FROM messages WHERE session = ?", (sid,))
            db.executemany("INSERT INTO messages (session, role, at, text) VALUES (?, ?, ?, ?)",
                           [(sid, m.role, m.at, m.text) for m in listed])
            db.execute("UPDATE sessions SET title = ?, workspace = ?, created = ?, updated = ?, messages = ?, "
                       "version = ?, resume = ? WHERE id = ?",
                       (title, workspace, created, updated, len(listed), version, resume, sid))
        report.sessions_changed += 1
        report.messages_added += len(listed)

    # --- reading ----------------------------------------------------------------------------

    @_usable
    def sessions(self, scope: Scope, *, limit: int, offset: int = 0, after: str = "", before: str = "",
                 source: str = "") -> list[SessionRow]:
        """Sessions in ``scope``, newest first (``after`` ≤ updated < ``before``, ISO times; empty: unbounded)."""
        where, args = self._filters(scope, after, before, source)
        with self._lock:
            rows = self._conn.execute(f"SELECT s.* FROM sessions s WHERE {where} ORDER BY s.updated DESC, s.id DESC "
                                      "LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
        return [_row(r) for r in rows]

    @_usable
    def count(self, scope: Scope, *, after: str = "", before: str = "", source: str = "") -> int:
        where, args = self._filters(scope, after, before, source)
        with self._lock:
            return int(self._conn.execute(f"SELECT COUNT(*) FROM sessions s WHERE {where}", args).fetchone()[0])

    @_usable
    def workspaces(self) -> list[tuple[str, int]]:
        """Every workspace the index has sessions of, with how many, most sessions first."""
        with self._lock:
            rows = self._conn.execute("SELECT workspace, COUNT(*) FROM sessions GROUP BY workspace "
                                      "ORDER BY COUNT(*) DESC, workspace").fetchall()
        return [(r[0], int(r[1])) for r in rows]

    @staticmethod
    def _filters(scope: Scope, after: str, before: str, source: str) -> tuple[str, list[Any]]:
        where, args = scope.clause()
        if after:
            where += " AND s.updated >= ?"
            args.append(after)
        if before:
            where += " AND s.updated < ?"
            args.append(before)
        if source:
            where += " AND s.source = ?"
            args.append(source)
        return where, args

    @_usable
    def session(self, key: str) -> SessionRow | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM sessions WHERE key = ?", (key,)).fetchone()
        return _row(row) if row is not None else None

    @_usable
    def messages(self, key: str, *, limit: int, offset: int = 0, newest_first: bool = True) -> list[StoredMessage]:
        """A page of one session's messages; ``offset`` counts from the newest (or the oldest) end."""
        order = "DESC" if newest_first else "ASC"
        with self._lock:
            total = self._conn.execute("SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session "
                                       "WHERE s.key = ?", (key,)).fetchone()[0]
            rows = self._conn.execute(
                f"SELECT m.role, m.at, m.text FROM messages m JOIN sessions s ON s.id = m.session WHERE s.key = ? "
                f"ORDER BY m.id {order} LIMIT ? OFFSET ?", (key, limit, offset)).fetchall()
        # Messages are numbered in id order (1 = oldest), counted from the page's end, not per row.
        numbers = (range(total - offset, 0, -1) if newest_first else range(offset + 1, total + 1))
        return [StoredMessage(n, r["role"], r["at"], r["text"]) for n, r in zip(numbers, rows, strict=False)]

    @_usable
    def search(self, query: str, scope: Scope, *, limit: int, after: str = "", before: str = "",
               per_session: int = 5) -> list[Hit]:
        """Sessions whose messages hold every word of ``query``, newest first, with up to ``per_session`` texts.

        Two plans, by how common the rarest word is (FTS5's vocabulary counts): a rare one reads every
        matching message once and groups them by session; a common one walks the sessions newest first,
        asking each (its rowid range) for its first matches, and stops at ``limit``. Each plan evaluates
        the match once per pass, never once per hit on top.
        """
        expression, words = fts_query(query)
        where, args = self._filters(scope, after, before, "")
        with self._lock:
            if self._rarest(words) > COMMON_WORD_MESSAGES:
                return self._walk(expression, where, args, limit, per_session)
            return self._grouped(expression, where, args, limit, per_session)

    def _rarest(self, words: list[str]) -> int:
        """How many messages hold the query's rarest word (0 when one is in none)."""
        counts = []
        for word in {w.lower() for w in words}:
            row = self._conn.execute("SELECT doc FROM messages_vocab WHERE term = ?", (word,)).fetchone()
            counts.append(int(row[0]) if row is not None else 0)
        return min(counts, default=0)

    def _grouped(self, expression: str, where: str, args: list[Any], limit: int, per_session: int) -> list[Hit]:
        matches = self._conn.execute(
            f"SELECT s.id, s.updated, m.id FROM messages_fts f CROSS JOIN messages m ON m.id = f.rowid "
            f"CROSS JOIN sessions s ON s.id = m.session WHERE messages_fts MATCH ? AND {where}",
            [expression, *args]).fetchall()
        ids: dict[int, list[int]] = {}
        newest: dict[int, str] = {}
        for sid, updated, mid in matches:
            ids.setdefault(sid, []).append(mid)
            newest[sid] = updated
        chosen = sorted(ids, key=lambda sid: (newest[sid], sid), reverse=True)[:limit]
        wanted = [mid for sid in chosen for mid in sorted(ids[sid])[:per_session]]
        texts = dict(self._conn.execute(f"SELECT id, text FROM messages WHERE id IN ({_marks(wanted)})",
                                        wanted).fetchall()) if wanted else {}
        rows = {row["id"]: row for row in self._conn.execute(
            f"SELECT * FROM sessions WHERE id IN ({_marks(chosen)})", chosen).fetchall()} if chosen else {}
        return [Hit(_row(rows[sid]), tuple(texts[mid] for mid in sorted(ids[sid])[:per_session])) for sid in chosen]

    def _walk(self, expression: str, where: str, args: list[Any], limit: int, per_session: int) -> list[Hit]:
        sessions = self._conn.execute(
            f"SELECT s.*, (SELECT MIN(id) FROM messages WHERE session = s.id) AS lo, "
            f"(SELECT MAX(id) FROM messages WHERE session = s.id) AS hi FROM sessions s "
            f"WHERE {where} AND s.messages > 0 ORDER BY s.updated DESC, s.id DESC", args)
        found: list[Hit] = []
        while len(found) < limit and (batch := sessions.fetchmany(64)):
            for row in batch:
                texts = self._conn.execute(
                    "SELECT m.text FROM messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts "
                    "MATCH ? AND f.rowid BETWEEN ? AND ? AND m.session = ? ORDER BY f.rowid LIMIT ?",
                    (expression, row["lo"], row["hi"], row["id"], per_session)).fetchall()
                if texts:
                    found.append(Hit(_row(row), tuple(t[0] for t in texts)))
                    if len(found) == limit:
                        break
        sessions.close()
        return found


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


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


_shared: HistoryIndex | None = None
_shared_lock = threading.Lock()


def shared() -> HistoryIndex:
    """This process's index on the crew home's database (reopened when the crew home moved: tests)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.path != index_path():
            if _shared is not None:
                _shared.close()
            _shared = HistoryIndex()
        return _shared


def _row(row: sqlite3.Row) -> SessionRow:
    return SessionRow(row["key"], row["source"], row["title"], row["workspace"], row["created"], row["updated"],
                      int(row["messages"]), int(row["bad_lines"]), row["resume"])


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


def _secret(path: Path) -> bytes:
    """The index's key secret, made once (owner-only, published whole with a link, so racers agree on one)."""
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
        if len(data) == 32:
            return data
        raise HistoryError(f"{path} is not a history key (expected 32 bytes): move it away to make a new one",
                           code="history_index_unusable")
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, secrets.token_bytes(32))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(temp)
    return _secret(path)
