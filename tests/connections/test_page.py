"""The dashboard's Connections page and ``POST /api/connections/install``, through the in-process gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_core.origin_overrides import OriginOverrides, activate

from kirocrew_connections.cards import (
    CONNECTED,
    NEEDS_ATTENTION,
    NEEDS_CONFIGURATION,
    NOT_CONNECTED,
    NOT_VERIFIED,
    WAITING,
    card_state,
    error_indicates_rejection,
    format_since,
    safe_approval_url,
)
from kirocrew_connections.status import ConnectionStatus


@pytest.fixture
def plugin_manager(connections_plugins: Any) -> Any:
    return connections_plugins


def crew_servers() -> dict[str, Any]:
    path = home.crew_home() / "mcp.json"
    return json.loads(path.read_text())["mcpServers"] if path.exists() else {}


def rendered_servers() -> dict[str, Any]:
    path = home.rendered_agent_file()
    return json.loads(path.read_text()).get("mcpServers", {}) if path.exists() else {}


def card_html(html: str, slug: str) -> str:
    start = html.index(f'<article id="connection-{slug}"')
    return html[start:html.index("</article>", start)]


# -- the page -------------------------------------------------------------------------------------------


def test_the_page_is_in_the_navigation_and_shows_a_card_per_offered_provider(gateway_client: Any) -> None:
    assert '<a href="/connections">Connections</a>' in gateway_client.get("/").text
    answer = gateway_client.get("/connections")
    assert answer.status_code == 200
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    html = answer.text
    assert "<style" not in html and "<script>" not in html and 'style="' not in html
    notion = card_html(html, "notion")
    assert 'data-state="not-connected"' in notion and ">Not connected<" in notion and ">Connect</button>" in notion
    assert "Search your Notion workspace and read pages and databases." in notion
    github = card_html(html, "github")  # pre-registered, no client configured
    assert 'data-state="needs-configuration"' in github and "<button" not in github
    assert "(planned)" not in github and "Needs your OAuth app" in github and "<button" not in github
    assert "http://127.0.0.1:48101/callback" in github  # the callback URL to register
    assert "kirocrew connections client set github --client-id" in github
    assert "KIROCREW_CONNECTIONS_GITHUB_CLIENT_ID" in github and "KIROCREW_CONNECTIONS_GITHUB_CLIENT_SECRET" in github
    sentry = card_html(html, "sentry")  # gated: listed behind the switch, never offered
    assert "data-gated hidden" in sentry and "<button" not in sentry
    assert 'id="connection-figma"' not in html  # hidden: vendor approval pending
    assert 'role="switch"' in html and "Show providers not offered yet" in html


def test_a_configured_preregistered_provider_is_an_ordinary_connect_card(
        gateway_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIROCREW_CONNECTIONS_GITHUB_CLIENT_ID", "Iv1.configured")
    monkeypatch.setenv("KIROCREW_CONNECTIONS_GITHUB_CLIENT_SECRET", "never-shown-on-a-page")
    html = gateway_client.get("/connections").text
    github = card_html(html, "github")
    assert 'data-state="not-connected"' in github and ">Connect</button>" in github
    assert "Needs your OAuth app" not in github and "never-shown-on-a-page" not in html
    asana = card_html(html, "asana")  # its own client is still missing
    assert 'data-state="needs-configuration"' in asana and "http://127.0.0.1:48102/callback" in asana


def test_a_connected_provider_shows_since_test_and_disconnect(gateway_client: Any) -> None:
    from kirocrew_core import grants

    from kirocrew_connections.registry import load_registry

    url = load_registry().get("notion").mcp_url
    token, registration = grants.artifact_paths(url)
    token.parent.mkdir(parents=True, exist_ok=True)
    registration.write_text("{}")
    token.write_text("{}")
    gateway_client.post("/api/connections/install", json={"slug": "notion"})
    # Never probed (no network here): the grant on disk decides.
    notion = card_html(gateway_client.get("/connections").text, "notion")
    assert 'data-state="connected"' in notion
    assert "Connected since <time" in notion
    assert ">Test</button>" in notion and ">Disconnect</button>" in notion


def test_a_javascript_approval_url_never_becomes_a_link(gateway_client: Any) -> None:
    from kirocrew_connections.cards import build_card
    from kirocrew_connections.registry import load_registry

    provider = load_registry().get("notion")
    card = build_card(provider, None, None, {"state": "waiting", "oauth_url": "javascript:alert(1)"})
    assert card.state == WAITING and card.oauth_url is None


def test_hostile_provider_and_server_strings_are_escaped(gateway_client: Any, providers: list[Any]) -> None:
    from kirocrew_connections.registry import builtin_document

    hostile = next(dict(e) for e in builtin_document() if e["slug"] == "notion")
    hostile.update(slug="hostile", name="<script>alert(1)</script>", mcp_url="https://hostile.example/mcp",
                   prerequisite_copy='"><img src=x onerror=alert(2)>')
    hostile.pop("revoke_manual_path", None)
    providers.append(hostile)
    crew = home.crew_home() / "mcp.json"
    crew.parent.mkdir(parents=True, exist_ok=True)
    crew.write_text(json.dumps({"mcpServers": {"hostile": {"url": "https://hostile.example/mcp"}}}))
    html = card_html(gateway_client.get("/connections").text, "hostile")
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in html


# -- the fold -------------------------------------------------------------------------------------------


class Row:
    def __init__(self, status: str = "unknown", disabled: bool = False, error: str = "") -> None:
        self.status, self.disabled, self.error = status, disabled, error


def row(status: str = "not_connected", grant: bool = False, indeterminate: bool = False,
        needs_config: bool | None = None) -> ConnectionStatus:
    return ConnectionStatus("notion", status, "r", grant, indeterminate, None, needs_config)


@pytest.mark.parametrize(("status", "server", "mint", "expected"), [
    (row(needs_config=True), None, {}, NEEDS_CONFIGURATION),
    (row(), None, {}, NOT_CONNECTED),
    (row(), None, {"state": "minting"}, WAITING),
    (row(grant=True), Row("ok"), {"state": "waiting", "oauth_url": "https://x.test/a"}, WAITING),
    (row(grant=True), Row("ok"), {}, CONNECTED),
    (row(grant=False), Row("ok"), {}, NOT_VERIFIED),
    (row(grant=False, indeterminate=True), Row("ok"), {}, CONNECTED),
    (row(grant=True), Row("needs_auth"), {}, CONNECTED),
    (row(grant=False, indeterminate=True), Row("needs_auth"), {}, NOT_VERIFIED),
    (row(grant=True), Row("error", error="invalid_grant"), {}, NEEDS_ATTENTION),
    (row(grant=True), Row("ok", disabled=True), {}, NEEDS_ATTENTION),
    (row(grant=True), Row("unknown"), {}, CONNECTED),
    (row(grant=False), Row("unknown"), {}, NOT_VERIFIED),
])
def test_the_card_state_follows_the_fold(status: Any, server: Any, mint: Any, expected: str) -> None:
    assert card_state(status, server, mint) == expected


@pytest.mark.parametrize(("status", "server", "mint", "expected"), [
    (row(grant=False), Row("needs_auth"), {}, NEEDS_ATTENTION),  # kiro-cli dropped the refused grant
    (row(grant=False), Row("unknown"), {}, NEEDS_ATTENTION),
    (row(grant=True), Row("ok"), {}, CONNECTED),  # a Reconnect brought a grant back: the refusal is history
    (row(grant=False), Row("ok"), {"state": "waiting", "oauth_url": "https://x.test/a"}, WAITING),
    (row(), None, {}, NOT_CONNECTED),  # disconnected: nothing left to reconnect
])
def test_a_grant_refused_at_the_last_test_needs_attention_until_a_grant_is_back(
        status: Any, server: Any, mint: Any, expected: str) -> None:
    assert card_state(status, server, mint, grant_refused=True) == expected


@pytest.mark.parametrize(("error", "rejected"), [
    ("invalid_grant: the refresh token was revoked", True),
    ("HTTP 401 from the server", True),
    ("the access token has expired", True),
    ("certificate has expired", False),
    ("timeout after 10s", False),
    ("connect ECONNRESET 10.0.0.1:4013", False),
])
def test_a_provider_rejection_is_told_from_an_unreachable_provider(error: str, rejected: bool) -> None:
    assert error_indicates_rejection(error) is rejected


def test_only_http_approval_links_and_real_dates_are_shown() -> None:
    assert safe_approval_url("javascript:alert(1)") is None
    assert safe_approval_url("https://auth.test/authorize?x=1") == "https://auth.test/authorize?x=1"
    assert format_since("2026-03-04T10:00:00Z") == "Mar 4, 2026"
    assert format_since("not a date") is None


# -- POST /api/connections/install ----------------------------------------------------------------------


def test_install_adds_the_entry_once_and_says_it_created_it(gateway_client: Any) -> None:
    first = gateway_client.post("/api/connections/install", json={"slug": "notion"})
    assert first.status_code == 200
    assert first.json() == {"ok": True, "slug": "notion", "name": "notion", "created": True, "changed": True}
    assert crew_servers()["notion"] == {"url": "https://mcp.notion.com/mcp"}
    assert rendered_servers()["notion"]["url"] == "https://mcp.notion.com/mcp"
    again = gateway_client.post("/api/connections/install", json={"slug": "notion"})
    assert again.json()["created"] is False and again.json()["changed"] is False


def test_install_re_enables_a_disabled_entry_and_restores_its_url_keeping_other_keys(gateway_client: Any) -> None:
    path = home.crew_home() / "mcp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": {"notion": {"url": "https://mcp.notion.com/old", "disabled": True,
                                                           "disabledTools": ["search"]}}}))
    answer = gateway_client.post("/api/connections/install", json={"slug": "notion"}).json()
    assert (answer["created"], answer["changed"]) == (False, True)
    assert crew_servers()["notion"] == {"url": "https://mcp.notion.com/mcp", "disabledTools": ["search"]}


def test_install_never_claims_a_name_another_scope_already_uses(gateway_client: Any) -> None:
    kiro = home.kiro_home() / "settings" / "mcp.json"
    kiro.parent.mkdir(parents=True, exist_ok=True)
    kiro.write_text(json.dumps({"mcpServers": {"notion": {"url": "https://mcp.notion.com/mcp"}}}))
    answer = gateway_client.post("/api/connections/install", json={"slug": "notion"}).json()
    assert (answer["created"], answer["changed"]) == (False, False)
    assert "notion" not in crew_servers()


@pytest.mark.parametrize("body", [b"[]", b"not json", b'{"slug": "../../etc"}', b'{"slug": "nope"}', b"{}"])
def test_install_refuses_bad_bodies_and_unknown_providers_and_changes_nothing(gateway_client: Any,
                                                                             body: bytes) -> None:
    answer = gateway_client.post("/api/connections/install", content=body,
                                 headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["code"] in ("bad_json", "unknown_provider")
    assert crew_servers() == {}


@pytest.mark.parametrize("slug", ["superhuman", "github", "figma"])
def test_install_refuses_a_provider_that_is_not_offered_and_writes_nothing(gateway_client: Any, slug: str) -> None:
    answer = gateway_client.post("/api/connections/install", json={"slug": slug})
    assert (answer.status_code, answer.json()["code"]) == (409, "provider_not_offered")
    assert crew_servers() == {} and not home.rendered_agent_file().exists()


def test_a_provider_that_stopped_being_offered_can_still_be_disconnected(gateway_client: Any) -> None:
    path = home.crew_home() / "mcp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    url = "https://mcp.mail.superhuman.com/mcp"
    from kirocrew_connections.registry import load_registry

    assert load_registry().get("superhuman").mcp_url == url
    path.write_text(json.dumps({"mcpServers": {"superhuman": {"url": url}}}))
    answer = gateway_client.post("/api/connections/disconnect", json={"slug": "superhuman"})
    assert answer.status_code == 200 and answer.json()["entryRemoved"] is True
    assert crew_servers() == {}


def test_install_refuses_a_malformed_crew_store_and_leaves_it_as_it_was(gateway_client: Any) -> None:
    path = home.crew_home() / "mcp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{ not json")
    answer = gateway_client.post("/api/connections/install", json={"slug": "notion"})
    assert (answer.status_code, answer.json()["code"]) == (500, "crew_store_unusable")
    assert path.read_text() == "{ not json"


# -- origin overrides, as the gateway applies them ---------------------------------------------------


@pytest.fixture
def overridden() -> Iterator[None]:
    activate(OriginOverrides({"https://mcp.notion.com": "http://127.0.0.1:9"}))
    yield
    activate(OriginOverrides())


def test_under_an_override_connect_installs_the_routed_url_and_every_page_shows_the_banner(
        gateway_client: Any, overridden: None) -> None:
    answer = gateway_client.post("/api/connections/install", json={"slug": "notion"}).json()
    assert answer["created"] is True
    assert crew_servers()["notion"] == {"url": "http://127.0.0.1:9/mcp"}
    for path in ("/", "/connections"):
        html = gateway_client.get(path).text
        assert 'class="override-banner" role="status"' in html
        assert "Requests for <code>https://mcp.notion.com</code> go to <code>http://127.0.0.1:9</code>" in html
    notion = card_html(gateway_client.get("/connections").text, "notion")
    assert "http://127.0.0.1:9/mcp" in notion  # the card searches (and acts on) the routed URL


def test_without_an_override_no_banner_is_shown(gateway_client: Any) -> None:
    assert "override-banner" not in gateway_client.get("/connections").text


# -- POST /api/connections/relay ------------------------------------------------------------------------

WAITING_VIEW = {"slug": "notion", "state": "waiting", "token": "t1",
                "oauth_url": "https://auth.test/authorize?client_id=c&redirect_uri=http%3A%2F%2F127.0.0.1%3A4567%2F"}


@pytest.mark.parametrize("pasted", [
    "", "   ", 42, "http://127.0.0.1/?code=a",              # no port
    "https://127.0.0.1:4567/?code=a",                     # not http
    "http://example.test:4567/?code=a",                   # not loopback
    "http://u:p@127.0.0.1:4567/?code=a",                  # userinfo
    "http://127.0.0.1:4567/?code=a#frag",
    "http://127.0.0.1:4567/?code=a&code=b", "http://127.0.0.1:4567/?code=", "http://127.0.0.1:4567/?state=s",
])
def test_a_return_address_that_is_not_one_loopback_callback_is_refused(pasted: object) -> None:
    from kirocrew_core.errors import BadInputError

    from kirocrew_connections.relay import return_address

    with pytest.raises(BadInputError) as refused:
        return_address(pasted)
    assert refused.value.code == "invalid_return_address"


def test_only_the_waiting_mints_own_listener_can_be_opened() -> None:
    from kirocrew_core.errors import BadInputError, ConflictError

    from kirocrew_connections.relay import relay_target, return_address

    pasted = return_address("127.0.0.1:4567/?code=abc&state=s")
    assert relay_target(WAITING_VIEW, pasted, "t1") == "http://127.0.0.1:4567/?code=abc&state=s"
    assert relay_target(WAITING_VIEW, return_address("http://localhost:4567/?code=abc"), None).startswith(
        "http://127.0.0.1:4567/?")
    with pytest.raises(BadInputError, match="not the one"):
        relay_target(WAITING_VIEW, return_address("http://127.0.0.1:4568/?code=abc"), None)
    with pytest.raises(BadInputError, match="not the one"):
        relay_target(WAITING_VIEW, return_address("http://127.0.0.1:4567/elsewhere?code=abc"), None)
    with pytest.raises(ConflictError) as stale:
        relay_target(WAITING_VIEW, pasted, "another-tab")
    assert stale.value.code == "no_consent_waiting"
    with pytest.raises(ConflictError):
        relay_target({"slug": "notion", "state": "granted", "token": "t1"}, pasted, None)


def test_the_relay_route_refuses_bad_bodies_and_a_provider_with_no_consent_waiting(gateway_client: Any) -> None:
    refused = gateway_client.post("/api/connections/relay", json={"slug": "nope", "redirect_url": "x"})
    assert (refused.status_code, refused.json()["code"]) == (400, "unknown_provider")
    refused = gateway_client.post("/api/connections/relay", json={"slug": "notion", "redirect_url": "nope"})
    assert (refused.status_code, refused.json()["code"]) == (400, "invalid_return_address")
    idle = gateway_client.post("/api/connections/relay",
                               json={"slug": "notion", "redirect_url": "http://127.0.0.1:4567/?code=abc"})
    assert (idle.status_code, idle.json()["code"]) == (409, "no_consent_waiting")
    assert "abc" not in idle.text  # the code is never echoed
