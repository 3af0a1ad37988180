"""Versioned schema migrations for the conversations database.

Applied by :func:`kirocrew_core.sqlite_db.migrate`: each migration in one transaction
with its ``schema_version`` row; a database from a newer server is refused untouched.
"""

from __future__ import annotations

import sqlite3

from kirocrew_core import sqlite_db

from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.vocabulary import RUN_STATUSES

# Statuses are only appended, so each version's CHECK is a fixed prefix: versions 1 and 2 knew the
# first eight; v3 added needs_attention_expired. A later status needs a new migration.
_V1_STATUSES = RUN_STATUSES[:8]
_V3_STATUSES = RUN_STATUSES[:9]


def _runs_table(table: str, statuses: tuple[str, ...]) -> str:
    """The runs table's DDL; its status CHECK lists ``statuses`` (SQLite cannot alter a CHECK in place)."""
    check = ", ".join(f"'{s}'" for s in statuses)
    return f"""CREATE TABLE {table} (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ({check})),
        model TEXT,
        effort TEXT,
        mode TEXT,
        authority TEXT NOT NULL,
        workspace_strategy TEXT NOT NULL,
        reply_text TEXT,
        reply_total_bytes INTEGER,
        reply_truncated INTEGER NOT NULL DEFAULT 0 CHECK (reply_truncated IN (0, 1)),
        error_code TEXT,
        error_detail TEXT,
        created_at TEXT NOT NULL,
        started_at TEXT,
        ended_at TEXT,
        updated_at TEXT NOT NULL,
        UNIQUE (conversation_id, seq)
    )"""


_V1 = [
    """CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('idle', 'active', 'archived')),
        model TEXT,
        effort TEXT,
        mode TEXT,
        authority TEXT NOT NULL,
        workspace_strategy TEXT NOT NULL CHECK (workspace_strategy IN ('shared', 'worktree')),
        workspace_path TEXT NOT NULL,
        workspace_fingerprint TEXT NOT NULL,
        worktree_path TEXT,
        worktree_branch TEXT,
        worktree_base_ref TEXT,
        retired INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1)),
        acp_session_id TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        archived_at TEXT
    )""",
    "CREATE INDEX conversations_by_state ON conversations (state, updated_at)",
    "CREATE INDEX conversations_by_name ON conversations (name)",
    _runs_table("runs", _V1_STATUSES),
    "CREATE INDEX runs_by_status ON runs (status)",
    """CREATE TABLE prompts (
        run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
        text TEXT,
        erased_at TEXT,
        erase_reason TEXT
    )""",
    """CREATE TABLE prompt_images (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES prompts (run_id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        mime_type TEXT NOT NULL,
        declared_size INTEGER NOT NULL,
        data BLOB,
        UNIQUE (run_id, position)
    )""",
    """CREATE TABLE permission_requests (
        id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        tool_name TEXT,
        options_json TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'decided', 'cancelled')),
        decided_option TEXT,
        created_at TEXT NOT NULL,
        decided_at TEXT
    )""",
    "CREATE INDEX permission_requests_by_run ON permission_requests (run_id, state)",
    # AUTOINCREMENT: a cursor is never reused, even after the newest events are deleted.
    """CREATE TABLE events (
        cursor INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        run_id TEXT REFERENCES runs (id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        payload_json TEXT NOT NULL,
        created_at TEXT NOT NULL
    )""",
    "CREATE INDEX events_by_run ON events (run_id, cursor)",
]

# v2: names are unique (kiro_delete and kiro_fork address conversations by exact name).
_V2 = [
    "DROP INDEX conversations_by_name",
    "CREATE UNIQUE INDEX conversations_name_unique ON conversations (name)",
]

# v3: the needs_attention_expired status (the runs table is rebuilt: a CHECK cannot be altered in
# place); each conversation's slash-command allowlist; every kiro session id a conversation used, so
# kiro_delete can remove kiro's own session files.
_V3 = [
    _runs_table("runs_v3", _V3_STATUSES),
    "INSERT INTO runs_v3 SELECT * FROM runs",
    "DROP TABLE runs",
    "ALTER TABLE runs_v3 RENAME TO runs",
    "CREATE INDEX runs_by_status ON runs (status)",
    "ALTER TABLE conversations ADD COLUMN allowed_commands_json TEXT NOT NULL DEFAULT '[]'",
    """CREATE TABLE conversation_sessions (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        session_id TEXT NOT NULL,
        PRIMARY KEY (conversation_id, session_id)
    )""",
    "INSERT INTO conversation_sessions (conversation_id, session_id)"
    " SELECT id, acp_session_id FROM conversations WHERE acp_session_id IS NOT NULL",
]

# v4 (sub-agents): a conversation a session spawned records its parent conversation (NULL for one the
# person spawned from the CLI) and its spawn batch (set on every spawned conversation: it is what makes a
# conversation a sub-agent); ``released_at`` ends a sub-agent for good (no further continue).
_V4_SUBAGENTS = [
    "ALTER TABLE conversations ADD COLUMN parent_id TEXT REFERENCES conversations (id) ON DELETE SET NULL",
    "ALTER TABLE conversations ADD COLUMN spawn_batch TEXT",
    "ALTER TABLE conversations ADD COLUMN released_at TEXT",
    "CREATE INDEX conversations_by_parent ON conversations (parent_id)",
]
# v4 (issue 17, the kirocrew-core session tools): what session directives leave on a conversation.
# One monitor loop per conversation (a new start replaces it; it survives a host restart), the
# current follow-up card (a new one replaces it), the project a conversation is bound to (used as
# the cwd of the kiro session its next run starts).
_V4_DIRECTIVES = [
    """CREATE TABLE monitors (
        conversation_id TEXT PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
        id TEXT NOT NULL,
        message TEXT NOT NULL,
        interval_secs INTEGER NOT NULL,
        max_cycles INTEGER NOT NULL,
        cycles INTEGER NOT NULL DEFAULT 0,
        active INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
        stopped_reason TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        last_fired_at TEXT
    )""",
    """CREATE TABLE followups (
        conversation_id TEXT PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
        run_id TEXT REFERENCES runs (id) ON DELETE SET NULL,
        items_json TEXT NOT NULL,
        created_at TEXT NOT NULL
    )""",
    "ALTER TABLE conversations ADD COLUMN project_path TEXT",
]
_V4 = [*_V4_SUBAGENTS, *_V4_DIRECTIVES]

# v5 (issue 26, the permission gate): what decided a permission request the owner is asked about: the
# policy rule (id, tier, decision, description, reason, as JSON), the part of the call it was about (redacted)
# and why it asks.
_V5 = [
    "ALTER TABLE permission_requests ADD COLUMN rule_json TEXT",
    "ALTER TABLE permission_requests ADD COLUMN subject TEXT",
    "ALTER TABLE permission_requests ADD COLUMN reason TEXT",
]

# v6 (issue 27, who may act on what): the conversation whose crew session created this one (kiro_spawn,
# kiro_delegate, kiro_fork, task_run, a cron job the session owns). NULL — every row made before, and each one
# the person makes — is the person's. A session sees the conversations it created and their descendants.
_V6 = [
    "ALTER TABLE conversations ADD COLUMN created_by TEXT REFERENCES conversations (id) ON DELETE SET NULL",
    "CREATE INDEX conversations_by_creator ON conversations (created_by)",
]

# v7 (issue 28): the commit a worktree's base ref resolved to when the worktree was made, beside the name it was
# given, so a branch that moves later does not change what the conversation says it was based on. NULL: made
# before this was kept (only the name is known).
_V7 = [
    "ALTER TABLE conversations ADD COLUMN worktree_base_commit TEXT",
]

# Index i holds the statements that take the schema from version i to i + 1.
MIGRATIONS: list[list[str]] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7]
LATEST_VERSION = len(MIGRATIONS)


def problem(exc: sqlite_db.DatabaseProblem) -> Exception:
    """The conversations error for a database :mod:`kirocrew_core.sqlite_db` refused."""
    if exc.kind == "too_new":
        return conversation_error("database_too_new", f"{exc}; upgrade kirocrew-conversations or point "
                                                      "KIRO_CONVERSATIONS_STATE_DIR elsewhere")
    return conversation_error("database_unusable", str(exc))


def migrate(conn: sqlite3.Connection) -> int:
    """Bring ``conn`` (autocommit mode) to :data:`LATEST_VERSION` (:func:`kirocrew_core.sqlite_db.migrate`)."""
    try:
        return sqlite_db.migrate(conn, MIGRATIONS)
    except sqlite_db.DatabaseProblem as exc:
        raise problem(exc) from exc
