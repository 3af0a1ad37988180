"""Images in kiro-cli sessions: downscaled before they are sent, counted, and repaired when a session broke.

kiro-cli keeps every image of a session inline (base64) in its transcript and replays them all
with each request. Its backend refuses a request holding an image over 2000 px on a side or more
than 100 inline images, so one such image breaks the session for good. We therefore downscale
anything over :data:`MAX_SIDE` before it is sent, refuse the send that would bring a session to
:data:`SESSION_IMAGE_LIMIT`, and ``repair`` mends a session that broke anyway: it downscales,
keeps the newest :data:`KEEP_ON_REPAIR` images, and keeps the original as ``<file>.bak``.

An inline image is a ``{"data": <base64>, "mimeType": "image/…"}`` object (kiro's ``images``
entries) or a ``data:image/…;base64,`` string. Pillow is imported only when pixels are read.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_core.jsonfile import write_bytes_atomic
from kirocrew_core.kiro_sessions import SessionFiles, backup_path

#: The longest side an image keeps (kiro's backend refuses more than 2000 px).
MAX_SIDE = 1900
#: kiro's backend refuses a request replaying more than 100 inline images; a send that would make the 100th is refused.
SESSION_IMAGE_LIMIT = 100
#: What a repair keeps: room for the turns after it, as the repair tools for real sessions do.
KEEP_ON_REPAIR = 80
NOTE = "[image removed by kirocrew conversations repair: the session held too many inline images]"
# Formats Pillow writes back as they were read; others are saved as PNG (lossless).
_KEEP_FORMAT = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
# Marks a removed list entry until the walk is over.
_GONE: Any = object()
# A transcript bigger than this is not read whole (kiro-cli's own readers stop at 100 MB too).
MAX_TRANSCRIPT_BYTES = 512 * 1024 * 1024


# How kiro's backend words the two refusals (as the repair tools for real sessions quote them).
_MEDIA_REFUSALS = ("inline media segments", "image dimensions exceed")


def is_media_refusal(text: str) -> bool:
    """True when kiro refused a request for the images its session holds (too many, or too large)."""
    lowered = text.lower()
    return any(phrase in lowered for phrase in _MEDIA_REFUSALS)


def downscale(data: bytes, mime_type: str) -> tuple[bytes, str]:
    """``(data, mime_type)`` with the longest side at most :data:`MAX_SIDE`; unchanged when it already is.

    An image Pillow cannot read is returned unchanged: the size check in ``_read_image`` has
    already accepted its format, and kiro reports what it makes of it.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as picture:
            if max(picture.size) <= MAX_SIDE:
                return data, mime_type
            fmt = picture.format if picture.format in _KEEP_FORMAT else "PNG"
            picture.thumbnail((MAX_SIDE, MAX_SIDE))
            scaled = picture.convert("RGB") if fmt == "JPEG" and picture.mode not in ("RGB", "L") else picture
            out = io.BytesIO()
            scaled.save(out, format=fmt)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return data, mime_type
    return out.getvalue(), _KEEP_FORMAT[fmt]


def _is_image_object(value: Any) -> bool:
    return (isinstance(value, dict) and isinstance(value.get("data"), str)
            and isinstance(value.get("mimeType"), str) and value["mimeType"].startswith("image/"))


def _is_data_uri(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("data:image/") and ";base64," in value[:100]


def _segments(node: Any) -> Iterator[tuple[Any, Any]]:
    """``(container, key)`` of each inline image under ``node``, in document order."""
    if isinstance(node, dict):
        items: Iterator[tuple[Any, Any]] = iter(node.items())
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for key, value in items:
        if _is_image_object(value) or _is_data_uri(value):
            yield node, key
        else:
            yield from _segments(value)


def _read_lines(path: Path) -> list[str]:
    if path.stat().st_size > MAX_TRANSCRIPT_BYTES:
        raise OSError(f"{path.name} is too large to read")
    return path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()


def _parsed(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None  # a torn line is kept as it is


def count_images(files: SessionFiles) -> int:
    """How many inline images the session's own transcript holds (what every request replays)."""
    try:
        lines = _read_lines(files.transcript)
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines if "image" in line for _ in _segments(_parsed(line)))


@dataclass
class RepairReport:
    """What :func:`repair` did, per session (all transcripts together)."""

    images: int = 0
    downscaled: int = 0
    removed: int = 0
    backups: list[str] = field(default_factory=list)  # file names, next to the transcripts

    def as_dict(self) -> dict[str, Any]:
        return {"images": self.images, "downscaled": self.downscaled, "removed": self.removed,
                "backups": list(self.backups)}


def repair(files: SessionFiles) -> RepairReport:
    """Downscale and trim every transcript of the session; each changed file keeps its original as a backup.

    The caller has made sure no process holds the session (its lock) and no worker of ours hosts it.
    """
    report = RepairReport()
    for path in files.transcripts():
        try:
            lines = _read_lines(path)
        except FileNotFoundError:
            continue
        documents = [_parsed(line) for line in lines]
        total = sum(1 for doc in documents for _ in _segments(doc))
        report.images += total
        drop = max(0, total - KEEP_ON_REPAIR)
        changed = False
        seen = 0
        for index, doc in enumerate(documents):
            touched = False
            for container, key in list(_segments(doc)):
                seen += 1
                if seen <= drop:
                    _remove(container, key)
                    report.removed += 1
                    touched = True
                elif _downscale_in_place(container, key):
                    report.downscaled += 1
                    touched = True
            if touched:
                _drop_empty_image_lists(doc)
                lines[index] = json.dumps(doc, ensure_ascii=False)
                changed = True
        if changed:
            report.backups.append(_backup(path).name)
            write_bytes_atomic(path, ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    return report


def _remove(container: Any, key: Any) -> None:
    """An image object leaves its list (or its key becomes the note); a data URI becomes the note."""
    if isinstance(container, list) and _is_image_object(container[key]):
        container[key] = _GONE  # taken out after the walk, so indices stay valid meanwhile
    else:
        container[key] = NOTE


def _drop_empty_image_lists(node: Any) -> None:
    if isinstance(node, dict):
        for key in list(node):
            value = node[key]
            if isinstance(value, list) and any(item is _GONE for item in value):
                kept = [item for item in value if item is not _GONE]
                if kept:
                    node[key] = kept
                else:
                    del node[key]  # kiro omits an empty images list
            else:
                _drop_empty_image_lists(value)
    elif isinstance(node, list):
        for value in node:
            _drop_empty_image_lists(value)


def _downscale_in_place(container: Any, key: Any) -> bool:
    value = container[key]
    if isinstance(value, dict):
        raw, mime = value["data"], value["mimeType"]
        prefix = ""
    else:
        head, raw = value.split(",", 1)
        prefix, mime = head + ",", head[5:].split(";", 1)[0]
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        return False
    smaller, new_mime = downscale(data, mime)
    if smaller is data:
        return False
    encoded = base64.b64encode(smaller).decode()
    if isinstance(value, dict):
        container[key] = {**value, "data": encoded, "mimeType": new_mime}
    else:
        container[key] = f"data:{new_mime};base64,{encoded}" if prefix else encoded
    return True


def _backup(path: Path) -> Path:
    """A new ``<file>.bak`` (``.bak.2``, ``.bak.3``… when one exists: an earlier backup is never replaced).

    A hard link to the original: the transcript is then replaced by a rename, so the backup is the
    untouched original file. Where links are not possible, a complete copy is renamed into place.
    """
    for n in range(1, 1000):
        backup = backup_path(path, n)
        try:
            os.link(path, backup)
            return backup
        except FileExistsError:
            continue
        except OSError:  # no hard links here: a complete copy, renamed into place
            if backup.exists():
                continue
            partial = backup.with_name(backup.name + ".part")
            partial.write_bytes(path.read_bytes())
            os.replace(partial, backup)
            return backup
    raise OSError(f"too many backups of {path.name}")
