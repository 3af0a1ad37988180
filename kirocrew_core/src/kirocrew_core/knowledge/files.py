"""A source's files, read safely: what a folder holds and each file's text, or why it was skipped.

Nothing is followed: a symlink is skipped (one pointing out of the source says so), a file is opened
with ``O_NOFOLLOW | O_NONBLOCK`` and must then be a regular file (a FIFO never blocks the reader),
at most :data:`MAX_FILE_BYTES`, without NUL bytes and valid UTF-8. A PDF (up to :data:`MAX_PDF_BYTES`)
is hashed here and its text extracted only when asked (:meth:`Content.text`), in a child process held
to hard limits (:mod:`.pdf`): a file whose hash did not change is never parsed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import html.parser
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_BYTES = 5 * 1024 * 1024
#: A PDF is streamed through the hash and parsed by a child process, not held in the host: a larger cap.
MAX_PDF_BYTES = 200 * 1024 * 1024
#: Files a folder source holds beyond this are not read (a reason is recorded once).
MAX_FILES = 20_000
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", ".tox"})


@dataclass(frozen=True)
class Entry:
    """A regular file of a source (by ``lstat``): where it is, its name relative to the source, size and mtime."""

    path: Path
    name: str
    size: int
    mtime_ns: int


class Skipped(Exception):
    """A file not read, with the reason recorded for the owner.

    ``unknowable``: it could not be looked at (an error opening or listing it), which says nothing about
    what it holds now, so what was read of it before is kept; otherwise what it holds was seen and refused.
    """

    def __init__(self, reason: str, *, unknowable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unknowable = unknowable


@dataclass
class Walk:
    """A source's regular files, the skipped ones' reasons, and whether every file was seen (``complete``)."""

    entries: list[Entry]
    skipped: dict[str, str]
    complete: bool = True


def walk(root: Path) -> Walk:
    """The regular files under ``root`` (a folder, or one file) and the skipped ones' reasons, by relative name.

    Incomplete when a folder could not be listed or there were more than :data:`MAX_FILES` files: then
    no file unseen may be taken for gone.
    """
    found = Walk([], {})
    try:
        top = os.lstat(root)
    except OSError as exc:
        raise Skipped(f"cannot be read: {exc.strerror}", unknowable=True) from exc
    if stat.S_ISREG(top.st_mode):
        found.entries.append(Entry(root, root.name, top.st_size, top.st_mtime_ns))
        return found
    if not stat.S_ISDIR(top.st_mode):
        raise Skipped("not a regular file or folder")
    for entry in _scan(root, root, found):
        if len(found.entries) >= MAX_FILES:
            found.skipped["…"] = f"more than {MAX_FILES} files: the rest are not read"
            found.complete = False
            break
        found.entries.append(entry)
    return found


def _scan(root: Path, folder: Path, found: Walk) -> Iterator[Entry]:
    skipped = found.skipped
    try:
        listing = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        skipped[str(folder.relative_to(root)) or "."] = f"cannot be listed: {exc.strerror}"
        found.complete = False
        return
    for item in listing:
        path = Path(item.path)
        name = str(path.relative_to(root))
        if item.is_symlink():
            skipped[name] = "symlink leading out of the source" if _outside(root, path) else "symlink (not followed)"
        elif item.is_dir(follow_symlinks=False):
            if item.name not in SKIPPED_DIRS:
                yield from _scan(root, path, found)
        elif item.is_file(follow_symlinks=False):
            info = item.stat(follow_symlinks=False)
            yield Entry(path, name, info.st_size, info.st_mtime_ns)
        else:
            skipped[name] = "not a regular file (FIFO, socket or device)"


def _outside(root: Path, link: Path) -> bool:
    try:
        target = link.resolve()
    except (OSError, RuntimeError):
        return True
    return not target.is_relative_to(root.resolve())


@contextlib.contextmanager
def opened(entry: Entry) -> Iterator[Content]:
    """The file, opened without following anything and hashed; :class:`Skipped` when it must not be read."""
    limit = MAX_PDF_BYTES if _is_pdf(entry) else MAX_FILE_BYTES
    if entry.size > limit:
        raise Skipped(_too_large(limit))
    try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise Skipped(f"cannot be opened: {exc.strerror}", unknowable=True) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Skipped("not a regular file (FIFO, socket or device)")
        yield Content(entry, fd, limit)
    finally:
        os.close(fd)


class Content:
    """An opened file's content hash (``sha256``) and, on demand, its text (:meth:`text`)."""

    def __init__(self, entry: Entry, fd: int, limit: int) -> None:
        self.entry = entry
        self._fd = fd
        self._data = b""
        hashed = hashlib.sha256()
        size = 0
        while block := os.read(fd, 1024 * 1024 if _is_pdf(entry) else limit + 1 - size):
            size += len(block)
            if size > limit:
                raise Skipped(_too_large(limit))
            hashed.update(block)
            if not _is_pdf(entry):
                self._data += block
        self.sha256 = hashed.hexdigest()

    def text(self) -> str:
        """The file's text (HTML as its visible text, a PDF's pages), or :class:`Skipped` with why."""
        if _is_pdf(self.entry):
            from kirocrew_core.knowledge import pdf

            return pdf.extract(self._fd, self.sha256)
        data = self._data
        if b"\0" in data[:8192]:
            raise Skipped("binary (holds NUL bytes)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Skipped(f"not valid UTF-8 (byte {exc.start})") from exc
        if self.entry.path.suffix.lower() in (".html", ".htm"):
            text = html_text(text)
        return text


def _is_pdf(entry: Entry) -> bool:
    return entry.path.suffix.lower() == ".pdf"


def _too_large(limit: int) -> str:
    return f"larger than {limit // (1024 * 1024)} MiB"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Text(html.parser.HTMLParser):
    _HIDDEN = frozenset({"script", "style", "template", "title"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self._hidden += 1
        elif len(tag) == 2 and tag[0] == "h" and tag[1].isdigit():
            self.parts.append("\n" + "#" * int(tag[1]) + " ")
        elif tag in ("p", "br", "li", "div", "tr", "pre"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN:
            self._hidden = max(0, self._hidden - 1)
        elif len(tag) == 2 and tag[0] == "h" and tag[1].isdigit():
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def html_text(source: str) -> str:
    """An HTML page's visible text, its headings as Markdown headings (so sections are found the same way)."""
    parser = _Text()
    parser.feed(source)
    parser.close()
    return "".join(parser.parts)
