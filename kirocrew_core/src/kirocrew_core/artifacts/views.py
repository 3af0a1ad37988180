"""What the owner's routes and the Artifacts page show: listings, one artifact, a diff, a change stamp.

Everything here acts as the owner (the gateway authenticated them) and is blocking file work, so
the routes call it in a worker thread. Content, names and comments are redacted on the way out,
as every artifact tool's result is (:func:`kirocrew_core.redaction.redact_secrets`).
"""

from __future__ import annotations

import difflib
import hashlib
import os
from dataclasses import dataclass
from typing import Any

from kirocrew_core.artifacts import names
from kirocrew_core.errors import BadInputError

#: A diff longer than this many lines is cut (a note says so): the page stays light with 25 MiB versions.
DIFF_MAX_LINES = 5000
#: The most of a version the page shows, renders, frames or diffs (cut at whitespace, a note says so):
#: redacting and rendering all 25 MiB an artifact may hold would take the page many seconds.
PAGE_MAX_CHARS = 1_000_000
#: The filters the list takes, each a query parameter of ``GET /api/artifacts`` and of the page.
FILTERS = ("q", "folder", "tag", "kind", "source", "starred")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def redacted(text: str) -> str:
    from kirocrew_core.redaction import redact_secrets

    return redact_secrets(text)


@dataclass(frozen=True)
class Filters:
    """The list's checked filters; each refusal is bad input with the code of the artifact tools."""

    q: str = ""
    folder_id: str | None = None
    folder_given: bool = False
    tag: str | None = None
    kind: str | None = None
    source: str | None = None
    starred: bool | None = None

    @classmethod
    def parse(cls, params: dict[str, str]) -> Filters:
        from kirocrew_core.artifacts import folders, store
        from kirocrew_core.artifacts.access import OWNER

        q = params.get("q", "").strip()
        if len(q) > names.QUERY_MAX_CHARS:
            raise BadInputError(f"q is longer than {names.QUERY_MAX_CHARS} characters", code="invalid_arguments")
        tag = params.get("tag") or None
        if tag is not None:
            names.check_tags([tag])
        kind = params.get("kind") or None
        if kind is not None:
            names.check_kind(kind)
        source = params.get("source") or None
        if source is not None and source not in names.SOURCES:
            raise BadInputError(f"source must be one of {', '.join(names.SOURCES)}", code="invalid_source")
        starred_text = (params.get("starred") or "").lower()
        if starred_text and starred_text not in _TRUE + _FALSE:
            raise BadInputError("starred must be true or false", code="invalid_arguments")
        starred = None if not starred_text else starred_text in _TRUE
        folder_ref = params.get("folder") or None
        folder_id = None
        if folder_ref is not None:
            with store.locked():
                folder_id = folders.resolve(folder_ref, create=False, actor=OWNER)
        return cls(q, folder_id, folder_ref is not None, tag, kind, source, starred)


def summary(meta: dict[str, Any], paths: dict[str, str]) -> dict[str, Any]:
    """One artifact as a listing shows it (no content, no events); :func:`redact_summaries` redacts its texts."""
    return {
        "slug": meta["slug"], "name": str(meta.get("name", "")), "kind": meta.get("kind"),
        "description": str(meta.get("description", "")), "tags": list(meta.get("tags", [])),
        "version": meta.get("version"), "updated_at": meta.get("updated_at"), "created_at": meta.get("created_at"),
        "source": meta.get("source"), "created_by": meta.get("created_by"), "conversation": meta.get("conversation"),
        "folder_id": meta.get("folder_id"), "folder": paths.get(str(meta.get("folder_id")), "/"),
        "starred": bool(meta.get("pinned")), "shared": bool(meta.get("shared")), "size": meta.get("size", 0),
    }


_SEPARATOR = "\x00\n"  # in no name or description (both refuse control characters), so the pieces come back


def redact_summaries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every row's name and description redacted in one pass (a pass each would cost 1,000 passes a listing)."""
    if not rows:
        return rows
    pieces = redacted(_SEPARATOR.join(f"{row['name']}{_SEPARATOR}{row['description']}" for row in rows))
    parts = pieces.split(_SEPARATOR)
    if len(parts) != 2 * len(rows):  # a redaction that took a separator with it: one pass each after all
        parts = [redacted(text) for row in rows for text in (row["name"], row["description"])]
    for n, row in enumerate(rows):
        row["name"], row["description"] = parts[2 * n], parts[2 * n + 1]
    return rows


def folder_paths() -> dict[str, str]:
    from kirocrew_core.artifacts import folders

    found = folders.load()
    return {f["id"]: folders.path_of(found, f["id"]) for f in found}


def everything() -> list[dict[str, Any]]:
    """Every artifact's metadata, newest change first: one read of the library, for a listing and its choices."""
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    return store.listing(OWNER)


def listing(filters: Filters, every: list[dict[str, Any]] | None = None, *, redact: bool = True
            ) -> list[dict[str, Any]]:
    """The rows that pass ``filters``; ``redact=False`` leaves :func:`redact_summaries` to the caller (a page
    redacts only the rows it shows)."""
    from kirocrew_core.artifacts import store

    paths = folder_paths()
    rows = []
    for meta in everything() if every is None else every:
        if not store.matches(meta, tag=filters.tag, kind=filters.kind, q=filters.q or None):
            continue
        if filters.folder_given and meta.get("folder_id") != filters.folder_id:
            continue
        if filters.source is not None and meta.get("source") != filters.source:
            continue
        if filters.starred is not None and bool(meta.get("pinned")) != filters.starred:
            continue
        rows.append(summary(meta, paths))
    return redact_summaries(rows) if redact else rows


def library(every: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the list's filter choices offer: every folder (path, count), tag and source in use."""
    tags: set[str] = set()
    sources: set[str] = set()
    counts: dict[str, int] = {}
    for meta in everything() if every is None else every:
        tags.update(str(t) for t in meta.get("tags", []))
        sources.add(str(meta.get("source", "")))
        if meta.get("folder_id"):
            counts[meta["folder_id"]] = counts.get(meta["folder_id"], 0) + 1
    folders = [{"id": folder_id, "path": path, "count": counts.get(folder_id, 0)}
               for folder_id, path in sorted(folder_paths().items(), key=lambda item: item[1])]
    return {"folders": folders, "tags": sorted(tags), "sources": sorted(s for s in sources if s),
            "kinds": list(names.KINDS)}


def comment_view(comment: dict[str, Any]) -> dict[str, Any]:
    """A comment as the page shows it: its text and quote redacted."""
    shown = {k: comment.get(k) for k in ("id", "author", "is_agent", "status", "parent_id", "thread_id", "created_at",
                                         "updated_at", "conversation", "anchor_version", "scope")}
    shown["body"] = redacted(str(comment.get("body", "")))
    shown["quote"] = redacted(str(comment["anchor_quote"])) if comment.get("anchor_quote") else None
    shown["orphaned"] = bool(comment.get("anchor_orphaned"))
    return shown


def comments(slug: str) -> list[dict[str, Any]]:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER
    from kirocrew_core.artifacts.tools import threaded

    return [comment_view(c) for c in threaded(store.comments(slug, OWNER))]


def detail(slug: str, version: int | None = None) -> dict[str, Any]:
    """One artifact: its summary, the content of the live version (or ``version``), kept versions, comments."""
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    meta, content = store.get(slug, OWNER, version)
    view = redact_summaries([summary(meta, folder_paths())])[0]
    shown, cut = page_content(content)
    view.update(versions=list(meta.get("versions", [])), shown_version=version or meta.get("version"),
                events=meta.get("events", [])[-20:][::-1], content=shown, cut=cut, comments=comments(slug))
    return view


def page_content(content: str) -> tuple[str, int | None]:
    """``content`` redacted, at most :data:`PAGE_MAX_CHARS` of it; and its whole length when it was cut."""
    from kirocrew_core.artifacts.tools import shown_content

    shown, cut = shown_content(content, PAGE_MAX_CHARS)
    return redacted(shown), len(content) if cut else None


def diff(slug: str, older: int, newer: int) -> dict[str, Any]:
    """``older`` → ``newer`` as unified diff lines ``{"op": " +-@", "text"}`` (redacted), cut at DIFF_MAX_LINES."""
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    before, before_cut = page_content(store.get(slug, OWNER, older)[1])
    after, after_cut = page_content(store.get(slug, OWNER, newer)[1])
    lines: list[dict[str, str]] = []
    cut = bool(before_cut or after_cut)
    produced = difflib.unified_diff(before.splitlines(), after.splitlines(),
                                    f"v{older}", f"v{newer}", lineterm="", n=3)
    for number, line in enumerate(produced):
        if number < 2:
            continue  # the ---/+++ header: the page names the versions itself
        if len(lines) >= DIFF_MAX_LINES:
            cut = True
            break
        op = line[:1] if line[:1] in "+-@" else " "
        lines.append({"op": op, "text": line[1:] if op != "@" else line})
    added = sum(1 for line in lines if line["op"] == "+")
    removed = sum(1 for line in lines if line["op"] == "-")
    return {"from": older, "to": newer, "lines": lines, "added": added, "removed": removed, "cut": cut}


def stamp(slug: str | None = None) -> str:
    """A short digest that changes whenever the library (or one artifact) or the pending deploys change.

    Only file sizes and modification times are read (every write replaces a file atomically, so each
    change is a new file): a page polls it every few seconds and reloads only when it moves.
    """
    from kirocrew_core import home
    from kirocrew_core.artifacts import store

    digest = hashlib.blake2b(digest_size=10)
    root = store.root()
    if slug is not None:
        entries = [names.check_slug(slug)]
    else:
        try:
            entries = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
        except FileNotFoundError:
            entries = []
    paths = [root / "folders.json", home.pending_deploys_file()]
    for entry in entries:
        paths += [root / entry / store.META_FILE, root / entry / store.COMMENTS_FILE]
    for path in paths:
        try:
            info = path.stat()
        except FileNotFoundError:
            digest.update(f"{path.name}:-;".encode())
            continue
        digest.update(f"{path.parent.name}/{path.name}:{info.st_mtime_ns}:{info.st_size};".encode())
    return digest.hexdigest()


def of_conversation(conversation_id: str) -> list[dict[str, Any]]:
    """The artifacts ``conversation_id``'s sessions saved (newest change first), for its page to link.

    Public for the plugin that shows conversations (core imports no plugin; the plugin calls this).
    An unreadable library answers ``[]``: the conversation's page is not the place to report it.
    """
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER
    from kirocrew_core.errors import KirocrewError

    try:
        found = [m for m in store.listing(OWNER) if m.get("conversation") == conversation_id]
        return redact_summaries([summary(meta, folder_paths()) for meta in found]) if found else []
    except KirocrewError:
        return []
