"""JSON files read with three honest answers and written atomically.

A read says *absent*, *empty*, *document*, *malformed* or *unreadable*; it never
turns "could not read" into "empty", because a caller that then rewrites the
file would clobber a document it simply failed to see. Writes go to a temp file
in the same directory, are fsynced, and replace the target with ``os.replace``,
so a reader sees the old file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import enum
import glob
import json
import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kirocrew_core.errors import MalformedFileError, UnreadableFileError

# A writer killed between mkstemp and os.replace leaves its temp file behind; one
# older than this cannot belong to a write still in flight, so the next write sweeps it.
STALE_TEMP_SECS = 3600.0

# A user's MCP or agent file is a few KiB; anything this big is not one of ours.
MAX_JSON_BYTES = 16 * 1024 * 1024
SECRET_FILE_MODE = 0o600


class ReadState(enum.Enum):
    ABSENT = "absent"
    EMPTY = "empty"
    DOCUMENT = "document"
    MALFORMED = "malformed"
    UNREADABLE = "unreadable"


@dataclass(frozen=True)
class JsonRead:
    """The outcome of :func:`read_json`. ``document`` is set only for ``DOCUMENT``."""

    path: Path
    state: ReadState
    document: Any = None
    error: str = ""
    line: int | None = None

    @property
    def known(self) -> bool:
        """True when the content is known (absent, empty or a document)."""
        return self.state in (ReadState.ABSENT, ReadState.EMPTY, ReadState.DOCUMENT)

    def object_or_empty(self) -> dict[str, Any]:
        """The document as a dict, ``{}`` for absent/empty; raise for anything unknowable.

        Raises :class:`MalformedFileError` for malformed JSON or a non-object
        document and :class:`UnreadableFileError` when the file could not be read.
        """
        if self.state is ReadState.UNREADABLE:
            raise UnreadableFileError(f"{self.path}: {self.error}")
        if self.state is ReadState.MALFORMED:
            raise MalformedFileError(self.path, self.error, line=self.line)
        if self.state is not ReadState.DOCUMENT:
            return {}
        if not isinstance(self.document, dict):
            raise MalformedFileError(self.path, "expected a JSON object at the top level")
        return self.document


def read_json(path: str | os.PathLike[str], *, max_bytes: int = MAX_JSON_BYTES) -> JsonRead:
    """Read a JSON file without ever guessing: see :class:`ReadState`."""
    p = Path(path)
    try:
        # O_NONBLOCK: a FIFO at the path must not hang the read until some writer shows up.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):  # a file where a folder should be: no document
        return JsonRead(p, ReadState.ABSENT)
    except OSError as exc:
        return JsonRead(p, ReadState.UNREADABLE, error=exc.strerror or str(exc))
    try:
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            return JsonRead(p, ReadState.UNREADABLE, error="is a directory")
        if not stat.S_ISREG(kind):
            return JsonRead(p, ReadState.UNREADABLE, error="not a regular file")
        with open(fd, "rb", closefd=False) as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        return JsonRead(p, ReadState.UNREADABLE, error=exc.strerror or str(exc))
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        return JsonRead(p, ReadState.MALFORMED, error=f"larger than {max_bytes} bytes")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return JsonRead(p, ReadState.MALFORMED, error=f"not UTF-8: {exc.reason}")
    if not text.strip():
        return JsonRead(p, ReadState.EMPTY)
    try:
        return JsonRead(p, ReadState.DOCUMENT, document=json.loads(text))
    except json.JSONDecodeError as exc:
        return JsonRead(p, ReadState.MALFORMED, error=exc.msg, line=exc.lineno)
    except RecursionError:
        return JsonRead(p, ReadState.MALFORMED, error="nested too deeply")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse directory fsync; the replace is still atomic
    finally:
        os.close(fd)


def _create_temp(target: Path, mode: int) -> tuple[int, str]:
    """A new, exclusive temp file next to ``target``, created with ``mode`` (umask applies)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    while True:
        name = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(name, flags, mode), name
        except FileExistsError:
            continue


def write_bytes_atomic(
    path: str | os.PathLike[str], data: bytes, *, secret: bool = False, mode: int | None = None
) -> Path:
    """Replace ``path`` with ``data`` atomically; return the path written.

    The mode of an existing file is kept; a new file gets ``mode``, or 0600 when
    ``secret``, else the umask default. A secret file is always forced to 0600.
    A symlinked target is written through (the link's target is replaced), so a
    dotfile managed as a link stays a link.
    """
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        existing_mode: int | None = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        existing_mode = None
    if secret:
        final_mode: int | None = SECRET_FILE_MODE
    elif existing_mode is not None:
        final_mode = existing_mode
    else:
        final_mode = mode  # None: let the kernel apply the umask at creation
    # Never flip the process umask to learn it: another thread creating a file meanwhile
    # would get a world-writable one. Creating with 0666 applies it for us instead.
    fd, tmp_name = _create_temp(target, 0o666 if final_mode is None else SECRET_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if final_mode is not None:
            os.chmod(tmp_name, final_mode)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(target.parent)
    _sweep_stale_temps(target)
    return target


def _sweep_stale_temps(target: Path) -> None:
    """Remove temp files of earlier writes of ``target`` that were killed mid-write."""
    cutoff = time.time() - STALE_TEMP_SECS
    try:
        candidates = list(target.parent.glob(f".{glob.escape(target.name)}.*.tmp"))
    except OSError:
        return
    for leftover in candidates:
        try:
            if leftover.is_file() and not leftover.is_symlink() and leftover.stat().st_mtime < cutoff:
                leftover.unlink()
        except OSError:
            continue  # racing another sweeper, or not ours to remove: leave it



def dumps(document: Any, *, indent: int | None = 2) -> str:
    """Serialize the way every kirocrew JSON file is written (stable, UTF-8, newline-terminated)."""
    return json.dumps(document, indent=indent, ensure_ascii=False) + "\n"


def write_json_atomic(
    path: str | os.PathLike[str], document: Any, *, secret: bool = False, mode: int | None = None
) -> Path:
    """Serialize ``document`` and replace ``path`` atomically (see :func:`write_bytes_atomic`)."""
    return write_bytes_atomic(path, dumps(document).encode("utf-8"), secret=secret, mode=mode)
