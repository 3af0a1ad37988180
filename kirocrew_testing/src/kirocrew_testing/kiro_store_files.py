"""Write kiro-cli session stores in their documented forms, for tests and benchmarks of the history.

Independent of the fake kiro-cli (which writes its own sessions as it runs): a test states
exactly which sessions exist, in which form. The three forms (see
``kirocrew_core.history.kiro_stores``):

* :func:`write_flat` / :func:`append_flat`: 2.x ``sessions/cli/<uuid>.json`` + ``<uuid>.jsonl``;
* :func:`write_v3`: ``sessions/<workspace hash>/<session dir>/session.json`` + ``messages.jsonl``;
* :func:`write_tui`: a row of ``conversations_v2`` in the TUI's ``data.sqlite3``.

``messages`` are ``(role, text)`` pairs, role ``user`` or ``assistant``.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path

Messages = Sequence[tuple[str, str]]


def flat_line(role: str, text: str, number: int = 0) -> bytes:
    kind = "Prompt" if role == "user" else "AssistantMessage"
    line = {"version": "v1", "kind": kind,
            "data": {"message_id": f"m{number}", "content": [{"kind": "text", "data": text}]}}
    return (json.dumps(line) + "\n").encode()


def write_flat(kiro_home: Path, session_id: str, *, title: str, cwd: str, messages: Messages,
               created: str = "2026-11-01T10:00:00Z", updated: str = "2026-11-01T11:00:00Z") -> Path:
    """A 2.x flat session; the transcript's path."""
    directory = kiro_home / "sessions" / "cli"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{session_id}.json").write_text(json.dumps({
        "session_id": session_id, "title": title, "cwd": cwd, "created_at": created, "updated_at": updated,
        "session_state": {"conversation_metadata": {"user_turn_metadatas": []}}}))
    transcript = directory / f"{session_id}.jsonl"
    transcript.write_bytes(b"".join(flat_line(role, text, n) for n, (role, text) in enumerate(messages)))
    return transcript


def append_flat(transcript: str | Path, role: str, text: str) -> None:
    """One more message at the end of a flat transcript, as kiro-cli appends it."""
    with open(transcript, "ab") as fh:
        fh.write(flat_line(role, text))


def write_v3(kiro_home: Path, session_dir: str, *, title: str, workspace: str, messages: Messages,
             created: str = "2026-11-02T10:00:00Z", updated: str = "2026-11-02T11:00:00Z") -> Path:
    """A V3 session in its workspace's hashed folder; the transcript's path."""
    folder = kiro_home / "sessions" / hashlib.sha256(workspace.encode()).hexdigest()[:16] / session_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "session.json").write_text(json.dumps({
        "id": session_dir, "title": title, "workspacePaths": [workspace], "createdAt": created,
        "lastModifiedAt": updated}))
    lines = [{"payload": {"type": role, "content": [{"type": "text", "text": text}]}} for role, text in messages]
    lines.insert(1, {"payload": {"type": "tool_call", "content": "ignored"}})
    transcript = folder / "messages.jsonl"
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return transcript


def write_tui(database: Path, conversation_id: str, *, cwd: str, messages: Messages,
              created_ms: int = 1_764_000_000_000, updated_ms: int = 1_764_000_100_000) -> None:
    """A TUI conversation (replacing one of that id); the table is made when missing."""
    database.parent.mkdir(parents=True, exist_ok=True)
    history: list[dict[str, object]] = []
    pending: dict[str, object] | None = None
    for role, text in messages:
        if role == "user":
            pending = {"content": {"Prompt": {"prompt": text}}}
            history.append({"user": pending, "assistant": None})
        else:
            history[-1]["assistant"] = {"Response": {"message_id": f"a{len(history)}", "content": text}}
    with sqlite3.connect(database) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS conversations_v2 (key TEXT NOT NULL, conversation_id TEXT NOT NULL "
                     "PRIMARY KEY, value TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)")
        conn.execute("INSERT OR REPLACE INTO conversations_v2 VALUES (?, ?, ?, ?, ?)",
                     (cwd, conversation_id, json.dumps({"conversation_id": conversation_id, "history": history}),
                      created_ms, updated_ms))
    conn.close()


def vocabulary(rng: random.Random, size: int = 5000) -> list[str]:
    """``size`` distinct made-up words, most common first when drawn by :func:`write_corpus`."""
    syllables = ["ka", "ro", "mi", "ten", "sul", "va", "dor", "ex", "pli", "qua", "zen", "lo", "bar", "fi", "gu"]
    seen: dict[str, None] = {}
    while len(seen) < size:
        seen.setdefault("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return list(seen)


def write_corpus(kiro_home: Path, sessions: int, messages: int, rng: random.Random, words: list[str]) -> None:
    """A benchmark corpus: ``sessions`` sessions of ``messages`` 24-word messages (nine in ten flat, the rest V3).

    Words are drawn with a Zipf-like skew (the first words are in most messages, most words are rare);
    sessions spread over 20 workspaces and a year of days.
    """
    weights = [1 / (rank + 1) for rank in range(len(words))]
    for number in range(sessions):
        workspace = f"/srv/workspace-{number % 20:02d}"
        chosen = rng.choices(words, weights=weights, k=messages * 24)
        texts = [(("user", "assistant")[i % 2], " ".join(chosen[i * 24:(i + 1) * 24])) for i in range(messages)]
        day = f"2026-{1 + number % 12:02d}-{1 + number % 28:02d}T10:00:00Z"
        if number % 10 == 9:
            write_v3(kiro_home, f"sess_{number:06d}", title=f"session {number}", workspace=workspace,
                     messages=texts, created=day, updated=day)
        else:
            write_flat(kiro_home, f"{number:08d}-0000-4000-8000-000000000000", title=f"session {number}",
                       cwd=workspace, messages=texts, created=day, updated=day)
