"""The authorization axis of a Connections card: does kiro-cli hold a grant, and since when.

Everything here is a local fact. A grant is the paired token + registration
artifacts in kiro-cli's OAuth cache, judged from ONE stat per artifact and never
opened (token bytes must not reach this process). Reachability is
``/api/mcp``'s question; asking it here too would give a card two verdicts
about one fact that can disagree, so nothing in this module touches the network.

The lookup is three-valued: present, absent, or indeterminate (a stat failed
with anything but ENOENT/ENOTDIR). An indeterminate read is never an absence:
it prunes nothing, stamps nothing and claims nothing.

``connectedSince`` is stamped the first time a grant is observed and persisted
in the crew home, because neither alternative means anything: the artifact
mtime moves on every token refresh, and a render-time clock restarts with every
poll. It is pruned on confirmed absence (re-authorizing starts a fresh clock),
preserved on an indeterminate read, and a fresh stamp that could not be
persisted is not published, since it would re-date the connection on each poll.

Everything here is blocking file work: a coroutine calls :func:`collect_statuses`
through ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import audit, grants, home, jsonfile
from kirocrew_core.errors import KirocrewError
from kirocrew_core.locks import named_lock

if TYPE_CHECKING:
    from kirocrew_connections.registry import Provider, Registry

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CONNECTED_SINCE_FILENAME = "connected-since.json"
AUDIT_EVENT = "connections_status.oauth_grant_presence"

CONNECTED = "connected"
AWAITING_CONSENT = "awaiting_consent"
NOT_CONNECTED = "not_connected"

REASON_GRANT_PRESENT = "grant_present"
REASON_MINT_IN_FLIGHT = "mint_in_flight"
REASON_GRANT_UNREADABLE = "grant_unreadable"
REASON_NO_GRANT = "no_grant"
REASON_CLIENT_NOT_CONFIGURED = "client_not_configured"

#: Mint states that mean a consent is under way (the card shows "awaiting consent").
IN_FLIGHT_MINT_STATES = frozenset({"minting", "waiting"})
MINT_MODULE = "kirocrew_connections.mint"


# -- the grant lookup -------------------------------------------------------------------


def observe_grant(mcp_url: str) -> bool | None:
    """True/False/None for the grant of ``mcp_url``: exactly one stat per paired artifact.

    Never ``grant_presence()`` followed by a diagnostic re-stat: two passes race,
    and a transient failure clearing between them would read as a definitive
    absence. A URL the key formula refuses cannot be looked up, so it is
    indeterminate rather than absent.
    """
    try:
        token, registration = grants.artifact_paths(mcp_url)
    except ValueError:
        return None
    return grants.combine_presence(grants.artifact_presence(token), grants.artifact_presence(registration))


# -- which providers get a row ----------------------------------------------------------


def status_providers(registry: Registry) -> tuple[Provider, ...]:
    """The providers a status read reports, in registry order.

    The visible grid, plus the pre-registered providers that are not hidden:
    one without the operator's client is listed with ``needsClientConfig``
    (its card says how to configure it); with it, it is visible anyway.
    """
    visible = {provider.slug for provider in registry.visible()}
    return tuple(
        provider for provider in registry.all()
        if provider.slug in visible or (provider.preregistered and provider.visibility != "hidden")
    )


def client_configured(provider: Provider, env: Mapping[str, str] | None = None) -> bool:
    """Whether a pre-registered provider has the client it needs to mint (DCR providers always do).

    Without ``env`` this is the routed provider's own answer (the operator's
    client was filled in when the registry was read); with one, the client is
    looked up afresh there (:func:`kirocrew_connections.clients.operator_client`,
    the one owner of where a client comes from).
    """
    if not provider.preregistered:
        return True
    if env is None:
        return provider.client_configured
    from kirocrew_connections.clients import operator_client

    client = operator_client(provider, env=env)
    return client is not None and client.ready_for(provider)


def current_mint_state(slug: str) -> str | None:
    """The mint engine's state for ``slug``, or None when the engine was never loaded.

    Reading it must not import the engine (it drags in the ACP client): a
    process that never minted has no mint in flight, so an unloaded module is
    a complete answer. An unclaimed premint (a warm URL nobody asked for) is
    not a consent under way, so it reads as no mint and the card keeps the
    verdict it would have without it. Call it on the event loop that owns the engine.
    """
    import sys

    module = sys.modules.get(MINT_MODULE)
    if module is None:
        return None
    state: str | None = module.mint_engine().consent_state(slug)
    return state


def current_mint_states(providers: Iterable[Provider]) -> dict[str, str | None]:
    """:func:`current_mint_state` for each provider, keyed by slug (on the event loop)."""
    return {provider.slug: current_mint_state(provider.slug) for provider in providers}


# -- the verdict ------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionStatus:
    """One card's authorization state (the ``connections`` rows of ``GET /api/connections/status``)."""

    slug: str
    status: str
    reason: str
    grant_present: bool
    grant_indeterminate: bool
    connected_since: str | None
    needs_client_config: bool | None = None  # None: not a pre-registered provider, no field

    def as_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "slug": self.slug,
            "status": self.status,
            "reason": self.reason,
            "grantPresent": self.grant_present,
            "grantIndeterminate": self.grant_indeterminate,
            "connectedSince": self.connected_since,
        }
        if self.needs_client_config is not None:
            row["needsClientConfig"] = self.needs_client_config
        return row


def classify(presence: bool | None, mint_state: str | None) -> tuple[str, str]:
    """``(status, reason)``: a grant wins, then an in-flight mint, then unreadable, then no grant."""
    if presence is True:
        return CONNECTED, REASON_GRANT_PRESENT
    if mint_state in IN_FLIGHT_MINT_STATES:
        return AWAITING_CONSENT, REASON_MINT_IN_FLIGHT
    if presence is None:
        return NOT_CONNECTED, REASON_GRANT_UNREADABLE
    return NOT_CONNECTED, REASON_NO_GRANT


def provider_status(
    provider: Provider,
    presence: bool | None,
    mint_state: str | None,
    connected_since: str | None,
    env: Mapping[str, str] | None = None,
) -> ConnectionStatus:
    """The row for one provider from facts already gathered (no I/O)."""
    status, reason = classify(presence, mint_state)
    needs_config: bool | None = None
    if provider.preregistered:
        # A held grant or a consent under way already answers the card; an
        # unreadable lookup does not, so it still flags (keeping its own reason).
        needs_config = status == NOT_CONNECTED and not client_configured(provider, env)
        if needs_config and reason == REASON_NO_GRANT:
            reason = REASON_CLIENT_NOT_CONFIGURED
    return ConnectionStatus(
        slug=provider.slug,
        status=status,
        reason=reason,
        grant_present=presence is True,
        grant_indeterminate=presence is None,
        connected_since=connected_since if presence is True else None,
        needs_client_config=needs_config,
    )


# -- connectedSince ---------------------------------------------------------------------


def connected_since_file() -> Path:
    """``<crew home>/state/connections/connected-since.json``."""
    return home.state_dir("connections") / CONNECTED_SINCE_FILENAME


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def load_connected_since(path: Path | None = None) -> dict[str, str] | None:
    """``{slug: connected_since}`` as stored; None when the file cannot be trusted.

    Unreadable, malformed or of another schema all answer None: the caller then
    reports no timestamp and writes nothing, because rewriting a file it failed
    to understand would destroy clocks nothing can reconstruct.
    """
    read = jsonfile.read_json(path or connected_since_file())
    if read.state in (jsonfile.ReadState.ABSENT, jsonfile.ReadState.EMPTY):
        return {}
    if read.state is not jsonfile.ReadState.DOCUMENT:
        log.warning("connections: %s is %s (%s); connectedSince is not reported",
                    read.path, read.state.value, read.error)
        return None
    document = read.document
    providers = document.get("providers") if isinstance(document, dict) else None
    if not isinstance(document, dict) or document.get("schema_version") != SCHEMA_VERSION \
            or not isinstance(providers, dict):
        log.warning("connections: %s is not a schema %d connected-since file; left alone",
                    read.path, SCHEMA_VERSION)
        return None
    stored: dict[str, str] = {}
    for slug, entry in providers.items():
        since = entry.get("connected_since") if isinstance(entry, dict) else None
        if not isinstance(since, str) or not since:
            log.warning("connections: %s has a malformed entry for %r; left alone", read.path, slug)
            return None
        stored[slug] = since
    return stored


def _apply(stored: Mapping[str, str], observed: Mapping[str, bool | None],
           now: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """The updated map and the slugs freshly stamped: stamp present, prune absent, keep the rest."""
    updated = dict(stored)
    fresh: list[str] = []
    for slug, presence in observed.items():
        if presence is True and slug not in updated:
            updated[slug] = now
            fresh.append(slug)
        elif presence is False:
            updated.pop(slug, None)
    return updated, tuple(fresh)


def _published(stored: Mapping[str, str], observed: Mapping[str, bool | None]) -> dict[str, str]:
    return {slug: stored[slug] for slug, presence in observed.items() if presence is True and slug in stored}


@dataclass(frozen=True)
class Reconciled:
    """What a status read may publish, and which first stamps it actually persisted."""

    connected_since: dict[str, str]
    stamped: tuple[str, ...]


def reconcile_connected_since(observed: Mapping[str, bool | None], *, now: str | None = None) -> Reconciled:
    """Bring the persisted clocks in line with ``observed`` and say what may be published.

    A steady poll only reads; the ``connections`` lock and the atomic write
    are taken only when a stamp or a prune is due, and the file is re-read
    under the lock so a concurrent reader's stamp is never overwritten. When the
    write cannot happen (a read-only or missing crew home, a lock that cannot
    be taken), the loaded entries stay reportable and fresh stamps are dropped.
    """
    path = connected_since_file()
    loaded = load_connected_since(path)
    if loaded is None:
        return Reconciled({}, ())
    stamp = now or utc_now()
    updated, fresh = _apply(loaded, observed, stamp)
    if updated == loaded:
        return Reconciled(_published(loaded, observed), ())
    try:
        with named_lock("connections"):
            current = load_connected_since(path)
            if current is None:
                return Reconciled({}, ())
            updated, fresh = _apply(current, observed, stamp)
            if updated != current:
                jsonfile.write_json_atomic(path, {
                    "schema_version": SCHEMA_VERSION,
                    "providers": {slug: {"connected_since": since} for slug, since in sorted(updated.items())},
                })
    except (OSError, KirocrewError) as exc:
        log.warning("connections: could not persist connectedSince to %s (%s); fresh stamps not published",
                    path, exc)
        return Reconciled(_published(loaded, observed), ())
    return Reconciled(_published(updated, observed), fresh)


def _audit_stamps(stamped: Iterable[str], connected_since: Mapping[str, str]) -> None:
    """One SEL event per persisted first stamp; best-effort, since the artifacts were only stat-ed."""
    for slug in stamped:
        try:
            audit.record(AUDIT_EVENT, actor="owner", outcome="success", provider=slug,
                         grant="present", connected_since=connected_since.get(slug))
        except (OSError, KirocrewError) as exc:
            log.warning("connections: could not audit the grant observed for %s: %s", slug, exc)


# -- the whole read ---------------------------------------------------------------------


def collect_statuses(
    providers: Sequence[Provider],
    mint_states: Mapping[str, str | None] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> list[ConnectionStatus]:
    """Stat every provider's grant once, reconcile the clocks, and build the rows (blocking)."""
    states = mint_states or {}
    observed = {provider.slug: observe_grant(provider.mcp_url) for provider in providers}
    reconciled = reconcile_connected_since(observed)
    _audit_stamps(reconciled.stamped, reconciled.connected_since)
    return [
        provider_status(provider, observed[provider.slug], states.get(provider.slug),
                        reconciled.connected_since.get(provider.slug), env)
        for provider in providers
    ]
