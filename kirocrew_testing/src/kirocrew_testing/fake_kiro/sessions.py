"""Session persistence as kiro-cli writes it, with kiro-cli 2.x lock semantics.

Two layouts (where the files go is :mod:`kirocrew_core.kiro_sessions`, the one owner of it):

* **2.x flat** (the default): ``<kiro home>/sessions/cli/<id>.json`` (``session_id``, ``title``,
  ``cwd``, ``created_at``, ``updated_at``, ``session_state``), ``<id>.jsonl`` with one
  ``{"version": "v1", "kind": "Prompt"|"AssistantMessage", "data": {"message_id", "content":
  [{"kind": "text", "data": ...}]}}`` per entry, and ``<id>.history``.
* **V3** (``--agent-engine v3`` or ``KIRO_FAKE_V3=1``): ``<kiro home>/sessions/<workspace
  hash>/sess_<id>/session.json`` (``id``, ``title``, ``workspacePaths``, ``createdAt``,
  ``lastModifiedAt``) and ``messages.jsonl`` with ``{"payload": {"type": "user"|"assistant"|
  "usage_summary", ...}}``; a sub-agent's transcript goes to ``sub-executions/<id>.jsonl``.

Images are kept inline in the prompt's line as ``images: [{data, mimeType}]`` (base64). While a
process hosts a session, its lock is ``{"pid": N, "started_at": ...}``, removed only on a graceful
exit; a SIGKILLed owner leaves it behind, and kiro-cli 2.16 then refuses ``session/load`` durably,
even once that pid is dead: removing a stale lock is the client's job.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kirocrew_core import kiro_sessions
from kirocrew_core.errors import BadInputError
from kirocrew_core.jsonfile import ReadState, read_json, write_json_atomic

# What kiro's backend refuses, and so every later request of a session holding it (the API's own words).
MEDIA_LIMIT = 100
IMAGE_SIDE_LIMIT = 2000
TITLE_MAX_CHARS = 80


class LockHeld(Exception):
    """Another process's lock names this session."""

    def __init__(self, pid: int | str) -> None:
        super().__init__(f"Session is active in another process (PID {pid})")
        self.pid = pid


class LockUnreadable(Exception):
    """The lock file exists but cannot be read as a lock (kiro's second refusal marker)."""


class SessionBroken(Exception):
    """The session holds media kiro's backend refuses: every request of it fails until it is repaired."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def new_session_id(v3: bool = False) -> str:
    return f"{kiro_sessions.V3_ID_PREFIX}{uuid.uuid4().hex}" if v3 else str(uuid.uuid4())


def is_safe_id(session_id: str) -> bool:
    """An id that names a file inside the sessions dir and nothing else."""
    try:
        kiro_sessions.check_session_id(session_id)
    except BadInputError:
        return False
    return True


@dataclass(frozen=True)
class SessionFiles:
    """One session's files (see the module docstring); ``history`` is the flat store's alone."""

    where: kiro_sessions.SessionFiles

    @property
    def session_id(self) -> str:
        return self.where.session_id

    @property
    def v3(self) -> bool:
        return self.where.layout == "v3"

    @property
    def transcript(self) -> Path:
        return self.where.transcript

    @property
    def state(self) -> Path:
        return self.where.metadata

    @property
    def lock(self) -> Path:
        return self.where.lock

    @property
    def history(self) -> Path | None:
        return None if self.v3 else self.where.transcript.with_suffix(".history")

    @property
    def directory(self) -> Path:
        return self.where.metadata.parent


def files_for(session_id: str, cwd: str | None = None) -> SessionFiles:
    """An existing session's files; else a new one's: V3 for a ``sess_`` id (in ``cwd``'s workspace), flat otherwise."""
    if not is_safe_id(session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    located = kiro_sessions.locate(session_id)
    if located is not None:
        return SessionFiles(located)
    if session_id.startswith(kiro_sessions.V3_ID_PREFIX) and cwd:
        return SessionFiles(kiro_sessions.v3_files(kiro_sessions.v3_session_dir(cwd, session_id)))
    return SessionFiles(kiro_sessions.flat_files(session_id))


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


# -- metadata: the fake keeps agent, model and forked_from beside kiro's own fields ----------------

_V3_NAMES = {"cwd": "workspacePaths", "created_at": "createdAt", "updated_at": "lastModifiedAt"}


def write_state(files: SessionFiles, state: dict[str, Any]) -> None:
    """Write the metadata file from the flat-named ``state`` (V3 renames kiro's fields its way)."""
    files.directory.mkdir(parents=True, exist_ok=True)
    state = {**state, "updated_at": now_iso()}
    if not files.v3:
        state.setdefault("session_state", {"conversation_metadata": {"user_turn_metadatas": []}})
        write_json_atomic(files.state, {**state, "session_id": files.session_id})
        return
    document: dict[str, Any] = {"id": files.session_id}
    for key, value in state.items():
        if key == "cwd":
            document["workspacePaths"] = [value]
        elif key != "session_state":
            document[_V3_NAMES.get(key, key)] = value
    write_json_atomic(files.state, document)


def read_state(files: SessionFiles) -> dict[str, Any]:
    """The metadata with flat names (``cwd``, ``created_at``, ``title``, ``agent``, ``model``...)."""
    read = read_json(files.state)
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        return {}
    document = dict(read.document)
    if not files.v3:
        return document
    state: dict[str, Any] = {}
    for key, value in document.items():
        if key == "workspacePaths":
            if isinstance(value, list) and value:
                state["cwd"] = value[0]
        elif key != "id":
            state[{v: k for k, v in _V3_NAMES.items()}.get(key, key)] = value
    return state


def _title_of(text: str) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first[:TITLE_MAX_CHARS]


def record_turn(files: SessionFiles, prompt: str, credits: float) -> None:
    """After a turn: the title (the first prompt's first line, the fake's choice) and the turn's credits."""
    state = read_state(files)
    if not state.get("title"):
        state["title"] = _title_of(prompt)
    if files.v3:
        _append(files.transcript, {"payload": {"type": "usage_summary",
                                               "promptTurnSummaries": [{"unit": "credit", "usage": credits}]}})
    else:
        meta = state.setdefault("session_state", {}).setdefault("conversation_metadata", {})
        meta.setdefault("user_turn_metadatas", []).append({"metering_usage": [{"unit": "credit", "value": credits}]})
    write_state(files, state)


# -- transcript ---------------------------------------------------------------------------------------


def _entry(v3: bool, role: str, text: str, images: list[dict[str, str]]) -> dict[str, Any]:
    if v3:
        payload: dict[str, Any] = {"type": role, "content": text, "timestamp": now_iso()}
        if images:
            payload["images"] = images
        return {"payload": payload}
    data: dict[str, Any] = {"message_id": str(uuid.uuid4()), "content": [{"kind": "text", "data": text}]}
    if images:
        data["images"] = images
    return {"version": "v1", "kind": "Prompt" if role == "user" else "AssistantMessage", "data": data}


def _append(path: Path, entry: dict[str, Any]) -> None:
    """Append one line; one ``write`` of one line is atomic enough for a transcript."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, ensure_ascii=False) + "\n")


def append_transcript(files: SessionFiles, role: str, text: str, images: list[dict[str, str]] | None = None) -> None:
    """Append one entry (``role`` is ``user`` or ``assistant``) in the session's layout."""
    _append(files.transcript, _entry(files.v3, role, text, images or []))


def _parse(line: str) -> tuple[str, str, list[Any]] | None:
    """``(role, text, images)`` of one transcript line in either layout; None for other kinds or a torn line."""
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        return None  # a torn last line after a crash: kiro skips it too
    if not isinstance(entry, dict):
        return None
    payload = entry.get("payload")
    if isinstance(payload, dict):
        role, text, images = payload.get("type"), payload.get("content"), payload.get("images")
    else:
        data = entry.get("data")
        data = data if isinstance(data, dict) else {}
        role = {"Prompt": "user", "AssistantMessage": "assistant"}.get(str(entry.get("kind")))
        blocks = data.get("content")
        blocks = blocks if isinstance(blocks, list) else []
        text = "".join(b.get("data", "") for b in blocks if isinstance(b, dict) and b.get("kind") == "text"
                       and isinstance(b.get("data"), str))
        images = data.get("images")
    if role not in ("user", "assistant") or not isinstance(text, str):
        return None
    return role, text, images if isinstance(images, list) else []


def _lines(files: SessionFiles) -> list[str]:
    try:
        return files.transcript.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def read_transcript(files: SessionFiles) -> list[dict[str, Any]]:
    """The prompts and replies, ``{role, text}`` each, in order."""
    return [{"role": role, "text": text} for role, text, _ in filter(None, map(_parse, _lines(files)))]


def check_media(files: SessionFiles) -> None:
    """Raise :class:`SessionBroken` as kiro's backend refuses a request replaying this session's images.

    More than :data:`MEDIA_LIMIT` inline images, or one over :data:`IMAGE_SIDE_LIMIT` px on a side.
    """
    images = [image for parsed in filter(None, map(_parse, _lines(files))) for image in parsed[2]]
    if len(images) > MEDIA_LIMIT:
        raise SessionBroken(f"too many inline media segments: {len(images)} exceeds limit {MEDIA_LIMIT}")
    for image in images:
        if max(_image_size(image)) > IMAGE_SIDE_LIMIT:
            raise SessionBroken("At least one of the image dimensions exceed max allowed size for many-image "
                                f"requests: {IMAGE_SIDE_LIMIT} pixels")


def _image_size(image: Any) -> tuple[int, int]:
    """An inline image's pixel size; (0, 0) when it cannot be read (the backend's check is on pixels only)."""
    from PIL import Image, UnidentifiedImageError

    data = image.get("data") if isinstance(image, dict) else None
    if not isinstance(data, str):
        return (0, 0)
    try:
        with Image.open(io.BytesIO(base64.b64decode(data, validate=True))) as picture:
            return picture.size
    except (ValueError, UnidentifiedImageError, OSError, Image.DecompressionBombError):
        return (0, 0)


def clear_transcript(files: SessionFiles) -> None:
    with contextlib.suppress(FileNotFoundError):
        files.transcript.unlink()


def append_history(files: SessionFiles, text: str) -> None:
    if files.history is None:
        return
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


def write_subagent(parent: SessionFiles, cwd: str, task: str, reply: str) -> str:
    """A sub-agent's session, as kiro writes one: flat beside its parent, or under the V3 parent's sub-executions.

    Returns the sub-agent's session id.
    """
    child_id = new_session_id()
    if parent.v3:
        path = parent.directory / kiro_sessions.V3_SUB_EXECUTIONS / f"{child_id}.jsonl"
        _append(path, _entry(True, "user", task, []))
        _append(path, _entry(True, "assistant", reply, []))
        return child_id
    child = SessionFiles(kiro_sessions.flat_files(child_id, parent.directory))
    write_state(child, {"title": _title_of(task), "cwd": cwd, "created_at": now_iso(),
                        "parent_session_id": parent.session_id,
                        "session_created_reason": kiro_sessions.SUBAGENT_REASON})
    append_transcript(child, "user", task)
    append_transcript(child, "assistant", reply)
    return child_id
