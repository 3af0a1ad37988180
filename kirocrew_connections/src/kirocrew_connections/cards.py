"""What each Connections card shows: the fold of the status row, the MCP entry and the mint (reference §2.4).

The page renders every card from :func:`connection_cards`, built from the same
functions the JSON routes answer with: the status rows of
``GET /api/connections/status`` (:func:`kirocrew_connections.status.collect_statuses`),
the configured servers of ``GET /api/mcp`` (kirocrew-mcp's ``discover``, with
their last probe) and the mint rows of ``GET /api/connections/mint``. Nothing
here touches the network. There are no chat banners in this product, so the
fold's banner steps are absent; and a server nobody has probed yet is judged by
the grant alone rather than shown as waiting (nothing is in flight to wait for).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from kirocrew_mcp.public import ServerRow

    from kirocrew_connections.registry import Provider
    from kirocrew_connections.status import ConnectionStatus

NOT_CONNECTED = "not-connected"
WAITING = "waiting-for-approval"
CONNECTED = "connected"
NOT_VERIFIED = "not-verified"
NEEDS_ATTENTION = "needs-attention"
NEEDS_CONFIGURATION = "needs-configuration"
#: Listed, but not offered: the provider has not passed the launch gate (shown behind a switch).
GATED = "not-offered"

LABELS: Mapping[str, str] = {
    NOT_CONNECTED: "Not connected",
    WAITING: "Waiting for approval",
    CONNECTED: "Connected",
    NOT_VERIFIED: "Not verified",
    NEEDS_ATTENTION: "Needs attention",
    NEEDS_CONFIGURATION: "Needs configuration",
    GATED: "Not offered yet",
}

DESCRIPTIONS: Mapping[str, str] = {
    "notion": "Search your Notion workspace and read pages and databases.",
    "github": "Work with your GitHub repositories, issues and pull requests.",
    "linear": "Find and read Linear issues, projects and cycles.",
    "atlassian": "Search Jira issues and Confluence pages in your Atlassian site.",
    "stripe": "Look up Stripe customers, payments and subscriptions.",
    "vercel": "Inspect your Vercel projects, deployments and logs.",
    "gitlab": "Work with your GitLab projects, issues and merge requests.",
}

_MINT_LIVE = frozenset({"minting", "waiting"})
_PROBE_FAILED = frozenset({"error", "disabled"})
_REJECTION = re.compile(
    r"\b(invalid_grant|invalid_token|invalid_client|unauthorized|forbidden|revoked|denied|consent)\b"
    r"|(?<![\d.])40[13](?![\d.])", re.I)
_EXPIRED_CREDENTIAL = re.compile(r"expired[^.]*\b(token|grant|authorization|credential|session)"
                                 r"|\b(token|grant|authorization|credential|session)\b[^.]*expired", re.I)


def description(provider: Provider) -> str:
    generic = f"Use {provider.name} from your Kiro sessions through its official MCP server."
    return DESCRIPTIONS.get(provider.slug, generic)


def error_indicates_rejection(error: str) -> bool:
    """The provider refused the credential (reconnect), as opposed to could not be reached (retry later)."""
    return bool(_REJECTION.search(error) or _EXPIRED_CREDENTIAL.search(error))


def safe_approval_url(url: object) -> str | None:
    """``url`` when it is http(s), else None: a ``javascript:`` URL never becomes a link."""
    if not isinstance(url, str):
        return None
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return None
    return url if scheme in ("http", "https") else None


def format_since(stamp: str | None) -> str | None:
    """``"Mar 4, 2026"`` for an ISO timestamp; None when absent or unparsable (the row is then omitted)."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return f"{when:%b} {when.day}, {when.year}"


def card_state(status: ConnectionStatus | None, server: ServerRow | None, mint: Mapping[str, Any],
               grant_refused: bool = False) -> str:
    """The card's state (reference §2.4's precedence, first match wins; no banner steps here).

    ``grant_refused``: the last Test found the provider refusing the stored grant; while no grant is back,
    the card needs attention (Reconnect) rather than reading "Not verified" with nothing to say why.
    """
    awaiting = mint.get("state") in _MINT_LIVE or (status is not None and status.status == "awaiting_consent")
    has_url = safe_approval_url(mint.get("oauth_url")) is not None
    if status is not None and status.needs_client_config and not awaiting and not has_url:
        return NEEDS_CONFIGURATION
    if server is None:
        return WAITING if awaiting else NOT_CONNECTED
    if awaiting or has_url:
        return WAITING
    grant: bool | None = None
    if status is not None and not status.grant_indeterminate:
        grant = status.grant_present
    if grant_refused and grant is not True:
        return NEEDS_ATTENTION
    probe = "disabled" if server.disabled else server.status
    if probe == "ok":
        return NOT_VERIFIED if grant is False else CONNECTED
    if probe == "needs_auth":
        return CONNECTED if grant is True else NOT_VERIFIED
    if probe in _PROBE_FAILED:
        return NEEDS_ATTENTION
    return CONNECTED if grant is True else NOT_VERIFIED


@dataclass(frozen=True)
class Card:
    """Everything one card's template needs (all text; the template escapes it)."""

    slug: str
    name: str
    state: str
    description: str
    mcp_url: str
    docs_url: str
    revoke_page_url: str
    prerequisite: str | None
    connected_since: str | None
    connected_since_iso: str | None
    oauth_url: str | None
    error: str
    rejected: bool
    grant_present: bool | None
    callback_url: str | None = None  # a pre-registered provider's registered redirect URI
    client_env: tuple[str, str] | None = None  # its client id / secret environment variables
    grant_refused: bool = False  # the last Test found the provider refusing the stored grant

    @property
    def label(self) -> str:
        return LABELS[self.state]

    @property
    def search_text(self) -> str:
        return f"{self.name} {self.slug} {self.mcp_url}".lower()


def is_provider_entry(provider: Provider, name: object, url: object) -> bool:
    """Whether an MCP entry is ``provider``'s: its slug AND its endpoint (a same-named stranger is not it)."""
    from kirocrew_connections.disconnect import normalized_endpoint

    return name == provider.slug and normalized_endpoint(url) == normalized_endpoint(provider.mcp_url)


def matching_server(provider: Provider, rows: Sequence[ServerRow]) -> ServerRow | None:
    """The configured entry for ``provider`` (:func:`is_provider_entry`), or ``None``."""
    return next((row for row in rows if is_provider_entry(provider, row.name, row.spec.get("url"))), None)


def managed_entries(providers: Sequence[Provider], servers: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names among ``servers`` (``GET /api/mcp`` rows) that are one of ``providers``' entries."""
    by_slug = {provider.slug: provider for provider in providers}
    return [row["name"] for row in servers
            if (provider := by_slug.get(str(row.get("name")))) is not None
            and is_provider_entry(provider, row["name"], row.get("url"))]


def build_card(provider: Provider, status: ConnectionStatus | None, server: ServerRow | None,
               mint: Mapping[str, Any], *, offered: bool = True) -> Card:
    from kirocrew_connections.liveness_api import forget_refusal, grant_refused_at_last_test

    grant = None if status is None or status.grant_indeterminate else status.grant_present
    if grant is True:
        forget_refusal(provider.slug)  # a grant is back (a Reconnect): the refusal is history
    refused = offered and grant_refused_at_last_test(provider.slug)
    state = card_state(status, server, mint, refused) if offered else GATED
    since_iso = status.connected_since if status is not None else None
    error = server.error if server is not None else ""
    client_env = None
    if provider.preregistered:
        from kirocrew_connections.clients import client_env_names

        client_env = client_env_names(provider.slug)
    return Card(
        slug=provider.slug, name=provider.name, state=state, description=description(provider),
        mcp_url=provider.mcp_url, docs_url=provider.docs_url, revoke_page_url=provider.revoke_page_url,
        prerequisite=provider.prerequisite_copy, connected_since=format_since(since_iso),
        connected_since_iso=since_iso,
        oauth_url=safe_approval_url(mint.get("oauth_url")) if state == WAITING else None,
        error=error, rejected=error_indicates_rejection(error), grant_present=grant,
        callback_url=provider.redirect_uri, client_env=client_env,
        grant_refused=refused and state == NEEDS_ATTENTION,
    )


def mint_views(slugs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each slug's ``GET /api/connections/mint`` view, without loading the engine (none loaded: all idle).

    An unclaimed premint reads as idle: a URL nobody asked for is not a consent under way.
    """
    import sys

    module = sys.modules.get("kirocrew_connections.mint")
    if module is None:
        return {slug: {"slug": slug, "state": "idle"} for slug in slugs}
    engine = module.mint_engine()
    return {slug: engine.view(slug) if engine.consent_state(slug) is not None else {"slug": slug, "state": "idle"}
            for slug in slugs}


@dataclass(frozen=True)
class Gallery:
    """The page's cards: the offered ones (visible and pre-registered), then the gated ones."""

    offered: list[Card]
    gated: list[Card]
    servers_unreadable: bool


def gallery_inputs(pm: Any) -> tuple[Any, Any, bool]:
    """The routed registry and kirocrew-mcp's rows (blocking); the rows are empty when discovery failed."""
    from kirocrew_mcp.public import discover

    from kirocrew_connections.registry import routed_registry

    registry = routed_registry(pm)
    try:
        rows = discover(pm=pm).rows
        unreadable = False
    except Exception:  # noqa: BLE001 - the cards still render, under a "could not be loaded" alert
        rows, unreadable = [], True
    return registry, rows, unreadable


def build_gallery(registry: Any, rows: Sequence[ServerRow], statuses: Sequence[ConnectionStatus],
                  mints: Mapping[str, Mapping[str, Any]], servers_unreadable: bool) -> Gallery:
    from kirocrew_connections.status import status_providers

    offered_providers = status_providers(registry)
    by_slug = {row.slug: row for row in statuses}
    offered = [build_card(p, by_slug.get(p.slug), matching_server(p, rows), mints.get(p.slug, {}))
               for p in offered_providers]
    offered_slugs = {p.slug for p in offered_providers}
    gated = [build_card(p, None, None, {}, offered=False) for p in registry.listed() if p.slug not in offered_slugs]
    return Gallery(offered, gated, servers_unreadable)
