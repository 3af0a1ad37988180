"""kirocrew_core.sqlite_db: how a plugin's SQLite database is opened and migrated, on real files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kirocrew_core import sqlite_db

V1 = ["CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"]
V2 = ["ALTER TABLE notes ADD COLUMN tag TEXT NOT NULL DEFAULT ''"]


def _open(path: Path) -> sqlite3.Connection:
    sqlite_db.ensure_private_file(path)
    return sqlite_db.connect(path)


def test_a_new_database_is_private_in_wal_mode_with_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = _open(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == sqlite_db.BUSY_TIMEOUT_MS
    finally:
        conn.close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_migrations_apply_in_order_once_and_keep_rows(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = _open(path)
    assert sqlite_db.migrate(conn, [V1]) == 1
    conn.execute("INSERT INTO notes (text) VALUES ('kept')")
    assert sqlite_db.migrate(conn, [V1, V2]) == 2
    assert sqlite_db.migrate(conn, [V1, V2]) == 2
    assert [tuple(row) for row in conn.execute("SELECT text, tag FROM notes")] == [("kept", "")]
    assert [row[0] for row in conn.execute("SELECT version FROM schema_version ORDER BY version")] == [1, 2]
    conn.close()


def test_a_failing_migration_leaves_the_previous_version_intact(tmp_path: Path) -> None:
    conn = _open(tmp_path / "state.db")
    sqlite_db.migrate(conn, [V1])
    with pytest.raises(sqlite3.OperationalError):
        sqlite_db.migrate(conn, [V1, ["ALTER TABLE notes ADD COLUMN tag TEXT", "SELECT * FROM missing_table"]])
    assert sqlite_db.schema_version(conn) == 1
    assert [row[1] for row in conn.execute("PRAGMA table_info(notes)")] == ["id", "text"]
    conn.close()


def test_a_database_from_a_newer_version_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = _open(path)
    sqlite_db.migrate(conn, [V1, V2])
    conn.close()
    older = _open(path)
    with pytest.raises(sqlite_db.DatabaseProblem) as refused:
        sqlite_db.migrate(older, [V1])
    assert refused.value.kind == "too_new"
    assert sqlite_db.schema_version(older) == 2
    older.close()


def test_a_file_that_is_not_sqlite_is_unusable(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"plain text, not a database " * 40)
    with pytest.raises(sqlite_db.DatabaseProblem) as refused:
        conn = sqlite_db.connect(path)
        sqlite_db.migrate(conn, [V1])
    assert refused.value.kind == "unusable"
