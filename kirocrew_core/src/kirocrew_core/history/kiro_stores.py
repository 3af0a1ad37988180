"""kiro-cli's own session stores, as the history reads them (never written).

Where they are and how they are laid out is :mod:`kirocrew_core.kiro_sessions`'s to say; this
module reads what is in them. Three forms, all under the user's Kiro home or data folder:

* **2.x flat** (``<kiro home>/sessions/cli/<uuid>.json`` + ``<uuid>.jsonl``): the ``.json``
  holds ``title``, ``cwd``, ``created_at``, ``updated_at``; each transcript line is
  ``{"version":"v1","kind":"Prompt"|"AssistantMessage"|…,"data":{"content":[{"kind":"text","data":…}]}}``;
* **V3** (``<kiro home>/sessions/<workspace hash>/<session dir>/session.json`` + ``messages.jsonl``):
  ``title``, ``workspacePaths[]``, ``createdAt``, ``lastModifiedAt``; lines
  ``{"payload":{"type":"user"|"assistant"|…,"content":…}}``;
* **TUI** (``<data dir>/kiro-cli/data.sqlite3``, table ``conversations_v2``: ``key`` = cwd,
  ``conversation_id``, ``value`` = ``{"history":[…]}``, ``created_at``/``updated_at`` in ms).

Only user and assistant text is kept: tool calls, tool results and usage lines are skipped.
A transcript line that is not a JSON object is *corrupt*: the index skips and counts it.
Sessions are named ``<form>/<id>`` inside their source (``cli/<uuid>``, ``<hash>/sess_…``,
``tui/<conversation id>``); the index keys them opaquely before any model sees one.
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final, Literal

from kirocrew_core import kiro_sessions
from kirocrew_core.contributions import HistoryMessage

FLAT: Final = "kiro-cli"
V3: Final = "kiro-v3"
TUI: Final = "kiro-tui"
#: A session's metadata file larger than this is not metadata: it is skipped (its transcript is still read).
MAX_META_BYTES = 4 * 1024 * 1024
TITLE_CHARS = 80


class CorruptLine(ValueError):
    """A transcript line that is not a JSON object: skipped and counted, never fatal."""


@dataclass(frozen=True)
class Meta:
    """What a session's metadata says (``""`` for what it does not say)."""

    title: str = ""
    workspace: str = ""
    created: str = ""
    updated: str = ""


@dataclass(frozen=True)
class FileSession:
    """One file-backed kiro-cli session: its metadata file and its append-only transcript."""

    source: Literal["kiro-cli", "kiro-v3"]
    native_id: str
    meta_path: str
    transcript: str
    resume_id: str

    def parse(self, raw: bytes) -> HistoryMessage | None:
        """One transcript line's message; None for a line of another kind; :class:`CorruptLine` for garbage."""
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise CorruptLine(str(exc)) from exc
        if not isinstance(obj, dict):
            raise CorruptLine("not a JSON object")
        return flat_message(obj) if self.source == FLAT else v3_message(obj)

    def meta(self, doc: dict[str, Any]) -> Meta:
        return flat_meta(doc) if self.source == FLAT else v3_meta(doc)

    @classmethod
    def of(cls, paths: kiro_sessions.SessionPaths) -> FileSession:
        """The session kiro's layout (:mod:`kirocrew_core.kiro_sessions`) found."""
        return cls(FLAT if paths.layout == "flat" else V3, paths.name, paths.metadata, paths.transcript,
                   paths.session_id)


def file_sessions(root: Path | None = None) -> Iterator[FileSession]:
    """Every flat and V3 session under ``root`` (default: kiro's sessions root) that has a transcript."""
    for paths in kiro_sessions.session_paths(root):
        yield FileSession.of(paths)


def read_meta(session: FileSession) -> Meta:
    """The session's metadata file, or an empty :class:`Meta` when it is missing, too large or malformed."""
    try:
        fd = os.open(session.meta_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_META_BYTES + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        doc = json.loads(raw) if len(raw) <= MAX_META_BYTES else None
    except (OSError, ValueError):
        return Meta()
    return session.meta(doc) if isinstance(doc, dict) else Meta()


def resume_command(workspace: str, resume: str) -> str:
    """What the owner types to continue a kiro-cli session in a terminal (``""`` when it cannot be said)."""
    if not resume:
        return ""
    where = f"cd {shlex.quote(workspace)} && " if workspace else ""
    return where + resume


# --- the 2.x flat form ------------------------------------------------------------------------


def flat_meta(doc: dict[str, Any]) -> Meta:
    return Meta(_str(doc.get("title")), _str(doc.get("cwd")), when(doc.get("created_at")), when(doc.get("updated_at")))


_FLAT_ROLES: dict[str, Literal["user", "assistant"]] = {"Prompt": "user", "AssistantMessage": "assistant"}


def flat_message(obj: dict[str, Any]) -> HistoryMessage | None:
    role = _FLAT_ROLES.get(str(obj.get("kind")))
    data = obj.get("data")
    if role is None or not isinstance(data, dict):
        return None
    text = content_text(data.get("content"))
    return HistoryMessage(role, text, when(data.get("timestamp") or obj.get("timestamp"))) if text else None


# --- the V3 form ------------------------------------------------------------------------------


def v3_meta(doc: dict[str, Any]) -> Meta:
    paths = doc.get("workspacePaths")
    workspace = _str(paths[0]) if isinstance(paths, list) and paths else ""
    return Meta(_str(doc.get("title")), workspace, when(doc.get("createdAt")), when(doc.get("lastModifiedAt")))


def v3_message(obj: dict[str, Any]) -> HistoryMessage | None:
    payload = obj.get("payload")
    if not isinstance(payload, dict) or payload.get("type") not in ("user", "assistant"):
        return None
    text = content_text(payload.get("content"))
    role: Literal["user", "assistant"] = "user" if payload["type"] == "user" else "assistant"
    stamp = payload.get("timestamp") or obj.get("timestamp") or obj.get("createdAt")
    return HistoryMessage(role, text, when(stamp)) if text else None


# --- the TUI's SQLite database ----------------------------------------------------------------


@dataclass(frozen=True)
class TuiRow:
    """One ``conversations_v2`` row without its history: enough to tell whether it changed."""

    conversation_id: str
    workspace: str
    created: str
    updated: str
    version: str


def tui_rows(database: Path) -> tuple[sqlite3.Connection, list[TuiRow]]:
    """An open read-only connection on the TUI database and its conversations (``sqlite3.Error`` when unusable).

    Read only (``mode=ro``): kiro-cli owns the file; the history never creates, migrates or locks it for writing.
    """
    conn = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=2.0)
    try:
        rows = conn.execute("SELECT key, conversation_id, created_at, updated_at FROM conversations_v2").fetchall()
    except BaseException:
        conn.close()
        raise
    return conn, [TuiRow(_str(cid), _str(key), when(created), when(updated), str(updated))
                  for key, cid, created, updated in rows if isinstance(cid, str) and cid]


def tui_messages(conn: sqlite3.Connection, conversation_id: str) -> list[HistoryMessage]:
    """One TUI conversation's user and assistant text, oldest first (nothing for a malformed value)."""
    row = conn.execute("SELECT value FROM conversations_v2 WHERE conversation_id = ?", (conversation_id,)).fetchone()
    try:
        doc = json.loads(row[0]) if row is not None and row[0] is not None else None
    except (ValueError, TypeError):
        return []
    history = doc.get("history") if isinstance(doc, dict) else None
    out: list[HistoryMessage] = []
    for entry in history if isinstance(history, list) else []:
        pair = (entry.get("user"), entry.get("assistant")) if isinstance(entry, dict) else (
            tuple(entry[:2]) if isinstance(entry, list) and len(entry) >= 2 else (None, None))
        user, assistant = pair
        if isinstance(user, dict):
            text = _tui_user_text(user.get("content"))
            if text:
                out.append(HistoryMessage("user", text, when(user.get("timestamp"))))
        if isinstance(assistant, dict):
            for variant in assistant.values():  # {"Response": {...}} or {"ToolUse": {...}}
                text = content_text(variant.get("content")) if isinstance(variant, dict) else ""
                if text:
                    out.append(HistoryMessage("assistant", text))
    return out


def _tui_user_text(content: Any) -> str:
    if isinstance(content, dict):
        for variant in content.values():  # {"Prompt": {"prompt": …}}, {"CancelledToolUses": {"prompt": …}}
            if isinstance(variant, dict) and isinstance(variant.get("prompt"), str):
                return str(variant["prompt"])
        return ""
    return content_text(content)


# --- shared -----------------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts, joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and part.get("kind", part.get("type", "text")) == "text":
            value = part.get("data", part.get("text"))
            if isinstance(value, str):
                parts.append(value)
    return "\n".join(p for p in parts if p)


def when(value: Any) -> str:
    """A time kiro wrote (RFC 3339 text, or epoch seconds or milliseconds) as ISO UTC; ``""`` when it is none."""
    try:
        if isinstance(value, bool):
            return ""
        if isinstance(value, (int, float)):
            stamp = datetime.fromtimestamp(value / 1000 if value > 100_000_000_000 else value, timezone.utc)
        elif isinstance(value, str) and value:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=timezone.utc)
        else:
            return ""
    except (ValueError, OverflowError, OSError):
        return ""
    return stamp.astimezone(timezone.utc).isoformat(timespec="seconds")


def title_from(messages: list[HistoryMessage] | tuple[HistoryMessage, ...]) -> str:
    """A title for a session that has none: its first user message's first line, shortened."""
    for message in messages:
        if message.role == "user" and message.text.strip():
            line = message.text.strip().splitlines()[0]
            return line if len(line) <= TITLE_CHARS else line[:TITLE_CHARS - 1] + "…"
    return ""


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
