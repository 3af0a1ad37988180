"""``kirocrew artifact …`` and ``kirocrew deploy …``: the owner's twins of the artifact tools.

Each twin calls one tool on the host as a ``cli`` client (the host is started in the background
if none runs), so who it acts for is decided by its process ancestry exactly as for the tools:
from the owner's shell it is the owner (source ``cli``), from a crew session's shell it is that
session. The owner's decisions (``resolve``, ``share``, ``deploy confirm|discard|list``) go to the
``kirocrew-artifacts-admin`` server, which refuses a session. With ``KIROCREW_NO_HOST=1`` the same
handlers run in this process as the person. Registered lazily by :mod:`kirocrew_core.builtin.artifacts`.
"""

from __future__ import annotations

import json
from typing import Any

import click

from kirocrew_core.artifacts import names
from kirocrew_core.artifacts.store import read_content
from kirocrew_core.coretools.directives import CORE_MCP_SERVER as CORE_SERVER


def call(server: str, tool: str, arguments: dict[str, Any]) -> str:
    """One tool call through the host, or in process as the person without one; a refusal raised with its code."""
    from kirocrew_core.host import twin

    return twin.call(server, tool, arguments, lambda: _in_process(server, tool, arguments))


async def _in_process(server: str, tool: str, arguments: dict[str, Any]) -> tuple[str, str | None]:
    from kirocrew_core.artifacts.admin import admin_tools
    from kirocrew_core.artifacts.tools import artifact_tools
    from kirocrew_core.coretools.server import CoreToolsServer
    from kirocrew_core.host.caller import CallerContext
    from kirocrew_core.host.protocol import SESSION_TYPE_CLI

    def source() -> dict[str, Any]:
        return admin_tools() if server != CORE_SERVER else {t.name: t for t in artifact_tools()}

    caller = CallerContext(session_key="", session_type=SESSION_TYPE_CLI, relay_pid=0, host_pid=None, raw={})
    core = CoreToolsServer(tool_source=source, server_name=server)
    return await core.call(tool, arguments, caller, as_person=True)


def _core(tool: str, arguments: dict[str, Any]) -> None:
    click.echo(call(CORE_SERVER, tool, arguments).rstrip("\n"))


def _admin(tool: str, arguments: dict[str, Any]) -> None:
    from kirocrew_core.artifacts.admin import ADMIN_SERVER

    click.echo(call(ADMIN_SERVER, tool, arguments).rstrip("\n"))


@click.group()
def artifact() -> None:
    """Artifacts sessions made for you: read, save, revise, review (twins of the artifact_* tools)."""


@artifact.command("list")
@click.option("--tag", default=None, help="Only artifacts with this tag.")
@click.option("--kind", type=click.Choice(names.KINDS), default=None)
@click.option("-q", "query", default=None, help="Words the name, slug or description contains.")
@click.option("--folder", default=None, help="Only artifacts filed directly in this folder (id or path).")
def list_(tag: str | None, kind: str | None, query: str | None, folder: str | None) -> None:
    """List artifacts, newest change first: slug  vN  kind  [tags]  name."""
    arguments = {k: v for k, v in (("tag", tag), ("kind", kind), ("q", query), ("folder", folder)) if v is not None}
    _core("artifact_list", arguments)


@artifact.command("show")
@click.argument("slug")
@click.option("--version", type=click.IntRange(1, names.MAX_VERSION), default=None, help="An earlier version.")
def show(slug: str, version: int | None) -> None:
    """Print an artifact's header lines and content."""
    _core("artifact_get", {"slug": slug, **({"version": version} if version else {})})


@artifact.command("save")
@click.argument("name")
@click.argument("source", metavar="FILE")
@click.option("--slug", default=None, help="The slug (refused if taken; default: from the name).")
@click.option("--kind", type=click.Choice(names.KINDS), default="markdown", show_default=True)
@click.option("--description", default=None)
@click.option("--tag", "tags", multiple=True, help="A tag (repeat for more).")
@click.option("--folder", default=None, help="A folder id or path (made if missing).")
def save(name: str, source: str, slug: str | None, kind: str, description: str | None, tags: tuple[str, ...],
         folder: str | None) -> None:
    """Save FILE (or - for stdin) as a new artifact called NAME."""
    content = read_content(source)
    arguments: dict[str, Any] = {"name": name, "kind": kind}
    for key, value in (("slug", slug), ("description", description), ("folder", folder)):
        if value is not None:
            arguments[key] = value
    if tags:
        arguments["tags"] = list(tags)
    if len(content.encode("utf-8")) <= INLINE_MAX_BYTES:
        _core("artifact_save", {**arguments, "content": content})
        return
    upload = _upload(content)
    try:
        _admin("artifact_save_upload", {**arguments, "upload": upload})
    finally:  # the host removes it once read; this is for a call that never reached it
        from kirocrew_core import home

        (home.artifact_uploads_dir() / upload).unlink(missing_ok=True)


#: Content up to this many bytes goes inside the tool call; the host reads a message of at most 4 MiB
#: (``protocol.MAX_LINE_BYTES``), and JSON escaping can grow text, so more goes as an upload.
INLINE_MAX_BYTES = 2 * 1024 * 1024


def _upload(content: str) -> str:
    """Leave ``content`` in the owner-only uploads folder for the host; the upload's name."""
    import secrets

    from kirocrew_core import home
    from kirocrew_core.jsonfile import write_bytes_atomic

    folder = home.artifact_uploads_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    upload = "up-" + secrets.token_hex(12)
    write_bytes_atomic(folder / upload, content.encode("utf-8"), secret=True)
    return upload


@artifact.command("versions")
@click.argument("slug")
def versions(slug: str) -> None:
    """The versions kept (the newest 50)."""
    _core("artifact_versions", {"slug": slug})


@artifact.command("revert")
@click.argument("slug")
@click.argument("version", type=click.IntRange(1, names.MAX_VERSION))
def revert(slug: str, version: int) -> None:
    """Make VERSION's content live again, as a new version."""
    _core("artifact_revert", {"slug": slug, "target_version": version})


@artifact.command("comments")
@click.argument("slug")
@click.option("--open", "open_only", is_flag=True, help="Leave out resolved comments.")
def comments(slug: str, open_only: bool) -> None:
    """The review comments, one per line (replies marked ↳)."""
    _core("artifact_get_comments", {"slug": slug, "exclude_resolved": open_only})


@artifact.command("comment")
@click.argument("slug")
@click.argument("text")
@click.option("--quote", default=None, help="Anchor the comment to this exact text of the content.")
@click.option("--reply-to", "parent_id", default=None, help="Reply to this comment id.")
def comment(slug: str, text: str, quote: str | None, parent_id: str | None) -> None:
    """Post a review comment for the session that made the artifact to read."""
    if parent_id is not None:
        _core("artifact_reply_comment", {"slug": slug, "parent_id": parent_id, "text": text})
        return
    _core("artifact_post_comment", {"slug": slug, "text": text, **({"quote": quote} if quote else {})})


@artifact.command("resolve")
@click.argument("slug")
@click.argument("comment_id")
def resolve(slug: str, comment_id: str) -> None:
    """Resolve a comment (the owner's alone)."""
    _admin("artifact_resolve_comment", {"slug": slug, "comment_id": comment_id})


@artifact.command("share")
@click.argument("slug")
@click.option("--off", is_flag=True, help="Stop sharing: back to the conversation tree that made it.")
def share(slug: str, off: bool) -> None:
    """Let every session see and revise the artifact (only you delete it)."""
    _admin("artifact_share", {"slug": slug, "shared": not off})


@artifact.command("delete")
@click.argument("slug")
@click.option("--yes", is_flag=True, help="Do not ask.")
def delete(slug: str, yes: bool) -> None:
    """Delete an artifact with its versions and comments."""
    if not yes:
        click.confirm(f"Delete {slug} with every version and comment?", abort=True)
    _core("artifact_delete", {"slug": slug})


@click.group()
def deploy() -> None:
    """Deploys sessions asked for (deploy_artifact): nothing is published until you confirm."""


@deploy.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the pending deploys as JSON.")
def deploy_list(as_json: bool) -> None:
    """The deploys waiting for you (each for an hour)."""
    text = call(_admin_server(), "deploy_list", {"json": as_json})
    click.echo(json.dumps(json.loads(text), indent=2) if as_json else text)


@deploy.command("confirm")
@click.argument("pending_id", metavar="ID")
def deploy_confirm(pending_id: str) -> None:
    """Publish a pending deploy (it is scanned again first)."""
    _admin("deploy_confirm", {"id": pending_id})


@deploy.command("discard")
@click.argument("pending_id", metavar="ID")
def deploy_discard(pending_id: str) -> None:
    """Drop a pending deploy."""
    _admin("deploy_discard", {"id": pending_id})


def _admin_server() -> str:
    from kirocrew_core.artifacts.admin import ADMIN_SERVER

    return ADMIN_SERVER
