"""The workspaces conversations ran in and who made whom, for the core ``known_workspaces()`` and
``conversation_ancestry()`` hooks.

kirocrew-connections' Disconnect reads each workspace's ``.kiro/agents`` for a
project agent sharing a grant; the conversations database is where those
workspaces are known. Read with a read-only SQLite connection of its own: the
host owns the database (:mod:`kirocrew_conversations.state_paths`), and a
reader never takes that ownership, migrates or writes.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from kirocrew_conversations.state_paths import database_file

#: A read waits this long for a writer's lock (a WAL read normally never waits).
READ_TIMEOUT_SECS = 5.0


def known_workspaces(database: Path | None = None) -> list[Path]:
    """Every distinct workspace and worktree path of every conversation, archived ones included.

    No database (conversations never ran here) is no workspaces. A database that
    cannot be read raises (``sqlite3.Error``, ``OSError``): the caller must not
    mistake "unknown" for "none".
    """
    rows = _read_only_rows(database, "SELECT workspace_path, worktree_path FROM conversations")
    seen: dict[str, None] = {}
    for row in rows:
        for value in row:
            if isinstance(value, str) and value and os.path.isabs(value):
                seen.setdefault(value)
    return [Path(value) for value in seen]


def conversation_ancestry(conversation_id: str, database: Path | None = None) -> list[str]:
    """The conversations above ``conversation_id``, nearest first (the core ``conversation_ancestry()`` hook).

    The same read-only connection as :func:`known_workspaces`; no database is no ancestors, one that
    cannot be read raises (the caller shows nothing on a guess).
    """
    from kirocrew_conversations.store import ANCESTORS_QUERY

    return [str(row[0]) for row in _read_only_rows(database, ANCESTORS_QUERY, (conversation_id,))]


def _read_only_rows(database: Path | None, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """``sql``'s rows over a read-only connection to the store (default: this host's); none without a database."""
    path = database if database is not None else database_file()
    try:
        os.stat(path)
    except FileNotFoundError:
        return []
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=READ_TIMEOUT_SECS)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()
