"""The typed API over the conversations database (stdlib sqlite3, no ORM).

Threading: one connection shared by all threads, every operation under one
lock. Writes are single short transactions, so the lock is held briefly, and
one connection means no ``database is locked`` surprises between our own
threads; the busy timeout covers a reader such as a backup tool.

Run statuses follow the spec's state machine: ``queued`` → ``running`` ⇄
``needs_attention`` → one terminal status. Terminal runs never change again,
which is what makes ``kiro_result`` idempotent forever.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from kirocrew_core import sqlite_db
from kirocrew_core.redaction import redact_secrets

from kirocrew_conversations import migrations
from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.redact import redact_payload
from kirocrew_conversations.vocabulary import (
    ACTIVE_STATUSES,
    DEFAULT_AGENT,
    NONTERMINAL_STATUSES,
    RUN_STATUSES,
    TERMINAL_STATUSES,
)
from kirocrew_conversations.state_paths import (
    StateDirOwnership,
    acquire_ownership,
    database_file,
    ensure_private_file,
    ensure_state_dir,
)

BUSY_TIMEOUT_MS = sqlite_db.BUSY_TIMEOUT_MS
MAX_REPLY_BYTES = 256 * 1024
MAX_EVENT_PAGE = 200


def _sql_set(statuses: frozenset[str]) -> str:
    """A status set as an SQL ``IN`` list in lifecycle order (our own constants, never input)."""
    return "(" + ", ".join(f"'{status}'" for status in sorted(statuses, key=RUN_STATUSES.index)) + ")"


_UNFINISHED = _sql_set(NONTERMINAL_STATUSES)
_ACTIVE = _sql_set(ACTIVE_STATUSES)

ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    # queued → failed covers a worker that could not start; queued → interrupted is restart recovery.
    "queued": frozenset({"running", "cancelled", "failed", "interrupted"}),
    "running": frozenset({"needs_attention"}) | TERMINAL_STATUSES,
    # A run waiting on a permission answer cannot complete; needs_attention_expired: the answer never came.
    "needs_attention": frozenset({"running"}) | (TERMINAL_STATUSES - {"completed"}),
    **{status: frozenset() for status in TERMINAL_STATUSES},
}


F = TypeVar("F", bound=Callable[..., Any])


def quick_read(method: F) -> F:
    """Mark a store method as a short read: an async caller may run it on its event loop.

    A read in WAL mode never waits for writers, and these are single indexed queries, so a
    thread hop (which costs more than the query) buys nothing. Writes stay off the loop: one may
    wait on a checkpoint's sync.
    """
    method.quick_read = True  # type: ignore[attr-defined]
    return method


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def new_id(prefix: str) -> str:
    """An opaque random id such as ``run_3f9a…``; never sequential, never parsed."""
    return f"{prefix}_{secrets.token_hex(12)}"


@dataclass(frozen=True)
class Workspace:
    """Where a conversation works. ``fingerprint`` is the redacted identity shown to clients."""

    strategy: str  # "shared" | "worktree"
    path: str
    fingerprint: str
    worktree_path: str | None = None
    worktree_branch: str | None = None
    worktree_base_ref: str | None = None  # the base ref as it was given (``main``, ``HEAD``)
    worktree_base_commit: str | None = None  # what it resolved to then; None: made before this was kept


@dataclass(frozen=True)
class Conversation:
    id: str
    name: str
    state: str
    model: str | None
    effort: str | None
    mode: str | None
    authority: str
    workspace: Workspace
    retired: bool
    created_at: str
    updated_at: str
    archived_at: str | None
    allowed_commands: tuple[str, ...] = ()  # slash commands its messages may run (see service.slash_command)
    parent_id: str | None = None  # the conversation whose session spawned this sub-agent
    spawn_batch: str | None = None  # set on every sub-agent (spawn_run, spawn_sub_agents, kirocrew spawn run)
    released_at: str | None = None  # a released sub-agent takes no further message
    created_by: str | None = None  # the conversation whose crew session created this one; None: the person

    @property
    def subagent(self) -> bool:
        return self.spawn_batch is not None
    project: str | None = None  # bound by the set_project directive: the cwd of its next kiro session

    @property
    def cwd(self) -> str:
        """The directory its kiro sessions work in: the bound project, else its worktree, else its workspace."""
        return self.project or self.workspace.worktree_path or self.workspace.path


@dataclass(frozen=True)
class Settings:
    """Per-run overrides; a None field falls back to the conversation default."""

    model: str | None = None
    effort: str | None = None
    mode: str | None = None
    authority: str | None = None


@dataclass(frozen=True)
class Run:
    id: str
    conversation_id: str
    seq: int
    status: str
    model: str | None
    effort: str | None
    mode: str | None
    authority: str
    workspace_strategy: str
    reply_text: str | None
    reply_total_bytes: int | None
    reply_truncated: bool
    error_code: str | None
    error_detail: str | None
    created_at: str
    started_at: str | None
    ended_at: str | None
    updated_at: str

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True)
class ImageInput:
    mime_type: str
    declared_size: int
    data: bytes


@dataclass(frozen=True)
class Prompt:
    """A queued message's content, readable until it is delivered or its run ends."""

    run_id: str
    text: str
    images: tuple[ImageInput, ...]


@dataclass(frozen=True)
class PermissionRequest:
    id: str
    run_id: str
    tool_name: str | None
    options: tuple[str, ...]
    state: str
    decided_option: str | None
    created_at: str
    decided_at: str | None
    rule: dict[str, Any] | None = None  # the permission-policy rule that asked (id, tier, description, reason)
    subject: str | None = None  # the part of the call it asked about, redacted
    reason: str | None = None


@dataclass(frozen=True)
class Event:
    cursor: int
    conversation_id: str
    run_id: str | None
    kind: str
    payload: dict[str, Any]
    created_at: str


@dataclass(frozen=True)
class EventPage:
    events: tuple[Event, ...]
    next_cursor: int  # pass back as ``after``; equal to the input when nothing newer exists


@dataclass(frozen=True)
class SummaryQuery:
    """``kiro_status`` filters; a None filter matches everything."""

    states: tuple[str, ...] | None = None  # idle | active | archived | retired
    run_statuses: tuple[str, ...] | None = None  # the latest run's status
    fingerprint: str | None = None
    model: str | None = None
    authority: str | None = None
    archive: str = "active"  # active | archived | all
    after_id: str | None = None
    limit: int = 20
    within: str | None = None  # only this conversation's descendants (a crew session's view); None: all


@dataclass(frozen=True)
class ConversationSummary:
    conversation: Conversation
    state: str  # "retired" for an archived conversation whose worktree was cleaned up
    latest_run_id: str | None
    latest_status: str | None
    queued_runs: int


# The conversations below one (``?`` twice): those it created or spawned, theirs, and so on. A conversation
# names at most one of them: ``parent_id`` (a sub-agent) or ``created_by``; both columns are indexed.
_DESCENDANTS = (
    "WITH RECURSIVE tree(id) AS (SELECT id FROM conversations WHERE parent_id = ? OR created_by = ?"
    " UNION SELECT c.id FROM conversations c JOIN tree t ON c.parent_id = t.id OR c.created_by = t.id)"
    " SELECT id FROM tree"
)
# The conversations above one (``?``), nearest first (SQLite walks a recursive CTE as a queue): who created or
# spawned it, and so on up to one the person made. Public: the ``conversation_ancestry`` hook reads it too.
ANCESTORS_QUERY = (
    "WITH RECURSIVE up(id) AS (SELECT COALESCE(parent_id, created_by) FROM conversations WHERE id = ?"
    " UNION SELECT COALESCE(c.parent_id, c.created_by) FROM conversations c JOIN up ON c.id = up.id)"
    " SELECT id FROM up WHERE id IS NOT NULL"
)


def _summary_filters(query: SummaryQuery) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if query.within is not None:
        where.append(f"id IN ({_DESCENDANTS})")
        params.extend((query.within, query.within))

    def among(column: str, values: Sequence[str]) -> None:
        where.append(f"{column} IN ({', '.join('?' for _ in values)})")
        params.extend(values)

    if query.archive == "active":
        where.append("state != 'archived'")
    elif query.archive == "archived":
        where.append("state = 'archived'")
    if query.states:
        among("shown_state", query.states)
    if query.run_statuses:
        among("latest_status", query.run_statuses)
    for column, value in (("workspace_fingerprint", query.fingerprint), ("model", query.model),
                          ("authority", query.authority)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    return where, params


def truncate_reply(text: str, limit: int = MAX_REPLY_BYTES) -> tuple[str, int, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes on a character boundary, its full size, and whether it was cut."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text, len(raw), False
    return raw[:limit].decode("utf-8", "ignore"), len(raw), True


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(
        id=row["id"], name=row["name"], state=row["state"], model=row["model"], effort=row["effort"],
        mode=row["mode"], authority=row["authority"],
        workspace=Workspace(
            strategy=row["workspace_strategy"], path=row["workspace_path"],
            fingerprint=row["workspace_fingerprint"], worktree_path=row["worktree_path"],
            worktree_branch=row["worktree_branch"], worktree_base_ref=row["worktree_base_ref"],
            worktree_base_commit=row["worktree_base_commit"],
        ),
        retired=bool(row["retired"]), created_at=row["created_at"], updated_at=row["updated_at"],
        archived_at=row["archived_at"], allowed_commands=tuple(json.loads(row["allowed_commands_json"])),
        parent_id=row["parent_id"], spawn_batch=row["spawn_batch"], released_at=row["released_at"],
        project=row["project_path"], created_by=row["created_by"],
    )


def _run(row: sqlite3.Row) -> Run:
    fields = {k: row[k] for k in row.keys()}  # noqa: SIM118 - iterating a sqlite3.Row yields its values
    fields["reply_truncated"] = bool(fields["reply_truncated"])
    return Run(**fields)


def _permission(row: sqlite3.Row) -> PermissionRequest:
    rule = json.loads(row["rule_json"]) if row["rule_json"] else None
    return PermissionRequest(
        id=row["id"], run_id=row["run_id"], tool_name=row["tool_name"],
        options=tuple(json.loads(row["options_json"])), state=row["state"],
        decided_option=row["decided_option"], created_at=row["created_at"], decided_at=row["decided_at"],
        rule=rule if isinstance(rule, dict) else None, subject=row["subject"], reason=row["reason"],
    )


def _event(row: sqlite3.Row) -> Event:
    return Event(
        cursor=row["cursor"], conversation_id=row["conversation_id"], run_id=row["run_id"],
        kind=row["kind"], payload=json.loads(row["payload_json"]), created_at=row["created_at"],
    )


class Store:
    """The conversations database. Open with :meth:`open` (or :func:`open_state` for a server)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self.path = path
        #: Set by a long-lived owner (the orchestrator) to scrub the WAL in the background instead of
        #: inline: called, from any thread, each time a prompt was erased. None means scrub at once.
        self.on_erase: Callable[[], None] | None = None
        self._scrub_lock = threading.Lock()
        self._scrub_conn: sqlite3.Connection | None = None
        # Conversations whose worktree is being removed: no run may be queued meanwhile. In memory, under
        # the store's lock: one process owns the state directory, and a crash ends every cleanup anyway.
        self._retiring: set[str] = set()
        self.directives = DirectiveStore(self)

    @classmethod
    def open(cls, path: Path) -> Store:
        """Open (creating 0600 if needed) and migrate the database at ``path``."""
        ensure_private_file(path)
        try:
            # Erased prompts and images are overwritten with zeros, not just unlinked from the b-tree.
            conn = sqlite_db.connect(path, secure_delete=True)
        except sqlite_db.DatabaseProblem as exc:
            raise migrations.problem(exc) from exc
        try:
            migrations.migrate(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise conversation_error("database_unusable", f"{path}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return cls(conn, path)

    def close(self) -> None:
        with self._scrub_lock:
            if self._scrub_conn is not None:
                self._scrub_conn.close()
                self._scrub_conn = None
        with self._lock:
            self._conn.close()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short IMMEDIATE transaction: it takes the write lock up front, so no upgrade deadlock."""
        with sqlite_db.immediate(self._conn, self._lock) as conn:
            yield conn

    # -- conversations ---------------------------------------------------

    def create_conversation(
        self, *, name: str, workspace: Workspace, authority: str = "unrestricted",
        model: str | None = None, effort: str | None = None, mode: str | None = None,
        conversation_id: str | None = None, acp_session_id: str | None = None,
        allowed_commands: Sequence[str] = (), parent_id: str | None = None, spawn_batch: str | None = None,
        created_by: str | None = None,
    ) -> Conversation:
        """A new idle conversation; ``conversation_name_taken`` when the name is in use (names are unique).

        ``spawn_batch`` makes it a sub-agent, ``parent_id`` the conversation that spawned it;
        ``created_by`` the conversation whose crew session created it otherwise (None: the person); one
        that no longer exists leaves it the person's, as deleting its creator later would.
        """
        cid, now = conversation_id or new_id("conv"), _now()
        with self._write() as db:
            try:
                db.execute(
                    "INSERT INTO conversations (id, name, state, model, effort, mode, authority, workspace_strategy,"
                    " workspace_path, workspace_fingerprint, worktree_path, worktree_branch, worktree_base_ref,"
                    " worktree_base_commit, acp_session_id, allowed_commands_json, parent_id, spawn_batch, created_by,"
                    " created_at, updated_at) VALUES (?, ?, 'idle', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                    " (SELECT id FROM conversations WHERE id = ?), ?, ?)",
                    (cid, name, model, effort, mode, authority, workspace.strategy, workspace.path,
                     workspace.fingerprint, workspace.worktree_path, workspace.worktree_branch,
                     workspace.worktree_base_ref, workspace.worktree_base_commit, acp_session_id,
                     json.dumps(list(allowed_commands)), parent_id, spawn_batch, created_by, now, now),
                )
            except sqlite3.IntegrityError as exc:
                raise conversation_error("conversation_name_taken",
                                         f"a conversation named {name!r} already exists") from exc
            if acp_session_id is not None:
                self._remember_session(db, cid, acp_session_id)
            self._append_event(db, cid, None, "conversation_created", {"name": name})
        return self.get_conversation(cid)

    @quick_read
    def name_in_use(self, name: str) -> bool:
        with self._read() as db:
            return db.execute("SELECT 1 FROM conversations WHERE name = ?", (name,)).fetchone() is not None

    @quick_read
    def session_id(self, conversation_id: str) -> str | None:
        """Kiro's session id for this conversation (internal: never shown to clients)."""
        with self._read() as db:
            row = db.execute("SELECT acp_session_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise conversation_error("conversation_not_found", f"no conversation {conversation_id!r}")
        return row[0]

    def set_session_id(self, conversation_id: str, session_id: str) -> None:
        with self._write() as db:
            db.execute("UPDATE conversations SET acp_session_id = ? WHERE id = ?", (session_id, conversation_id))
            self._remember_session(db, conversation_id, session_id)

    @staticmethod
    def _remember_session(db: sqlite3.Connection, conversation_id: str, session_id: str) -> None:
        """Every session a conversation ever used, so deleting it can remove kiro's files of each."""
        db.execute("INSERT OR IGNORE INTO conversation_sessions (conversation_id, session_id) VALUES (?, ?)",
                   (conversation_id, session_id))

    @quick_read
    def session_ids(self, conversation_id: str) -> list[str]:
        """Every kiro session id the conversation has used (internal: never shown to clients)."""
        with self._read() as db:
            rows = db.execute("SELECT session_id FROM conversation_sessions WHERE conversation_id = ?"
                              " ORDER BY session_id", (conversation_id,)).fetchall()
        return [r[0] for r in rows]

    @quick_read
    def get_conversation(self, conversation_id: str) -> Conversation:
        with self._read() as db:
            return self._get_conversation(db, conversation_id)

    def _get_conversation(self, db: sqlite3.Connection, conversation_id: str) -> Conversation:
        row = db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise conversation_error("conversation_not_found", f"no conversation {conversation_id!r}")
        return _conversation(row)

    @quick_read
    def descends_from(self, conversation_id: str, ancestor_id: str) -> bool:
        """Whether ``ancestor_id`` created or spawned ``conversation_id``, directly or through others.

        False for a conversation and itself, and for an id that does not exist.
        """
        with self._read() as db:
            row = db.execute(f"SELECT 1 FROM ({ANCESTORS_QUERY}) WHERE id = ? LIMIT 1",
                             (conversation_id, ancestor_id)).fetchone()
        return row is not None

    @quick_read
    def list_conversations(
        self, *, include_archived: bool = False, after_id: str | None = None, limit: int = 50
    ) -> list[Conversation]:
        """Conversations ordered by id (stable under inserts), at most ``limit`` after ``after_id``."""
        clauses, params = [], []
        if not include_archived:
            clauses.append("state != 'archived'")
        if after_id is not None:
            clauses.append("id > ?")
            params.append(after_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._read() as db:
            rows = db.execute(
                f"SELECT * FROM conversations {where} ORDER BY id LIMIT ?", (*params, max(1, limit))
            ).fetchall()
        return [_conversation(r) for r in rows]

    @quick_read
    def subagents(self, parent_id: str | None, *, limit: int = 200) -> list[Conversation]:
        """Sub-agents, newest first: ``parent_id``'s children, or (None) every sub-agent of every parent."""
        where, params = "spawn_batch IS NOT NULL", []
        if parent_id is not None:
            where += " AND parent_id = ?"
            params.append(parent_id)
        with self._read() as db:
            rows = db.execute(f"SELECT * FROM conversations WHERE {where} ORDER BY created_at DESC, id LIMIT ?",
                              (*params, max(1, limit))).fetchall()
        return [_conversation(r) for r in rows]

    @quick_read
    def active_subagents(self, parent_id: str) -> int:
        """How many of ``parent_id``'s unreleased sub-agents have a run queued or executing."""
        with self._read() as db:
            row = db.execute(
                "SELECT COUNT(*) FROM conversations c WHERE c.parent_id = ? AND c.spawn_batch IS NOT NULL"
                f" AND c.released_at IS NULL AND EXISTS (SELECT 1 FROM runs r WHERE r.conversation_id = c.id"
                f" AND r.status IN {_UNFINISHED})", (parent_id,)).fetchone()
        return int(row[0])

    def release_subagent(self, conversation_id: str) -> Conversation:
        """End a sub-agent for good: released and archived (it must be idle: cancel its runs first)."""
        with self._write() as db:
            conv = self._get_conversation(db, conversation_id)
            if conv.released_at is None:
                db.execute("UPDATE conversations SET released_at = ?, updated_at = ? WHERE id = ?",
                           (_now(), _now(), conversation_id))
                self._append_event(db, conversation_id, None, "subagent_released", {})
        return self.archive_conversation(conversation_id)

    def update_defaults(self, conversation_id: str, settings: Settings, *,
                        allowed_commands: Sequence[str] | None = None) -> Conversation:
        """Change a conversation's defaults; only while idle, so no queued run sees a surprise."""
        with self._write() as db:
            conv = self._get_conversation(db, conversation_id)
            if conv.state == "archived":
                raise conversation_error("conversation_archived", f"conversation {conversation_id} is archived")
            if conv.state != "idle":
                raise conversation_error("conversation_busy", f"conversation {conversation_id} is not idle")
            changes = {k: v for k, v in vars(settings).items() if v is not None}
            if allowed_commands is not None:
                changes["allowed_commands_json"] = json.dumps(list(allowed_commands))
            if changes:
                sets = ", ".join(f"{k} = ?" for k in changes)
                db.execute(f"UPDATE conversations SET {sets}, updated_at = ? WHERE id = ?",
                           (*changes.values(), _now(), conversation_id))
                fields = sorted("allowed_commands" if k == "allowed_commands_json" else k for k in changes)
                self._append_event(db, conversation_id, None, "defaults_changed", {"fields": fields})
            return self._get_conversation(db, conversation_id)

    def archive_conversation(self, conversation_id: str, *, retired: bool = False) -> Conversation:
        """Hide an idle conversation from normal use; its history and results stay.

        ``retired`` (after worktree cleanup) also applies to an already archived conversation.
        """
        with self._write() as db:
            conv = self._get_conversation(db, conversation_id)
            if conv.state == "active":
                raise conversation_error("conversation_busy", f"conversation {conversation_id} is not idle")
            if conv.state == "archived" and retired and not conv.retired:
                db.execute("UPDATE conversations SET retired = 1, updated_at = ? WHERE id = ?",
                           (_now(), conversation_id))
                self._append_event(db, conversation_id, None, "conversation_archived", {"retired": True})
            if conv.state == "idle":
                now = _now()
                db.execute(
                    "UPDATE conversations SET state = 'archived', archived_at = ?, updated_at = ?,"
                    " retired = MAX(retired, ?) WHERE id = ?", (now, now, int(retired), conversation_id),
                )
                self._append_event(db, conversation_id, None, "conversation_archived", {"retired": retired})
            return self._get_conversation(db, conversation_id)

    def auto_archive(self, idle_before: str) -> list[str]:
        """Archive idle conversations not updated since ``idle_before`` (ISO UTC); returns their ids."""
        with self._write() as db:
            ids = [r[0] for r in db.execute(
                "SELECT id FROM conversations WHERE state = 'idle' AND updated_at < ? ORDER BY id", (idle_before,))]
            now = _now()
            for cid in ids:
                db.execute("UPDATE conversations SET state = 'archived', archived_at = ?, updated_at = ?"
                           " WHERE id = ?", (now, now, cid))
                self._append_event(db, cid, None, "conversation_archived", {"retired": False, "automatic": True})
        return ids

    @quick_read
    def summaries(self, query: SummaryQuery) -> tuple[list[ConversationSummary], dict[str, int]]:
        """One page of conversation summaries after ``query.after_id`` and the per-state counts under the filters."""
        where, params = _summary_filters(query)
        base = (
            "SELECT c.*, (SELECT r.id FROM runs r WHERE r.conversation_id = c.id ORDER BY r.seq DESC LIMIT 1)"
            " AS latest_run_id, (SELECT r.status FROM runs r WHERE r.conversation_id = c.id ORDER BY r.seq DESC"
            " LIMIT 1) AS latest_status, (SELECT COUNT(*) FROM runs r WHERE r.conversation_id = c.id AND"
            " r.status = 'queued') AS queued_runs,"
            " CASE WHEN c.state = 'archived' AND c.retired = 1 THEN 'retired' ELSE c.state END AS shown_state"
            " FROM conversations c"
        )
        filtered = f"SELECT * FROM ({base}) WHERE {' AND '.join(where) or '1'}"
        with self._read() as db:
            page_sql = f"{filtered} AND id > ? ORDER BY id LIMIT ?"
            rows = db.execute(page_sql, (*params, query.after_id or "", max(1, query.limit))).fetchall()
            counts = {state: 0 for state in ("idle", "active", "archived", "retired")}
            for state, count in db.execute(f"SELECT shown_state, COUNT(*) FROM ({filtered}) GROUP BY shown_state",
                                           params):
                counts[state] = count
        return [ConversationSummary(_conversation(r), r["shown_state"], r["latest_run_id"], r["latest_status"],
                                    r["queued_runs"]) for r in rows], counts

    def delete_conversation(self, conversation_id: str, *, confirm_name: str,
                            precheck: Callable[[Conversation, list[str]], None] | None = None) -> list[str]:
        """Permanently remove an archived conversation; its runs, prompts and events go with it (FK cascade).

        ``precheck(conversation, session_ids)`` runs once the archive state and name are verified, in the
        transaction, and may refuse (a Kiro session still in use); it must be quick and must not use the store.
        Returns the kiro session ids the conversation used, for the caller to remove kiro's files.
        """
        with self._write() as db:
            conv = self._get_conversation(db, conversation_id)
            if conv.state != "archived":
                raise conversation_error(
                    "conversation_not_archived", f"conversation {conversation_id} must be archived first"
                )
            if confirm_name != conv.name:
                raise conversation_error(
                    "confirmation_mismatch", "the confirmation is not the conversation's exact name"
                )
            sessions = [r[0] for r in db.execute(
                "SELECT session_id FROM conversation_sessions WHERE conversation_id = ?", (conversation_id,))]
            if precheck is not None:
                precheck(conv, sessions)
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            return sessions

    def begin_retiring(self, conversation_id: str) -> Conversation:
        """Mark an idle conversation as being retired (worktree cleanup): until :meth:`end_retiring`,
        :meth:`enqueue_run` refuses it with ``conversation_retiring``. Checked and marked atomically."""
        with self._write() as db:
            conv = self._get_conversation(db, conversation_id)
            active = db.execute(
                f"SELECT COUNT(*) FROM runs WHERE conversation_id = ? AND status IN {_UNFINISHED}",
                (conversation_id,)).fetchone()[0]
            if active:
                raise conversation_error("worktree_active", f"{active} run(s) are active or queued")
            if conversation_id in self._retiring:
                raise conversation_error("conversation_retiring", "the worktree is already being cleaned up")
            self._retiring.add(conversation_id)
            return conv

    def end_retiring(self, conversation_id: str) -> None:
        with self._lock:
            self._retiring.discard(conversation_id)

    def _refresh_conversation_state(self, db: sqlite3.Connection, conversation_id: str) -> None:
        busy = db.execute(
            f"SELECT 1 FROM runs WHERE conversation_id = ? AND status IN {_UNFINISHED}"
            " LIMIT 1", (conversation_id,),
        ).fetchone()
        db.execute(
            "UPDATE conversations SET state = ?, updated_at = ? WHERE id = ? AND state != 'archived'",
            ("active" if busy else "idle", _now(), conversation_id),
        )

    # -- runs -------------------------------------------------------------

    def enqueue_run(
        self, conversation_id: str, text: str, *, settings: Settings | None = None,
        images: Sequence[ImageInput] = (),
    ) -> Run:
        """Queue a message as a new run at the tail of the conversation's FIFO.

        The run records its resolved settings (override, else conversation default) forever; its mode
        with neither is the rendered kirocrew agent (:data:`~kirocrew_conversations.vocabulary.DEFAULT_AGENT`),
        a conversation stored without one included.
        """
        settings = settings or Settings()
        rid, now = new_id("run"), _now()
        with self._write() as db:
            conv = self._get_conversation(db, conversation_id)
            if conv.state == "archived":
                raise conversation_error("conversation_archived", f"conversation {conversation_id} is archived")
            if conversation_id in self._retiring:
                raise conversation_error("conversation_retiring",
                                         f"conversation {conversation_id}'s worktree is being cleaned up")
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM runs WHERE conversation_id = ?",
                             (conversation_id,)).fetchone()[0]
            db.execute(
                "INSERT INTO runs (id, conversation_id, seq, status, model, effort, mode, authority,"
                " workspace_strategy, created_at, updated_at) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
                (rid, conversation_id, seq, settings.model or conv.model, settings.effort or conv.effort,
                 settings.mode or conv.mode or DEFAULT_AGENT, settings.authority or conv.authority,
                 conv.workspace.strategy,
                 now, now),
            )
            db.execute("INSERT INTO prompts (run_id, text) VALUES (?, ?)", (rid, text))
            db.executemany(
                "INSERT INTO prompt_images (run_id, position, mime_type, declared_size, data) VALUES (?, ?, ?, ?, ?)",
                [(rid, i, img.mime_type, img.declared_size, img.data) for i, img in enumerate(images)],
            )
            self._refresh_conversation_state(db, conversation_id)
            self._append_event(db, conversation_id, rid, "run_queued", {"seq": seq, "images": len(images)})
            return self._get_run(db, rid)

    @quick_read
    def get_run(self, run_id: str) -> Run:
        with self._read() as db:
            return self._get_run(db, run_id)

    def _get_run(self, db: sqlite3.Connection, run_id: str) -> Run:
        row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise conversation_error("run_not_found", f"no run {run_id!r}")
        return _run(row)

    @quick_read
    def list_runs(self, conversation_id: str) -> list[Run]:
        with self._read() as db:
            rows = db.execute("SELECT * FROM runs WHERE conversation_id = ? ORDER BY seq",
                              (conversation_id,)).fetchall()
        return [_run(r) for r in rows]

    @quick_read
    def next_queued_run(self, conversation_id: str) -> Run | None:
        """The run to start next: the oldest queued one, or None while another run is active."""
        with self._read() as db:
            return self._next_queued(db, conversation_id)

    def _next_queued(self, db: sqlite3.Connection, conversation_id: str) -> Run | None:
        active = db.execute(
            f"SELECT 1 FROM runs WHERE conversation_id = ? AND status IN {_ACTIVE} LIMIT 1",
            (conversation_id,),
        ).fetchone()
        if active:
            return None
        row = db.execute(
            "SELECT * FROM runs WHERE conversation_id = ? AND status = 'queued' ORDER BY seq LIMIT 1",
            (conversation_id,),
        ).fetchone()
        return _run(row) if row else None

    def transition_run(
        self, run_id: str, status: str, *, error_code: str | None = None, error_detail: str | None = None,
        reply: str | None = None,
    ) -> Run:
        """Move a run along the state machine; an illegal move raises ``illegal_transition``.

        Starting a run enforces FIFO (``not_next_in_queue``). Ending one erases an
        undelivered prompt and cancels its pending permission requests; ``reply`` is
        recorded in the same transaction (see :meth:`record_reply`).
        """
        with self._write() as db:
            run = self._get_run(db, run_id)
            if status not in ALLOWED_TRANSITIONS.get(run.status, frozenset()):
                raise conversation_error(
                    "illegal_transition", f"run {run_id} cannot go from {run.status} to {status}"
                )
            if run.status == "queued" and status == "running":
                head = self._next_queued(db, run.conversation_id)
                if head is None or head.id != run_id:
                    raise conversation_error(
                        "not_next_in_queue", f"run {run_id} is not next in its conversation's queue"
                    )
            if reply is not None:
                self._store_reply(db, run, reply)
            self._set_status(db, run, status, error_code, error_detail)
            updated = self._get_run(db, run_id)
        if updated.terminal:
            self._erased()
        return updated

    def _set_status(
        self, db: sqlite3.Connection, run: Run, status: str, error_code: str | None, error_detail: str | None
    ) -> None:
        now = _now()
        terminal = status in TERMINAL_STATUSES
        db.execute(
            "UPDATE runs SET status = ?, updated_at = ?, started_at = COALESCE(started_at, ?),"
            " ended_at = ?, error_code = COALESCE(?, error_code), error_detail = COALESCE(?, error_detail)"
            " WHERE id = ?",
            (status, now, now if status == "running" else None, now if terminal else None,
             error_code, redact_secrets(error_detail) if error_detail else error_detail, run.id),
        )
        if terminal:
            self._erase_prompt(db, run.id, f"run_{status}")
            db.execute(
                "UPDATE permission_requests SET state = 'cancelled', decided_at = ?"
                " WHERE run_id = ? AND state = 'pending'",
                (now, run.id),
            )
            self._refresh_conversation_state(db, run.conversation_id)
        payload: dict[str, Any] = {"from": run.status, "to": status}
        if error_code:
            payload["errorCode"] = error_code
        self._append_event(db, run.conversation_id, run.id, "run_status", payload)

    def record_reply(self, run_id: str, text: str) -> Run:
        """Keep the final reply, cut to :data:`MAX_REPLY_BYTES` with its full size and a truncation flag."""
        with self._write() as db:
            run = self._get_run(db, run_id)
            if run.terminal:
                # Results are idempotent forever: a terminal run's reply never changes.
                raise conversation_error("illegal_transition", f"run {run_id} is {run.status}; its reply is final")
            self._store_reply(db, run, text)
            return self._get_run(db, run_id)

    def _store_reply(self, db: sqlite3.Connection, run: Run, text: str) -> None:
        # Redacted before it is kept (and before the cut, so no half of a secret survives it): a reply
        # is shown on pages, in tools, as a cron job's result, and the database file must not hold one.
        kept, total, truncated = truncate_reply(redact_secrets(text))
        db.execute(
            "UPDATE runs SET reply_text = ?, reply_total_bytes = ?, reply_truncated = ?, updated_at = ?"
            " WHERE id = ?",
            (kept, total, int(truncated), _now(), run.id),
        )
        self._append_event(db, run.conversation_id, run.id, "reply_recorded", {"bytes": total, "truncated": truncated})

    def recover_interrupted(self) -> list[str]:
        """Mark every nonterminal run ``interrupted`` (a restarted server supervises none of them)."""
        with self._write() as db:
            rows = db.execute(
                f"SELECT * FROM runs WHERE status IN {_UNFINISHED}"
                " ORDER BY conversation_id, seq"
            ).fetchall()
            for row in rows:
                self._set_status(db, _run(row), "interrupted", "server_restarted", None)
        if rows:
            self._erased()
        return [r["id"] for r in rows]

    # -- prompts ------------------------------------------------------------

    @quick_read
    def read_prompt(self, run_id: str) -> Prompt:
        """The queued message to deliver; ``payload_erased`` once delivered or discarded."""
        with self._read() as db:
            row = db.execute("SELECT text, erased_at FROM prompts WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                self._get_run(db, run_id)  # raises run_not_found for an unknown id
                raise conversation_error("payload_erased", f"run {run_id} has no prompt")
            if row["erased_at"] is not None:
                raise conversation_error("payload_erased", f"the prompt of run {run_id} was erased")
            images = db.execute(
                "SELECT mime_type, declared_size, data FROM prompt_images WHERE run_id = ? ORDER BY position",
                (run_id,),
            ).fetchall()
        return Prompt(run_id, row["text"], tuple(ImageInput(i[0], i[1], bytes(i[2])) for i in images))

    def record_reported_settings(self, run_id: str, *, model: str | None, mode: str | None) -> Run:
        """Fill the run's model and mode that were unknown when it was queued with what kiro reported.

        A run queued without kiro-cli being asked (a sub-agent's, a monitor cycle's) records the
        settings its session really ran on once they are applied; a value already recorded is kept.
        """
        with self._write() as db:
            db.execute("UPDATE runs SET model = COALESCE(model, ?), mode = COALESCE(mode, ?) WHERE id = ?",
                       (model, mode, run_id))
            return self._get_run(db, run_id)

    def mark_delivered(self, run_id: str, *, started: dict[str, Any] | None = None) -> None:
        """Erase the prompt text and image bytes once Kiro has received them.

        ``started`` records the ``run_started`` event in the same transaction.
        """
        with self._write() as db:
            run = self._get_run(db, run_id)
            self._erase_prompt(db, run_id, "delivered")
            if started is not None:
                self._append_event(db, run.conversation_id, run_id, "run_started", started)
        self._erased()

    def _erased(self) -> None:
        if self.on_erase is not None:
            self.on_erase()
        else:
            self.scrub_wal()

    def scrub_wal(self) -> None:
        """Checkpoint and truncate the WAL, so erased prompt pages do not linger in ``-wal``.

        It syncs the database twice (milliseconds), so a server runs it off the run's path
        (:attr:`on_erase`), on its own connection: the store's lock stays free meanwhile.
        Best effort: a concurrent reader can keep old frames alive until the next erasure.
        """
        with self._scrub_lock:
            if self._scrub_conn is None:
                self._scrub_conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000,
                                                   isolation_level=None, check_same_thread=False)
                self._scrub_conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._scrub_conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _erase_prompt(self, db: sqlite3.Connection, run_id: str, reason: str) -> None:
        db.execute(
            "UPDATE prompts SET text = NULL, erased_at = ?, erase_reason = ? WHERE run_id = ? AND erased_at IS NULL",
            (_now(), reason, run_id),
        )
        db.execute("UPDATE prompt_images SET data = NULL WHERE run_id = ?", (run_id,))

    @quick_read
    def runs_ahead(self, run: Run) -> int:
        """Nonterminal runs queued or active before ``run`` in its conversation (0 = next or running)."""
        with self._read() as db:
            return int(db.execute(
                "SELECT COUNT(*) FROM runs WHERE conversation_id = ? AND seq < ?"
                f" AND status IN {_UNFINISHED}", (run.conversation_id, run.seq),
            ).fetchone()[0])

    @quick_read
    def unfinished_runs(self, conversation_id: str) -> list[Run]:
        """The conversation's queued and active runs, FIFO order."""
        with self._read() as db:
            rows = db.execute(
                f"SELECT * FROM runs WHERE conversation_id = ? AND status IN {_UNFINISHED}"
                " ORDER BY seq", (conversation_id,),
            ).fetchall()
        return [_run(r) for r in rows]

    # -- permissions ----------------------------------------------------------

    def add_permission_request(
        self, run_id: str, options: Sequence[str], *, tool_name: str | None = None,
        rule: dict[str, Any] | None = None, subject: str | None = None, reason: str | None = None,
    ) -> PermissionRequest:
        """A pending request, with the policy rule that asked the owner, what about and why (all redacted)."""
        pid = new_id("perm")
        with self._write() as db:
            self._get_run(db, run_id)
            db.execute(
                "INSERT INTO permission_requests (id, run_id, tool_name, options_json, state, created_at,"
                " rule_json, subject, reason) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?)",
                (pid, run_id, tool_name, json.dumps(list(options)), _now(),
                 json.dumps(rule) if rule is not None else None, subject, reason),
            )
            row = db.execute("SELECT * FROM permission_requests WHERE id = ?", (pid,)).fetchone()
        return _permission(row)

    def decide_permission(self, permission_id: str, option: str) -> PermissionRequest:
        """Record the one-shot answer; only a pending request can be decided."""
        with self._write() as db:
            row = db.execute("SELECT * FROM permission_requests WHERE id = ?", (permission_id,)).fetchone()
            if row is None:
                raise conversation_error("permission_not_found", f"no permission request {permission_id!r}")
            if row["state"] != "pending":
                raise conversation_error("permission_not_pending",
                                         f"permission request {permission_id} is {row['state']}")
            db.execute("UPDATE permission_requests SET state = 'decided', decided_option = ?, decided_at = ?"
                       " WHERE id = ?", (option, _now(), permission_id))
            return _permission(db.execute("SELECT * FROM permission_requests WHERE id = ?",
                                          (permission_id,)).fetchone())

    @quick_read
    def permission_requests(self, run_id: str) -> list[PermissionRequest]:
        with self._read() as db:
            rows = db.execute("SELECT * FROM permission_requests WHERE run_id = ? ORDER BY created_at, id",
                              (run_id,)).fetchall()
        return [_permission(r) for r in rows]

    # -- events ---------------------------------------------------------------

    def _append_event(
        self, db: sqlite3.Connection, conversation_id: str, run_id: str | None, kind: str, payload: dict[str, Any]
    ) -> int:
        # The callers redact what they put in (paths, arguments); the known secret values are taken out here,
        # once for every writer, so no stored event carries one.
        cur = db.execute(
            "INSERT INTO events (conversation_id, run_id, kind, payload_json, created_at) VALUES (?, ?, ?, ?, ?)",
            (conversation_id, run_id, kind, json.dumps(redact_payload(payload), sort_keys=True), _now()),
        )
        return int(cur.lastrowid or 0)

    def append_event(self, conversation_id: str, run_id: str | None, kind: str, payload: dict[str, Any]) -> int:
        """Append an event; ``payload`` must already be redacted (it is stored and shown as is)."""
        with self._write() as db:
            return self._append_event(db, conversation_id, run_id, kind, payload)

    @quick_read
    def list_events(self, run_id: str, *, after: int = 0, limit: int = 50) -> EventPage:
        """A run's events with cursor > ``after``, oldest first, at most ``limit`` (≤ :data:`MAX_EVENT_PAGE`)."""
        if after < 0:
            raise conversation_error("bad_cursor", f"cursor {after} is negative")
        limit = max(1, min(limit, MAX_EVENT_PAGE))
        with self._read() as db:
            self._get_run(db, run_id)
            rows = db.execute(
                "SELECT * FROM events WHERE run_id = ? AND cursor > ? ORDER BY cursor LIMIT ?",
                (run_id, after, limit),
            ).fetchall()
        events = tuple(_event(r) for r in rows)
        return EventPage(events, events[-1].cursor if events else after)


# -- session directives (issue 17) ------------------------------------------------------------------


@dataclass(frozen=True)
class Monitor:
    """A conversation's monitor loop (the ``monitor_*`` directives); ``stopped_reason`` when inactive."""

    conversation_id: str
    id: str
    message: str
    interval_secs: int
    max_cycles: int
    cycles: int
    active: bool
    stopped_reason: str | None
    created_at: str
    updated_at: str
    last_fired_at: str | None


@dataclass(frozen=True)
class FollowUps:
    """The follow-up card a ``suggest_followup`` directive left on a conversation (a new one replaces it)."""

    conversation_id: str
    run_id: str | None
    items: tuple[dict[str, str], ...]
    created_at: str


def _monitor(row: sqlite3.Row) -> Monitor:
    return Monitor(conversation_id=row["conversation_id"], id=row["id"], message=row["message"],
                   interval_secs=row["interval_secs"], max_cycles=row["max_cycles"], cycles=row["cycles"],
                   active=bool(row["active"]), stopped_reason=row["stopped_reason"], created_at=row["created_at"],
                   updated_at=row["updated_at"], last_fired_at=row["last_fired_at"])


class DirectiveStore:
    """What session directives keep per conversation: monitor loops, follow-up cards, project bindings.

    A view over :class:`Store`'s connection and lock (``store.directives``), kept apart so the
    directive effects have one owner.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    # monitors
    def start_monitor(self, conversation_id: str, *, message: str, interval_secs: int, max_cycles: int) -> Monitor:
        """Arm the conversation's loop, replacing any earlier one (its cycle count starts at zero)."""
        now = _now()
        with self._store._write() as db:
            self._store._get_conversation(db, conversation_id)
            db.execute("INSERT OR REPLACE INTO monitors (conversation_id, id, message, interval_secs, max_cycles,"
                       " cycles, active, stopped_reason, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 0, 1, NULL,"
                       " ?, ?)", (conversation_id, new_id("mon"), message, interval_secs, max_cycles, now, now))
            return self._get_monitor(db, conversation_id)  # type: ignore[return-value]

    def update_monitor(self, conversation_id: str, patch: dict[str, Any]) -> Monitor:
        """Patch the loop; ``monitor_not_found`` / ``monitor_cap_too_low`` / ``monitor_paused`` refuse."""
        with self._store._write() as db:
            monitor = self._get_monitor(db, conversation_id)
            if monitor is None or (not monitor.active and monitor.stopped_reason != "cycle_cap"):
                raise conversation_error("monitor_not_found", "No active monitor loop on this session to update.")
            cap = patch.get("max_cycles", monitor.max_cycles)
            if cap <= monitor.cycles:
                raise conversation_error("monitor_cap_too_low", f"max_cycles must exceed the {monitor.cycles} "
                                         "cycle(s) already run")
            revive = not monitor.active and "max_cycles" in patch and cap > monitor.max_cycles
            if not monitor.active and not revive:
                raise conversation_error("monitor_paused", f"Monitor loop {monitor.id} stopped at its cycle cap; "
                                         "raise max_cycles to revive it.")
            db.execute("UPDATE monitors SET message = ?, interval_secs = ?, max_cycles = ?, active = 1,"
                       " stopped_reason = NULL, updated_at = ? WHERE conversation_id = ?",
                       (patch.get("message", monitor.message), patch.get("idle_secs", monitor.interval_secs), cap,
                        _now(), conversation_id))
            return self._get_monitor(db, conversation_id)  # type: ignore[return-value]

    def stop_monitor(self, conversation_id: str, reason: str) -> Monitor | None:
        """Stop the active loop with ``reason`` (``manual``, ``cycle_cap``, ``archived``); None if none was active."""
        with self._store._write() as db:
            monitor = self._get_monitor(db, conversation_id)
            if monitor is None or not monitor.active:
                return None
            db.execute("UPDATE monitors SET active = 0, stopped_reason = ?, updated_at = ? WHERE conversation_id = ?",
                       (reason, _now(), conversation_id))
            return self._get_monitor(db, conversation_id)

    def count_cycle(self, conversation_id: str, monitor_id: str) -> Monitor | None:
        """One more cycle of the active loop ``monitor_id``; it stops at its cap (``cycle_cap``). None if gone."""
        now = _now()
        with self._store._write() as db:
            monitor = self._get_monitor(db, conversation_id)
            if monitor is None or not monitor.active or monitor.id != monitor_id:
                return None
            cycles = monitor.cycles + 1
            capped = cycles >= monitor.max_cycles
            db.execute("UPDATE monitors SET cycles = ?, last_fired_at = ?, updated_at = ?, active = ?,"
                       " stopped_reason = ? WHERE conversation_id = ?",
                       (cycles, now, now, 0 if capped else 1, "cycle_cap" if capped else None, conversation_id))
            return self._get_monitor(db, conversation_id)

    @quick_read
    def monitor(self, conversation_id: str) -> Monitor | None:
        with self._store._read() as db:
            return self._get_monitor(db, conversation_id)

    @quick_read
    def active_monitors(self) -> list[Monitor]:
        with self._store._read() as db:
            rows = db.execute("SELECT * FROM monitors WHERE active = 1 ORDER BY conversation_id").fetchall()
        return [_monitor(r) for r in rows]

    @staticmethod
    def _get_monitor(db: sqlite3.Connection, conversation_id: str) -> Monitor | None:
        row = db.execute("SELECT * FROM monitors WHERE conversation_id = ?", (conversation_id,)).fetchone()
        return None if row is None else _monitor(row)

    # follow-ups
    def set_followups(self, conversation_id: str, run_id: str | None, items: Sequence[dict[str, str]]) -> FollowUps:
        with self._store._write() as db:
            self._store._get_conversation(db, conversation_id)
            db.execute("INSERT OR REPLACE INTO followups (conversation_id, run_id, items_json, created_at)"
                       " VALUES (?, ?, ?, ?)", (conversation_id, run_id, json.dumps(list(items)), _now()))
        return self.followups(conversation_id)  # type: ignore[return-value]

    def dismiss_followups(self, conversation_id: str) -> bool:
        """Drop the card (the person chose one, or Skip); whether there was one."""
        with self._store._write() as db:
            return db.execute("DELETE FROM followups WHERE conversation_id = ?", (conversation_id,)).rowcount > 0

    @quick_read
    def followups(self, conversation_id: str) -> FollowUps | None:
        with self._store._read() as db:
            row = db.execute("SELECT * FROM followups WHERE conversation_id = ?", (conversation_id,)).fetchone()
        if row is None:
            return None
        return FollowUps(row["conversation_id"], row["run_id"], tuple(json.loads(row["items_json"])),
                         row["created_at"])

    # project binding
    def bind_project(self, conversation_id: str, project: str | None) -> bool:
        """Bind (or with None unbind) the project; when it changes, forget kiro's session so the next run
        starts a new one in the new directory. Returns whether it changed."""
        with self._store._write() as db:
            conv = self._store._get_conversation(db, conversation_id)
            if conv.project == project:
                return False
            db.execute("UPDATE conversations SET project_path = ?, acp_session_id = NULL, updated_at = ?"
                       " WHERE id = ?", (project, _now(), conversation_id))
            return True


@dataclass
class State:
    """An owned state directory and its open store: what a server holds for its lifetime."""

    ownership: StateDirOwnership
    store: Store
    interrupted: list[str]

    def close(self) -> None:
        self.store.close()
        self.ownership.release()


def open_state(directory: Path | None = None) -> State:
    """Own the state directory, open the database, and run restart recovery.

    Recovery runs only after the ownership lock is held, so it can never touch
    the live runs of another server.
    """
    directory = ensure_state_dir(directory)
    ownership = acquire_ownership(directory)
    try:
        store = Store.open(database_file(directory))
        interrupted = store.recover_interrupted()
    except BaseException:
        ownership.release()
        raise
    return State(ownership, store, interrupted)
