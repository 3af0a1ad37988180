"""The artifact folders: one flat list in ``folders.json``, each ``{id, name, parent_id, order, created_by}``.

Membership lives on the artifact (``folder_id``), so renaming or moving a folder touches no
artifact. A folder is named by its id (12 hex) or a ``/``-separated path of names; resolving a path
to file something creates what is missing, like ``mkdir -p``, all or nothing. A move that would
make a cycle, or a tree deeper than :data:`~.names.MAX_FOLDER_DEPTH`, is refused. Every session
sees the folders (they hold no content); a session renames, moves or deletes only folders its own
conversation tree made, and deletes contents only when every artifact in them is its tree's.
Callers hold the ``artifacts`` lock (:func:`.store.locked`) around every function here.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from kirocrew_core import home
from kirocrew_core.artifacts import names
from kirocrew_core.artifacts.access import Actor
from kirocrew_core.errors import BadInputError
from kirocrew_core.jsonfile import ReadState, read_json, write_json_atomic

_ID = re.compile(r"^[0-9a-f]{12}$")
FILE = "folders.json"


def _path() -> Any:
    return home.artifacts_dir() / FILE


def load() -> list[dict[str, Any]]:
    read = read_json(_path())
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return []
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, list):
        from kirocrew_core.errors import MalformedFileError

        raise MalformedFileError(read.path, read.error or "expected a JSON list", code="artifact_unreadable")
    return [f for f in read.document if isinstance(f, dict) and _ID.match(str(f.get("id", "")))]


def _save(folders: list[dict[str, Any]]) -> None:
    write_json_atomic(_path(), folders, mode=0o600)


def path_of(folders: list[dict[str, Any]], folder_id: str | None) -> str:
    """``/A/B`` for a folder id ("/" for the root); a broken chain ends where it breaks."""
    by_id = {f["id"]: f for f in folders}
    parts: list[str] = []
    seen: set[str] = set()
    while folder_id and folder_id in by_id and folder_id not in seen:
        seen.add(folder_id)
        parts.append(str(by_id[folder_id]["name"]))
        folder_id = by_id[folder_id].get("parent_id")
    return "/" + "/".join(reversed(parts))


def _child(folders: list[dict[str, Any]], parent_id: str | None, name: str) -> dict[str, Any] | None:
    return next((f for f in folders if f.get("parent_id") == parent_id and f.get("name") == name), None)


def _depth(folders: list[dict[str, Any]], folder_id: str | None) -> int:
    return 0 if not folder_id else path_of(folders, folder_id).count("/")


def resolve(ref: str | None, *, create: bool, actor: Actor) -> str | None:
    """The folder id ``ref`` names (None: the root); with ``create``, a path's missing folders are made."""
    if ref is None or names.is_root_ref(ref):
        return None
    folders = load()
    if _ID.match(ref.strip()) and any(f["id"] == ref.strip() for f in folders):
        return ref.strip()
    parent: str | None = None
    made = False
    for name in names.folder_path_parts(ref):
        found = _child(folders, parent, name)
        if found is None:
            if not create:
                raise BadInputError(f"no folder {ref}", code="folder_not_found")
            found = _new(folders, name, parent, actor)
            made = True
        parent = found["id"]
    if made:
        _save(folders)
    return parent


def _new(folders: list[dict[str, Any]], name: str, parent_id: str | None, actor: Actor) -> dict[str, Any]:
    if _depth(folders, parent_id) + 1 > names.MAX_FOLDER_DEPTH:
        raise BadInputError(f"folders nest at most {names.MAX_FOLDER_DEPTH} deep", code="folder_too_deep")
    folder = {"id": secrets.token_hex(6), "name": name, "parent_id": parent_id,
              "order": sum(1 for f in folders if f.get("parent_id") == parent_id), "created_by": actor.tree}
    folders.append(folder)
    return folder


def create(name: str, parent_ref: str | None, actor: Actor) -> dict[str, Any]:
    name = names.check_folder_name(name)
    parent_id = resolve(parent_ref, create=False, actor=actor)
    folders = load()
    if _child(folders, parent_id, name) is not None:
        raise BadInputError(f"a folder {name} is already there", code="folder_exists")
    folder = _new(folders, name, parent_id, actor)
    _save(folders)
    return folder


def _mine(folders: list[dict[str, Any]], ref: str, actor: Actor) -> dict[str, Any]:
    if names.is_root_ref(ref):
        raise BadInputError("the library root cannot be renamed, moved or deleted", code="folder_root")
    folder_id = resolve(ref, create=False, actor=actor)
    folder = next(f for f in folders if f["id"] == folder_id)
    if not actor.is_owner and folder.get("created_by") != actor.tree:
        raise BadInputError("that folder was not made in this conversation tree; only the owner changes it",
                            code="owner_only")
    return folder


def rename(ref: str, name: str, actor: Actor) -> dict[str, Any]:
    name = names.check_folder_name(name)
    folders = load()
    folder = _mine(folders, ref, actor)
    clash = _child(folders, folder.get("parent_id"), name)
    if clash is not None and clash["id"] != folder["id"]:
        raise BadInputError(f"a folder {name} is already there", code="folder_exists")
    folder["name"] = name
    _save(folders)
    return folder


def move(ref: str, new_parent_ref: str | None, actor: Actor) -> dict[str, Any]:
    folders = load()
    folder = _mine(folders, ref, actor)
    parent_id = resolve(new_parent_ref, create=False, actor=actor)
    if parent_id is not None and (parent_id == folder["id"] or folder["id"] in _ancestors(folders, parent_id)):
        raise BadInputError("a folder cannot move into itself or a folder inside it", code="folder_cycle")
    if _depth(folders, parent_id) + _height(folders, folder["id"]) > names.MAX_FOLDER_DEPTH:
        raise BadInputError(f"folders nest at most {names.MAX_FOLDER_DEPTH} deep", code="folder_too_deep")
    if _child(folders, parent_id, folder["name"]) not in (None, folder):
        raise BadInputError(f"a folder {folder['name']} is already there", code="folder_exists")
    folder["parent_id"] = parent_id
    _save(folders)
    return folder


def _ancestors(folders: list[dict[str, Any]], folder_id: str) -> list[str]:
    by_id = {f["id"]: f for f in folders}
    found: list[str] = []
    current = by_id.get(folder_id, {}).get("parent_id")
    while current and current in by_id and current not in found:
        found.append(current)
        current = by_id[current].get("parent_id")
    return found


def subtree(folders: list[dict[str, Any]], folder_id: str) -> set[str]:
    ids = {folder_id}
    grew = True
    while grew:
        more = {f["id"] for f in folders if f.get("parent_id") in ids} - ids
        ids |= more
        grew = bool(more)
    return ids


def _height(folders: list[dict[str, Any]], folder_id: str) -> int:
    """How many levels ``folder_id`` and what is under it take (1 for a leaf)."""
    children = [f["id"] for f in folders if f.get("parent_id") == folder_id]
    return 1 + max((_height(folders, c) for c in children), default=0)


def delete(ref: str, actor: Actor, *, delete_contents: bool, artifacts: list[dict[str, Any]]) -> tuple[int, list[str]]:
    """Remove a folder: its subfolders and artifacts move up to its parent, or (``delete_contents``) go too.

    ``artifacts`` is every artifact's metadata (the caller reads it under the lock). Returns how many
    folders went, and the slugs to delete (``delete_contents``) or to re-file (otherwise: the caller
    files them in the parent, which is the folder's ``parent_id``).
    """
    folders = load()
    folder = _mine(folders, ref, actor)
    gone = subtree(folders, folder["id"]) if delete_contents else {folder["id"]}
    inside = [a for a in artifacts if a.get("folder_id") in gone]
    if delete_contents and not actor.is_owner and any(a.get("tree") != actor.tree for a in inside):
        raise BadInputError("that folder holds artifacts of another conversation tree; only the owner deletes them",
                            code="owner_only")
    for other in folders:
        if other.get("parent_id") == folder["id"] and other["id"] not in gone:
            other["parent_id"] = folder.get("parent_id")
    _save([f for f in folders if f["id"] not in gone])
    return len(gone), [str(a["slug"]) for a in inside]
