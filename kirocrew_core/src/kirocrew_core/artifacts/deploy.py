"""``deploy_artifact``: a session asks to publish an artifact; only the owner makes it happen.

Three gates, in order, and nothing is queued unless all pass:

1. **The credential scan blocks.** The content is run through the same secret detection that
   redacts every result (:func:`kirocrew_core.redaction.redact_secrets`: the known secret values
   of this machine and credential shapes); a finding refuses the deploy (``deploy_blocked``),
   naming the lines, never the values. It runs again when the owner confirms.
2. **The destination exists and is ready** (``deploy_destinations()``; the built-in ``local`` one
   needs ``artifacts.deploy_dir``).
3. **A pending entry, never a publication.** At most :data:`MAX_PENDING` wait, each for
   :data:`PENDING_SECS`; the owner confirms one (``kirocrew deploy confirm``), which claims it
   atomically (removes it under the ``deploys`` lock before publishing), so one request publishes
   at most once, or discards it. A session cannot confirm: the confirm path is the owner's command
   and checks the caller is the person.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.artifacts import names
from kirocrew_core.errors import BadInputError, KirocrewError

if TYPE_CHECKING:
    from kirocrew_core.artifacts.access import Actor
    from kirocrew_core.contributions import CoreMcpTool, DeployDestination, Publication
    from kirocrew_core.coretools.contract import ToolCall

MAX_PENDING = 20
PENDING_SECS = 3600
LOCK = "deploys"
SITE_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$"
PROFILE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
LOCAL = "local"
DEPLOY_DIR_KEY = "artifacts.deploy_dir"
_PENDING_ID = re.compile(r"^d-[0-9a-f]{12}$")
_MARKER = ".kirocrew-deploy.json"
_FINDING = "\x00kirocrew-finding\x00"  # a marker no content holds (content has no NUL)
_EXTENSIONS = {"markdown": "md", "html": "html", "svg": "svg", "json": "json", "text": "txt"}
_IMAGE_EXTENSIONS = {"png": "png", "jpeg": "jpg", "gif": "gif", "webp": "webp"}

DEPLOY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "site_id": {"type": "string", "maxLength": 64, "pattern": SITE_PATTERN,
                    "description": "The published site's name (lowercase letters, digits, inner hyphens)."},
        "artifact_slug": {"type": "string", "maxLength": names.SLUG_MAX_CHARS, "pattern": names.SLUG_PATTERN,
                          "description": "The artifact to publish (its live version)."},
        "profile": {"type": "string", "maxLength": 64, "pattern": PROFILE_PATTERN, "default": LOCAL,
                    "description": "The destination (local: the owner's configured web-root directory)."},
        "ttl_hours": {"type": "integer", "minimum": 0, "maximum": 8760, "default": 72,
                      "description": "How long it should stay up (0: for good); passed to the destination, which "
                                     "may not expire it (the local directory keeps it until replaced)."},
    },
    "required": ["site_id", "artifact_slug"],
    "additionalProperties": False,
}


# --- the scan -------------------------------------------------------------------------------------


def scan(content: str) -> list[int]:
    """The lines holding a credential, each once ([] for clean content), from one pass of the redaction.

    A finding that spans lines (a private key block) is counted on the line it starts on; lines after
    it are numbered as the redacted text numbers them.
    """
    from kirocrew_core.redaction import redact_secrets

    redacted = redact_secrets(content.replace(_FINDING, ""), _FINDING)
    lines: list[int] = []
    number, counted = 1, 0
    position = redacted.find(_FINDING)
    while position >= 0:
        number += redacted.count("\n", counted, position)
        counted = position
        if not lines or lines[-1] != number:
            lines.append(number)
        position = redacted.find(_FINDING, position + len(_FINDING))
    return lines


def blocked_text(lines: list[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:20]) + (" …" if len(lines) > 20 else "")
    return (f"Deploy BLOCKED by scan ({len(lines)} finding(s)): a credential-shaped value or a secret this "
            f"machine holds on line(s) {shown}. Remove it, update the artifact, and ask again; nothing was queued.")


# --- destinations ---------------------------------------------------------------------------------


def destinations() -> dict[str, DeployDestination]:
    from kirocrew_core.contributions import DeployDestination, flatten
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    found: dict[str, DeployDestination] = {}
    for contribution in flatten(call_hook(get_plugin_manager(), "deploy_destinations", on_error="skip").contributions):
        value = contribution.value
        if isinstance(value, DeployDestination) and value.name not in found:
            found[value.name] = value
    return found


def destination(profile: str) -> DeployDestination:
    found = destinations()
    chosen = found.get(profile)
    if chosen is None:
        raise BadInputError(f"no deploy destination {profile}; there are: {', '.join(sorted(found)) or 'none'}",
                            code="deploy_destination_unknown")
    problem = chosen.ready()
    if problem:
        raise BadInputError(f"the {profile} destination cannot publish: {problem}", code="deploy_not_configured")
    return chosen


def local_directory() -> Path | None:
    from kirocrew_core.config import get_value

    value = str(get_value(DEPLOY_DIR_KEY) or "")
    return Path(value).expanduser() if value else None


def local_ready() -> str | None:
    directory = local_directory()
    if directory is None:
        return f"no web root is configured (kirocrew config set {DEPLOY_DIR_KEY} /path/to/webroot)"
    if not directory.is_dir():
        return f"the configured web root {directory} is not a directory"
    return None


def publish_local(publication: Publication) -> str:
    """Write the version as ``<web root>/<site_id>/index.<ext>``; a site folder kirocrew did not make is refused."""
    from kirocrew_core.jsonfile import read_json, write_bytes_atomic, write_json_atomic

    directory = local_directory()
    problem = local_ready()
    if directory is None or problem:
        raise KirocrewError(problem or "no web root", code="deploy_not_configured")
    if not re.match(SITE_PATTERN, publication.site_id):
        raise BadInputError("not a site id", code="invalid_arguments")
    site = directory / publication.site_id
    marker = site / _MARKER
    if site.is_symlink() or (site.exists() and not site.is_dir()):
        raise KirocrewError(f"{site} is not a folder kirocrew made; nothing was published",
                            code="deploy_target_foreign")
    if site.exists() and not marker.is_file() and any(site.iterdir()):
        raise KirocrewError(f"{site} holds files kirocrew did not publish; nothing was published (choose another "
                            "site_id)", code="deploy_target_foreign")
    data, extension = _file_of(publication)
    target = site / f"index.{extension}"
    if target.is_symlink():
        raise KirocrewError(f"{target} is a link; nothing was published", code="deploy_target_foreign")
    site.mkdir(mode=0o755, exist_ok=True)
    earlier = read_json(marker).document if marker.is_file() else None
    write_bytes_atomic(target, data, mode=0o644)
    previous = earlier.get("file") if isinstance(earlier, dict) else None
    if isinstance(previous, str) and previous != target.name and re.match(r"^index\.[a-z]{2,4}$", previous):
        (site / previous).unlink(missing_ok=True)
    write_json_atomic(marker, {"slug": publication.slug, "version": publication.version, "file": target.name,
                               "published_at": iso_time(time.time())}, mode=0o644)
    return (f"Published {publication.slug} v{publication.version} into the local web root: {target}. kirocrew "
            "serves nothing itself; it is public to whoever can read that directory or whatever serves it.")


def _file_of(publication: Publication) -> tuple[bytes, str]:
    if publication.kind != "image":
        return publication.content, _EXTENSIONS.get(publication.kind, "txt")
    import base64

    header, _, body = publication.content.decode("ascii", "replace").partition(",")
    subtype = header.removeprefix("data:image/").removesuffix(";base64")
    return base64.b64decode(body, validate=True), _IMAGE_EXTENSIONS.get(subtype, "bin")


def local_destination() -> DeployDestination:
    from kirocrew_core.contributions import DeployDestination

    return DeployDestination(LOCAL, f"Copies the artifact into a local directory (the {DEPLOY_DIR_KEY} web root); "
                             "no network.", publish_local, local_ready)


# --- pending --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    id: str
    slug: str
    version: int
    site_id: str
    profile: str
    ttl_hours: int
    requested_by: str
    created_at: float
    expires_at: float

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))

    def line(self) -> str:
        left = max(0, int(self.expires_at - time.time()) // 60)
        return (f"{self.id}  {self.slug} v{self.version} -> {self.profile}:{self.site_id}  by {self.requested_by}  "
                f"expires in {left} min")


def iso_time(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")


def _load() -> list[Pending]:
    from kirocrew_core.errors import MalformedFileError
    from kirocrew_core.jsonfile import ReadState, read_json

    read = read_json(home.pending_deploys_file())
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return []
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, list):
        raise MalformedFileError(read.path, read.error or "expected a JSON list", code="deploy_store_unreadable")
    entries = []
    for item in read.document:
        try:
            entries.append(Pending(**item))
        except TypeError:
            continue  # not an entry this version wrote: it cannot be confirmed, and it is dropped on the next write
    return entries


def _save(entries: list[Pending]) -> None:
    from kirocrew_core.jsonfile import write_json_atomic

    write_json_atomic(home.pending_deploys_file(), [e.as_dict() for e in entries], mode=0o600)


def pending() -> list[Pending]:
    """The deploys waiting now (expired ones left out)."""
    from kirocrew_core.locks import named_lock

    with named_lock(LOCK):
        return [e for e in _load() if e.expires_at > time.time()]


def request(actor: Actor, slug: str, site_id: str, profile: str, ttl_hours: int) -> tuple[Pending, dict[str, Any]]:
    """Scan, check the destination, queue; :class:`KirocrewError` with nothing queued otherwise."""
    from kirocrew_core.artifacts import store
    from kirocrew_core.locks import named_lock

    meta, content = store.get(slug, actor)
    findings = scan(content)
    if findings:
        raise KirocrewError(blocked_text(findings), code="deploy_blocked")
    destination(profile)
    now = time.time()
    entry = Pending("d-" + secrets.token_hex(6), meta["slug"], int(meta["version"]), site_id, profile, ttl_hours,
                    actor.label, now, now + PENDING_SECS)
    with named_lock(LOCK):
        live = [e for e in _load() if e.expires_at > now]
        if len(live) >= MAX_PENDING:
            raise KirocrewError(f"{MAX_PENDING} deploys already wait for the owner; ask them to confirm or discard "
                                "some first", code="deploy_pending_full")
        _save([*live, entry])
    return entry, meta


def claim(pending_id: str) -> Pending:
    """Remove and return a waiting deploy (atomic: a second claim of the same id finds nothing)."""
    from kirocrew_core.locks import named_lock

    if not _PENDING_ID.match(pending_id):
        raise BadInputError("not a pending deploy id (d-…)", code="deploy_not_found")
    with named_lock(LOCK):
        entries = _load()
        found = next((e for e in entries if e.id == pending_id), None)
        if found is None:
            raise BadInputError(f"no pending deploy {pending_id} (confirmed, discarded or never made)",
                                code="deploy_not_found")
        _save([e for e in entries if e.id != pending_id and e.expires_at > time.time()])
    if found.expires_at <= time.time():
        raise BadInputError(f"pending deploy {pending_id} expired; ask for it again", code="deploy_expired")
    return found


def confirm(pending_id: str) -> str:
    """The owner's confirmation: claim, read that version, scan again, publish. Returns the destination's sentence."""
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER
    from kirocrew_core.contributions import Publication

    entry = claim(pending_id)
    meta, content = store.get(entry.slug, OWNER, entry.version)
    findings = scan(content)
    if findings:
        raise KirocrewError(blocked_text(findings), code="deploy_blocked")
    chosen = destination(entry.profile)
    return chosen.publish(Publication(entry.site_id, entry.slug, entry.version, str(meta["kind"]),
                                      content.encode("utf-8"), entry.ttl_hours))


def discard(pending_id: str) -> Pending:
    try:
        return claim(pending_id)
    except BadInputError as exc:
        if exc.code == "deploy_expired":
            raise BadInputError(f"pending deploy {pending_id} had already expired; it is gone now",
                                code="deploy_expired") from None
        raise


# --- the tool -------------------------------------------------------------------------------------


async def deploy_artifact(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_core.artifacts.access import actor_of

    def work() -> str:
        actor = actor_of(call)
        entry, meta = request(actor, args["artifact_slug"], args["site_id"], args.get("profile", LOCAL),
                              int(args.get("ttl_hours", 72)))
        chosen = destinations()[entry.profile]
        return "\n".join([
            f"Deploy pending the owner's confirmation (id={entry.id}, expires {iso_time(entry.expires_at)}):",
            f"  {entry.slug} v{entry.version} ({meta['kind']}, {meta.get('size', 0)} bytes) -> {entry.profile} as "
            f"site {entry.site_id}",
            f"  destination: {chosen.description}",
            "WARNING: once confirmed it is public, without authentication, to whoever can reach the destination.",
            f"Nothing is published until the owner runs: kirocrew deploy confirm {entry.id}",
        ])

    return await asyncio.to_thread(work)


def deploy_tool() -> CoreMcpTool:
    from kirocrew_core.contributions import CoreMcpTool

    return CoreMcpTool("deploy_artifact", "Ask to publish an artifact's live version. A credential in it blocks the "
                       "request; otherwise it waits (1 h) for the owner to confirm: you cannot publish by yourself.",
                       DEPLOY_SCHEMA, deploy_artifact, identity="lenient")
