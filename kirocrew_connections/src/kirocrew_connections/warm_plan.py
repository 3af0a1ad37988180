"""Which providers the warm table serves, and the agent specs one warm process mounts.

The *spec universe* is registry-derived and blind to grant and cancel state:
a plan that followed "who needs a URL now" would change on every consent and
every Cancel, and each change costs a respawn that destroys every other card's
consent listener. So the universe is the visible providers that are not
disabled in the MCP config and have a mintable entry (dynamic registration, or
a client id, and no fixed callback port); the *candidates* are the universe members whose grant is
confirmed absent (present is connected, unreadable is not an absence).

A configured entry that asks for a different URL, scopes or client than the
registry's is served by the cold path only: one shared process cannot honour
two authorization asks for one server. Everything here is synchronous and
touches files; coroutines reach it through :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kirocrew_core import grants, home

if TYPE_CHECKING:
    from kirocrew_connections.registry import Provider

log = logging.getLogger(__name__)

WARM_PREFIX = "kirocrew-mint-warm-"
BASE_AGENT = WARM_PREFIX + "base"
ALL_AGENT = WARM_PREFIX + "all"
SPEC_SENTINEL = "kirocrew warm mint spec (machine-written; safe to delete)"

AuthShape = tuple[str, tuple[str, ...], str | None]


def registry_entry(provider: Provider) -> dict[str, Any]:
    """The entry a warm spec mounts: the registry URL, plus the registry's public client id when it names one."""
    entry: dict[str, Any] = {"url": provider.mcp_url}
    if provider.client_id:
        entry["oauth"] = {"clientId": provider.client_id}
    return entry


def auth_shape(entry: Mapping[str, Any]) -> AuthShape:
    """``(url, scopes, client id)``: what kiro-cli asks the authorization server for with this entry."""
    scopes = entry.get("oauthScopes")
    oauth = entry.get("oauth")
    client = oauth.get("clientId") if isinstance(oauth, Mapping) else None
    return (str(entry.get("url", "")),
            tuple(str(s) for s in scopes) if isinstance(scopes, list) else (),
            client if isinstance(client, str) else None)


def mintable(provider: Provider) -> bool:
    """Dynamic registration or a client id (what kiro-cli needs to start a consent unattended), and no fixed port.

    A pre-registered provider (GitHub, Asana) is never warmed: its OAuth app
    names one fixed callback port, a warm session would hold that listener for
    as long as it lives (a TTL past its rows), and every cold Connect of that
    provider in the meantime could not listen. It always mints cold.
    """
    if provider.preregistered:
        return False
    return provider.l0.dcr or bool(provider.client_id)


def configured_entries() -> dict[str, Mapping[str, Any]] | None:
    """The rendered agent file's servers (what kiro-cli will run); None when it cannot be read."""
    from kirocrew_core.jsonfile import ReadState, read_json

    read = read_json(home.rendered_agent_file())
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return {}
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        return None
    servers = read.document.get("mcpServers")
    if not isinstance(servers, dict):
        return {}
    return {name: entry for name, entry in servers.items() if isinstance(entry, dict)}


def warm_entry(provider: Provider, alias: str, configured: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The provider's warm entry, or None when only the cold path can mint it.

    None for a provider kiro-cli cannot mint unattended, one the owner switched
    off (by slug or alias), and one whose configured entry at this grant asks for
    another URL, scopes or client than the registry's.
    """
    if not mintable(provider):
        return None
    entry = registry_entry(provider)
    for name in {provider.slug, alias}:
        found = configured.get(name)
        if found is None:
            continue
        if found.get("disabled") is True:
            return None
        url = found.get("url")
        try:
            same_grant = isinstance(url, str) and grants.grant_key(url) == grants.grant_key(provider.mcp_url)
        except ValueError:
            same_grant = False
        if same_grant and auth_shape(found) != auth_shape(entry):
            return None
    return entry


@dataclass(frozen=True)
class WarmPlan:
    """Every spec one warm process reads at spawn; ``entries``/``providers`` are keyed by server alias."""

    entries: Mapping[str, Mapping[str, Any]]
    providers: Mapping[str, Provider]
    specs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    digest: str = ""

    def shape(self, alias: str) -> AuthShape | None:
        entry = self.entries.get(alias)
        return auth_shape(entry) if entry is not None else None


def _spec(name: str, entries: Mapping[str, Mapping[str, Any]], aliases: Mapping[str, str]) -> dict[str, Any]:
    from kirocrew_connections.mint import spec_body

    body = spec_body(name, "-", {})
    body["description"] = f"{SPEC_SENTINEL}: {name}"
    body["mcpServers"] = {alias: dict(entry) for alias, entry in sorted(entries.items())}
    body["tools"] = [f"@{alias}" for alias in sorted(entries)]
    if aliases:
        body["toolAliases"] = dict(aliases)
    return body


def build_plan(universe: Iterable[Provider]) -> WarmPlan:
    """The base spec (no servers: the process spawns on it) and the all spec (every universe entry)."""
    from kirocrew_connections.mint import server_alias
    from kirocrew_connections.tool_aliases import connections_tool_aliases

    configured = configured_entries() or {}
    entries: dict[str, Mapping[str, Any]] = {}
    providers: dict[str, Provider] = {}
    for provider in universe:
        alias = server_alias(provider.slug)
        entry = warm_entry(provider, alias, configured)
        if entry is not None:
            entries[alias], providers[alias] = entry, provider
    specs = {BASE_AGENT: _spec(BASE_AGENT, {}, {}),
             ALL_AGENT: _spec(ALL_AGENT, entries, connections_tool_aliases(providers.values()))}
    digest = hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()
    return WarmPlan(entries, providers, specs, digest)


def servable(resident: WarmPlan | None, wanted: WarmPlan) -> bool:
    """The resident process can activate ``wanted`` as is: the same rosters, each entry identical.

    A plan that merely shrank is not servable: the all mode would still start,
    and challenge, the provider the new plan left out.
    """
    if resident is None or not resident.digest:
        return False
    return set(resident.entries) == set(wanted.entries) and all(
        resident.entries[alias] == entry for alias, entry in wanted.entries.items())


def spec_universe(providers: Iterable[Provider]) -> list[Provider]:
    """The visible providers with a warm entry (registry order); an unreadable config vetoes nothing."""
    from kirocrew_connections.mint import server_alias

    configured = configured_entries()
    if configured is None:
        log.warning("the rendered agent file cannot be read; warming from the registry alone")
        configured = {}
    return [p for p in providers if p.visibility == "visible"
            and warm_entry(p, server_alias(p.slug), configured) is not None]


def candidate_scan(catalog: Callable[[], Iterable[Provider]]) -> tuple[list[Provider], list[Provider]]:
    """``(universe, candidates)``: candidates are the universe members whose grant is confirmed absent.

    One registry read (``catalog``) and one presence read per provider; any
    failure reads as nothing to warm (the cold path still serves every Connect).
    """
    try:
        universe = spec_universe(catalog())
    except Exception as exc:  # noqa: BLE001 - warming is an optimisation; never fail the page for it
        log.warning("warm candidate scan failed: %s", type(exc).__name__)
        return [], []
    candidates = []
    for provider in universe:
        try:
            presence = grants.grant_presence(provider.mcp_url)
        except ValueError:
            presence = None
        if presence is False:
            candidates.append(provider)
        elif presence is None:
            log.warning("grant cache for %s is unreadable; not warming it", provider.slug)
    return universe, candidates
