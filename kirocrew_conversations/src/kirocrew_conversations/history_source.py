"""The conversations as a history source (the core ``history_sources()`` hook).

What a conversation leaves to search: its name (the title), its workspace and each run's
reply (a prompt is erased once delivered, so replies are what is kept). Read with a
read-only SQLite connection of its own, as :mod:`.workspaces` does: the host owns the
database, and a reader never takes that ownership, migrates or writes. A conversation's
``version`` is its run count, its newest run update and its own update time, so the history
index re-reads a conversation only after it or one of its runs changed.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from pathlib import Path

from kirocrew_core.contributions import HistoryMessage, HistorySession, HistorySource

from kirocrew_conversations.state_paths import database_file
from kirocrew_conversations.workspaces import READ_TIMEOUT_SECS

SOURCE_NAME = "kirocrew"


def history_source(database: Path | None = None) -> HistorySource:
    return HistorySource(SOURCE_NAME, "kirocrew conversations", lambda: conversations(database))


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=READ_TIMEOUT_SECS)


def conversations(database: Path | None = None) -> list[HistorySession]:
    """Every conversation, archived ones included; none when conversations never ran here (raises when unreadable)."""
    path = database if database is not None else database_file()
    try:
        os.stat(path)
    except FileNotFoundError:
        return []
    conn = _connect(path)
    try:
        rows = conn.execute(
            "SELECT c.id, c.name, c.workspace_path, c.created_at, c.updated_at, "
            "(SELECT COUNT(*) || '/' || COALESCE(MAX(r.updated_at), '') || '/' || c.updated_at FROM runs r "
            "WHERE r.conversation_id = c.id) "
            "FROM conversations c").fetchall()
    finally:
        conn.close()
    return [HistorySession(cid, name or "", workspace or "", created or "", updated or "", version or "",
                           functools.partial(replies, path, cid))
            for cid, name, workspace, created, updated, version in rows]


def replies(path: Path, conversation_id: str) -> list[HistoryMessage]:
    """One conversation's run replies, oldest run first."""
    conn = _connect(path)
    try:
        rows = conn.execute("SELECT reply_text, COALESCE(ended_at, updated_at) FROM runs WHERE conversation_id = ? "
                            "AND reply_text IS NOT NULL AND reply_text != '' ORDER BY seq",
                            (conversation_id,)).fetchall()
    finally:
        conn.close()
    return [HistoryMessage("assistant", reply, at or "") for reply, at in rows]
