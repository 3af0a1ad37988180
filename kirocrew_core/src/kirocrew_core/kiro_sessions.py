"""kiro-cli's persisted session files: where they are, what their metadata says, and their locks.

The one owner of kiro-cli's session layout. Two stores (facts from third-party readers of real
sessions; ``docs/testing/fake-kiro-cli.md`` lists them):

* **flat** (kiro-cli 2.x): ``<kiro home>/sessions/cli/<id>.{json,jsonl,history,lock}``; the
  ``.json`` carries ``session_id``, ``title``, ``cwd``, ``created_at``, ``updated_at`` and, for a
  sub-agent's session, ``parent_session_id`` and ``session_created_reason: "subagent"``.
* **V3** (the opt-in engine): ``<kiro home>/sessions/<workspace hash>/<id>/`` holding
  ``session.json`` (``id``, ``title``, ``workspacePaths``, ``createdAt``, ``lastModifiedAt``),
  ``messages.jsonl`` and ``sub-executions/``, ``snapshots/``, ``tool-outputs/``. Its lock file name
  is unrecorded; we use ``session.lock`` in that directory. Sessions are found by their directory
  name, never by recomputing the workspace hash.

The terminal UI keeps its conversations elsewhere, in one SQLite database (:func:`tui_database`).
The history reads every session through :func:`session_paths` (and a watcher maps a changed path
to what it concerns with :func:`place_of`); conversations' delete, repair and open go through
:func:`locate` and the lock functions.

A lock holds ``{"pid": N, "started_at": ...}``. A hard-killed owner leaves its
lock behind and every later ``session/load`` is refused for good, because
kiro-cli reads the lock as durable state, not as a liveness check. We remove a
lock only when its pid is provably dead: a live pid, an unreadable or
malformed lock, or an owner whose liveness cannot be read all mean "keep"
(:func:`kirocrew_core.processes.alive`).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kirocrew_core import home, processes
from kirocrew_core.errors import BadInputError

log = logging.getLogger(__name__)

# kiro-cli's ids are UUIDs; anything that could leave the sessions dir is refused.
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
# The largest lock file worth parsing ({"pid":N,"started_at":"..."} is ~60 bytes).
_MAX_LOCK_BYTES = 4096


def check_session_id(session_id: str) -> str:
    """``session_id`` if it is safe to use in a file name, else :class:`BadInputError`."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise BadInputError(f"not a kiro session id: {session_id!r}", code="bad_session_id")
    return session_id


# -- layout ---------------------------------------------------------------------------------------

FLAT_DIR = "cli"
FLAT_METADATA_SUFFIX = ".json"
FLAT_TRANSCRIPT_SUFFIX = ".jsonl"
V3_METADATA = "session.json"
V3_TRANSCRIPT = "messages.jsonl"
V3_LOCK = "session.lock"  # kiro's own name is unrecorded
V3_SUB_EXECUTIONS = "sub-executions"
V3_ID_PREFIX = "sess_"
SUBAGENT_REASON = "subagent"
TUI_DIR = "kiro-cli"
TUI_DATABASE = "data.sqlite3"
# Metadata worth parsing; a 2.x ``.json`` keeps per-turn state and grows, but not this far.
_MAX_METADATA_BYTES = 64 * 1024 * 1024
# How deep sub-agents of sub-agents are followed (a cycle in hostile files ends here too).
_MAX_TREE_DEPTH = 8


def sessions_root() -> Path:
    """``<kiro home>/sessions``: the flat store is its ``cli`` directory, V3 keeps one directory per workspace."""
    return home.kiro_sessions_dir().parent


def tui_database() -> Path:
    """The terminal UI's database: ``$XDG_DATA_HOME/kiro-cli/data.sqlite3`` (default ``~/.local/share``)."""
    data = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(data) if data and os.path.isabs(data) else home.user_home() / ".local" / "share"
    return base / TUI_DIR / TUI_DATABASE


def workspace_hash(cwd: str) -> str:
    """The V3 workspace directory name the fake uses (kiro's own hash is unrecorded; readers never recompute it)."""
    return hashlib.sha256(cwd.encode("utf-8", "surrogateescape")).hexdigest()[:16]


@dataclass(frozen=True)
class SessionFiles:
    """Where one session's files are, in either layout. ``directory`` is a V3 session's own directory."""

    session_id: str
    layout: Literal["flat", "v3"]
    metadata: Path
    transcript: Path
    lock: Path
    directory: Path | None = None

    def transcripts(self) -> list[Path]:
        """Every transcript the session holds: its own, then (V3) its sub-executions' in name order."""
        found = [self.transcript]
        if self.directory is not None:
            with contextlib.suppress(OSError):
                found += sorted(p for p in (self.directory / V3_SUB_EXECUTIONS).glob("*.jsonl") if p.is_file())
        return found


def flat_files(session_id: str, sessions_dir: Path | None = None) -> SessionFiles:
    """A flat session's files in ``sessions_dir`` (default :func:`home.kiro_sessions_dir`), existing or not."""
    directory = sessions_dir or home.kiro_sessions_dir()
    check_session_id(session_id)
    return SessionFiles(session_id, "flat", directory / f"{session_id}.json", directory / f"{session_id}.jsonl",
                        directory / f"{session_id}.lock")


def v3_files(session_dir: Path) -> SessionFiles:
    """A V3 session's files, from its directory (``<root>/<workspace hash>/<id>``)."""
    session_id = check_session_id(session_dir.name)
    return SessionFiles(session_id, "v3", session_dir / V3_METADATA, session_dir / V3_TRANSCRIPT,
                        session_dir / V3_LOCK, session_dir)


def v3_session_dir(cwd: str, session_id: str, root: Path | None = None) -> Path:
    """Where a new V3 session of workspace ``cwd`` goes."""
    return (root or sessions_root()) / workspace_hash(cwd) / check_session_id(session_id)


def locate(session_id: str, root: Path | None = None) -> SessionFiles | None:
    """The session's files in whichever store holds it (flat first), or None when neither does."""
    root = root or sessions_root()
    flat = flat_files(session_id, root / FLAT_DIR)
    if flat.metadata.is_file() or flat.transcript.is_file():
        return flat
    try:
        workspaces = [d for d in root.iterdir() if d.name != FLAT_DIR and d.is_dir()]
    except OSError:
        return None
    for workspace in workspaces:
        candidate = workspace / session_id
        if (candidate / V3_METADATA).is_file() and not candidate.is_symlink():
            return v3_files(candidate)
    return None


@dataclass(frozen=True)
class SessionPaths:
    """One session's metadata file and transcript, as plain strings, for readers that scan them all.

    ``name`` is the session's place under the sessions root (``cli/<id>``, ``<workspace dir>/<id>``):
    unique there, and what a watcher's :func:`place_of` names too. Strings, not ``Path``: the history
    scans thousands of these, and a ``Path`` per file was half the cost of its scan.
    """

    layout: Literal["flat", "v3"]
    name: str
    session_id: str
    metadata: str
    transcript: str


def session_paths(root: Path | str | None = None) -> Iterator[SessionPaths]:
    """Every flat and V3 session under ``root`` (default :func:`sessions_root`) that has a transcript, by name."""
    top = os.fspath(root or sessions_root())
    yield from flat_session_paths(top)
    for workspace in _entries(top):
        if workspace.name != FLAT_DIR and workspace.is_dir(follow_symlinks=False):
            yield from workspace_session_paths(workspace.path)


def flat_session_paths(top: str) -> Iterator[SessionPaths]:
    """The flat sessions under the sessions root ``top`` that have a transcript."""
    flat = os.path.join(top, FLAT_DIR)
    for entry in _entries(flat):
        if entry.name.endswith(FLAT_TRANSCRIPT_SUFFIX) and entry.is_file(follow_symlinks=False):
            yield _flat(flat, entry.name[:-len(FLAT_TRANSCRIPT_SUFFIX)])


def flat_session(top: str, session_id: str) -> SessionPaths | None:
    """One flat session under the sessions root ``top``, or None when it has no transcript (any more)."""
    flat = os.path.join(top, FLAT_DIR)
    return _flat(flat, session_id) if _regular(os.path.join(flat, session_id + FLAT_TRANSCRIPT_SUFFIX)) else None


def _flat(flat: str, session_id: str) -> SessionPaths:
    return SessionPaths("flat", f"{FLAT_DIR}/{session_id}", session_id,
                        os.path.join(flat, session_id + FLAT_METADATA_SUFFIX),
                        os.path.join(flat, session_id + FLAT_TRANSCRIPT_SUFFIX))


def workspace_session_paths(workspace: str) -> Iterator[SessionPaths]:
    """The V3 sessions in one workspace directory that have a transcript."""
    for folder in _entries(workspace):
        if not folder.name.startswith(".") and folder.is_dir(follow_symlinks=False) \
                and (found := v3_session(folder.path)) is not None:  # .deleting-…: a removal under way
            yield found


def v3_session(directory: str) -> SessionPaths | None:
    """The V3 session in ``directory`` (``<root>/<workspace dir>/<id>``), or None when it has no transcript."""
    transcript = os.path.join(directory, V3_TRANSCRIPT)
    if not _regular(transcript):
        return None
    workspace, session_id = os.path.split(directory)
    return SessionPaths("v3", f"{os.path.basename(workspace)}/{session_id}", session_id,
                        os.path.join(directory, V3_METADATA), transcript)


def session_at(top: str, name: str) -> SessionPaths | None:
    """The session named ``name`` (:attr:`SessionPaths.name`) under the root ``top``; None without a transcript."""
    directory, _, session_id = name.rpartition("/")
    if directory == FLAT_DIR:
        return flat_session(top, session_id)
    return v3_session(os.path.join(top, name))


@dataclass(frozen=True)
class Place:
    """What a changed path under the sessions root concerns (:func:`place_of`).

    ``kind`` ``all``: the root or the flat directory itself (any session may have changed);
    ``workspace``: a V3 workspace directory, ``name`` its directory name (its sessions);
    ``session``: one session, ``name`` its :attr:`SessionPaths.name`, whatever file of it changed (it may
    be gone). ``appeared``: the path was a directory just created (a watcher looks at it twice).
    """

    kind: Literal["all", "workspace", "session"]
    name: str = ""
    appeared: bool = False


def place_of(path: str, top: str) -> Place | None:
    """What a changed ``path`` under the sessions root ``top`` concerns, for a watcher; None for nothing we read."""
    relative = os.path.relpath(path, top)
    if relative == os.curdir:
        return Place("all")
    parts = relative.split(os.sep)
    if parts[0] in (os.pardir, "") or parts[0].startswith("."):
        return None
    if parts[0] == FLAT_DIR:
        if len(parts) == 1:
            return Place("all")
        for suffix in (FLAT_TRANSCRIPT_SUFFIX, FLAT_METADATA_SUFFIX):
            if len(parts) == 2 and parts[1].endswith(suffix) and len(parts[1]) > len(suffix):
                return Place("session", f"{FLAT_DIR}/{parts[1][:-len(suffix)]}")
        return None  # a lock, a history file, a backup: not what the history reads
    if len(parts) == 1:
        return Place("workspace", parts[0])
    if parts[1].startswith("."):  # a session folder renamed aside to be removed (:func:`remove_session`)
        return None
    return Place("session", f"{parts[0]}/{parts[1]}")


def _regular(path: str) -> bool:
    """A regular file itself, not a link to one."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []


@dataclass(frozen=True)
class SessionMeta:
    """What a session's metadata file says, in either layout ("" where it says nothing)."""

    session_id: str
    title: str
    cwd: str
    created_at: str
    updated_at: str
    parent_session_id: str = ""
    created_reason: str = ""


def _text(document: dict[str, Any], key: str) -> str:
    value = document.get(key)
    return value if isinstance(value, str) else ""


def read_meta(files: SessionFiles) -> SessionMeta | None:
    """The session's metadata, or None when its file is absent, oversized or not a JSON object."""
    document = _read_object(files.metadata)
    if document is None:
        return None
    if files.layout == "flat":
        return SessionMeta(_text(document, "session_id") or files.session_id, _text(document, "title"),
                           _text(document, "cwd"), _text(document, "created_at"), _text(document, "updated_at"),
                           _text(document, "parent_session_id"), _text(document, "session_created_reason"))
    paths = document.get("workspacePaths")
    cwd = paths[0] if isinstance(paths, list) and paths and isinstance(paths[0], str) else ""
    return SessionMeta(_text(document, "id") or files.session_id, _text(document, "title"), cwd,
                       _text(document, "createdAt"), _text(document, "lastModifiedAt"))


def _read_object(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_METADATA_BYTES + 1)
    except OSError:
        return None
    if len(data) > _MAX_METADATA_BYTES:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def children(session_id: str, root: Path | None = None) -> list[str]:
    """The flat sessions whose ``parent_session_id`` is ``session_id`` (its sub-agents), sorted.

    A V3 session keeps its sub-agents inside its own directory (``sub-executions/``), so they go with it.
    """
    directory = (root or sessions_root()) / FLAT_DIR
    needle = json.dumps(check_session_id(session_id)).encode()
    found = []
    try:
        candidates = sorted(directory.glob("*.json"))
    except OSError:
        return []
    for path in candidates:
        try:
            with open(path, "rb") as fh:
                raw = fh.read(_MAX_METADATA_BYTES + 1)
        except OSError:
            continue
        if needle not in raw or b"parent_session_id" not in raw:  # most files: no parse at all
            continue
        meta = read_meta(flat_files(path.stem, directory)) if _SESSION_ID.fullmatch(path.stem) else None
        if meta is not None and meta.parent_session_id == session_id and path.stem != session_id:
            found.append(path.stem)
    return found


def session_tree(session_id: str, root: Path | None = None) -> list[str]:
    """``session_id`` and its sub-agents' sessions, transitively, parents before children."""
    tree, frontier = [check_session_id(session_id)], [session_id]
    for _ in range(_MAX_TREE_DEPTH):
        frontier = [child for parent in frontier for child in children(parent, root) if child not in tree]
        if not frontier:
            break
        tree += frontier
    return tree


def lock_path(session_id: str, sessions_dir: Path | None = None) -> Path:
    """The session's lock: ``<sessions dir>/<id>.lock`` when a flat dir is named, else wherever its session is.

    Without ``sessions_dir`` a V3 session's lock is in its directory; an unknown session's would be flat.
    """
    if sessions_dir is not None:
        return flat_files(session_id, sessions_dir).lock
    located = locate(session_id)
    return located.lock if located is not None else flat_files(session_id).lock


@dataclass(frozen=True)
class LockInfo:
    """What a session lock says. ``pid`` is None when the file is unreadable or malformed."""

    path: Path
    exists: bool | None  # None: could not tell (EACCES, I/O error)
    pid: int | None = None
    problem: str = ""


def read_lock(session_id: str, sessions_dir: Path | None = None) -> LockInfo:
    """Read the session's lock (tri-state existence; a bad file is reported, never rewritten)."""
    return read_lock_file(lock_path(session_id, sessions_dir))


def read_lock_file(path: Path) -> LockInfo:
    """Read one lock file (see :func:`read_lock`)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_LOCK_BYTES + 1)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return LockInfo(path, False)
        return LockInfo(path, None, problem=exc.strerror or str(exc))
    if len(data) > _MAX_LOCK_BYTES:
        return LockInfo(path, True, problem="lock file is implausibly large")
    try:
        payload = json.loads(data)
    except ValueError as exc:
        return LockInfo(path, True, problem=f"not JSON: {exc}")
    pid = payload.get("pid") if isinstance(payload, dict) else None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return LockInfo(path, True, problem="no pid in lock file")
    return LockInfo(path, True, pid)


class StaleLockOutcome(enum.Enum):
    """What :func:`remove_stale_lock` did, and why."""

    REMOVED = "removed"  # the owner was dead; the lock is gone
    ABSENT = "absent"  # no lock (already cleaned up)
    OWNER_ALIVE = "owner_alive"  # kept: its pid runs
    UNKNOWN = "unknown"  # kept: lock unreadable/malformed, or liveness unknowable


@dataclass(frozen=True)
class StaleLockResult:
    outcome: StaleLockOutcome
    lock: LockInfo

    def describe(self) -> str:
        pid = f"PID {self.lock.pid}" if self.lock.pid else "an unknown process"
        return {
            StaleLockOutcome.REMOVED: f"removed the stale lock of dead {pid}",
            StaleLockOutcome.ABSENT: "no lock file is left",
            StaleLockOutcome.OWNER_ALIVE: f"the lock's owner, {pid}, is still running",
            StaleLockOutcome.UNKNOWN: f"the lock was kept: {self.lock.problem or 'its owner cannot be checked'}",
        }[self.outcome]


def remove_stale_lock(session_id: str, sessions_dir: Path | None = None) -> StaleLockResult:
    """Remove the session's lock if and only if the pid it names is dead (:func:`remove_stale_lock_file`)."""
    return remove_stale_lock_file(lock_path(session_id, sessions_dir))


def remove_stale_lock_file(path: Path) -> StaleLockResult:
    """Remove the lock at ``path`` if and only if the pid it names is dead.

    A dead owner cannot come back, but a new owner could take the lock while we
    look, so the pid is re-read just before the unlink to narrow that window.
    """
    lock = read_lock_file(path)
    if lock.exists is False:
        return StaleLockResult(StaleLockOutcome.ABSENT, lock)
    if lock.pid is None:
        return StaleLockResult(StaleLockOutcome.UNKNOWN, lock)
    alive = processes.alive(lock.pid)
    if alive is None:
        return StaleLockResult(StaleLockOutcome.UNKNOWN,
                               LockInfo(lock.path, True, lock.pid, "its liveness cannot be read"))
    if alive:
        return StaleLockResult(StaleLockOutcome.OWNER_ALIVE, lock)
    again = read_lock_file(path)
    if again.exists is False:
        return StaleLockResult(StaleLockOutcome.ABSENT, again)
    if again.pid != lock.pid:
        # Rewritten while we looked: someone else owns it now; the caller's retry will see.
        return StaleLockResult(StaleLockOutcome.UNKNOWN, LockInfo(again.path, True, again.pid, "lock changed owner"))
    try:
        os.unlink(lock.path)
    except FileNotFoundError:
        return StaleLockResult(StaleLockOutcome.ABSENT, lock)
    except OSError as exc:
        return StaleLockResult(StaleLockOutcome.UNKNOWN,
                               LockInfo(lock.path, True, lock.pid, f"cannot remove: {exc.strerror or exc}"))
    log.info("removed stale kiro session lock %s (PID %d is dead)", lock.path, lock.pid)
    return StaleLockResult(StaleLockOutcome.REMOVED, lock)


# The files kiro-cli keeps per flat session; the lock goes last, so a crash mid-way leaves it (stale, removable).
SESSION_FILE_SUFFIXES = (".jsonl", ".json", ".history")
#: A repaired transcript's original is kept beside it as ``<transcript>.bak`` (``.bak.2``, … after that).
BACKUP_SUFFIX = ".bak"


def backup_path(transcript: Path, n: int) -> Path:
    """The ``n``-th backup name of ``transcript`` (1: ``<name>.bak``, then ``<name>.bak.<n>``)."""
    return transcript.with_name(transcript.name + (BACKUP_SUFFIX if n == 1 else f"{BACKUP_SUFFIX}.{n}"))


def lock_in_use(path: Path) -> bool:
    """True while the lock at ``path`` names a live pid, or exists with an owner that cannot be checked."""
    lock = read_lock_file(path)
    if lock.exists is False:
        return False
    if lock.pid is None:
        return True
    return processes.alive(lock.pid) is not False


def session_in_use(session_id: str, sessions_dir: Path | None = None) -> bool:
    """True while the session's lock names a live pid, or a lock exists whose owner cannot be checked (keep it)."""
    return lock_in_use(lock_path(session_id, sessions_dir))


def tree_in_use(session_id: str, root: Path | None = None) -> bool:
    """True while the session or any of its sub-agents' sessions is in use (:func:`session_in_use`)."""
    for member in session_tree(session_id, root):
        located = locate(member, root)
        lock = located.lock if located is not None else flat_files(member, (root or sessions_root()) / FLAT_DIR).lock
        if lock_in_use(lock):
            return True
    return False


def remove_session_files(session_id: str, sessions_dir: Path | None = None) -> bool:
    """Remove one flat session's transcript, state and history, then its (stale) lock, under kiro's lock rules.

    Nothing is removed while the lock names a live process (or an owner that cannot be checked):
    returns False then. True once none of the session's files is left.
    """
    files = flat_files(session_id, sessions_dir)
    if lock_in_use(files.lock):
        return False
    backups = list(files.transcript.parent.glob(f"{session_id}.jsonl{BACKUP_SUFFIX}*"))  # they hold prompts too
    for path in [*(files.lock.with_suffix(suffix) for suffix in SESSION_FILE_SUFFIXES), *backups]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    outcome = remove_stale_lock_file(files.lock).outcome
    return outcome in (StaleLockOutcome.REMOVED, StaleLockOutcome.ABSENT)


def remove_session(session_id: str, root: Path | None = None) -> bool:
    """Remove one session in whichever layout holds it; False (nothing removed) while it is in use.

    A V3 session's directory is first renamed aside in its workspace directory, so kiro never sees
    half of it, then removed with everything in it (sub-executions, snapshots, tool outputs).
    """
    root = root or sessions_root()
    located = locate(session_id, root)
    if located is None or located.directory is None:
        return remove_session_files(session_id, root / FLAT_DIR)
    if lock_in_use(located.lock):
        return False
    aside = located.directory.with_name(f".deleting-{located.directory.name}")
    shutil.rmtree(aside, ignore_errors=True)  # left by a removal that was interrupted
    try:
        os.rename(located.directory, aside)
    except FileNotFoundError:
        return True
    shutil.rmtree(aside, ignore_errors=True)
    return not aside.exists()


def remove_session_tree(session_id: str, root: Path | None = None) -> list[str]:
    """Remove the session and its sub-agents' sessions, children first; the ids kept because they are in use."""
    return [member for member in reversed(session_tree(session_id, root)) if not remove_session(member, root)]
