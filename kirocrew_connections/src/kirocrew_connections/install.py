"""Connect's first step: make the provider's MCP entry present and enabled before the mint.

The card installs the entry before it mints (reference §2.6), so the approval
the user gives is for the very server kirocrew sessions will run, and a Cancel
can tell a *new* connect (``created``: the card uninstalls what it added) from a
reconnect of an existing entry (kept); an entry is "created" only when no scope
knew the name before, so that uninstall can never take a user's own server. The entry is ``{"url": <mcp_url>}`` under
the provider's slug in the crew store; an existing crew-store entry keeps its
other keys and only gets the registry URL back and its ``disabled`` flag
cleared (a Connect click is consent to run it). A shared scope that already
declares the slug at the provider's endpoint is the user's and is left alone.

A pre-registered provider's entry also carries the operator's client as
kiro-cli reads it (``oauth: {clientId, redirectUri}`` and ``oauthScopes``,
the wire spelling, which the render copies into the agent file as it is), so
the runtime and its refreshes use the app the grant was issued to. Never the
secret: this entry ends up in the rendered agent file, which the model's file
tools can read; only the mint's private spec carries it, and kiro-cli keeps it
with the grant's registration afterwards.

The write happens under the locks every MCP writer takes, through kirocrew-mcp's
one scope writer, then the agent file is rebuilt once. A crew store that cannot
be read is reported, never overwritten.
"""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError
from kirocrew_core.jsonfile import ReadState, read_json

from kirocrew_connections.disconnect import TRANSACTION_LOCKS, normalized_endpoint

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

    from kirocrew_connections.registry import Provider

CREW_KIND = "crew"


class CrewStoreUnusableError(KirocrewError):
    """The crew store's MCP file exists but cannot be read as a server list; it was left as it was."""

    code = "crew_store_unusable"
    exit_code = 1


@dataclass(frozen=True)
class InstallResult:
    """``created``: this call added the entry (a Cancel may uninstall it); ``changed``: a file was written."""

    slug: str
    name: str
    created: bool
    changed: bool
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"ok": True, "slug": self.slug, "name": self.name, "created": self.created, "changed": self.changed}


def _declared_elsewhere(name: str, scopes: list[Any]) -> list[object]:
    """The ``url`` of every non-crew scope entry named ``name`` (the user's own entries)."""
    urls: list[object] = []
    for scope in scopes:
        if scope.kind == CREW_KIND:
            continue
        read = read_json(scope.path)
        servers = read.document.get("mcpServers") if isinstance(read.document, dict) else None
        entry = servers.get(name) if isinstance(servers, dict) else None
        if isinstance(entry, dict):
            urls.append(entry.get("url"))
    return urls


def install_provider_entry(provider: Provider, *, pm: KirocrewPluginManager | None = None) -> InstallResult:
    """Add or re-enable ``provider``'s entry in the crew store and rebuild the agent file (blocking)."""
    from kirocrew_core.locks import named_lock
    from kirocrew_core.plugins import get_plugin_manager
    from kirocrew_mcp.public import all_scopes, remove_then_rebuild, write_scope_document

    manager = pm if pm is not None else get_plugin_manager()
    name = provider.slug
    warnings: list[str] = []
    with ExitStack() as stack:
        for lock in TRANSACTION_LOCKS:
            stack.enter_context(named_lock(lock))
        scopes = list(all_scopes(manager))
        crew = next(scope for scope in scopes if scope.kind == CREW_KIND)
        read = read_json(crew.path)
        if read.state in (ReadState.ABSENT, ReadState.EMPTY):
            document: dict[str, Any] = {}
        elif read.state is ReadState.DOCUMENT and isinstance(read.document, dict):
            document = read.document
        else:
            raise CrewStoreUnusableError(f"{crew.path} is {read.state.value}; fix it, then connect again")
        servers = document.setdefault("mcpServers", {})
        if not isinstance(servers, dict):
            raise CrewStoreUnusableError(f"{crew.path}: mcpServers is not an object; fix it, then connect again")
        existing = servers.get(name)
        elsewhere = _declared_elsewhere(name, scopes)
        at_endpoint = any(normalized_endpoint(url) == normalized_endpoint(provider.mcp_url) for url in elsewhere)
        # Only an entry no scope knew by this name is "created": Cancel may uninstall that one and nothing else.
        created = False
        if isinstance(existing, dict):
            entry = {k: v for k, v in existing.items() if k != "disabled"}
            if "url" in entry or not at_endpoint:
                entry["url"] = provider.mcp_url
        elif at_endpoint:
            entry = None
        else:
            entry, created = {"url": provider.mcp_url}, not elsewhere
        if entry is not None and provider.preregistered:
            _with_operator_client(entry, provider)
        changed = entry is not None and entry != existing
        if changed:
            servers[name] = entry
            write_scope_document(crew, document)
            refresh = remove_then_rebuild([], pm=manager)
            if refresh.error is not None:
                warnings.append(f"could not rebuild the agent file: {refresh.error}")
    return InstallResult(provider.slug, name, created, changed, tuple(warnings))


def _with_operator_client(entry: dict[str, Any], provider: Provider) -> None:
    """Put the operator's client id, callback and scopes on ``entry``; drop any secret found there."""
    from kirocrew_connections.clients import mint_oauth_fields, operator_client

    fields = mint_oauth_fields(provider, operator_client(provider), with_secret=False)
    existing = entry.get("oauth")
    oauth = {k: v for k, v in existing.items() if k != "clientSecret"} if isinstance(existing, dict) else {}
    if fields:
        oauth.update(fields["oauth"])
        if not isinstance(entry.get("oauthScopes"), list):
            entry["oauthScopes"] = fields["oauthScopes"]
    if oauth:
        entry["oauth"] = oauth
    elif "oauth" in entry:
        del entry["oauth"]


async def install_provider(provider: Provider, *, pm: KirocrewPluginManager | None = None) -> InstallResult:
    """:func:`install_provider_entry` off the event loop (its file locks belong to the worker thread)."""
    return await asyncio.to_thread(install_provider_entry, provider, pm=pm)
