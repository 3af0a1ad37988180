"""The one way a kirocrew plugin opens and migrates an SQLite database in its state.

WAL (readers never wait for the writer, so a CLI can read while the host writes), a busy
timeout (a second writer waits briefly instead of failing at once), foreign keys on, and a
forward-only ``schema_version`` table: each migration runs in one transaction with its
version row, so a crash mid-migration leaves the previous version intact, and a database
from a newer version is refused untouched (guessing at an unknown schema could destroy what
users were promised). The owning plugin maps :class:`DatabaseProblem` to its own error codes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar

BUSY_TIMEOUT_MS = 5000
DATABASE_MODE = 0o600


class DatabaseProblem(Exception):
    """The database cannot be used: ``unusable`` (not SQLite, damaged, unwritable) or ``too_new``."""

    def __init__(self, kind: Literal["unusable", "too_new"], message: str) -> None:
        super().__init__(message)
        self.kind = kind


def ensure_private_file(path: Path) -> Path:
    """Create ``path`` empty and owner-only (0600) if missing; tighten it if it exists (``OSError`` otherwise).

    Done before SQLite opens the file, because SQLite creates its ``-wal`` and ``-shm`` files
    with the database file's mode.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, DATABASE_MODE)
    try:
        if (os.fstat(fd).st_mode & 0o777) != DATABASE_MODE:
            os.fchmod(fd, DATABASE_MODE)
    finally:
        os.close(fd)
    return path


def connect(path: Path, *, secure_delete: bool = False) -> sqlite3.Connection:
    """An autocommit connection (``BEGIN`` explicitly) in WAL mode with the busy timeout and foreign keys on.

    Shareable across threads (``check_same_thread=False``): callers serialise use with their own lock.
    """
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise DatabaseProblem("unusable", f"cannot open {path}: {exc}") from exc
    conn.row_factory = sqlite3.Row
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        if secure_delete:
            conn.execute("PRAGMA secure_delete = ON")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise DatabaseProblem("unusable", f"cannot enable WAL on {path} (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise DatabaseProblem("unusable", f"{path}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection, lock: threading.Lock | threading.RLock) -> Iterator[sqlite3.Connection]:
    """One ``BEGIN IMMEDIATE`` transaction on ``conn`` under ``lock`` (the connection's one user at a time).

    The write lock is taken up front, so a read-modify-write inside never has to upgrade a read
    lock (no upgrade deadlock, no lost update); any exception rolls back, success commits.
    """
    with lock:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def schema_version(conn: sqlite3.Connection) -> int:
    """The applied version (0 for an empty database)."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(conn: sqlite3.Connection, migrations: Sequence[Sequence[str]]) -> int:
    """Bring ``conn`` (autocommit mode) to ``len(migrations)``; return the version reached.

    ``migrations[i]`` holds the statements that take the schema from version i to i + 1.
    Re-running it on an up-to-date database changes nothing. Foreign keys are off while it runs
    (a table rebuild drops the old table, which must not cascade) and checked before each commit.
    """
    latest = len(migrations)
    try:
        current = schema_version(conn)
    except sqlite3.DatabaseError as exc:
        raise DatabaseProblem("unusable", f"cannot read the schema version: {exc}") from exc
    if current > latest:
        raise DatabaseProblem("too_new", f"the database has schema version {current}, newer than this "
                                         f"version's {latest}")
    if current == latest:
        return current
    enforced = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")  # a no-op inside a transaction: set before BEGIN
    try:
        for version in range(current + 1, latest + 1):
            _apply(conn, version, migrations[version - 1])
    finally:
        conn.execute(f"PRAGMA foreign_keys = {'ON' if enforced else 'OFF'}")
    return latest


def _apply(conn: sqlite3.Connection, version: int, statements: Sequence[str]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Re-checked under the write lock: another connection may have just migrated.
        if schema_version(conn) >= version:
            conn.execute("COMMIT")
            return
        for statement in statements:
            conn.execute(statement)
        if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
            raise DatabaseProblem("unusable", f"migration to version {version} broke a reference")
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, _now()))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class _Closable(Protocol):
    path: Path

    def close(self) -> None: ...


_Db = TypeVar("_Db", bound=_Closable)


class PerHome(Generic[_Db]):
    """This process's one open database object for the crew home's file, reopened when that file moved.

    The crew home moves only in tests (each has its own), but a long-lived process must then not keep
    writing the old one: :meth:`get` compares the open object's ``path`` with ``where()`` each time.
    """

    def __init__(self, opener: Callable[[], _Db], where: Callable[[], Path]) -> None:
        self._opener, self._where = opener, where
        self._open: _Db | None = None
        self._lock = threading.Lock()

    def get(self) -> _Db:
        with self._lock:
            if self._open is None or self._open.path != self._where():
                if self._open is not None:
                    with contextlib.suppress(sqlite3.Error):
                        self._open.close()
                self._open = self._opener()
            return self._open
