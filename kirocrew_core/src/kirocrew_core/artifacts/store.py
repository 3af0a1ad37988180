"""The artifact library on disk: one folder per artifact, written only by the host (and the owner's CLI).

Layout under :func:`kirocrew_core.home.artifacts_dir`::

    <slug>/meta.json        everything but the content: name, kind, source, provenance, version, events
    <slug>/current.html     the live content (every kind; the name is the original's)
    <slug>/versions/vN.html the content of each snapshot, the newest MAX_VERSIONS kept
    <slug>/comments.json    the review comments, a JSON list
    folders.json            the folder tree (:mod:`.folders`)

Every change happens under the ``artifacts`` lock and every file is replaced atomically
(:func:`kirocrew_core.jsonfile.write_bytes_atomic`), content first and ``meta.json`` last, so a
reader never sees a version number whose content is not on disk and two writers of one artifact
both land, one version after the other. Who may see and change what is :mod:`.access`'s rule;
this module checks it on every call with the :class:`~.access.Actor` it is given.

Caps: :data:`MAX_VERSIONS` snapshots (the oldest files are pruned, numbers keep counting),
:data:`MAX_EVENTS` events (oldest dropped), :data:`MAX_COMMENTS` comments (the oldest whole
threads dropped), :data:`~.names.CONTENT_MAX_BYTES` of content (refused before anything is written).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.artifacts import names
from kirocrew_core.artifacts.access import Actor, may_delete, may_see
from kirocrew_core.errors import BadInputError, ConflictError, KirocrewError, MalformedFileError
from kirocrew_core.jsonfile import ReadState, read_json, write_bytes_atomic, write_json_atomic

MAX_VERSIONS = 50
MAX_EVENTS = 500
MAX_COMMENTS = 500
CONTENT_FILE = "current.html"
META_FILE = "meta.json"
COMMENTS_FILE = "comments.json"
VERSIONS_DIR = "versions"
LOCK = "artifacts"
STATUSES = ("open", "review", "resolved")
COMMENT_SCOPES = ("private", "shared")
_VERSION_FILE = re.compile(r"^v[0-9]{1,9}\.html$")
#: ``meta.json`` and ``comments.json`` are small; a bigger one is not ours.
_META_MAX_BYTES = 4 * 1024 * 1024
_COMMENTS_MAX_BYTES = 64 * 1024 * 1024


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def root() -> Path:
    return home.artifacts_dir()


@contextmanager
def locked() -> Iterator[None]:
    from kirocrew_core.locks import named_lock

    with named_lock(LOCK):
        yield


def not_found(slug: str) -> BadInputError:
    """The same answer for an artifact that does not exist and one the caller may not see."""
    return BadInputError(f"no artifact {slug}", code="artifact_not_found")


@dataclass(frozen=True)
class NewArtifact:
    """A checked ``artifact_save``: everything but provenance, which comes from the :class:`Actor`."""

    name: str
    content: str
    kind: str
    slug: str | None = None
    description: str = ""
    tags: tuple[str, ...] = ()
    folder: str | None = None
    shared: bool = False
    claimed_source: str | None = None


@dataclass
class Saved:
    meta: dict[str, Any]
    hints: list[str]


# --- files ------------------------------------------------------------------------------------------


def _dir(slug: str) -> Path:
    return root() / names.check_slug(slug)


def _read_meta(slug: str) -> dict[str, Any] | None:
    read = read_json(_dir(slug) / META_FILE, max_bytes=_META_MAX_BYTES)
    if read.state is ReadState.ABSENT:
        return None
    document = read.document
    if not isinstance(document, dict) or document.get("slug") != slug:
        raise MalformedFileError(read.path, read.error or "not an artifact's metadata", code="artifact_unreadable")
    return document


def _visible_meta(slug: str, actor: Actor) -> dict[str, Any]:
    meta = _read_meta(names.check_slug(slug))
    if meta is None or not may_see(actor, meta):
        raise not_found(slug)
    return meta


def _read_text(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(names.CONTENT_MAX_BYTES + 1)
    except FileNotFoundError:
        raise KirocrewError(f"{path.name} is missing from the artifact's folder", code="artifact_unreadable") from None
    if len(raw) > names.CONTENT_MAX_BYTES:
        raise KirocrewError(f"{path.name} is larger than the content cap", code="artifact_unreadable")
    return raw.decode("utf-8", "replace")


def _write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"), mode=0o600)


def _write_meta(meta: dict[str, Any]) -> None:
    """Write the metadata, then remove the version files it no longer names (pruned, or left by a crash)."""
    meta["events"] = meta.get("events", [])[-MAX_EVENTS:]
    folder = _dir(meta["slug"])
    write_json_atomic(folder / META_FILE, dict(sorted(meta.items())), mode=0o600)
    named = {f"v{v}.html" for v in meta.get("versions", [])}
    try:
        present = os.listdir(folder / VERSIONS_DIR)
    except FileNotFoundError:
        return
    for name in present:
        if name not in named and _VERSION_FILE.match(name):
            (folder / VERSIONS_DIR / name).unlink(missing_ok=True)


def _read_comments(slug: str) -> list[dict[str, Any]]:
    read = read_json(_dir(slug) / COMMENTS_FILE, max_bytes=_COMMENTS_MAX_BYTES)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return []
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, list):
        raise MalformedFileError(read.path, read.error or "expected a JSON list", code="artifact_unreadable")
    return [c for c in read.document if isinstance(c, dict)]


def _write_comments(slug: str, comments: list[dict[str, Any]]) -> None:
    write_json_atomic(_dir(slug) / COMMENTS_FILE, _capped(comments), mode=0o600)


def _capped(comments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most MAX_COMMENTS, dropping the oldest whole threads (a reply never outlives its root)."""
    while len(comments) > MAX_COMMENTS:
        oldest = comments[0].get("thread_id")
        comments = [c for c in comments if c.get("thread_id") != oldest]
    return comments


def _event(meta: dict[str, Any], kind: str, actor: Actor, **details: Any) -> None:
    meta.setdefault("events", []).append({"type": kind, "at": now(), "by": actor.label, **details})


def _snapshot(meta: dict[str, Any], content: str) -> None:
    """Write ``content`` as the next version and the live content; prune past MAX_VERSIONS. Meta is the caller's."""
    version = int(meta.get("version", 0)) + 1
    folder = _dir(meta["slug"])
    _write_text(folder / VERSIONS_DIR / f"v{version}.html", content)
    _write_text(folder / CONTENT_FILE, content)
    kept = [v for v in meta.get("versions", []) if isinstance(v, int)] + [version]
    meta["versions"] = kept[-MAX_VERSIONS:]  # the files go once the metadata no longer names them
    meta["version"] = version
    meta["size"] = len(content.encode("utf-8"))
    meta["updated_at"] = now()


def _rescan_anchors(slug: str, content: str) -> None:
    """Flag comments whose quoted anchor the content no longer contains (and clear the flag when it does)."""
    comments = _read_comments(slug)
    changed = False
    for comment in comments:
        quote = comment.get("anchor_quote")
        if not quote:
            continue
        orphaned = quote not in content
        if comment.get("anchor_orphaned") != orphaned:
            comment["anchor_orphaned"] = orphaned
            changed = True
    if changed:
        _write_comments(slug, comments)


def read_content(source: str) -> str:
    """The text of a file (or ``-``: stdin), refused past 25 MiB while reading: nothing more is read or saved."""
    limit = names.CONTENT_MAX_BYTES
    try:
        if source == "-":
            raw = sys.stdin.buffer.read(limit + 1)
        else:
            with open(Path(source).expanduser(), "rb") as fh:
                raw = fh.read(limit + 1)
    except OSError as exc:
        raise BadInputError(f"cannot read {source}: {exc.strerror or exc}", code="unreadable_input") from None
    if len(raw) > limit:
        raise BadInputError(f"{source} is larger than {limit} bytes (25 MiB); nothing was saved",
                            code="content_too_large")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInputError(f"{source} is not UTF-8 text", code="invalid_content") from None


# --- artifacts --------------------------------------------------------------------------------------


def save(new: NewArtifact, actor: Actor) -> Saved:
    """Create an artifact; an explicit slug that is taken is ``slug_taken`` (never renamed)."""
    from kirocrew_core.artifacts import folders

    names.check_content(new.content, new.kind)
    hints: list[str] = []
    with locked():
        root().mkdir(parents=True, exist_ok=True)
        if new.slug is not None:
            slug = names.check_slug(new.slug)
            if _dir(slug).exists():
                raise ConflictError(f"slug {slug} is taken; choose another or update that artifact",
                                    code="slug_taken")
        else:
            slug = _free_slug(names.slug_from(new.name))
            if slug != names.slug_from(new.name):
                hints.append(f"slug_collided_with={names.slug_from(new.name)}")
        folder_id = folders.resolve(new.folder, create=True, actor=actor) if new.folder is not None else None
        created = now()
        meta: dict[str, Any] = {
            "slug": slug, "name": new.name, "kind": new.kind, "description": new.description,
            "tags": list(new.tags), "version": 0, "versions": [], "created_at": created, "updated_at": created,
            "events": [], "folder_id": folder_id, "pinned": False, "shared": bool(new.shared and actor.is_owner),
            **actor.provenance(new.claimed_source),
        }
        if new.slug is None and _same_name_exists(new.name, actor):  # a second save that meant an update
            hints.append("an artifact with this name already exists; update it by slug instead of saving again")
        folder = _dir(slug)
        (folder / VERSIONS_DIR).mkdir(parents=True, exist_ok=False)
        try:
            _snapshot(meta, new.content)
            _event(meta, "created", actor, version=meta["version"])
            _write_meta(meta)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # a half-made artifact is no artifact
            raise
    return Saved(meta, hints)


def _free_slug(base: str) -> str:
    if not _dir(base).exists():
        return base
    for _ in range(100):
        suffix = "-" + secrets.token_hex(3)
        candidate = base[:names.SLUG_MAX_CHARS - len(suffix)].rstrip("-") + suffix
        if not _dir(candidate).exists():
            return candidate
    raise ConflictError("no free slug could be found; pass one", code="slug_taken")


def _same_name_exists(name: str, actor: Actor) -> bool:
    return any(meta.get("name") == name for meta in _all_meta(actor))


def _all_meta(actor: Actor) -> Iterator[dict[str, Any]]:
    try:
        entries = sorted(p.name for p in root().iterdir() if p.is_dir())
    except FileNotFoundError:
        return
    for entry in entries:
        try:
            meta = _read_meta(entry)
        except (BadInputError, KirocrewError):
            continue  # a folder that is no artifact (or a broken one) is left alone, never listed
        if meta is not None and may_see(actor, meta):
            yield meta


def get(slug: str, actor: Actor, version: int | None = None) -> tuple[dict[str, Any], str]:
    """The metadata and the live content, or one version's (``version_not_found`` when pruned or never made)."""
    with locked():
        meta = _visible_meta(slug, actor)
        if version is None:
            return meta, _read_text(_dir(slug) / CONTENT_FILE)
        if version not in meta.get("versions", []):
            raise BadInputError(f"{slug} has no version {version} (kept: {_version_list(meta)})",
                                code="version_not_found")
        return meta, _read_text(_dir(slug) / VERSIONS_DIR / f"v{version}.html")


def _version_list(meta: dict[str, Any]) -> str:
    return ", ".join(f"v{v}" for v in meta.get("versions", [])) or "none"


def update(slug: str, actor: Actor, *, content: str | None = None, name: str | None = None,
           description: str | None = None, tags: list[str] | None = None, shared: bool | None = None,
           event: str | None = None, **details: Any) -> dict[str, Any]:
    """Change an artifact; new content is a new version (a snapshot). ``shared`` is the owner's alone."""
    if shared is not None and not actor.is_owner:
        raise BadInputError("only the owner shares an artifact with every session", code="owner_only")
    with locked():
        meta = _visible_meta(slug, actor)
        if content is not None:
            names.check_content(content, meta["kind"])
            _snapshot(meta, content)
            _rescan_anchors(slug, content)
        updates: dict[str, Any] = {
            "name": None if name is None else names.check_name(name),
            "description": None if description is None else names.check_description(description),
            "tags": None if tags is None else names.check_tags(tags),
            "shared": shared,
        }
        changed = [field for field, value in updates.items() if value is not None]
        for field in changed:
            meta[field] = updates[field]
        if changed and content is None:
            meta["updated_at"] = now()
        kind = event or ("edited" if actor.is_owner else "iterated")
        _event(meta, kind, actor, version=meta["version"], **({"fields": changed} if changed else {}), **details)
        _write_meta(meta)
        return meta


def revert(slug: str, actor: Actor, target_version: int) -> dict[str, Any]:
    """A new version holding ``target_version``'s content (a revert always snapshots)."""
    _, content = get(slug, actor, target_version)
    return update(slug, actor, content=content, event="reverted", from_version=target_version)


def listing(actor: Actor, *, tag: str | None = None, kind: str | None = None, q: str | None = None,
            folder_id: str | None = None) -> list[dict[str, Any]]:
    """What ``actor`` may see, newest change first, filtered (``q``: case-insensitive in name, slug, description)."""
    found = [meta for meta in _all_meta(actor) if matches(meta, tag=tag, kind=kind, q=q, folder_id=folder_id)]
    return sorted(found, key=lambda m: (str(m.get("updated_at", "")), m["slug"]), reverse=True)


def matches(meta: dict[str, Any], *, tag: str | None = None, kind: str | None = None, q: str | None = None,
            folder_id: str | None = None) -> bool:
    """Whether one artifact passes :func:`listing`'s filters (the page filters one read of the library with it)."""
    if tag is not None and tag not in meta.get("tags", []):
        return False
    if kind is not None and meta.get("kind") != kind:
        return False
    if folder_id is not None and meta.get("folder_id") != folder_id:
        return False
    haystack = " ".join(str(meta.get(f, "")) for f in ("name", "slug", "description")).lower()
    return all(word in haystack for word in (q or "").lower().split())


def delete(slug: str, actor: Actor) -> None:
    with locked():
        meta = _visible_meta(slug, actor)
        if not may_delete(actor, meta):
            raise BadInputError(f"{slug} was shared with this session by the owner; only the owner deletes it",
                                code="owner_only")
        _remove(slug)


def _remove(slug: str) -> None:
    """Out of the library at once (renamed aside), then its files."""
    folder = _dir(slug)
    aside = root() / f".deleted-{slug}-{secrets.token_hex(4)}"
    folder.rename(aside)
    shutil.rmtree(aside, ignore_errors=True)


def move(slug: str, actor: Actor, folder_ref: str | None) -> str | None:
    """File the artifact in a folder (None or a root ref: unfiled); no version bump."""
    from kirocrew_core.artifacts import folders

    with locked():
        meta = _visible_meta(slug, actor)
        folder_id = folders.resolve(folder_ref, create=False, actor=actor) if folder_ref is not None else None
        meta["folder_id"] = folder_id
        _event(meta, "moved", actor, folder_id=folder_id)
        _write_meta(meta)
        return folder_id


def set_pinned(slug: str, actor: Actor, pinned: bool) -> dict[str, Any]:
    with locked():
        meta = _visible_meta(slug, actor)
        meta["pinned"] = pinned
        _write_meta(meta)
        return meta


# --- comments ---------------------------------------------------------------------------------------


def comments(slug: str, actor: Actor, *, exclude_resolved: bool = False) -> list[dict[str, Any]]:
    with locked():
        _visible_meta(slug, actor)
        found = _read_comments(slug)
    if exclude_resolved:
        found = [c for c in found if c.get("status") != "resolved"]
    return found


def post_comment(slug: str, actor: Actor, text: str, *, scope: str = "private", quote: str | None = None,
                 parent_id: str | None = None) -> dict[str, Any]:
    """A new open comment (a reply when ``parent_id``); a quote anchors it to the live content."""
    names.check_comment_text(text)
    if scope not in COMMENT_SCOPES:
        raise BadInputError("scope must be private or shared", code="invalid_arguments")
    with locked():
        meta = _visible_meta(slug, actor)
        found = _read_comments(slug)
        thread_id = None
        if parent_id is not None:
            parent = _find(found, parent_id)
            thread_id = parent.get("thread_id") or parent["id"]
        comment_id = "c-" + secrets.token_hex(6)
        stamp = now()
        comment: dict[str, Any] = {
            "id": comment_id, "origin": "local", "scope": scope, "author": actor.label, "is_agent": not actor.is_owner,
            "body": text, "thread_id": thread_id or comment_id, "parent_id": parent_id, "status": "open",
            "sync_state": "local_only", "anchor_orphaned": False, "created_at": stamp, "updated_at": stamp,
            **({"conversation": actor.conversation} if actor.conversation else {}),
        }
        if quote:
            if len(quote) > names.QUOTE_MAX_CHARS:
                raise BadInputError(f"quote is longer than {names.QUOTE_MAX_CHARS} characters",
                                    code="invalid_arguments")
            content = _read_text(_dir(slug) / CONTENT_FILE)
            if quote not in content:
                raise BadInputError("the quote is not in the artifact's live content", code="quote_not_found")
            comment.update(anchor_quote=quote, anchor_version=meta["version"])
        found.append(comment)
        _write_comments(slug, found)
        _event(meta, "comment", actor, comment_id=comment_id, action="replied" if parent_id else "posted")
        _write_meta(meta)
        return comment


def _find(found: list[dict[str, Any]], comment_id: str) -> dict[str, Any]:
    names.check_comment_id(comment_id)
    for comment in found:
        if comment.get("id") == comment_id:
            return comment
    raise BadInputError(f"no comment {comment_id} on this artifact", code="comment_not_found")


def mark_review(slug: str, actor: Actor, comment_id: str) -> dict[str, Any]:
    """``open`` → ``review``: the agent says it applied the comment and asks the owner to look."""
    return _set_status(slug, actor, comment_id, "review")


def resolve_comment(slug: str, actor: Actor, comment_id: str) -> dict[str, Any]:
    """→ ``resolved``: the owner's alone (an agent cannot close the owner's review)."""
    if not actor.is_owner:
        raise BadInputError("only the owner resolves a comment; mark it for review instead", code="owner_only")
    return _set_status(slug, actor, comment_id, "resolved")


def _set_status(slug: str, actor: Actor, comment_id: str, status: str) -> dict[str, Any]:
    with locked():
        meta = _visible_meta(slug, actor)
        found = _read_comments(slug)
        comment = _find(found, comment_id)
        if comment.get("status") == "resolved":
            raise BadInputError(f"comment {comment_id} is already resolved", code="comment_resolved")
        if comment.get("status") == status:
            return comment
        comment["status"] = status
        comment["updated_at"] = now()
        _write_comments(slug, found)
        _event(meta, "comment", actor, comment_id=comment_id, action="reviewed" if status == "review" else status)
        _write_meta(meta)
        return comment


def delete_comment(slug: str, actor: Actor, comment_id: str, reason: str) -> int:
    """Remove a comment and its replies; how many went. An agent deletes only what it applied (in review)."""
    if not isinstance(reason, str) or not reason.strip() or len(reason) > names.REASON_MAX_CHARS:
        raise BadInputError(f"reason must be 1-{names.REASON_MAX_CHARS} characters", code="invalid_arguments")
    with locked():
        meta = _visible_meta(slug, actor)
        found = _read_comments(slug)
        comment = _find(found, comment_id)
        if not actor.is_owner:
            if comment.get("origin", "local") != "local":
                raise BadInputError("a comment synced from a provider is the owner's to delete", code="owner_only")
            if comment.get("status") == "open":
                raise BadInputError(f"comment {comment_id} is still open: apply it and mark it for review before "
                                    "deleting it", code="comment_not_applied")
        gone = {comment_id} | _replies_of(found, comment_id)
        kept = [c for c in found if c.get("id") not in gone]
        _write_comments(slug, kept)
        _event(meta, "comment", actor, comment_id=comment_id, action="deleted", reason=reason.strip())
        _write_meta(meta)
        return len(gone)


def _replies_of(found: list[dict[str, Any]], comment_id: str) -> set[str]:
    replies: set[str] = set()
    frontier = {comment_id}
    while frontier:
        children = {str(c["id"]) for c in found if c.get("parent_id") in frontier and c.get("id") not in replies}
        replies |= children
        frontier = children
    return replies


# --- folders ----------------------------------------------------------------------------------------


def folder_list() -> list[tuple[dict[str, Any], str, int]]:
    """Every folder with its path and how many artifacts it holds, sorted by path."""
    from kirocrew_core.artifacts import folders
    from kirocrew_core.artifacts.access import OWNER

    with locked():
        found = folders.load()
        counts: dict[str, int] = {}
        for meta in _all_meta(OWNER):
            if meta.get("folder_id"):
                counts[meta["folder_id"]] = counts.get(meta["folder_id"], 0) + 1
    rows = [(f, folders.path_of(found, f["id"]), counts.get(f["id"], 0)) for f in found]
    return sorted(rows, key=lambda row: row[1])


def folder_create(name: str, parent: str | None, actor: Actor) -> tuple[dict[str, Any], str]:
    from kirocrew_core.artifacts import folders

    with locked():
        root().mkdir(parents=True, exist_ok=True)
        folder = folders.create(name, parent, actor)
        return folder, folders.path_of(folders.load(), folder["id"])


def folder_rename(ref: str, name: str, actor: Actor) -> tuple[dict[str, Any], str]:
    from kirocrew_core.artifacts import folders

    with locked():
        folder = folders.rename(ref, name, actor)
        return folder, folders.path_of(folders.load(), folder["id"])


def folder_move(ref: str, new_parent: str | None, actor: Actor) -> tuple[dict[str, Any], str]:
    from kirocrew_core.artifacts import folders

    with locked():
        folder = folders.move(ref, new_parent, actor)
        return folder, folders.path_of(folders.load(), folder["id"])


def folder_delete(ref: str, actor: Actor, *, delete_contents: bool) -> tuple[int, int]:
    """``(folders removed, artifacts deleted or re-filed)``; see :func:`.folders.delete`."""
    from kirocrew_core.artifacts import folders
    from kirocrew_core.artifacts.access import OWNER

    with locked():
        every = list(_all_meta(OWNER))
        parent = next((f.get("parent_id") for f in folders.load()
                       if f["id"] == folders.resolve(ref, create=False, actor=actor)), None)
        gone, slugs = folders.delete(ref, actor, delete_contents=delete_contents, artifacts=every)
        for meta in every:
            if meta["slug"] not in slugs:
                continue
            if delete_contents:
                _remove(meta["slug"])
            else:
                meta["folder_id"] = parent
                _write_meta(meta)
        return gone, len(slugs)
