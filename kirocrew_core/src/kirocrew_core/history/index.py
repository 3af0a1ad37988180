"""The history index: one SQLite database with an FTS5 table over every past session's messages.

Kept in ``<crew home>/state/history/index.sqlite3`` (owner-only, WAL, through
:mod:`kirocrew_core.sqlite_db`): the sessions, their messages, what was read of each file,
and ``messages_fts`` with its vocabulary. :meth:`HistoryIndex.refresh` brings it up to date
before each answer (incrementally: :mod:`.ingest`; in the host, only what its watcher saw
change: :mod:`.watch`); the reading methods and the search are here.

Sessions are keyed opaquely (:meth:`HistoryIndex.key_for`: an HMAC of the source and its id
under a secret kept next to the index), so a key given to a model names nothing outside it.
Every database failure of a public method is :class:`HistoryError` ``history_index_unusable``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import logging
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from kirocrew_core import home, sqlite_db
from kirocrew_core.contributions import HistorySource
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.history.kiro_stores import FileSession

if TYPE_CHECKING:
    from kirocrew_core.history.ingest import RefreshReport
    from kirocrew_core.history.watch import SessionWatcher

log = logging.getLogger(__name__)
_F = TypeVar("_F", bound=Callable[..., Any])

STATE = "history"
INDEX_NAME = "index.sqlite3"
SECRET_NAME = "key"
#: The folder the watcher's barrier files are made in (:mod:`.watch`), next to the index.
BARRIERS = "barriers"
KEY_PREFIX = "h1-"
KEY_PATTERN = re.compile(r"^h1-[0-9a-f]{24}$")
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
], [
    # A summary a model wrote, valid while its session still has the message count and last update it was
    # written for (list_sessions' summarize: .summaries); dropped with its session.
    """CREATE TABLE summaries (
        session INTEGER PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
        messages INTEGER NOT NULL,
        updated TEXT NOT NULL,
        summary TEXT NOT NULL,
        made TEXT NOT NULL
    )""",
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


def _plugin_sources() -> list[HistorySource]:
    from kirocrew_core.history.ingest import plugin_sources

    return plugin_sources()


class HistoryIndex:
    """The index database, open; one per process (:func:`shared`), or one per test with its own roots."""

    def __init__(self, path: Path | None = None, *, kiro_root: Path | None = None, tui_database: Path | None = None,
                 sources: Callable[[], Sequence[HistorySource]] | None = None) -> None:
        self.path = path or index_path()
        self.kiro_root = kiro_root
        self.tui_database = tui_database
        self.sources = sources if sources is not None else _plugin_sources
        #: The one connection, and the lock its users take (:mod:`.ingest` writes through both).
        self.lock = threading.RLock()
        self.conn = self._open()
        self._secret = _secret(self.path.parent / SECRET_NAME)
        #: While the host runs: what changed in kiro-cli's stores (:meth:`watch`); None: scan them all.
        self.watcher: SessionWatcher | None = None
        #: One watched refresh at a time: an answer that comes while another reads the changes it took
        #: waits for that read, or it would answer without them.
        self._fresh = threading.Lock()

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
        self.unwatch()
        with self.lock:
            self.conn.close()

    def key_for(self, source: str, native_id: str) -> str:
        digest = hmac.new(self._secret, f"{source}\0{native_id}".encode(), hashlib.sha256).hexdigest()
        return KEY_PREFIX + digest[:24]

    # --- updating (kirocrew_core.history.ingest does the work) -------------------------------

    @_usable
    def refresh(self, stop: threading.Event | None = None) -> RefreshReport:
        """Bring the index up to date with every store (:mod:`.ingest`); what changed.

        ``stop`` set ends it between two sessions (the host stopping during a first build): what
        was indexed stays, and nothing is dropped as gone on the strength of an unfinished look.
        """
        from kirocrew_core.history.ingest import Ingest

        watcher = self.watcher
        if watcher is None:
            return Ingest(self).refresh(stop or threading.Event())
        with self._fresh:
            changes = watcher.changes()
            try:
                report = Ingest(self).refresh(stop or threading.Event(), changes)
            except BaseException:
                watcher.lost("an update of the index failed half-way")
                raise
            if report.interrupted:
                watcher.lost("the last update was stopped half-way")
            elif report.unread:
                watcher.again(changes)
            return report

    def watch(self) -> bool:
        """Keep up with kiro-cli's stores from file-change notifications (the host, while it runs).

        From now on :meth:`refresh` re-reads only what changed (:mod:`.watch`); the first one still scans
        everything. False when no watcher could start: every refresh then scans as before.
        """
        from kirocrew_core import kiro_sessions
        from kirocrew_core.history.watch import SessionWatcher

        self.unwatch()
        watcher = SessionWatcher(self.kiro_root or kiro_sessions.sessions_root(),
                                 self.tui_database or kiro_sessions.tui_database(), self.path.parent / BARRIERS)
        started = watcher.start()
        self.watcher = watcher
        return started

    def unwatch(self) -> None:
        """Stop the watcher (its thread ends); :meth:`refresh` scans everything again."""
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            watcher.close()

    @_usable
    def update_file_session(self, session: FileSession, report: RefreshReport | None = None) -> int:
        """Index what changed in one kiro-cli file session (its metadata, its transcript's tail); the messages added.

        What a watched :meth:`refresh` calls for each session whose files changed.
        """
        from kirocrew_core.history.ingest import Ingest, RefreshReport

        return Ingest(self).update_file_session(session, report or RefreshReport())

    # --- reading ----------------------------------------------------------------------------

    @_usable
    def sessions(self, scope: Scope, *, limit: int, offset: int = 0, after: str = "", before: str = "",
                 source: str = "") -> list[SessionRow]:
        """Sessions in ``scope``, newest first (``after`` ≤ updated < ``before``, ISO times; empty: unbounded)."""
        where, args = self._filters(scope, after, before, source)
        with self.lock:
            rows = self.conn.execute(f"SELECT s.* FROM sessions s WHERE {where} ORDER BY s.updated DESC, s.id DESC "
                                      "LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
        return [_row(r) for r in rows]

    @_usable
    def count(self, scope: Scope, *, after: str = "", before: str = "", source: str = "") -> int:
        where, args = self._filters(scope, after, before, source)
        with self.lock:
            return int(self.conn.execute(f"SELECT COUNT(*) FROM sessions s WHERE {where}", args).fetchone()[0])

    @_usable
    def workspaces(self) -> list[tuple[str, int]]:
        """Every workspace the index has sessions of, with how many, most sessions first."""
        with self.lock:
            rows = self.conn.execute("SELECT workspace, COUNT(*) FROM sessions GROUP BY workspace "
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
        with self.lock:
            row = self.conn.execute("SELECT * FROM sessions WHERE key = ?", (key,)).fetchone()
        return _row(row) if row is not None else None

    @_usable
    def messages(self, key: str, *, limit: int, offset: int = 0, newest_first: bool = True) -> list[StoredMessage]:
        """A page of one session's messages; ``offset`` counts from the newest (or the oldest) end."""
        order = "DESC" if newest_first else "ASC"
        with self.lock:
            total = self.conn.execute("SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session "
                                       "WHERE s.key = ?", (key,)).fetchone()[0]
            rows = self.conn.execute(
                f"SELECT m.role, m.at, m.text FROM messages m JOIN sessions s ON s.id = m.session WHERE s.key = ? "
                f"ORDER BY m.id {order} LIMIT ? OFFSET ?", (key, limit, offset)).fetchall()
        # Messages are numbered in id order (1 = oldest), counted from the page's end, not per row.
        numbers = (range(total - offset, 0, -1) if newest_first else range(offset + 1, total + 1))
        return [StoredMessage(n, r["role"], r["at"], r["text"]) for n, r in zip(numbers, rows, strict=False)]

    @_usable
    def summaries(self, keys: Sequence[str]) -> dict[str, str]:
        """The cached summary of each of ``keys`` whose session is unchanged since it was written."""
        if not keys:
            return {}
        with self.lock:
            rows = self.conn.execute(
                f"SELECT s.key, c.summary FROM summaries c JOIN sessions s ON s.id = c.session WHERE s.key IN "
                f"({_marks(keys)}) AND c.messages = s.messages AND c.updated = s.updated", list(keys)).fetchall()
        return {row[0]: row[1] for row in rows}

    @_usable
    def store_summary(self, row: SessionRow, summary: str) -> None:
        """Cache ``summary`` for the session as ``row`` saw it (a session changed since is summarized again)."""
        from datetime import datetime, timezone

        made = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self.lock:
            self.conn.execute(
                "INSERT INTO summaries (session, messages, updated, summary, made) SELECT id, ?, ?, ?, ? FROM sessions "
                "WHERE key = ? ON CONFLICT (session) DO UPDATE SET messages = excluded.messages, "
                "updated = excluded.updated, summary = excluded.summary, made = excluded.made",
                (row.messages, row.updated, summary, made, row.key))

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
        with self.lock:
            if self._rarest(words) > COMMON_WORD_MESSAGES:
                return self._walk(expression, where, args, limit, per_session)
            return self._grouped(expression, where, args, limit, per_session)

    def _rarest(self, words: list[str]) -> int:
        """How many messages hold the query's rarest word (0 when one is in none)."""
        counts = []
        for word in {w.lower() for w in words}:
            row = self.conn.execute("SELECT doc FROM messages_vocab WHERE term = ?", (word,)).fetchone()
            counts.append(int(row[0]) if row is not None else 0)
        return min(counts, default=0)

    def _grouped(self, expression: str, where: str, args: list[Any], limit: int, per_session: int) -> list[Hit]:
        matches = self.conn.execute(
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
        texts = dict(self.conn.execute(f"SELECT id, text FROM messages WHERE id IN ({_marks(wanted)})",
                                        wanted).fetchall()) if wanted else {}
        rows = {row["id"]: row for row in self.conn.execute(
            f"SELECT * FROM sessions WHERE id IN ({_marks(chosen)})", chosen).fetchall()} if chosen else {}
        return [Hit(_row(rows[sid]), tuple(texts[mid] for mid in sorted(ids[sid])[:per_session])) for sid in chosen]

    def _walk(self, expression: str, where: str, args: list[Any], limit: int, per_session: int) -> list[Hit]:
        sessions = self.conn.execute(
            f"SELECT s.*, (SELECT MIN(id) FROM messages WHERE session = s.id) AS lo, "
            f"(SELECT MAX(id) FROM messages WHERE session = s.id) AS hi FROM sessions s "
            f"WHERE {where} AND s.messages > 0 ORDER BY s.updated DESC, s.id DESC", args)
        found: list[Hit] = []
        while len(found) < limit and (batch := sessions.fetchmany(64)):
            for row in batch:
                texts = self.conn.execute(
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


_shared: sqlite_db.PerHome[HistoryIndex] = sqlite_db.PerHome(lambda: HistoryIndex(), lambda: index_path())


def shared() -> HistoryIndex:
    """This process's index on the crew home's database (reopened when the crew home moved: tests)."""
    return _shared.get()


def _row(row: sqlite3.Row) -> SessionRow:
    return SessionRow(row["key"], row["source"], row["title"], row["workspace"], row["created"], row["updated"],
                      int(row["messages"]), int(row["bad_lines"]), row["resume"])


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
