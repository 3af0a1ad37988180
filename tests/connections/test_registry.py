"""The provider registry: the shipped roster, every loader rule, immutability, plugin sources."""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections import Counter
from collections.abc import Callable
from datetime import date, timedelta
from importlib import resources
from typing import Any

import pytest

from kirocrew_connections.registry import (
    L0_VERIFICATION_MAX_AGE_DAYS,
    L0_VERIFICATION_WARN_AGE_DAYS,
    REVOKE_VERIFICATION_MAX_AGE_DAYS,
    RegistryError,
    builtin_document,
    clear_registry_cache,
    is_local_host,
    load_registry,
    parse_providers,
    stale_l0_baselines,
    utc_today,
)
from kirocrew_core.contributions import RegistryLoader
from kirocrew_core.errors import KirocrewError
from kirocrew_core.plugins import PluginWarning
from kirocrew_testing.plugins import register_plugin

VISIBLE = ["notion", "linear", "atlassian", "stripe", "vercel", "gitlab"]
HIDDEN = ["figma", "canva", "dropbox", "square"]


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_registry_cache()
    yield
    clear_registry_cache()


def _doc() -> list[dict[str, Any]]:
    return copy.deepcopy(builtin_document())


def _entry(doc: list[dict[str, Any]], slug: str) -> dict[str, Any]:
    return next(e for e in doc if e["slug"] == slug)


# --- the shipped roster ---------------------------------------------------------


def test_the_shipped_registry_ships_as_package_data():
    assert resources.files("kirocrew_connections").joinpath("registry.json").is_file()


def test_the_shipped_registry_loads_all_29_providers_in_file_order(plugin_manager):
    registry = load_registry(plugin_manager)
    slugs = [p.slug for p in registry.all()]
    assert len(slugs) == 29 and len(set(slugs)) == 29
    assert slugs[:3] == ["notion", "github", "linear"] and slugs[-1] == "todoist"
    assert {p.source for p in registry.all()} == {"registry.json"}


def test_visibility_is_six_visible_nineteen_gated_four_hidden(plugin_manager):
    registry = load_registry(plugin_manager)
    assert Counter(p.visibility for p in registry.all()) == {"visible": 6, "gated": 19, "hidden": 4}
    assert [p.slug for p in registry.visible()] == VISIBLE
    assert sorted(p.slug for p in registry.all() if p.visibility == "hidden") == sorted(HIDDEN)
    assert len(registry.listed()) == 25 and not {p.slug for p in registry.listed()} & set(HIDDEN)


def test_pre_registered_providers_are_gated_until_the_operator_client_is_configured(plugin_manager):
    registry = load_registry(plugin_manager)
    github, asana = registry.get("github"), registry.get("asana")
    assert (github.visibility, asana.visibility) == ("gated", "gated")
    assert github.auth is not None and asana.auth is not None
    assert (github.auth.redirect_port, asana.auth.redirect_port) == (48101, 48102)
    assert github.redirect_uri == "http://127.0.0.1:48101/callback"
    assert asana.redirect_uri == "http://127.0.0.1:48102/callback"
    assert github.auth.registration_guide == "oauth-app-registration/github.md"
    assert registry.get("notion").redirect_uri is None
    assert sum(p.auth is not None for p in registry.all()) == 2

    # The launch gate does not decide a pre-registered provider: the operator's client does.
    doc = _doc()
    for slug in ("github", "asana"):
        _entry(doc, slug).update(launch_gate_passed=True)
    assert [p.visibility for p in parse_providers(doc) if p.slug in ("github", "asana")] == ["gated", "gated"]
    _entry(doc, "github")["client_id"] = "Iv1.kiro-client"
    with_id = next(p for p in parse_providers(doc) if p.slug == "github")
    assert with_id.visibility == "gated"  # confidential: the secret is missing
    assert dataclasses.replace(with_id, client_secret_set=True).visibility == "visible"
    assert dataclasses.replace(github, client_id="Iv1.x", client_secret_set=True).visibility == "visible"
    public = dataclasses.replace(github, auth=dataclasses.replace(github.auth, confidential=False))
    assert dataclasses.replace(public, client_id="Iv1.x").visibility == "visible"
    assert dataclasses.replace(github, client_id="Iv1.x", client_secret_set=True,
                               vendor_approval_pending=True).visibility == "hidden"


def test_the_shipped_registry_carries_aliases_smoke_fixtures_and_copy(plugin_manager):
    registry = load_registry(plugin_manager)
    assert dict(registry.get("linear").tool_aliases)["list_teams"] == "linear_list_teams"
    assert registry.get("notion").tool_aliases == {}
    assert registry.get("webflow").smoke_arguments() == {"actions": [{"list_sites": {}}]}
    assert registry.get("huggingface").smoke_tool == "hub_repo_search"
    assert registry.get("paypal").recommended_scopes == ("openid", "email", "profile")
    assert sum(p.revoke_manual_path is not None for p in registry.all()) == 22
    assert sum(p.prerequisite_copy is not None for p in registry.all()) == 15
    assert registry.get("github").l0.dcr is False and registry.get("github").l0.pkce is True
    assert registry.get("superhuman").revoke_verified_note.startswith("UNVERIFIED")


def test_an_unknown_slug_is_a_stable_unknown_provider_error(plugin_manager):
    registry = load_registry(plugin_manager)
    with pytest.raises(KirocrewError) as caught:
        registry.get("no-such-provider")
    assert caught.value.code == "unknown_provider" and "no-such-provider" in caught.value.message
    with pytest.raises(KirocrewError, match="unknown provider$"):
        registry.get("Not A Slug!")


def test_the_registry_is_built_once_per_plugin_manager(plugin_manager):
    first = load_registry()
    assert load_registry(plugin_manager) is first
    clear_registry_cache()
    assert load_registry() is not first


# --- every loader rule ------------------------------------------------------------

Mutation = Callable[[list[dict[str, Any]]], None]


def _set(target: str, /, **fields: Any) -> Mutation:
    return lambda doc: _entry(doc, target).update(copy.deepcopy(fields))


def _drop(slug: str, field: str) -> Mutation:
    return lambda doc: _entry(doc, slug).pop(field)


def _set_in(slug: str, block: str, **fields: Any) -> Mutation:
    return lambda doc: _entry(doc, slug)[block].update(copy.deepcopy(fields))


def _l0(slug: str, **fields: Any) -> Mutation:
    return _set_in(slug, "l0_expectations", **fields)


def _future(doc: list[dict[str, Any]]) -> None:
    _entry(doc, "notion")["l0_expectations"]["verified_on"] = (utc_today() + timedelta(days=1)).isoformat()


def _duplicate_slug(doc: list[dict[str, Any]]) -> None:
    _entry(doc, "stripe")["slug"] = "notion"


def _github_auth(**fields: Any) -> Mutation:
    return _set_in("github", "auth", **fields)


PREREGISTERED = {"mode": "preregistered", "confidential": True, "redirect_port": 48103,
                 "registration_guide": "oauth-app-registration/notion.md"}

RULES: list[tuple[str, Mutation, str]] = [
    ("missing field", _drop("notion", "docs_url"), "missing fields: 'docs_url'"),
    ("unknown field", _set("notion", colour="blue"), "unknown fields: 'colour'"),
    ("bad slug", _set("notion", slug="Not_A_Slug"), "#0: slug must match"),
    ("duplicate slug", _duplicate_slug, "'notion': duplicate slug"),
    ("empty name", _set("notion", name=" "), "name must be a non-empty string"),
    ("empty gotcha", _set("notion", gotcha_copy=""), "gotcha_copy must be a non-empty string"),
    ("http mcp url", _set("notion", mcp_url="http://mcp.notion.com/mcp"), "mcp_url must be an https:// URL"),
    ("http revoke url", _set("notion", revoke_page_url="http://x.example"), "revoke_page_url must be an https"),
    ("http docs url", _set("notion", docs_url="ftp://x.example"), "docs_url must be an https"),
    ("bad category", _set("notion", category="social"), "category must be one of calendar-email"),
    ("empty category", _set("notion", category=""), "category must be a non-empty string"),
    ("tier 4", _set("notion", tier=4), "tier must be the integer 1, 2 or 3"),
    ("tier as bool", _set("notion", tier=True), "tier must be the integer"),
    ("tier as string", _set("notion", tier="1"), "tier must be the integer"),
    ("scopes not a list", _set("notion", recommended_scopes="default"), "recommended_scopes must be a list"),
    ("empty scope", _set("notion", recommended_scopes=[""]), "recommended_scopes must be a list"),
    ("repeated scope", _set("notion", recommended_scopes=["a", "a"]), "must not repeat a scope"),
    ("smoke extra key", _set_in("notion", "smoke_fixture", extra=1), "smoke_fixture must be an object with"),
    ("smoke empty tool", _set_in("notion", "smoke_fixture", tool=""), "smoke_fixture.tool must be"),
    ("smoke args list", _set_in("notion", "smoke_fixture", args=[]), "smoke_fixture.args must be an object"),
    ("smoke args not json", _set_in("notion", "smoke_fixture", args={"when": date(2026, 1, 1)}),
     "smoke_fixture.args must be plain JSON data"),
    ("auth mode unhashable", _github_auth(mode=["preregistered"]), "auth.mode must be one of"),
    ("l0 extra key", _l0("notion", origin="x"), "l0_expectations must be an object with exactly"),
    ("l0 dcr string", _l0("notion", dcr="yes"), "l0_expectations.dcr must be true or false"),
    ("l0 pkce null", _l0("notion", pkce=None), "l0_expectations.pkce must be true or false"),
    ("l0 date shape", _l0("notion", verified_on="13/08/2026"), "verified_on must be a YYYY-MM-DD date"),
    ("l0 compact date", _l0("notion", verified_on="20260813"), "verified_on must be a YYYY-MM-DD date"),
    ("l0 unreal date", _l0("notion", verified_on="2026-02-30"), "verified_on must be a real calendar date"),
    ("l0 future date", _future, "verified_on must not be in the future"),
    ("issuer http", _l0("notion", authorization_server="http://mcp.notion.com"), "must be an https URL"),
    ("issuer userinfo", _l0("notion", authorization_server="https://u:p@mcp.notion.com"), "must not carry userinfo"),
    ("issuer query", _l0("notion", authorization_server="https://mcp.notion.com/?a=1"), "must not carry a query"),
    ("issuer empty query", _l0("notion", authorization_server="https://mcp.notion.com/?"), "must not carry a query"),
    ("issuer fragment", _l0("notion", authorization_server="https://mcp.notion.com/#x"), "must not carry a fragment"),
    ("issuer bad port", _l0("notion", authorization_server="https://mcp.notion.com:99999"), "well-formed URL"),
    ("issuer ipv4", _l0("notion", authorization_server="https://10.0.0.1/oauth"), "must be a public DNS name"),
    ("issuer short ipv4", _l0("notion", authorization_server="https://127.1"), "must be a public DNS name"),
    ("issuer ipv6", _l0("notion", authorization_server="https://[::1]:8443"), "must be a public DNS name"),
    ("issuer localhost", _l0("notion", authorization_server="https://LocalHost."), "must be a public DNS name"),
    ("issuer .local", _l0("notion", authorization_server="https://auth.corp.local"), "must be a public DNS name"),
    ("issuer .internal", _l0("notion", authorization_server="https://a.internal/x"), "must be a public DNS name"),
    ("issuer .home.arpa", _l0("notion", authorization_server="https://nas.home.arpa"), "must be a public DNS name"),
    ("issuer bad host", _l0("notion", authorization_server="https://a..b"), "must be a public DNS name"),
    ("approval hosts missing", _drop("notion", "approval_hosts"), "missing fields: 'approval_hosts'"),
    ("approval hosts empty", _set("notion", approval_hosts=[]), "approval_hosts must be a non-empty list"),
    ("approval hosts string", _set("notion", approval_hosts="mcp.notion.com"), "approval_hosts must be a non-empty"),
    ("approval host url", _set("notion", approval_hosts=["https://mcp.notion.com"]), "approval_hosts entries must"),
    ("approval host port", _set("notion", approval_hosts=["mcp.notion.com:443"]), "approval_hosts entries must"),
    ("approval host upper", _set("notion", approval_hosts=["MCP.notion.com"]), "approval_hosts entries must"),
    ("approval host wildcard", _set("notion", approval_hosts=["*.notion.com"]), "approval_hosts entries must"),
    ("approval host bare", _set("notion", approval_hosts=["notion"]), "approval_hosts entries must"),
    ("approval host ip", _set("notion", approval_hosts=["10.0.0.1"]), "approval_hosts entries must be public"),
    ("approval host local", _set("notion", approval_hosts=["auth.corp.local"]), "must be public DNS names"),
    ("approval host repeated", _set("notion", approval_hosts=["a.example", "a.example"]), "must not repeat a host"),
    ("revoke date", _set("notion", revoke_verified_on="2026-13-01"), "revoke_verified_on must be a real"),
    ("revoke note", _set("notion", revoke_verified_note=""), "revoke_verified_note must be a non-empty"),
    ("gate not bool", _set("notion", launch_gate_passed=1), "launch_gate_passed must be true or false"),
    ("vp not bool", _set("notion", vendor_approval_pending="no"), "vendor_approval_pending must be true or false"),
    ("tier 3 not pending", _set("figma", vendor_approval_pending=False), "Tier 3 providers must be vendor-approval"),
    ("tier 3 gate", _set("figma", launch_gate_passed=True), "Tier 3 providers cannot pass the launch gate"),
    ("tier 1 pending", _set("notion", vendor_approval_pending=True), "vendor approval is only meaningful for Tier 3"),
    ("auth bad mode", _github_auth(mode="pkce"), "auth.mode must be one of dcr, preregistered"),
    ("auth dcr extras", _set("notion", auth={"mode": "dcr", "confidential": True}), "dcr must carry no other"),
    ("auth unknown key", _github_auth(secret="x"), "auth has unknown fields: 'secret'"),
    ("auth confidential", _github_auth(confidential="yes"), "auth.confidential must be true or false"),
    ("auth low port", _github_auth(redirect_port=80), "auth.redirect_port must be an integer in 1024-49151"),
    ("auth high port", _github_auth(redirect_port=49152), "auth.redirect_port must be an integer"),
    ("auth port bool", _github_auth(redirect_port=True), "auth.redirect_port must be an integer"),
    ("auth guide path", _github_auth(registration_guide="../github.md"), "auth.registration_guide must look like"),
    ("auth host", _github_auth(redirect_host="0.0.0.0"), "auth.redirect_host must be 127.0.0.1 or localhost"),
    ("auth missing port", lambda doc: _entry(doc, "github")["auth"].pop("redirect_port"), "auth.redirect_port"),
    ("auth port reused", _set("prisma", auth={**PREREGISTERED, "redirect_port": 48101}),
     "'prisma': auth.redirect_port 48101 is already used by 'github'"),
    ("aliases empty", _set("notion", tool_aliases={}), "tool_aliases must be a non-empty object"),
    ("aliases bad key", _set("notion", tool_aliases={"a b": "notion_a b"}), "keys and values must match"),
    ("aliases non-string", _set("notion", tool_aliases={"a": 1}), "keys and values must match"),
    ("aliases wrong prefix", _set("notion", tool_aliases={"search": "linear_search"}), "must be <slug>_<tool>"),
    ("client id empty", _set("notion", client_id=""), "client_id must be a non-empty string when present"),
    ("prerequisite null", _set("notion", prerequisite_copy=None), "prerequisite_copy must be a non-empty"),
    ("manual path number", _set("notion", revoke_manual_path=3), "revoke_manual_path must be a non-empty"),
    # A list where an object belongs is the fault under test, so it cannot type-check.
    ("entry not object", lambda doc: doc.__setitem__(0, ["notion"]),  # type: ignore[call-overload]
     "provider #0: must be an object"),
]


@pytest.mark.parametrize(("mutate", "rule"), [pytest.param(m, r, id=i) for i, m, r in RULES])
def test_a_registry_breaking_a_rule_is_rejected_naming_the_provider_and_rule(mutate, rule):
    doc = _doc()
    mutate(doc)
    with pytest.raises(RegistryError) as caught:
        parse_providers(doc)
    assert caught.value.code == "registry_invalid"
    assert caught.value.message.startswith("registry.json: provider ")
    assert rule in caught.value.message


@pytest.mark.parametrize("value", ["https://u:hunter2@mcp.notion.com", "https://mcp.notion.com/?token=hunter2"])
def test_a_rejected_value_is_never_echoed_in_the_error(value):
    doc = _doc()
    _entry(doc, "notion")["l0_expectations"]["authorization_server"] = value
    with pytest.raises(RegistryError) as caught:
        parse_providers(doc)
    assert "hunter2" not in caught.value.message and "'notion'" in caught.value.message


@pytest.mark.parametrize("document", [[], {}, None, "[]"])
def test_a_registry_root_that_is_not_a_non_empty_array_is_rejected(document):
    with pytest.raises(RegistryError, match="must be a non-empty JSON array"):
        parse_providers(document)


def test_optional_fields_may_be_absent_and_a_dcr_auth_block_is_accepted():
    doc = _doc()
    notion = _entry(doc, "notion")
    for field in ("category", "revoke_manual_path"):
        notion.pop(field)
    notion["auth"] = {"mode": "dcr"}
    provider = parse_providers(doc)[0]
    assert provider.auth is not None
    assert (provider.category, provider.revoke_manual_path, provider.auth.mode) == (None, None, "dcr")
    assert provider.redirect_uri is None and provider.visibility == "visible"


@pytest.mark.parametrize(("host", "local"), [
    ("mcp.notion.com", False), ("bücher.example", False), ("MCP.Notion.COM.", False),
    ("127.0.0.1", True), ("127.1", True), ("0x7f.1", True), ("2130706433", True), ("[::1]", True),
    ("localhost", True), ("LOCALHOST.", True), ("app.localhost", True), ("printer.local", True),
    ("svc.internal", True), ("nas.home.arpa", True), ("", True), ("bad_host.example", True),
])
def test_local_hosts_are_judged_on_the_canonical_host(host, local):
    assert is_local_host(host) is local


def test_verification_windows_match_the_reference():
    assert (REVOKE_VERIFICATION_MAX_AGE_DAYS, L0_VERIFICATION_WARN_AGE_DAYS,
            L0_VERIFICATION_MAX_AGE_DAYS) == (180, 60, 90)


def _verified(provider, on: date):
    return dataclasses.replace(provider, l0=dataclasses.replace(provider.l0, verified_on=on))


def test_an_l0_baseline_is_stale_only_when_strictly_older_than_the_window(plugin_manager):
    registry = load_registry(plugin_manager)
    notion = _verified(registry.get("notion"), date(2026, 8, 13))
    todoist = _verified(registry.get("todoist"), date(2026, 9, 26))
    edge = notion.l0.verified_on + timedelta(days=90)
    assert stale_l0_baselines([notion, todoist], edge) == ()
    assert stale_l0_baselines([notion, todoist], edge + timedelta(days=1)) == (notion,)
    assert stale_l0_baselines([notion, todoist], date(2026, 9, 27), max_age_days=0) == (notion, todoist)


def test_no_shipped_l0_baseline_is_older_than_the_warn_window(plugin_manager):
    """The nightly ``l0 --fail-on-stale`` fails on these too; the suite says so first, on every change.

    Refresh: ``kirocrew connections l0 --record`` against the live providers, review, commit
    (docs/connections.md, "Refreshing the baselines").
    """
    stale = stale_l0_baselines(load_registry(plugin_manager).all(), utc_today(), L0_VERIFICATION_WARN_AGE_DAYS)
    assert [(p.slug, p.l0.verified_on.isoformat()) for p in stale] == []


# --- immutability ------------------------------------------------------------------


def test_no_caller_can_mutate_the_registry(plugin_manager):
    registry = load_registry(plugin_manager)
    linear = registry.get("linear")
    # Some attempts write through a read-only type (Mapping, tuple), so mypy refuses them too; this test is
    # about run time, where each must raise as well.
    attempts: list[Callable[[], object]] = [
        lambda: setattr(linear, "mcp_url", "https://evil.example"),
        lambda: setattr(linear.l0, "dcr", False),
        lambda: setattr(registry.get("github").auth, "redirect_port", 1),
        lambda: linear.tool_aliases.__setitem__("x", "linear_x"),  # type: ignore[index]
        lambda: registry.get("webflow").smoke_args["actions"][0].__setitem__("list_sites", 1),
        lambda: registry.get("webflow").smoke_args["actions"].append({}),
        lambda: linear.recommended_scopes.append("write"),  # type: ignore[attr-defined]
        lambda: registry.by_slug.__setitem__("evil", linear),  # type: ignore[index]
        lambda: setattr(registry, "providers", ()),
        lambda: registry.all().__setitem__(0, linear),  # type: ignore[index]
    ]
    for attempt in attempts:
        with pytest.raises((TypeError, AttributeError, dataclasses.FrozenInstanceError)):
            attempt()
    args = registry.get("webflow").smoke_arguments()
    args["actions"].append({"evil": {}})
    assert registry.get("webflow").smoke_arguments() == {"actions": [{"list_sites": {}}]}
    assert load_registry(plugin_manager).get("linear").mcp_url == "https://mcp.linear.app/mcp/readonly"


# --- plugin sources ------------------------------------------------------------------


def _plugin_entry(slug: str, **fields: Any) -> dict[str, Any]:
    entry = {**copy.deepcopy(_entry(builtin_document(), "notion")), "slug": slug, "name": slug.title()}
    entry.update(fields)
    return entry


def test_a_plugin_registry_loader_adds_providers_and_its_bad_entries_are_reported(plugin_manager):
    entries = [
        _plugin_entry("acme"),
        _plugin_entry("broken", tier=7),
        _plugin_entry("notion"),
        _plugin_entry("portly", auth={**PREREGISTERED, "redirect_port": 48102}),
        _plugin_entry("acme-eu", tool_aliases={"search": "acme-eu_search"}),
    ]
    register_plugin(plugin_manager, "roster", registry_loaders=lambda: [
        RegistryLoader("connections.providers", load=lambda: entries),
        RegistryLoader("something.else", load=lambda: [_plugin_entry("ignored")]),
    ])
    with pytest.warns(PluginWarning) as caught:
        registry = load_registry(plugin_manager)
    messages = [str(w.message) for w in caught]
    assert [p.slug for p in registry.all()][29:] == ["acme", "acme-eu"]
    assert registry.get("acme").source == "roster" and registry.get("notion").source == "registry.json"
    assert any("roster: provider 'broken': tier must be the integer" in m for m in messages)
    assert any("roster: provider 'notion': duplicate slug (already defined by registry.json)" in m for m in messages)
    assert any("roster: provider 'portly': auth.redirect_port 48102 is already used by 'asana'" in m
               for m in messages)
    with pytest.raises(KirocrewError, match="unknown provider"):
        registry.get("ignored")


def test_a_plugin_loader_that_raises_or_returns_junk_skips_only_that_source(plugin_manager):
    def explode() -> list[dict[str, Any]]:
        raise RuntimeError("token=hunter2")

    register_plugin(plugin_manager, "a-exploding", registry_loaders=lambda: [
        RegistryLoader("connections.providers", load=explode)])
    register_plugin(plugin_manager, "b-junk", registry_loaders=lambda: [
        RegistryLoader("connections.providers", load=lambda: {"slug": "x"})])
    register_plugin(plugin_manager, "c-good", registry_loaders=lambda: [
        RegistryLoader("connections.providers", load=lambda: [_plugin_entry("good-one")])])
    with pytest.warns(PluginWarning) as caught:
        registry = load_registry(plugin_manager)
    messages = " | ".join(str(w.message) for w in caught)
    assert "a-exploding: registry loader raised RuntimeError" in messages and "hunter2" not in messages
    assert "b-junk: registry loader must return a list" in messages
    assert registry.get("good-one").source == "c-good" and len(registry.all()) == 30


def test_in_strict_plugin_mode_a_bad_plugin_entry_is_fatal(plugin_manager):
    register_plugin(plugin_manager, "roster", registry_loaders=lambda: [
        RegistryLoader("connections.providers", load=lambda: [_plugin_entry("bad", docs_url="http://x")])])
    plugin_manager.strict_all = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RegistryError, match="roster: provider 'bad': docs_url must be an https"):
            load_registry(plugin_manager)


# --- approval hosts ------------------------------------------------------------------

# Two issuers send the user to a consent page on another host than their own (their RFC 8414 metadata says so).
CONSENT_HOST_OF_ISSUER = {"api.figma.com": "www.figma.com", "mcp.mixpanel.com": "mixpanel.com"}


def test_every_shipped_approval_host_is_its_issuers_host_or_its_documented_consent_host(plugin_manager):
    from urllib.parse import urlsplit

    for provider in load_registry(plugin_manager).all():
        issuer_host = urlsplit(provider.l0.authorization_server).hostname
        assert issuer_host is not None
        expected = CONSENT_HOST_OF_ISSUER.get(issuer_host, issuer_host)
        assert provider.approval_origins == (f"https://{expected}",), provider.slug


def test_an_overridden_approval_origin_is_routed_like_the_mcp_url(plugin_manager):
    from kirocrew_core.origin_overrides import OriginOverrides, activate

    from kirocrew_connections.registry import routed_registry

    activate(OriginOverrides({"https://mcp.notion.com": "http://127.0.0.1:9"}))
    try:
        notion, linear = routed_registry(plugin_manager).get("notion"), routed_registry(plugin_manager).get("linear")
    finally:
        activate(OriginOverrides())
    assert (notion.mcp_url, notion.approval_origins) == ("http://127.0.0.1:9/mcp", ("http://127.0.0.1:9",))
    assert linear.approval_origins == ("https://mcp.linear.app",)
