"""What ``file_send`` may deliver, and the owner-only outbox it copies into.

A session sends a file of its own workspace, and only one that is safe to put in front of the owner
or on a channel. Refusals, each with its code, checked in this order (nothing is copied on any):

- ``bad_path``: not an absolute path, or a NUL in it;
- ``path_outside_workspace``: it does not resolve (symlinks followed) inside the session's workspace,
  or the session has none (``no_workspace``);
- ``path_sensitive``: it lies in what kirocrew protects (every plugin's ``protected_paths()``: the crew
  home, tokens, OAuth grants), in a credential folder (``.ssh``, ``.aws``, ``.gnupg``, ...), in ``.git``,
  or its name is a credential's (``.env``, ``id_rsa``, ``*.pem``, a name holding ``secret``, ``token``...);
- ``file_not_found``, ``not_a_file``: nothing there, or a folder, device or fifo;
- ``file_too_large``: over :data:`FILE_MAX_BYTES`;
- ``file_kind_refused``: a binary that is not audio, video, a raster image or a PDF, judged by its
  content (magic bytes), not its name; SVG is refused too (it can carry script);
- ``file_flagged``: text that holds a secret (what :func:`~kirocrew_core.redaction.redact_secrets`
  would remove), unless the owner approved that exact content (``kirocrew messages approve SHA256``;
  the refusal names the digest).

The copy is written atomically, 0600, into ``<crew home>/state/messages/outbox`` (0700), named
``<message id>-<file name>``; the gateway serves it to the owner only, as a download.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from kirocrew_core import home
from kirocrew_core.errors import BadInputError

#: The largest file ``file_send`` delivers.
FILE_MAX_BYTES = 25 * 1024 * 1024
PATH_MAX_CHARS = 4096
#: Folders under any directory that hold credentials (the sandbox keeps the same ones read-only).
CREDENTIAL_DIRS = (".ssh", ".aws", ".gnupg", ".docker", ".kube", ".azure", ".gcloud", ".password-store", ".git")
CREDENTIAL_PAIRS = ((".config", "gh"), (".config", "gcloud"))
#: File names that are credentials whatever their content.
CREDENTIAL_NAMES = re.compile(
    r"^(\.env(\..*)?|\.envrc|\.netrc|_netrc|\.git-credentials|\.npmrc|\.pypirc|\.pgpass|credentials(\..*)?"
    r"|id_(rsa|dsa|ecdsa|ed25519)(_sk)?(\.pub)?|known_hosts|authorized_keys|.*\.(pem|key|p12|pfx|jks|keystore|kdbx"
    r"|ovpn|gpg|asc))$", re.IGNORECASE)
#: Words that make a file name a secret's wherever they stand as a word (``db_password.txt``, ``api-key``).
SECRET_WORDS = re.compile(r"(^|[_.-])(secrets?|passwords?|passwd|credentials?|private[_-]?keys?|api[_-]?keys?"
                          r"|tokens?)([_.-]|$)", re.IGNORECASE)
OUTBOX_NAME_PATTERN = r"^m[0-9a-f]{16}-[A-Za-z0-9._-]{1,100}$"
_OUTBOX_NAME = re.compile(OUTBOX_NAME_PATTERN)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# Bytes no text file holds (tab, newlines, form feed and ESC, for coloured logs, are text).
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")

# Content signatures of what may be sent (offset, bytes, kind).
_SIGNATURES: tuple[tuple[int, bytes, str], ...] = (
    (0, b"%PDF-", "pdf"),
    (0, b"\x89PNG\r\n\x1a\n", "image"),
    (0, b"\xff\xd8\xff", "image"),
    (0, b"GIF87a", "image"),
    (0, b"GIF89a", "image"),
    (0, b"BM", "image"),
    (0, b"II*\x00", "image"),
    (0, b"MM\x00*", "image"),
    (0, b"ID3", "audio"),
    (0, b"\xff\xfb", "audio"),
    (0, b"\xff\xf3", "audio"),
    (0, b"fLaC", "audio"),
    (0, b"OggS", "audio"),
    (0, b"\x1aE\xdf\xa3", "video"),  # Matroska / WebM
    (4, b"ftyp", "video"),  # MP4, MOV, M4A
)


@dataclass(frozen=True)
class Checked:
    """A file that passed every check: its content, its kind and digest, and the name it is sent under."""

    source: Path
    name: str
    data: bytes
    kind: str
    digest: str


def outbox_dir() -> Path:
    return home.state_dir("messages") / "outbox"


def _refuse(message: str, code: str) -> BadInputError:
    return BadInputError(message, code=code)


def sensitive(path: Path, protected: list[Path]) -> str | None:
    """Why ``path`` (resolved) is sensitive, or None."""
    for root in protected:
        if path == root or path.is_relative_to(root):
            return "it is one of kirocrew's protected files"
    parts = path.parts
    for part in parts[:-1]:
        if part in CREDENTIAL_DIRS:
            return f"it is inside a {part} folder"
    for first, second in zip(parts, parts[1:], strict=False):
        if (first, second) in CREDENTIAL_PAIRS:
            return f"it is inside {first}/{second}"
    if CREDENTIAL_NAMES.match(path.name) or SECRET_WORDS.search(path.name):
        return "its name is a credential's"
    return None


def kind_of(data: bytes) -> str | None:
    """``pdf``, ``image``, ``audio``, ``video`` or ``text`` by content; None for any other binary (and SVG)."""
    for offset, magic, kind in _SIGNATURES:
        if data[offset:offset + len(magic)] == magic:
            return kind
    if data[:4] == b"RIFF" and data[8:12] in (b"WAVE", b"AVI ", b"WEBP"):
        return {b"WAVE": "audio", b"AVI ": "video", b"WEBP": "image"}[data[8:12]]
    if _CONTROL_BYTES.search(data[:65536]):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if re.search(r"<svg[\s>]", text[:4096], re.IGNORECASE):
        return None  # an SVG is an image that can carry script
    return "text"


def _protected_roots() -> list[Path]:
    from kirocrew_core.gate.protections import all_protected_paths

    paths, problems = all_protected_paths()
    if problems:  # fail closed: without the full fence, nothing leaves
        raise _refuse("kirocrew cannot tell which files are protected right now (a plugin failed), so no file "
                      "is sent", "path_sensitive")
    return [Path(os.path.realpath(p.path)) for p in paths]


def check(raw_path: object, workspace: str | None) -> Checked:
    """Every refusal of the module's text, in order (blocking); the file's content when it passes."""
    if not isinstance(raw_path, str) or not raw_path or len(raw_path) > PATH_MAX_CHARS or "\x00" in raw_path \
            or not os.path.isabs(raw_path):
        raise _refuse("path must be an absolute path of a file in your workspace", "bad_path")
    if not workspace:
        raise _refuse("this session has no workspace, so it has no files it may send", "no_workspace")
    root = Path(os.path.realpath(workspace))
    path = Path(os.path.realpath(raw_path))
    if not path.is_relative_to(root) or path == root:
        raise _refuse("path is not a file of this session's workspace (symlinks are followed to decide)",
                      "path_outside_workspace")
    why = sensitive(path, _protected_roots())
    if why:
        raise _refuse(f"{path.name} is not sent: {why}", "path_sensitive")
    data = _read(path)
    kind = kind_of(data)
    if kind is None:
        raise _refuse(f"{path.name} is a kind of file file_send does not deliver (only text, PDF, raster images, "
                      "audio and video, judged by content; SVG is refused)", "file_kind_refused")
    digest = hashlib.sha256(data).hexdigest()
    if kind == "text":
        from kirocrew_core.messages import store
        from kirocrew_core.redaction import redact_secrets

        text = data.decode("utf-8")
        if redact_secrets(text) != text and not store.is_approved(digest):
            raise _refuse(f"{path.name} looks like it holds a secret, so it is not sent; the owner may let this "
                          f"exact content through with `kirocrew messages approve {digest}`", "file_flagged")
    return Checked(path, _safe_name(path.name), data, kind, digest)


def _read(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise _refuse(f"{path.name} does not exist", "file_not_found") from None
    except OSError as exc:
        raise _refuse(f"{path.name} cannot be read ({exc.strerror})", "not_a_file") from None
    opened = _opened_path(fd)
    if opened is not None and opened != path:  # a folder on the way was swapped for a link since it was resolved
        os.close(fd)
        raise _refuse(f"{path.name} moved while it was checked; nothing was sent", "path_outside_workspace")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _refuse(f"{path.name} is not a regular file", "not_a_file")
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > FILE_MAX_BYTES:
            raise _refuse(f"{path.name} is {info.st_size} bytes; file_send delivers at most {FILE_MAX_BYTES}",
                          "file_too_large")
        data = fh.read(FILE_MAX_BYTES + 1)
    if len(data) > FILE_MAX_BYTES:
        raise _refuse(f"{path.name} grew past {FILE_MAX_BYTES} bytes while it was read", "file_too_large")
    return data


def _opened_path(fd: int) -> Path | None:
    """What the kernel says ``fd`` is (Linux's ``/proc/self/fd``), or None where it cannot say."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


def _safe_name(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")[:100]
    return safe or "file"


def store_copy(message_id: str, checked: Checked) -> Path:
    """Copy the checked content into the outbox atomically (0600 in a 0700 folder); its path."""
    from kirocrew_core.jsonfile import write_bytes_atomic

    home.ensure_crew_home()
    folder = outbox_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    return write_bytes_atomic(folder / f"{message_id}-{checked.name}", checked.data, secret=True)


def outbox_file(name: str) -> Path:
    """The outbox file ``name`` (checked: no folders, no dot files); ``outbox_file_not_found`` when absent."""
    if not isinstance(name, str) or not _OUTBOX_NAME.match(name):
        raise _refuse("no such outbox file", "outbox_file_not_found")
    path = outbox_dir() / name
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        raise _refuse("no such outbox file (deleted with its message?)", "outbox_file_not_found") from None
    if not stat.S_ISREG(info.st_mode):
        raise _refuse("no such outbox file", "outbox_file_not_found")
    return path


def shown_name(copy: Path) -> str:
    """The name an outbox copy is shown and downloaded under: the file's own, without the message id."""
    return copy.name.split("-", 1)[1] if _OUTBOX_NAME.match(copy.name) else copy.name


def remove_copy(name: str | None) -> None:
    if name:
        with contextlib.suppress(BadInputError, FileNotFoundError):
            outbox_file(name).unlink()
