"""The connection-provider registry: the shipped ``registry.json`` plus plugin sources.

Every entry is validated before anything uses it, because the registry decides
which URLs a Connect can mint against and which issuers the L0 probe trusts. The
shipped file is ours and must be perfect (a bad entry is a hard error); an entry a
third-party plugin contributes through ``registry_loaders()`` (loader name
``connections.providers``) is checked by the same rules and, if bad or colliding
with an earlier slug or redirect port, skipped with a :class:`PluginWarning` so
one broken plugin cannot hide every card (``KIROCREW_STRICT_PLUGINS=1`` makes it
fatal). Everything handed out is immutable: frozen dataclasses, tuples and
read-only mappings, so no caller can change what the next caller sees.
"""

from __future__ import annotations

import ipaddress
import json
import re
import threading
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from importlib import resources
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from kirocrew_core.errors import BadInputError, KirocrewError

from kirocrew_connections.approval_url import approval_origins

BUILTIN_SOURCE = "registry.json"
LOADER_NAME = "connections.providers"

REVOKE_VERIFICATION_MAX_AGE_DAYS = 180
L0_VERIFICATION_WARN_AGE_DAYS = 60
L0_VERIFICATION_MAX_AGE_DAYS = 90
CALLBACK_PATH = "/callback"

PROVIDER_CATEGORIES = frozenset({
    "collaboration-docs", "project-management", "developer-tools", "design", "file-storage",
    "data-analytics", "payments-finance", "calendar-email", "crm-sales",
})
REQUIRED_FIELDS = frozenset({
    "name", "slug", "tier", "mcp_url", "recommended_scopes", "revoke_page_url", "docs_url",
    "gotcha_copy", "smoke_fixture", "l0_expectations", "launch_gate_passed",
    "vendor_approval_pending", "revoke_verified_on", "revoke_verified_note", "approval_hosts",
})
OPTIONAL_FIELDS = frozenset({
    "client_id", "auth", "prerequisite_copy", "revoke_manual_path", "tool_aliases", "category",
})
AUTH_MODES = frozenset({"dcr", "preregistered"})
PREREGISTERED_AUTH_FIELDS = frozenset({
    "mode", "confidential", "redirect_host", "redirect_port", "registration_guide",
})
REDIRECT_HOSTS = ("127.0.0.1", "localhost")
REDIRECT_PORT_RANGE = range(1024, 49152)  # registered ports: never privileged, never ephemeral
LOCAL_HOST_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa")

SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
ALIAS_RE = re.compile(r"^[A-Za-z0-9_-]+$")
GUIDE_RE = re.compile(r"^oauth-app-registration/[a-z0-9-]+\.md$")
_DNS_NAME_RE = re.compile(r"^[a-z0-9-]+(?:\.[a-z0-9-]+)*$")
_NUMERIC_LABEL_RE = re.compile(r"^(?:[0-9]+|0x[0-9a-f]*)$")


class RegistryError(KirocrewError):
    """The registry (or one entry of it) breaks a rule; the message names the entry and the rule."""

    code = "registry_invalid"
    exit_code = 1


@dataclass(frozen=True)
class L0Expectations:
    """What the L0 probe asserts about the provider's OAuth metadata (recorded, then strict)."""

    authorization_server: str
    dcr: bool
    pkce: bool
    verified_on: date


@dataclass(frozen=True)
class Auth:
    """How kiro-cli gets an OAuth client: dynamic registration, or a client we registered."""

    mode: str
    confidential: bool | None = None
    redirect_host: str | None = None
    redirect_port: int | None = None
    registration_guide: str | None = None


@dataclass(frozen=True)
class Provider:
    """One validated registry entry; ``source`` is ``registry.json`` or the contributing plugin."""

    slug: str
    name: str
    tier: int
    category: str | None
    mcp_url: str
    recommended_scopes: tuple[str, ...]
    revoke_page_url: str
    docs_url: str
    gotcha_copy: str
    smoke_tool: str
    smoke_args: Mapping[str, Any]
    l0: L0Expectations
    launch_gate_passed: bool
    vendor_approval_pending: bool
    revoke_verified_on: date
    revoke_verified_note: str
    auth: Auth | None
    tool_aliases: Mapping[str, str]
    prerequisite_copy: str | None
    revoke_manual_path: str | None
    client_id: str | None
    source: str
    #: Whether the operator's client secret is configured (the secret itself never enters the registry).
    client_secret_set: bool = False
    #: Where an approval URL may send the user: ``https://<host>`` per ``approval_hosts`` (the hosts of the
    #: provider's documented authorization endpoints), routed like ``mcp_url`` under ``--override-origin``.
    approval_origins: tuple[str, ...] = ()

    @property
    def preregistered(self) -> bool:
        return self.auth is not None and self.auth.mode == "preregistered"

    @property
    def visibility(self) -> str:
        """``visible`` (a Connect card), ``gated`` (listed, waiting on a rung) or ``hidden``.

        Hidden: vendor approval pending (tier 3) — the vendor must admit us first.
        A pre-registered provider is offered whatever its launch gate says and is
        visible (connectable) once the operator's client is configured: its id,
        and its secret when the client is confidential
        (:func:`kirocrew_connections.clients.with_operator_clients` fills both
        in); until then it is gated and its card says how to configure it. Any
        other provider is visible once the manual launch gate passed.
        """
        if self.vendor_approval_pending:
            return "hidden"
        if self.preregistered:
            return "visible" if self.client_configured else "gated"
        return "visible" if self.launch_gate_passed else "gated"

    @property
    def client_configured(self) -> bool:
        """A DCR provider needs nothing; a pre-registered one its client id (and secret when confidential)."""
        if not self.preregistered:
            return True
        needs_secret = self.auth is not None and bool(self.auth.confidential)
        return self.client_id is not None and (not needs_secret or self.client_secret_set)

    @property
    def redirect_uri(self) -> str | None:
        """The loopback callback a pre-registered client is registered with; None for DCR."""
        if not self.preregistered or self.auth is None:
            return None
        return f"http://{self.auth.redirect_host}:{self.auth.redirect_port}{CALLBACK_PATH}"

    def smoke_arguments(self) -> dict[str, Any]:
        """A fresh, mutable (JSON-ready) copy of the smoke tool's arguments."""
        thawed = _thaw(self.smoke_args)
        assert isinstance(thawed, dict)
        return thawed


@dataclass(frozen=True)
class Registry:
    """Every provider, in order: the shipped file's, then plugins' (in hook call order)."""

    providers: tuple[Provider, ...]
    by_slug: Mapping[str, Provider]

    @classmethod
    def of(cls, providers: Iterable[Provider]) -> Registry:
        items = tuple(providers)
        return cls(items, MappingProxyType({p.slug: p for p in items}))

    def all(self) -> tuple[Provider, ...]:
        return self.providers

    def get(self, slug: object) -> Provider:
        provider = self.by_slug.get(slug) if isinstance(slug, str) else None
        if provider is None:
            shown = f" {slug!r}" if isinstance(slug, str) and len(slug) <= 64 and SLUG_RE.match(slug) else ""
            raise BadInputError(f"unknown provider{shown}", code="unknown_provider")
        return provider

    def visible(self) -> tuple[Provider, ...]:
        return tuple(p for p in self.providers if p.visibility == "visible")

    def listed(self) -> tuple[Provider, ...]:
        """Visible and gated providers: everything but the hidden (vendor-pending) ones."""
        return tuple(p for p in self.providers if p.visibility != "hidden")


# --- validation ----------------------------------------------------------------


def utc_today() -> date:
    return datetime.now(UTC).date()


def is_local_host(host: str) -> bool:
    """True for an IP literal or a name that only resolves on this machine or network.

    Judged on the canonical host (lowercase, IDNA, no trailing dot). A last label
    that is numeric counts as an IP literal, as the WHATWG parser kiro-cli uses
    reads ``127.1`` or ``0x7f.1`` as IPv4. A host that cannot be canonicalised
    counts as local, so the caller fails closed.
    """
    canonical = canonical_host(host)
    if canonical is None:
        return True
    try:
        ipaddress.ip_address(canonical)
        return True
    except ValueError:
        pass
    if _NUMERIC_LABEL_RE.match(canonical.rsplit(".", 1)[-1]):
        return True
    return canonical == "localhost" or canonical.endswith(LOCAL_HOST_SUFFIXES)


def canonical_host(host: str) -> str | None:
    """Lowercase, IDNA-encoded, trailing dot dropped; an IPv6 literal unbracketed; None if invalid."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    if text.endswith("."):
        text = text[:-1]
    if not text:
        return None
    try:
        text = text.encode("idna").decode("ascii")
    except (UnicodeError, ValueError):
        return None
    return text if _DNS_NAME_RE.match(text) else None


class _Invalid(Exception):
    """One rule broken inside an entry; turned into a RegistryError naming the entry."""


def _require(condition: bool, rule: str) -> None:
    if not condition:
        raise _Invalid(rule)


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _https_url(value: object) -> bool:
    if not (isinstance(value, str) and value.startswith("https://")):
        return False
    try:
        return bool(urlsplit(value).hostname)
    except ValueError:
        return False


def _parse_date(value: object, field: str) -> date:
    _require(isinstance(value, str) and DATE_RE.match(value) is not None, f"{field} must be a YYYY-MM-DD date")
    assert isinstance(value, str)
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise _Invalid(f"{field} must be a real calendar date") from None


def _names(keys: Iterable[object]) -> str:
    return ", ".join(sorted(repr(k)[:40] for k in keys))


def _check_issuer(value: object) -> str:
    field = "l0_expectations.authorization_server"
    _require(isinstance(value, str) and value.startswith("https://"), f"{field} must be an https URL")
    assert isinstance(value, str)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise _Invalid(f"{field} must be a well-formed URL") from None
    netloc = parts.netloc
    _require("@" not in netloc, f"{field} must not carry userinfo")
    _require("?" not in value and not parts.query, f"{field} must not carry a query")
    _require("#" not in value and not parts.fragment, f"{field} must not carry a fragment")
    _require(bool(parts.hostname), f"{field} must name a host")
    _require(not is_local_host(parts.hostname or ""),
             f"{field} must be a public DNS name (no IP literal, localhost or local-only suffix)")
    return value


def _check_smoke(value: object) -> tuple[str, Mapping[str, Any]]:
    _require(isinstance(value, dict) and set(value) == {"tool", "args"},
             "smoke_fixture must be an object with exactly tool and args")
    assert isinstance(value, dict)
    _require(_nonempty_str(value["tool"]), "smoke_fixture.tool must be a non-empty string")
    _require(isinstance(value["args"], dict), "smoke_fixture.args must be an object")
    try:
        json.dumps(value["args"], allow_nan=False)
    except (TypeError, ValueError):
        raise _Invalid("smoke_fixture.args must be plain JSON data") from None
    frozen = _freeze(value["args"])
    assert isinstance(frozen, Mapping)
    return value["tool"], frozen


def _check_l0(value: object) -> L0Expectations:
    keys = {"authorization_server", "dcr", "pkce", "verified_on"}
    _require(isinstance(value, dict) and set(value) == keys,
             "l0_expectations must be an object with exactly authorization_server, dcr, pkce, verified_on")
    assert isinstance(value, dict)
    issuer = _check_issuer(value["authorization_server"])
    _require(isinstance(value["dcr"], bool), "l0_expectations.dcr must be true or false")
    _require(isinstance(value["pkce"], bool), "l0_expectations.pkce must be true or false")
    verified = _parse_date(value["verified_on"], "l0_expectations.verified_on")
    _require(verified <= utc_today(), "l0_expectations.verified_on must not be in the future")
    return L0Expectations(issuer, value["dcr"], value["pkce"], verified)


def _check_auth(value: object) -> Auth:
    _require(isinstance(value, dict) and isinstance(value.get("mode"), str) and value["mode"] in AUTH_MODES,
             "auth.mode must be one of dcr, preregistered")
    assert isinstance(value, dict)
    if value["mode"] == "dcr":
        _require(set(value) == {"mode"}, "auth with mode dcr must carry no other fields")
        return Auth("dcr")
    unknown = set(value) - PREREGISTERED_AUTH_FIELDS
    _require(not unknown, f"auth has unknown fields: {_names(unknown)}")
    _require(isinstance(value.get("confidential"), bool), "auth.confidential must be true or false")
    port = value.get("redirect_port")
    _require(_is_int(port) and port in REDIRECT_PORT_RANGE, "auth.redirect_port must be an integer in 1024-49151")
    guide = value.get("registration_guide")
    _require(isinstance(guide, str) and GUIDE_RE.match(guide) is not None,
             "auth.registration_guide must look like oauth-app-registration/<name>.md")
    host = value.get("redirect_host", REDIRECT_HOSTS[0])
    _require(host in REDIRECT_HOSTS, "auth.redirect_host must be 127.0.0.1 or localhost")
    return Auth("preregistered", value["confidential"], host, port, guide)


def _check_aliases(value: object, slug: str) -> Mapping[str, str]:
    _require(isinstance(value, dict) and len(value) > 0, "tool_aliases must be a non-empty object")
    assert isinstance(value, dict)
    for tool, alias in value.items():
        _require(isinstance(tool, str) and isinstance(alias, str)
                 and ALIAS_RE.match(tool) is not None and ALIAS_RE.match(alias) is not None,
                 "tool_aliases keys and values must match [A-Za-z0-9_-]+")
        _require(alias == f"{slug}_{tool}", "each tool_aliases value must be <slug>_<tool>")
    return MappingProxyType(dict(value))


def _check_approval_hosts(value: object) -> tuple[str, ...]:
    """Exact public DNS names, as written (lowercase, no port, no wildcard): the consent pages a URL may open."""
    field = "approval_hosts"
    _require(isinstance(value, list) and len(value) > 0, f"{field} must be a non-empty list of host names")
    assert isinstance(value, list)
    for host in value:
        _require(isinstance(host, str) and canonical_host(host) == host and "." in host,
                 f"{field} entries must be lowercase DNS names without scheme, port or path")
        assert isinstance(host, str)
        _require(not is_local_host(host), f"{field} entries must be public DNS names")
    _require(len(set(value)) == len(value), f"{field} must not repeat a host")
    return tuple(value)


def _optional_str(entry: dict[str, Any], field: str) -> str | None:
    if field not in entry:
        return None
    _require(_nonempty_str(entry[field]), f"{field} must be a non-empty string when present")
    value: str = entry[field]
    return value


def _check_entry(entry: dict[str, Any], source: str) -> Provider:
    missing = REQUIRED_FIELDS - set(entry)
    _require(not missing, f"missing fields: {_names(missing)}")
    unknown = set(entry) - REQUIRED_FIELDS - OPTIONAL_FIELDS
    _require(not unknown, f"unknown fields: {_names(unknown)}")
    for field in ("name", "mcp_url", "revoke_page_url", "docs_url", "gotcha_copy"):
        _require(_nonempty_str(entry[field]), f"{field} must be a non-empty string")
    for field in ("mcp_url", "revoke_page_url", "docs_url"):
        _require(_https_url(entry[field]), f"{field} must be an https:// URL")
    slug: str = entry["slug"]
    category = _optional_str(entry, "category")
    _require(category is None or category in PROVIDER_CATEGORIES,
             f"category must be one of {', '.join(sorted(PROVIDER_CATEGORIES))}")
    tier = entry["tier"]
    _require(_is_int(tier) and tier in (1, 2, 3), "tier must be the integer 1, 2 or 3")
    scopes = entry["recommended_scopes"]
    _require(isinstance(scopes, list) and all(_nonempty_str(s) for s in scopes),
             "recommended_scopes must be a list of non-empty strings")
    _require(len(set(scopes)) == len(scopes), "recommended_scopes must not repeat a scope")
    smoke_tool, smoke_args = _check_smoke(entry["smoke_fixture"])
    l0 = _check_l0(entry["l0_expectations"])
    approval_hosts = _check_approval_hosts(entry["approval_hosts"])
    gate, pending = entry["launch_gate_passed"], entry["vendor_approval_pending"]
    _require(isinstance(gate, bool), "launch_gate_passed must be true or false")
    _require(isinstance(pending, bool), "vendor_approval_pending must be true or false")
    if tier == 3:
        _require(pending, "Tier 3 providers must be vendor-approval pending")
        _require(not gate, "Tier 3 providers cannot pass the launch gate")
    else:
        _require(not pending, "vendor approval is only meaningful for Tier 3")
    revoke_on = _parse_date(entry["revoke_verified_on"], "revoke_verified_on")
    _require(_nonempty_str(entry["revoke_verified_note"]), "revoke_verified_note must be a non-empty string")
    auth = _check_auth(entry["auth"]) if "auth" in entry else None
    aliases = _check_aliases(entry["tool_aliases"], slug) if "tool_aliases" in entry else MappingProxyType({})
    return Provider(
        slug=slug, name=entry["name"], tier=tier, category=category, mcp_url=entry["mcp_url"],
        recommended_scopes=tuple(scopes), revoke_page_url=entry["revoke_page_url"],
        docs_url=entry["docs_url"], gotcha_copy=entry["gotcha_copy"], smoke_tool=smoke_tool,
        smoke_args=smoke_args, l0=l0, launch_gate_passed=gate, vendor_approval_pending=pending,
        revoke_verified_on=revoke_on, revoke_verified_note=entry["revoke_verified_note"], auth=auth,
        tool_aliases=aliases, prerequisite_copy=_optional_str(entry, "prerequisite_copy"),
        revoke_manual_path=_optional_str(entry, "revoke_manual_path"),
        client_id=_optional_str(entry, "client_id"), source=source,
        approval_origins=approval_origins(approval_hosts),
    )


def validate_provider(entry: object, *, source: str, index: int) -> Provider:
    """Validate one raw entry; a :class:`RegistryError` names the source, the entry and the rule."""
    slug = entry.get("slug") if isinstance(entry, dict) else None
    valid_slug = isinstance(slug, str) and SLUG_RE.match(slug) is not None
    where = f"{source}: provider {slug!r}" if valid_slug else f"{source}: provider #{index}"
    try:
        _require(isinstance(entry, dict), "must be an object")
        assert isinstance(entry, dict)
        _require(valid_slug, "slug must match ^[a-z0-9]+(?:-[a-z0-9]+)*$")
        return _check_entry(entry, source)
    except _Invalid as exc:
        raise RegistryError(f"{where}: {exc}") from None


class _Taken:
    """Slugs and redirect ports already claimed, across every source."""

    def __init__(self) -> None:
        self.slugs: dict[str, str] = {}
        self.ports: dict[int, str] = {}

    def check(self, provider: Provider) -> None:
        where = f"{provider.source}: provider {provider.slug!r}"
        if provider.slug in self.slugs:
            raise RegistryError(f"{where}: duplicate slug (already defined by {self.slugs[provider.slug]})")
        port = provider.auth.redirect_port if provider.auth else None
        if port is not None and port in self.ports:
            raise RegistryError(f"{where}: auth.redirect_port {port} is already used by {self.ports[port]!r}")

    def claim(self, provider: Provider) -> None:
        self.slugs[provider.slug] = provider.source
        if provider.auth and provider.auth.redirect_port is not None:
            self.ports[provider.auth.redirect_port] = provider.slug


def parse_providers(document: object, *, source: str = BUILTIN_SOURCE) -> tuple[Provider, ...]:
    """Validate a whole registry document strictly: any bad entry fails it all."""
    if not isinstance(document, list) or not document:
        raise RegistryError(f"{source}: the registry must be a non-empty JSON array")
    taken = _Taken()
    out = []
    for index, entry in enumerate(document):
        provider = validate_provider(entry, source=source, index=index)
        taken.check(provider)
        taken.claim(provider)
        out.append(provider)
    return tuple(out)


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise RegistryError(f"{BUILTIN_SOURCE}: an object repeats a key")
    return dict(pairs)


def builtin_document() -> Any:
    """The shipped ``registry.json``, parsed (not validated)."""
    raw = resources.files("kirocrew_connections").joinpath(BUILTIN_SOURCE).read_bytes()
    try:
        return json.loads(raw, object_pairs_hook=_reject_duplicate_keys)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{BUILTIN_SOURCE}: not valid JSON ({type(exc).__name__})") from None


# --- plugin sources ------------------------------------------------------------


def _plugin_providers(pm: Any, taken: _Taken) -> list[Provider]:
    from kirocrew_core.contributions import RegistryLoader, flatten
    from kirocrew_core.plugins import PluginWarning, collect

    strict = bool(getattr(pm, "strict_all", False))

    def reject(message: str) -> None:
        if strict:
            raise RegistryError(message)
        warnings.warn(f"skipped: {message}", PluginWarning, stacklevel=4)

    out: list[Provider] = []
    for contribution in flatten(collect(pm, "registry_loaders")):
        loader = contribution.value
        if not isinstance(loader, RegistryLoader) or loader.name != LOADER_NAME:
            continue
        source = contribution.plugin
        try:
            document = loader.load()
        except Exception as exc:  # noqa: BLE001 - a plugin's loader failing is rejected, never fatal
            reject(f"{source}: registry loader raised {type(exc).__name__}")
            continue
        if not isinstance(document, (list, tuple)):
            reject(f"{source}: registry loader must return a list of provider objects")
            continue
        for index, entry in enumerate(document):
            try:
                provider = validate_provider(entry, source=source, index=index)
                taken.check(provider)
            except RegistryError as exc:
                reject(exc.message)
                continue
            taken.claim(provider)
            out.append(provider)
    return out


_lock = threading.Lock()
_cache: tuple[Any, Registry] | None = None


def load_registry(pm: Any = None) -> Registry:
    """The registry for ``pm`` (default: the process-wide plugin manager), built once per manager."""
    global _cache
    if pm is None:
        from kirocrew_core.plugins import get_plugin_manager

        pm = get_plugin_manager()
    with _lock:
        if _cache is not None and _cache[0] is pm:
            return _cache[1]
        builtin = parse_providers(builtin_document())
        taken = _Taken()
        for provider in builtin:
            taken.claim(provider)
        registry = Registry.of((*builtin, *_plugin_providers(pm, taken)))
        _cache = (pm, registry)
        return registry


def routed_registry(pm: Any = None) -> Registry:
    """The registry as the gateway acts on it: operator clients filled in, URLs through the origin overrides.

    Every pre-registered provider carries the operator's client id (and
    whether its secret is set), read now, so a client configured while the
    gateway runs counts at the next request (:mod:`kirocrew_connections.clients`).
    Under ``kirocrew serve --override-origin`` the entry a Connect installs, the
    mint, Test, Disconnect and the grant stat all use the routed URL, so they
    agree on one endpoint, and an overridden approval origin becomes its target
    (the fixture serves the consent page too); the registry's https rule is
    checked before routing.
    """
    from dataclasses import replace

    from kirocrew_core.origin_overrides import active

    from kirocrew_connections.clients import with_operator_clients

    registry = with_operator_clients(load_registry(pm))
    overrides = active()
    if not overrides:
        return registry
    return Registry.of(replace(p, mcp_url=overrides.apply(p.mcp_url),
                               approval_origins=tuple(overrides.apply(o) for o in p.approval_origins))
                       for p in registry.all())


def clear_registry_cache() -> None:
    global _cache
    with _lock:
        _cache = None


def stale_l0_baselines(
    providers: Iterable[Provider], as_of: date, max_age_days: int = L0_VERIFICATION_MAX_AGE_DAYS
) -> tuple[Provider, ...]:
    """Providers whose L0 baseline is strictly older than ``max_age_days`` on ``as_of``."""
    return tuple(p for p in providers if (as_of - p.l0.verified_on).days > max_age_days)


# --- immutability ----------------------------------------------------------------


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value
