"""Fail a test that writes outside its temporary directories.

Uses a CPython audit hook (``open``, ``os.mkdir``, ``os.rename``…), so it sees
writes made by any library in the test process, not only ours. Child processes
are not watched; they inherit the isolated HOME instead.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# event -> ((index of a path argument, index of its dir_fd argument or None), ...)
_PATH_EVENTS: dict[str, tuple[tuple[int, int | None], ...]] = {
    "os.mkdir": ((0, 2),),
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.rename": ((0, 2), (1, 3)),
    "os.replace": ((0, 2), (1, 3)),
    "os.symlink": ((1, 2),),
    "os.link": ((1, 3),),
    "os.chmod": ((0, 2),),
    "os.truncate": ((0, None),),
    "shutil.rmtree": ((0, 1),),
    "sqlite3.connect": ((0, None),),
}
_ALWAYS_ALLOWED = ("/dev/", "/proc/")


class WriteGuard:
    """Records writes outside the allowed roots while armed."""

    def __init__(self) -> None:
        self.allowed: tuple[str, ...] = ()
        self.violations: list[str] = []
        self.armed = False
        self._local = threading.local()

    def arm(self, *roots: Path) -> None:
        base = [os.path.realpath(tempfile.gettempdir())]
        self.allowed = tuple(os.path.realpath(r) for r in roots) + tuple(base)
        self.violations = []
        self.armed = True

    def disarm(self) -> list[str]:
        self.armed = False
        return self.violations

    def _allowed(self, path: object, dir_fd: object = None) -> bool:
        if isinstance(path, int):
            return True  # a file descriptor: opened already, checked then
        try:
            text = os.fsdecode(path)  # type: ignore[arg-type]
        except TypeError:
            return True
        if text in ("", ":memory:") or text.startswith("file::memory:"):
            return True
        if text.startswith("file:"):  # an SQLite URI: read-only opens write nothing, else judge its path
            from urllib.parse import parse_qs, unquote, urlsplit

            uri = urlsplit(text)
            if parse_qs(uri.query).get("mode") == ["ro"]:
                return True
            text = unquote(uri.path)
        if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(text):
            try:  # relative to an open directory (shutil.rmtree, pytest's tmp cleanup)
                text = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), text)
            except OSError:
                return True  # cannot tell where; do not accuse
        real = os.path.realpath(text)
        if real.startswith(_ALWAYS_ALLOWED) or "__pycache__" in real:
            return True
        return any(real == root or real.startswith(root + os.sep) for root in self.allowed)

    def _record(self, event: str, path: object) -> None:
        self.violations.append(f"{event} {os.fsdecode(path)!s}")  # type: ignore[arg-type]

    def hook(self, event: str, args: tuple[object, ...]) -> None:
        if not self.armed or getattr(self._local, "busy", False):
            return
        self._local.busy = True
        try:
            if event == "open":
                path, mode, flags = (tuple(args) + (None, None))[:3]
                writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                    isinstance(flags, int) and flags & _WRITE_FLAGS
                )
                if writing and not self._allowed(path):
                    self._record(event, path)
                return
            where = _PATH_EVENTS.get(event)
            if where is None:
                return
            for index, fd_index in where:
                dir_fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
                if index < len(args) and not self._allowed(args[index], dir_fd):
                    self._record(event, args[index])
        finally:
            self._local.busy = False


GUARD = WriteGuard()
_installed = False


def install() -> WriteGuard:
    """Install the audit hook once per process (audit hooks cannot be removed)."""
    global _installed
    if not _installed:
        sys.addaudithook(GUARD.hook)
        _installed = True
    return GUARD
