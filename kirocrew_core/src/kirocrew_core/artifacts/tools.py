"""The ``artifact_*`` tools of ``kirocrew-core``: save, read, revise and review what a session makes.

Every tool is ``lenient`` and serves two callers, told apart by process ancestry
(:meth:`~kirocrew_core.coretools.contract.ToolCall.acting_session`): a verified crew session acts
on its conversation tree's artifacts and those the owner shared (:mod:`.access`); the person's own
MCP client (one that is no session's descendant) is the owner and acts on all. Anyone else is
refused ``caller_unverified``. Provenance (session, conversation, source) comes from that
decision, never from the arguments. Content and comment text are redacted on the way out.
Refusals carry the store's codes; a refused call changed nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kirocrew_core.artifacts import names
from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.coretools.person_tools import object_schema as _schema

if TYPE_CHECKING:
    from kirocrew_core.artifacts.access import Actor
    from kirocrew_core.coretools.contract import ToolCall

_SLUG = {"type": "string", "maxLength": names.SLUG_MAX_CHARS, "pattern": names.SLUG_PATTERN,
         "description": "The artifact's slug (lowercase letters, digits, inner hyphens)."}
_TAGS = {"type": "array", "maxItems": names.MAX_TAGS, "items": {"type": "string", "maxLength": names.TAG_MAX_CHARS}}
_FOLDER = {"type": "string", "maxLength": names.FOLDER_REF_MAX_CHARS,
           "description": "A folder id or a /-separated path of folder names; \"\" or \"root\" is the library root."}
_COMMENT_ID = {"type": "string", "pattern": names.COMMENT_ID_PATTERN, "maxLength": 128}
_TEXT = {"type": "string", "minLength": 1, "maxLength": names.COMMENT_MAX_CHARS}
_CONTENT = {"type": "string", "description": "The full content (at most 25 MiB)."}


SAVE_SCHEMA = _schema({
    "name": {"type": "string", "minLength": 1, "maxLength": names.NAME_MAX_CHARS},
    "content": _CONTENT,
    "slug": {**_SLUG, "description": "Optional; a slug that is taken is refused (slug_taken), never renamed. "
                                    "Without one, the slug comes from the name."},
    "kind": {"type": "string", "enum": [*names.KINDS, *names.UNSUPPORTED_KINDS], "default": "markdown",
             "description": "markdown, html, svg, json, text or image (a data:image/...;base64 URL). widget and "
                            "webapp are refused (kind_unsupported)."},
    "source": {"type": "string", "enum": list(names.SOURCES), "default": "chat",
               "description": "Only import is taken from you (the content came from elsewhere); otherwise the "
                              "source is decided by who you are (chat, subagent, cron)."},
    "description": {"type": "string", "maxLength": names.DESCRIPTION_MAX_CHARS},
    "tags": _TAGS,
    "folder": _FOLDER,
}, ("name", "content"))
GET_SCHEMA = _schema({"slug": _SLUG, "version": {"type": "integer", "minimum": 1, "maximum": names.MAX_VERSION}},
                     ("slug",))
UPDATE_SCHEMA = _schema({
    "slug": _SLUG, "content": _CONTENT, "name": {"type": "string", "minLength": 1, "maxLength": names.NAME_MAX_CHARS},
    "description": {"type": "string", "maxLength": names.DESCRIPTION_MAX_CHARS}, "tags": _TAGS,
}, ("slug",))
REVERT_SCHEMA = _schema({"slug": _SLUG,
                         "target_version": {"type": "integer", "minimum": 1, "maximum": names.MAX_VERSION}},
                        ("slug", "target_version"))
LIST_SCHEMA = _schema({"tag": {"type": "string", "maxLength": names.TAG_MAX_CHARS},
                       "kind": {"type": "string", "enum": list(names.KINDS)},
                       "q": {"type": "string", "maxLength": names.QUERY_MAX_CHARS,
                             "description": "Words the name, slug or description contains (case-insensitive)."},
                       "folder": {**_FOLDER, "description": "Only the artifacts filed directly in this folder."}})
SLUG_ONLY_SCHEMA = _schema({"slug": _SLUG}, ("slug",))
MOVE_SCHEMA = _schema({"slug": _SLUG, "folder": _FOLDER}, ("slug",))
GET_COMMENTS_SCHEMA = _schema({"slug": _SLUG, "exclude_resolved": {"type": "boolean", "default": False}}, ("slug",))
POST_COMMENT_SCHEMA = _schema({
    "slug": _SLUG, "text": _TEXT,
    "scope": {"type": "string", "enum": ["private", "shared"], "default": "private",
              "description": "Recorded with the comment; no provider sync ships, so both stay local."},
    "quote": {"type": "string", "minLength": 1, "maxLength": names.QUOTE_MAX_CHARS,
              "description": "Anchor the comment to this exact text of the live content."},
}, ("slug", "text"))
REPLY_SCHEMA = _schema({"slug": _SLUG, "parent_id": _COMMENT_ID, "text": _TEXT}, ("slug", "parent_id", "text"))
COMMENT_SCHEMA = _schema({"slug": _SLUG, "comment_id": _COMMENT_ID}, ("slug", "comment_id"))
DELETE_COMMENT_SCHEMA = _schema({"slug": _SLUG, "comment_id": _COMMENT_ID,
                                 "reason": {"type": "string", "minLength": 1, "maxLength": names.REASON_MAX_CHARS}},
                                ("slug", "comment_id", "reason"))
FOLDER_LIST_SCHEMA = _schema({})
FOLDER_CREATE_SCHEMA = _schema({"name": {"type": "string", "minLength": 1, "maxLength": names.FOLDER_NAME_MAX_CHARS},
                                "parent": _FOLDER}, ("name",))
FOLDER_RENAME_SCHEMA = _schema({"folder": _FOLDER,
                                "name": {"type": "string", "minLength": 1, "maxLength": names.FOLDER_NAME_MAX_CHARS}},
                               ("folder", "name"))
FOLDER_MOVE_SCHEMA = _schema({"folder": _FOLDER, "new_parent": _FOLDER}, ("folder",))
FOLDER_DELETE_SCHEMA = _schema({"folder": _FOLDER, "delete_contents": {"type": "boolean", "default": False}},
                               ("folder",))


def _redacted(text: str) -> str:
    from kirocrew_core.redaction import redact_secrets

    return redact_secrets(text)


def _actor(call: ToolCall) -> Actor:
    from kirocrew_core.artifacts.access import actor_of

    return actor_of(call)


# --- the tools ----------------------------------------------------------------------------------------


def save_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    kind = names.check_kind(args.get("kind", "markdown"))
    new = store.NewArtifact(
        name=names.check_name(args["name"]), content=args["content"], kind=kind,  # the store checks the content
        slug=args.get("slug"), description=names.check_description(args.get("description", "")),
        tags=tuple(names.check_tags(args.get("tags", []))), folder=args.get("folder"),
        claimed_source=args.get("source"))
    saved = store.save(new, actor)
    meta = saved.meta
    lines = [f"Saved artifact: slug={meta['slug']} version={meta['version']}",
             f"source={meta['source']}; the owner reads it with: kirocrew artifact show {meta['slug']}"]
    lines += saved.hints
    return "\n".join(lines)


def get_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    meta, content = store.get(args["slug"], actor, args.get("version"))
    version = args.get("version", meta["version"])
    shown, cut = shown_content(content)
    text = "\n".join([f"slug: {meta['slug']}", f"name: {meta['name']}", f"kind: {meta['kind']}",
                      f"version: {version}", f"updated_at: {meta['updated_at']}", "--- content ---", shown])
    if cut:
        text += (f"\n…[content cut at {len(shown)} of {len(content)} characters: a result holds at most "
                 f"{SHOWN_MAX_CHARS}]")
    return _redacted(text)


#: The most of an artifact's content one result shows (the server cuts every result at 100,000 characters).
SHOWN_MAX_CHARS = 90_000


def shown_content(content: str, limit: int = SHOWN_MAX_CHARS) -> tuple[str, bool]:
    """The content up to ``limit`` characters, cut at whitespace so no piece of a secret is left at the end
    for redaction to miss; and whether it was cut. Redacting only what is shown keeps a 25 MiB get cheap."""
    if len(content) <= limit:
        return content, False
    piece = content[:limit]
    end = max(piece.rfind(" "), piece.rfind("\n"), piece.rfind("\t"))
    return (piece[:end] if end > 0 else ""), True


def update_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    fields = {k: args[k] for k in ("content", "name", "description", "tags") if k in args}
    if not fields:
        from kirocrew_core.errors import BadInputError

        raise BadInputError("nothing to update: pass content, name, description or tags", code="invalid_arguments")
    meta = store.update(args["slug"], actor, **fields)
    return f"Updated artifact: slug={meta['slug']} version={meta['version']}"


def revert_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    target = int(args["target_version"])
    meta = store.revert(args["slug"], actor, target)
    return (f"Reverted {meta['slug']} to v{target}'s content. Live state is now v{meta['version']} "
            f"(snapshot of v{target}).")


def list_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import folders, store

    folder_id = None
    if args.get("folder") is not None and not names.is_root_ref(args["folder"]):
        with store.locked():
            folder_id = folders.resolve(args["folder"], create=False, actor=actor)
    found = store.listing(actor, tag=args.get("tag"), kind=args.get("kind"), q=args.get("q"), folder_id=folder_id)
    if not found:
        return "No artifacts saved." if not any(args.values()) else "No artifacts match."
    return _redacted("\n".join(line(meta) for meta in found))  # one pass over the whole listing


def line(meta: dict[str, Any]) -> str:
    """``slug  vN  kind  [tags]  name``: one artifact in a listing (not yet redacted)."""
    return f"{meta['slug']}  v{meta['version']}  {meta['kind']}  [{', '.join(meta.get('tags', []))}]  {meta['name']}"


def versions_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    meta, _ = store.get(args["slug"], actor)
    return f"{meta['slug']}: versions {', '.join(f'v{v}' for v in meta.get('versions', []))}"


def delete_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    store.delete(args["slug"], actor)
    return f"Deleted artifact: {args['slug']}"


def move_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import folders, store

    folder_id = store.move(args["slug"], actor, args.get("folder"))
    if folder_id is None:
        return f"Moved {args['slug']} to the library root (unfiled)."
    return f"Moved {args['slug']} to folder {folder_id} (`{folders.path_of(folders.load(), folder_id)}`)."


def comment_lines(found: list[dict[str, Any]]) -> list[str]:
    """One line per comment, replies under their thread: ``• author: body [status] (id=…) parent=… at=…``.

    The caller redacts the joined lines (the quote is redacted before it is cut, so no cut hides a secret).
    """
    lines = []
    for comment in found:
        lead = "  ↳ " if comment.get("parent_id") else "• "
        who = ("[agent] " if comment.get("is_agent") else "") + str(comment.get("author", "?"))
        anchor = ""
        if comment.get("anchor_quote"):
            anchor = f' on "{_redacted(str(comment["anchor_quote"]))[:80]}"'
            if comment.get("anchor_orphaned"):
                anchor += " (orphaned: the content no longer contains it)"
        lines.append(f"{lead}{who}: {comment.get('body', '')} [{comment.get('status')}] "
                     f"(id={comment.get('id')}) parent={comment.get('parent_id') or '-'} "
                     f"at={comment.get('created_at')}{anchor}")
    return lines


def get_comments_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    found = store.comments(args["slug"], actor, exclude_resolved=bool(args.get("exclude_resolved", False)))
    if not found:
        return f"No comments on {args['slug']}."
    return _redacted("\n".join(comment_lines(threaded(found))))


def threaded(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Roots in order, each followed by its thread's replies."""
    replies: dict[Any, list[dict[str, Any]]] = {}
    for comment in found:
        if comment.get("parent_id"):
            replies.setdefault(comment.get("thread_id"), []).append(comment)
    ordered: list[dict[str, Any]] = []
    for comment in found:
        if not comment.get("parent_id"):
            ordered += [comment, *replies.pop(comment.get("id"), [])]
    for orphans in replies.values():  # replies whose root is gone
        ordered += orphans
    return ordered


def post_comment_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    comment = store.post_comment(args["slug"], actor, args["text"], scope=args.get("scope", "private"),
                                 quote=args.get("quote"))
    return f"Comment posted (id={comment['id']}, sync={comment['sync_state']})"


def reply_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    comment = store.post_comment(args["slug"], actor, args["text"], parent_id=args["parent_id"])
    return f"Reply posted (id={comment['id']}, sync={comment['sync_state']})"


def mark_review_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    store.mark_review(args["slug"], actor, args["comment_id"])
    return f"Comment {args['comment_id']} advanced to REVIEW status."


def delete_comment_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    store.delete_comment(args["slug"], actor, args["comment_id"], args["reason"])
    return f"Comment {args['comment_id']} deleted (reason recorded in activity feed)."


def folder_list_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    rows = store.folder_list()
    if not rows:
        return "No folders."
    return "\n".join(f"{folder['id']}  {path}  ({count} item{_s(count)})"
                     for folder, path, count in rows)


def folder_create_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    folder, path = store.folder_create(args["name"], args.get("parent"), actor)
    return f"Created folder `{path}` (id={folder['id']})."


def folder_rename_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    folder, path = store.folder_rename(args["folder"], args["name"], actor)
    return f"Renamed folder to `{path}` (id={folder['id']})."


def folder_move_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    folder, path = store.folder_move(args["folder"], args.get("new_parent"), actor)
    return f"Moved folder to `{path}` (id={folder['id']})."


def folder_delete_text(args: dict[str, Any], actor: Actor) -> str:
    from kirocrew_core.artifacts import store

    contents = bool(args.get("delete_contents", False))
    gone, artifacts = store.folder_delete(args["folder"], actor, delete_contents=contents)
    if contents:
        return f"Deleted {gone} folder{_s(gone)} and {artifacts} artifact{_s(artifacts)}."
    return (f"Deleted the folder; its subfolders and {artifacts} artifact{_s(artifacts)} moved up "
            "to its parent.")


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def artifact_tools() -> list[CoreMcpTool]:
    from kirocrew_core.artifacts.deploy import deploy_tool

    def tool(name: str, description: str, schema: dict[str, Any], fn: Callable[[dict[str, Any], Actor], str],
             read_only: bool = False) -> CoreMcpTool:
        return CoreMcpTool(name, description, schema, _run_args(fn), read_only=read_only, identity="lenient")

    return [
        tool("artifact_save", "Save a new artifact for the owner (a report, a design note, an HTML prototype): "
             "versioned, reviewed by the owner, and yours to revise. Returns its slug and version.",
             SAVE_SCHEMA, save_text),
        tool("artifact_get", "Read an artifact: its slug, name, kind, version and updated_at lines, then its content "
             "(the live version, or the one asked for).", GET_SCHEMA, get_text, read_only=True),
        tool("artifact_update", "Revise an artifact: new content is a new version; name, description and tags "
             "change in place.", UPDATE_SCHEMA, update_text),
        tool("artifact_revert", "Make an earlier version's content the live one again, as a new version.",
             REVERT_SCHEMA, revert_text),
        tool("artifact_list", "List the artifacts you may see, newest change first: slug  vN  kind  [tags]  name.",
             LIST_SCHEMA, list_text, read_only=True),
        tool("artifact_versions", "The versions of an artifact that are kept (the newest 50).", SLUG_ONLY_SCHEMA,
             versions_text, read_only=True),
        tool("artifact_delete", "Delete an artifact with its versions and comments.", SLUG_ONLY_SCHEMA, delete_text),
        tool("artifact_move", "File an artifact in a folder (made if missing), or at the library root without one.",
             MOVE_SCHEMA, move_text),
        tool("artifact_get_comments", "Read the owner's review comments on an artifact, one per line with status "
             "(open, review, resolved) and id; replies are marked ↳, anchors the content lost are flagged orphaned.",
             GET_COMMENTS_SCHEMA, get_comments_text, read_only=True),
        tool("artifact_post_comment", "Post a comment on an artifact, optionally anchored to a quote of its content.",
             POST_COMMENT_SCHEMA, post_comment_text),
        tool("artifact_reply_comment", "Reply to a comment (say what you changed).", REPLY_SCHEMA, reply_text),
        tool("artifact_mark_review", "Mark a comment you applied for the owner's review (open -> review). Only the "
             "owner resolves it.", COMMENT_SCHEMA, mark_review_text),
        tool("artifact_delete_comment", "Delete a comment you fully applied (it must be in review), with its replies; "
             "the reason is recorded in the artifact's activity.", DELETE_COMMENT_SCHEMA, delete_comment_text),
        tool("artifact_folder_list", "List the artifact folders: id  path  (N items), sorted by path.",
             FOLDER_LIST_SCHEMA, folder_list_text, read_only=True),
        tool("artifact_folder_create", "Create an artifact folder (under parent, or at the root).",
             FOLDER_CREATE_SCHEMA, folder_create_text),
        tool("artifact_folder_rename", "Rename a folder (its artifacts stay in it).", FOLDER_RENAME_SCHEMA,
             folder_rename_text),
        tool("artifact_folder_move", "Move a folder under another (or to the root); cycles and depth over 20 are "
             "refused.", FOLDER_MOVE_SCHEMA, folder_move_text),
        tool("artifact_folder_delete", "Delete a folder: its subfolders and artifacts move up to its parent, or with "
             "delete_contents the whole subtree and its artifacts go.", FOLDER_DELETE_SCHEMA, folder_delete_text),
        deploy_tool(),
    ]


def _run_args(fn: Callable[[dict[str, Any], Actor], str]) -> Callable[[dict[str, Any], ToolCall], Any]:
    async def handler(args: dict[str, Any], call: ToolCall) -> str:
        def work() -> str:
            return fn(args, _actor(call))

        return await asyncio.to_thread(work)

    return handler
