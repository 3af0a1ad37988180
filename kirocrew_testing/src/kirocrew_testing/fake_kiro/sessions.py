"""Session persistence under ``<kiro home>/sessions/cli``, with kiro-cli 2.x lock semantics.

Each session is ``<id>.jsonl`` (transcript), ``<id>.json`` (state) and, while a
process hosts it, ``<id>.lock`` = ``{"pid": N, "started_at": ...}``. The lock is
removed only on a graceful exit; a SIGKILLed owner leaves it behind, and
kiro-cli 2.16 then refuses ``session/load`` durably, even once that pid is
dead. It does not check liveness: removing a stale lock is the client's job,
which is exactly the behaviour the production seam must cope with.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.jsonfile import ReadState, read_json, write_json_atomic

_SAFE_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,127}\Z")


class LockHeld(Exception):
    """Another process's lock names this session."""

    def __init__(self, pid: int | str) -> None:
        super().__init__(f"Session is active in another process (PID {pid})")
        self.pid = pid


class LockUnreadable(Exception):
    """The lock file exists but cannot be read as a lock (kiro's second refusal marker)."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def new_session_id() -> str:
    return str(uuid.uuid4())


def is_safe_id(session_id: str) -> bool:
    """An id that names a file inside the sessions dir and nothing else."""
    return bool(_SAFE_ID.match(session_id))


@dataclass(frozen=True)
class SessionFiles:
    session_id: str
    directory: Path

    @property
    def transcript(self) -> Path:
        return self.directory / f"{self.session_id}.jsonl"

    @property
    def state(self) -> Path:
        return self.directory / f"{self.session_id}.json"

    @property
    def lock(self) -> Path:
        return self.directory / f"{self.session_id}.lock"

    @property
    def history(self) -> Path:
        return self.directory / f"{self.session_id}.history"


def files_for(session_id: str) -> SessionFiles:
    if not is_safe_id(session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    return SessionFiles(session_id, home.kiro_sessions_dir())


def exists(files: SessionFiles) -> bool:
    return files.state.is_file()


def read_lock_pid(files: SessionFiles) -> int | None:
    """The pid the lock names, None when there is no lock; raise :class:`LockUnreadable`."""
    read = read_json(files.lock)
    if read.state is ReadState.ABSENT:
        return None
    if read.state is ReadState.DOCUMENT and isinstance(read.document, dict):
        pid = read.document.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool):
            return pid
    raise LockUnreadable(f"failed to re-read lock file {files.lock}: {read.error or 'no pid'}")


def acquire_lock(files: SessionFiles, pid: int) -> None:
    """Take the session for ``pid``; raise :class:`LockHeld` if another pid's lock is there."""
    owner = read_lock_pid(files)
    if owner is not None and owner != pid:
        raise LockHeld(owner)
    if owner is None:
        files.directory.mkdir(parents=True, exist_ok=True)
        write_json_atomic(files.lock, {"pid": pid, "started_at": now_iso()})


def release_lock(files: SessionFiles, pid: int) -> bool:
    """Remove the lock if it is ours; True when a lock was removed."""
    try:
        owner = read_lock_pid(files)
    except LockUnreadable:
        return False
    if owner != pid:
        return False
    try:
        files.lock.unlink()
    except FileNotFoundError:
        return False
    return True


def write_state(files: SessionFiles, state: dict[str, Any]) -> None:
    files.directory.mkdir(parents=True, exist_ok=True)
    write_json_atomic(files.state, {**state, "session_id": files.session_id, "updated_at": now_iso()})


def read_state(files: SessionFiles) -> dict[str, Any]:
    read = read_json(files.state)
    if read.state is ReadState.DOCUMENT and isinstance(read.document, dict):
        return read.document
    return {}


def append_transcript(files: SessionFiles, role: str, text: str) -> None:
    """Append one turn part; an append of one short line is atomic enough for a transcript."""
    files.directory.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"role": role, "text": text, "at": now_iso()}, ensure_ascii=False) + "\n"
    with open(files.transcript, "a", encoding="utf-8") as fh:
        fh.write(line)


def read_transcript(files: SessionFiles) -> list[dict[str, Any]]:
    try:
        raw = files.transcript.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    entries = []
    for line in raw.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line after a crash: kiro skips it too
        if isinstance(entry, dict) and isinstance(entry.get("text"), str):
            entries.append(entry)
    return entries


def clear_transcript(files: SessionFiles) -> None:
    with contextlib.suppress(FileNotFoundError):
        files.transcript.unlink()


def append_history(files: SessionFiles, text: str) -> None:
    files.directory.mkdir(parents=True, exist_ok=True)
    with open(files.history, "a", encoding="utf-8") as fh:
        fh.write(text.replace("\n", " ") + "\n")


def copy_session(source: SessionFiles, target: SessionFiles) -> None:
    """Fork: the same transcript and state under a new id (no lock is copied)."""
    state = read_state(source)
    state.pop("session_id", None)
    write_state(target, state)
    try:
        data = source.transcript.read_bytes()
    except FileNotFoundError:
        data = b""
    target.transcript.write_bytes(data)

