"""Disconnect: remove a provider's MCP entry and, when nobody else holds it, kiro-cli's grant.

Removing the entry alone would hide a connection, not end it: kiro-cli's grant
artifacts would let the next Connect resume the old grant silently. So one
transaction, under the locks every MCP writer takes, (1) takes a census of
every source that can hold the grant, (2) purges the entry from the scopes that
configure this provider *at its endpoint*, (3) unlinks each owned grant pair no
other entry shares, and (4) rebuilds the agent file. Nothing here can revoke at
the provider, and nothing says it did.

Two identities, because they disagree in both directions:

- :func:`normalized_endpoint` (entry identity, the card's match on name + url)
  keeps the query and strips a trailing slash;
- :func:`kirocrew_core.grants.grant_key` (grant identity, the artifacts' file
  names) drops the query and keeps the slash.

Key equality is trusted only inside the provable set (:func:`artifact_key`),
where kiro-cli's WHATWG parser and Python's ``urlsplit`` serialize a URL the
same way; anything else fails closed as an incomplete census. The fail-closed
rule is asymmetric: the revoke needs proof of *no* sharer, so any unreadable
source keeps the grant; the purge acts only on a scope it read and matched, so
an unreadable scope is simply not purged. Artifacts are stat'd and unlinked,
never opened.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit

from kirocrew_core import home
from kirocrew_core.grants import REGISTRATION_SUFFIX, TOKEN_SUFFIX, artifact_presence, grant_key
from kirocrew_core.jsonfile import ReadState, read_json

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager
    from kirocrew_mcp.public import Scope

    from kirocrew_connections.registry import Provider

log = logging.getLogger(__name__)

AUDIT_EVENT = "connections.disconnect"
#: The locks every gateway MCP writer takes, in :data:`kirocrew_core.locks.LOCK_ORDER`; the
#: rebuild re-enters ``agent-file``.
TRANSACTION_LOCKS = ("crew-mcp", "agent-file", "connections")
#: Not a hex digest, so it can never equal a real key.
UNPROVABLE = "\x00unprovable-url"
UNLINK_ATTEMPTS = 2
ARTIFACT_LABELS = (("token", TOKEN_SUFFIX), ("registration", REGISTRATION_SUFFIX))
DEFAULT_PORTS = {"http": 80, "https": 443}

_PROVABLE_HOST = re.compile(r"[a-z0-9._-]+")
_PROVABLE_PATH = re.compile(r"[\x21-\x7e]*")
_DOT_SEGMENT = re.compile(r"(?:\A|/)\.\.?(?:/|\Z)")


# -- identities ---------------------------------------------------------------------


def normalized_endpoint(value: Any) -> str | None:
    """The endpoint an entry talks to: scheme and host lowercased, default port dropped,
    userinfo and query kept, trailing ``/`` stripped, fragment dropped.

    None for a non-string, an empty string, a bad port, or a URL without scheme or host.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    split = split_url(text)
    if split is None:
        return None
    parts, port, hostname = split
    scheme = parts.scheme.lower()
    userinfo, at, _ = parts.netloc.rpartition("@")
    host = f"[{hostname}]" if ":" in hostname else hostname
    netloc = f"{userinfo}{at}{host}"
    if port is not None and port != DEFAULT_PORTS.get(scheme):
        netloc += f":{port}"
    endpoint = f"{scheme}://{netloc}{parts.path.rstrip('/')}"
    return f"{endpoint}?{parts.query}" if parts.query else endpoint


def split_url(url: str) -> tuple[SplitResult, int | None, str] | None:
    """``urlsplit`` with its port and hostname, or None when there is no scheme, no host or a bad port."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts, port, parts.hostname


def is_provable(url: str) -> bool | None:
    """Whether ``grant_key(url)`` is provably the key kiro-cli computes; None for junk.

    Provable: a lowercase-ASCII LDH host (urlsplit already lowercases it), a
    printable-ASCII path with no ``%``, no backslash and no ``.``/``..``
    segment, and not ``http`` with an explicit ``:80`` (WHATWG drops it, the
    key keeps it). Outside that, WHATWG percent-decodes, IDNA-maps, folds ``\\``
    and removes dot segments, so the two hashes may differ either way.
    """
    split = split_url(url)
    if split is None:
        return None
    parts, port, hostname = split
    if not _PROVABLE_HOST.fullmatch(hostname):
        return False
    path = parts.path
    if not _PROVABLE_PATH.fullmatch(path) or "%" in path or "\\" in path or _DOT_SEGMENT.search(path):
        return False
    return not (parts.scheme.lower() == "http" and port == 80)


def artifact_key(url: Any) -> str | None:
    """The grant key of ``url`` when provable, :data:`UNPROVABLE` when not, None for junk.

    Junk (not a string, no host, a bad port, a host IDNA refuses such as an
    empty label) is "not ours": kiro-cli cannot hold our grant under it, and
    failing closed on it would let one junk line block every disconnect.
    """
    if not isinstance(url, str):
        return None
    provable = is_provable(url)
    if provable is None:
        return None
    if not provable:
        return UNPROVABLE
    try:
        return grant_key(url)
    except ValueError:  # includes UnicodeError from the IDNA codec
        return None


# -- the census -----------------------------------------------------------------------


@dataclass(frozen=True)
class CensusEntry:
    """One ``mcpServers`` entry somewhere kiro-cli may read it.

    ``scope`` is set for an mcp.json scope (a purge candidate); agent specs are
    never purged. ``mirror`` marks the rendered ``kirocrew.json``, which
    reflects the scopes.
    """

    source: str
    name: str
    url: Any
    scope: Scope | None = None
    mirror: bool = False


@dataclass
class Census:
    entries: list[CensusEntry] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    documents: dict[str, tuple[Scope, dict[str, Any]]] = field(default_factory=dict)


def _servers_of(document: Any) -> dict[Any, Any] | None:
    """``mcpServers`` of a document; None when the document's entries are unknowable."""
    if not isinstance(document, dict):
        return None
    servers = document.get("mcpServers")
    if servers is None:
        return {}
    return servers if isinstance(servers, dict) else None


def _read_entries(path: Path) -> tuple[dict[Any, Any] | None, dict[str, Any] | None]:
    """``(mcpServers, document)``; ``(None, None)`` when the file's entries cannot be known.

    Absence and an empty file are genuine absence; unreadable bytes, malformed
    JSON, a directory in the file's place, ``[]`` or ``{"mcpServers": []}`` are not.
    """
    read = read_json(path)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return {}, {}
    if read.state is not ReadState.DOCUMENT:
        return None, None
    servers = _servers_of(read.document)
    return (servers, read.document) if servers is not None else (None, None)


def _add_entries(census: Census, source: str, servers: dict[Any, Any], *, scope: Scope | None = None,
                 mirror: bool = False) -> None:
    for name, entry in servers.items():
        if isinstance(name, str) and isinstance(entry, dict):
            census.entries.append(CensusEntry(source, name, entry.get("url"), scope, mirror))


def _census_agents_dir(census: Census, directory: Path, rendered: Path | None) -> None:
    # os.listdir, not Path.glob: glob swallows scan errors, and an unlistable
    # directory would read as "no sharers".
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return
    except OSError:
        census.unreadable.append(str(directory))
        return
    for name in names:
        if not name.endswith(".json"):
            continue
        path = directory / name
        servers, _ = _read_entries(path)
        if servers is None:
            census.unreadable.append(str(path))
            continue
        _add_entries(census, str(path), servers, mirror=rendered is not None and path == rendered)


#: The config key naming project roots beyond the workspaces plugins know (declared in core's config).
PROJECT_ROOTS_KEY = "connections.project_roots"


def _absolute_paths(value: object) -> str | None:
    """``known_workspaces()``'s result check: a list of absolute paths."""
    if not isinstance(value, list) or not all(isinstance(item, Path) and item.is_absolute() for item in value):
        return "known_workspaces() must return a list of absolute paths"
    return None


def workspace_agent_dirs(pm: KirocrewPluginManager) -> tuple[list[Path], list[str]]:
    """``<workspace>/.kiro/agents`` for every workspace kirocrew knows, and the sources that could not be read.

    The workspaces are every ``known_workspaces()`` answer (the conversations'
    checkouts) plus ``connections.project_roots``; kiro-cli loads a project's
    agents when it runs there, so each one can hold the grant. A plugin whose
    answer failed, or a config file that cannot be read, is named in the second
    list: the census is then incomplete and the grant is kept, because a sharer
    it would have named may exist.
    """
    from kirocrew_core.config import load_config
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.plugins import call_hook

    roots: list[Path] = []
    unreadable: list[str] = []
    call = call_hook(pm, "known_workspaces", on_error="skip", check=_absolute_paths)
    for failure in call.failures:
        unreadable.append(f"known_workspaces() of plugin {failure.plugin}")
    for contribution in call.contributions:
        roots.extend(contribution.value)
    try:
        configured = load_config().get(PROJECT_ROOTS_KEY)
    except KirocrewError as exc:
        log.warning("could not read %s: %s", PROJECT_ROOTS_KEY, exc)
        unreadable.append(f"config.toml ({PROJECT_ROOTS_KEY})")
    else:
        roots.extend(Path(root).expanduser() for root in configured)
    dirs: dict[Path, None] = {}
    for root in roots:
        dirs.setdefault(Path(os.path.normpath(root)) / ".kiro" / "agents")
    return list(dirs), unreadable


def take_census(scopes: Sequence[Scope], project_agent_dirs: Iterable[Path] = ()) -> Census:
    """Read every source that can hold a grant: each scope, every user agent spec, project agents.

    Reads only. Call it under :data:`TRANSACTION_LOCKS` when acting on it.
    """
    census = Census()
    for scope in scopes:
        servers, document = _read_entries(scope.path)
        if servers is None or document is None:
            census.unreadable.append(str(scope.path))
            continue
        census.documents[scope.id] = (scope, document)
        _add_entries(census, str(scope.path), servers, scope=scope)
    _census_agents_dir(census, home.kiro_agents_dir(), home.rendered_agent_file())
    for directory in project_agent_dirs:
        _census_agents_dir(census, Path(directory), None)
    return census


# -- judgement ----------------------------------------------------------------------------


@dataclass
class Judgement:
    """What the census decides: which scope entries to purge, which grant keys to revoke."""

    owned: list[CensusEntry]
    owned_keys: set[str]
    shared_with: dict[str, set[str]]
    incomplete: bool
    unreadable: list[str]

    @property
    def revocable(self) -> list[str]:
        """Owned keys with no sharer; none at all when the census had a gap."""
        if self.incomplete:
            return []
        return sorted(k for k in self.owned_keys if not self.shared_with.get(k))


def judge(provider: Provider, census: Census) -> Judgement:
    """Ownership first (name AND endpoint, scopes only), then a sharer test of everything else."""
    endpoint = normalized_endpoint(provider.mcp_url)
    owned = [
        e for e in census.entries
        if e.scope is not None and e.name == provider.slug and endpoint is not None
        and normalized_endpoint(e.url) == endpoint
    ]
    unreadable = list(census.unreadable)
    incomplete = bool(unreadable)
    # The registry key is ours even when no scope configures it; each owned entry's own
    # key too (a trailing-slash entry is the same endpoint but a different pair).
    owned_keys: set[str] = set()
    for url in [provider.mcp_url, *(e.url for e in owned)]:
        key = artifact_key(url)
        if key == UNPROVABLE:
            incomplete = True
        elif key is not None:
            owned_keys.add(key)
    shared_with: dict[str, set[str]] = {}
    purging = bool(owned)
    for entry in census.entries:
        if entry in owned:
            continue
        # The purge strips our name from the rendered file itself, so that copy reflects
        # what this transaction removes; with nothing owned it is a holder like any other.
        if entry.mirror and purging and entry.name == provider.slug:
            continue
        key = artifact_key(entry.url)
        if key == UNPROVABLE:
            incomplete = True
            if entry.source not in unreadable:
                unreadable.append(entry.source)
        elif key is not None and key in owned_keys:
            shared_with.setdefault(key, set()).add(entry.name)
    return Judgement(owned, owned_keys, shared_with, incomplete, unreadable)


# -- acting ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DisconnectResult:
    """The response fields; see the spec's Disconnect table for what each establishes."""

    slug: str
    grant_removed: bool
    grant_surviving: list[str]
    entry_removed: bool
    grant_shared_with: list[str]
    grant_census_incomplete: bool
    grant_census_unreadable: list[str]
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "slug": self.slug,
            "grantRemoved": self.grant_removed,
            "grantSurviving": list(self.grant_surviving),
            "entryRemoved": self.entry_removed,
            "grantSharedWith": list(self.grant_shared_with),
            "grantCensusIncomplete": self.grant_census_incomplete,
            "grantCensusUnreadable": list(self.grant_census_unreadable),
        }


def _artifact_paths(key: str) -> list[tuple[str, Path]]:
    cache = home.oauth_cache_dir()
    return [(label, cache / f"{key}{suffix}") for label, suffix in ARTIFACT_LABELS]


def _unlink(path: Path) -> bool:
    """Unlink without opening; True when this call removed it."""
    for _ in range(UNLINK_ATTEMPTS):
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False
        except OSError:
            continue
    return False


def revoke_local_grants(keys: Iterable[str]) -> tuple[bool, list[str]]:
    """Unlink each key's pair; ``(anything removed, labels still on disk)``.

    Survivors come from a fresh stat of the attempted pairs, never from what the
    unlink loop believed; an unknowable stat counts as surviving, because calling
    it gone could hide a usable refresh token.
    """
    removed = False
    attempted: list[tuple[str, Path]] = []
    for key in keys:
        for label, path in _artifact_paths(key):
            removed = _unlink(path) or removed
            attempted.append((label, path))
    surviving = sorted({label for label, path in attempted if artifact_presence(path) is not False})
    return removed, surviving


def _purge(owned: Sequence[CensusEntry], census: Census, warnings: list[str]) -> bool:
    from kirocrew_mcp.public import write_scope_document

    by_scope: dict[str, list[str]] = {}
    for entry in owned:
        assert entry.scope is not None
        by_scope.setdefault(entry.scope.id, []).append(entry.name)
    removed = False
    for scope_id, names in by_scope.items():
        scope, document = census.documents[scope_id]
        servers = document["mcpServers"]
        for name in names:
            servers.pop(name, None)
        try:
            write_scope_document(scope, document)
        except OSError as exc:
            warnings.append(f"could not write {scope.path}: {exc.strerror or exc}")
            continue
        removed = True
    return removed


def _rebuild(slug: str, pm: KirocrewPluginManager, warnings: list[str]) -> None:
    from kirocrew_core.errors import KirocrewError
    from kirocrew_mcp.public import remove_then_rebuild

    try:
        refresh = remove_then_rebuild([slug], pm=pm)
    except (KirocrewError, OSError) as exc:
        warnings.append(f"could not rebuild the agent file: {exc}")
        return
    if refresh.error is not None:
        warnings.append(f"could not rebuild the agent file: {refresh.error}")
    elif refresh.report is not None:
        warnings.extend(refresh.report.warnings)


def remove_provider_entry(provider: Provider, *, pm: KirocrewPluginManager | None = None,
                          project_agent_dirs: Iterable[Path] | None = None) -> DisconnectResult:
    """The whole transaction, synchronous: census, purge, revoke and rebuild under one lock hold.

    ``project_agent_dirs`` None (the route) means every workspace kirocrew knows
    (:func:`workspace_agent_dirs`). Run it in a worker thread: the file locks
    belong to that thread, so a cancelled request cannot release them while the
    work is half done.
    """
    from contextlib import ExitStack

    from kirocrew_core.locks import named_lock
    from kirocrew_core.plugins import get_plugin_manager
    from kirocrew_mcp.public import all_scopes

    manager = pm if pm is not None else get_plugin_manager()
    warnings: list[str] = []
    unknown: list[str] = []
    if project_agent_dirs is None:
        project_agent_dirs, unknown = workspace_agent_dirs(manager)
    with ExitStack() as stack:
        for name in TRANSACTION_LOCKS:
            stack.enter_context(named_lock(name))
        census = take_census(all_scopes(manager), project_agent_dirs)
        census.unreadable.extend(unknown)
        verdict = judge(provider, census)
        entry_removed = _purge(verdict.owned, census, warnings) if verdict.owned else False
        revocable = verdict.revocable
        grant_removed, surviving = revoke_local_grants(revocable) if revocable else (False, [])
        if entry_removed:
            _rebuild(provider.slug, manager, warnings)
    shared = sorted({name for names in verdict.shared_with.values() for name in names})
    result = DisconnectResult(
        slug=provider.slug,
        grant_removed=grant_removed,
        grant_surviving=surviving,
        entry_removed=entry_removed,
        grant_shared_with=shared,
        grant_census_incomplete=verdict.incomplete,
        grant_census_unreadable=verdict.unreadable,
        warnings=warnings,
    )
    _audit(result)
    return result


def _audit(result: DisconnectResult) -> None:
    from kirocrew_core import audit

    try:
        audit.record(
            AUDIT_EVENT,
            actor="owner",
            outcome="partial" if result.grant_surviving else "ok",
            slug=result.slug,
            grant_removed=result.grant_removed,
            grant_surviving=result.grant_surviving,
            entry_removed=result.entry_removed,
            grant_shared_with=result.grant_shared_with,
            grant_census_incomplete=result.grant_census_incomplete,
            provider_revoked=False,
        )
    except Exception as exc:  # noqa: BLE001 - the act is done; failing the response now would misreport it
        log.warning("could not record %s in the security event log: %s", AUDIT_EVENT, exc)
        result.warnings.append(f"could not record {AUDIT_EVENT}: {exc}")


async def cancel_mint(slug: str) -> bool:
    """Dispose any in-flight mint for ``slug`` first: a grant landing after the user disowned
    the connection is not a race worth keeping. No mint engine installed means no mint."""
    try:
        from kirocrew_connections.mint import mint_engine
    except ModuleNotFoundError as exc:
        if exc.name != "kirocrew_connections.mint":
            raise
        return False
    return await mint_engine().cancel_slug(slug)


async def disconnect_provider(provider: Provider, *, pm: KirocrewPluginManager | None = None,
                              project_agent_dirs: Iterable[Path] | None = None) -> DisconnectResult:
    """Cancel the mint, then run :func:`remove_provider_entry` off the event loop.

    ``project_agent_dirs`` None censuses every workspace kirocrew knows.
    """
    await cancel_mint(provider.slug)
    dirs = None if project_agent_dirs is None else list(project_agent_dirs)
    return await asyncio.to_thread(remove_provider_entry, provider, pm=pm, project_agent_dirs=dirs)
