"""The owner's artifact decisions: resolve a comment, share an artifact, confirm or discard a deploy.

These are no model's to make, so they are not ``kirocrew-core`` tools: they are the tools of a
separate host server, ``kirocrew-artifacts-admin``, that no agent config names, and each refuses
any caller but the person's own ``kirocrew`` command (:attr:`ToolCall.is_person_command`: decided by
process ancestry, so the same command run from a session's shell is that session and is refused
``person_only_command``). ``kirocrew artifact resolve|share``, ``kirocrew deploy`` and a ``kirocrew artifact
save`` too large for one host message call them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kirocrew_core.artifacts import names
from kirocrew_core.coretools.person_tools import object_schema as _schema

if TYPE_CHECKING:
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer

ADMIN_SERVER = "kirocrew-artifacts-admin"
ADMIN_COMMAND = "mcp-artifacts-admin"
INSTRUCTIONS = "The owner's artifact decisions (resolve, share, deploy confirm/discard); not for models."
_SLUG = {"type": "string", "maxLength": names.SLUG_MAX_CHARS, "pattern": names.SLUG_PATTERN}
_PENDING = {"type": "string", "pattern": r"^d-[0-9a-f]{12}$"}


def resolve_comment(args: dict[str, Any]) -> str:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER_CLI

    store.resolve_comment(args["slug"], OWNER_CLI, args["comment_id"])
    return f"Comment {args['comment_id']} resolved."


def share(args: dict[str, Any]) -> str:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER_CLI

    shared = bool(args.get("shared", True))
    store.update(args["slug"], OWNER_CLI, shared=shared)
    return (f"{args['slug']} is shared with every session." if shared
            else f"{args['slug']} is back to its own conversation tree.")


#: An upload's name: what :func:`kirocrew_core.artifacts.cli.save` makes (``up-`` and 24 hex digits).
UPLOAD_PATTERN = r"^up-[0-9a-f]{24}$"


def save_upload(args: dict[str, Any]) -> str:
    """``artifact_save`` for content the owner's CLI left in the uploads folder (too large for one message).

    Only a name inside that folder is taken, never a path, and the file is read with the 25 MiB cap
    (refused while it is read); it is removed whatever the outcome.
    """
    from kirocrew_core import home
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER_CLI

    upload = home.artifact_uploads_dir() / args["upload"]
    try:
        kind = names.check_kind(args.get("kind", "markdown"))
        new = store.NewArtifact(
            name=names.check_name(args["name"]), content=store.read_content(str(upload)),
            kind=kind, slug=args.get("slug"), description=names.check_description(args.get("description", "")),
            tags=tuple(names.check_tags(args.get("tags", []))), folder=args.get("folder"))
        meta = store.save(new, OWNER_CLI).meta
    finally:
        upload.unlink(missing_ok=True)
    return f"Saved artifact: slug={meta['slug']} version={meta['version']}\nsource={meta['source']}"


def confirm(args: dict[str, Any]) -> str:
    from kirocrew_core.artifacts import deploy

    return deploy.confirm(args["id"])


def discard(args: dict[str, Any]) -> str:
    from kirocrew_core.artifacts import deploy

    entry = deploy.discard(args["id"])
    return f"Discarded deploy {entry.id} ({entry.slug} v{entry.version} -> {entry.profile}:{entry.site_id})."


def pending(args: dict[str, Any]) -> str:
    import json

    from kirocrew_core.artifacts import deploy

    entries = deploy.pending()
    if args.get("json"):
        return json.dumps([e.as_dict() for e in entries], indent=2)
    if not entries:
        return "No deploys wait for confirmation."
    return "\n".join(e.line() for e in entries)


def admin_tools() -> dict[str, CoreMcpTool]:
    from kirocrew_core.coretools.person_tools import person_tool as tool

    found = [
        tool("artifact_resolve_comment", "resolve a review comment",
             _schema({"slug": _SLUG, "comment_id": {"type": "string", "pattern": names.COMMENT_ID_PATTERN}},
                     ("slug", "comment_id")), resolve_comment),
        tool("artifact_share", "share an artifact with every session (or stop)",
             _schema({"slug": _SLUG, "shared": {"type": "boolean", "default": True}}, ("slug",)), share),
        tool("artifact_save_upload", "save an artifact from an upload of the owner's command",
             _schema({"upload": {"type": "string", "pattern": UPLOAD_PATTERN},
                      "name": {"type": "string", "minLength": 1, "maxLength": names.NAME_MAX_CHARS},
                      "slug": _SLUG, "kind": {"type": "string"},
                      "description": {"type": "string", "maxLength": names.DESCRIPTION_MAX_CHARS},
                      "tags": {"type": "array", "maxItems": names.MAX_TAGS, "items": {"type": "string"}},
                      "folder": {"type": "string", "maxLength": names.FOLDER_REF_MAX_CHARS}},
                     ("upload", "name")), save_upload),
        tool("deploy_confirm", "confirm a pending deploy", _schema({"id": _PENDING}, ("id",)), confirm),
        tool("deploy_discard", "discard a pending deploy", _schema({"id": _PENDING}, ("id",)), discard),
        tool("deploy_list", "list the pending deploys", _schema({"json": {"type": "boolean"}}), pending,
             read_only=True),
    ]
    return {t.name: t for t in found}


def hosted_server() -> HostedMcpServer:
    from kirocrew_core.coretools.person_tools import admin_server

    return admin_server(ADMIN_SERVER, ADMIN_COMMAND, admin_tools, INSTRUCTIONS,
                        "The owner's artifact decisions (resolve, share, deploy); no agent config names it.")
