"""The Connections page in a real headless Chromium against a real ``kirocrew serve --override-origin``.

Black-box: the gateway runs with the fake kiro-cli on its PATH and routes Notion's origin
(``https://mcp.notion.com``) to the OAuth-protected MCP fixture server on 127.0.0.1, so the
whole Connect flow (install, mint, consent in the tab the click opened, the grant, Test,
Disconnect) runs against real processes. Outcomes are checked on disk (the crew store, the
grant pair) and in the process table, not only in the page. Elements are found by role and
accessible name.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kirocrew_core import grants, home
from kirocrew_testing.processes import processes_running

NOTION_ORIGIN = "https://mcp.notion.com"
WAIT_MS = 90_000


LINEAR_ORIGIN = "https://mcp.linear.app"
#: Linear is routed to a closed loopback port: a card can show it connected (a seeded grant), nothing answers.
LINEAR_ROUTED_URL = "http://127.0.0.1:9/mcp/readonly"


@pytest.fixture
def kiro_switches() -> dict[str, str]:
    """Fake kiro-cli switches for the served gateway (a test parametrizes this name to set some)."""
    return {}


@pytest.fixture
def premint() -> str:
    """The gateway's premint switch: off, so these tests drive the cold path (a test parametrizes it on)."""
    return "off"


@pytest.fixture
def gateway_env(fake_kiro_cli: Any, isolated_homes: Any, kiro_switches: dict[str, str], premint: str,
                tmp_path: Any) -> dict[str, str]:
    """The served gateway's environment: the fake kiro-cli first on PATH (and in KIRO_CLI_PATH).

    A ``commands_until`` switch names a file in the test's tmp dir (:func:`released`).
    """
    switches = {name: str(tmp_path / value) if name == "commands_until" else value
                for name, value in kiro_switches.items()}
    return {**fake_kiro_cli.env(**switches), "KIROCREW_CONNECTIONS_PREMINT": premint}


def released(tmp_path: Any, name: str) -> None:
    """Release the fake kiro-cli's ``commands_until`` wait on ``name``."""
    (tmp_path / name).touch()


@pytest.fixture
def file_privileges() -> bool:
    """Whether the served gateway may ignore file permissions as root (a test parametrizes it False)."""
    return True


@pytest.fixture
def gateway_command(gateway_command: list[str], file_privileges: bool) -> list[str]:
    from kirocrew_testing.requirements import without_file_privileges

    return gateway_command if file_privileges else without_file_privileges(gateway_command)


#: The other visible providers' origins: a warm premint mounts every visible provider, so these go to a closed port.
OTHER_ORIGINS = ("https://mcp.atlassian.com", "https://mcp.stripe.com", "https://mcp.vercel.com", "https://gitlab.com")


@pytest.fixture
def gateway_args(oauth_mcp_server: Any, premint: str) -> list[str]:
    args = ["--override-origin", f"{NOTION_ORIGIN}={oauth_mcp_server.base_url}",
            "--override-origin", f"{LINEAR_ORIGIN}=http://127.0.0.1:9"]
    if premint == "on":
        for origin in OTHER_ORIGINS:
            args += ["--override-origin", f"{origin}=http://127.0.0.1:9"]
    return args


def _crew_servers() -> dict[str, Any]:
    path = home.crew_home() / "mcp.json"
    return json.loads(path.read_text()).get("mcpServers", {}) if path.exists() else {}


def _mint_processes(agent: bytes = b"kirocrew-mint-notion-") -> list[int]:
    """Live processes running a Notion mint's dedicated agent spec (``--agent kirocrew-mint-notion-…``)
    under this test's crew home (tests in other workers run their own); ``agent`` names another."""
    return processes_running(agent, os.environ["KIROCREW_HOME"])


def _wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.1)


def _wait_for_no_other_tab(page: Any, timeout: float = 30) -> None:
    """Until ``page`` is its context's only open tab (the approval tab a failed Connect opened is closed)."""
    deadline = time.monotonic() + timeout
    while [p for p in page.context.pages if p is not page and not p.is_closed()]:
        assert time.monotonic() < deadline, "the blank approval tab was never closed"
        page.wait_for_timeout(100)  # lets Playwright take in the close event (a bare sleep would not)


def _notion(page: Any) -> Any:
    return page.get_by_role("article", name="Notion")


def _open(dashboard: Any, **kwargs: Any) -> Any:
    opened = dashboard.open("/connections", **kwargs)
    assert opened.page.get_by_role("heading", name="Connections", level=1).is_visible()
    return opened


def _connect_and_take_the_consent_tab(page: Any) -> Any:
    """Click Connect on the Notion card; the tab the click opened, once it shows the provider's consent page."""
    with page.context.expect_page() as opened_tab:
        _notion(page).get_by_role("button", name="Connect").click()
    consent = opened_tab.value
    consent.wait_for_url("**/consent?request=*", timeout=WAIT_MS)
    return consent


def test_a_full_connect_completes_consent_in_the_tab_the_click_opened_then_test_and_disconnect(
        dashboard: Any, oauth_mcp_server: Any) -> None:
    opened = _open(dashboard)
    page = opened.page
    banner = page.get_by_role("status").filter(has_text="Development gateway")
    assert f"Requests for {NOTION_ORIGIN} go to {oauth_mcp_server.base_url}" in banner.inner_text()
    card = _notion(page)
    assert card.get_by_text("Not connected", exact=True).is_visible()
    dashboard.screenshot(opened, "connections-light")

    consent = _connect_and_take_the_consent_tab(page)
    fixture_url = oauth_mcp_server.mcp_url
    assert _crew_servers()["notion"] == {"url": fixture_url}  # installed before the mint, at the routed URL
    card.get_by_text("Waiting for approval", exact=True).wait_for()
    card.get_by_role("link", name="Re-open approval").wait_for(timeout=WAIT_MS)
    assert card.get_by_text("Finish approving in your browser…").is_visible()
    dashboard.screenshot(opened, "connections-waiting-light")

    consent.get_by_role("link", name="Allow").click()
    card.get_by_text("Connected", exact=True).wait_for(timeout=WAIT_MS)
    assert grants.grant_presence(fixture_url) is True
    assert card.get_by_text("Connected since").is_visible()
    _wait_until(lambda: not _mint_processes(), "the mint's kiro-cli exited after the grant")

    card.get_by_role("button", name="Test").click()
    card.get_by_role("status").filter(has_text="Connection is healthy").wait_for(timeout=WAIT_MS)
    dashboard.screenshot(opened, "connections-connected-light")

    # Another server configured at the same endpoint shares the grant: Disconnect keeps it and says so.
    kiro_settings = home.kiro_home() / "settings" / "mcp.json"
    kiro_settings.parent.mkdir(parents=True, exist_ok=True)
    kiro_settings.write_text(json.dumps({"mcpServers": {"team-notion": {"url": fixture_url}}}))
    card.get_by_role("button", name="Disconnect").click()
    alert = card.get_by_role("alert")
    alert.wait_for(timeout=WAIT_MS)
    kept = "The stored grant was kept because the same endpoint is also configured by: team-notion"
    assert kept in alert.inner_text()
    revoke = card.get_by_role("link", name="Revoke at Notion")
    assert revoke.get_attribute("href") == "https://app.notion.com"
    assert "notion" not in _crew_servers()
    assert grants.grant_presence(fixture_url) is True  # the sharer still uses it
    dashboard.screenshot(opened, "connections-disconnected-light")
    assert opened.csp_violations() == []
    assert opened.console_errors == []


def test_a_test_on_a_grant_revoked_at_the_provider_says_it_was_refused_and_reconnect_approves_again(
        dashboard: Any, oauth_mcp_server: Any) -> None:
    opened = _open(dashboard)
    page = opened.page
    card = _notion(page)
    consent = _connect_and_take_the_consent_tab(page)
    consent.get_by_role("link", name="Allow").click()
    card.get_by_text("Connected", exact=True).wait_for(timeout=WAIT_MS)
    fixture_url = oauth_mcp_server.mcp_url

    oauth_mcp_server.revoke_all()  # revoked at the provider: the pair on this disk no longer works
    card.get_by_role("button", name="Test").click()
    said = card.get_by_role("alert").filter(has_text="Notion refused the stored authorization")
    said.wait_for(timeout=WAIT_MS)
    assert "did not pass" not in card.inner_text()
    card.get_by_text("Needs attention", exact=True).wait_for(timeout=WAIT_MS)
    assert card.get_by_text("Notion refused the stored authorization when it was tested.").is_visible()
    reconnect = card.get_by_role("button", name="Reconnect")
    assert reconnect.is_visible()
    assert grants.grant_presence(fixture_url) is False  # kiro-cli dropped the refused token itself
    dashboard.screenshot(opened, "connections-grant-refused-light")

    with page.context.expect_page() as opened_tab:
        reconnect.click()
    consent = opened_tab.value
    consent.wait_for_url("**/consent?request=*", timeout=WAIT_MS)
    consent.get_by_role("link", name="Allow").click()
    card.get_by_text("Connected", exact=True).wait_for(timeout=WAIT_MS)
    assert grants.grant_presence(fixture_url) is True
    card.get_by_role("button", name="Test").click()
    card.get_by_role("status").filter(has_text="Connection is healthy").wait_for(timeout=WAIT_MS)
    assert opened.csp_violations() == []
    assert opened.console_errors == []


def test_cancel_mid_consent_uninstalls_what_the_new_connect_installed_and_ends_the_mint(
        dashboard: Any, oauth_mcp_server: Any) -> None:
    opened = _open(dashboard)
    page = opened.page
    _connect_and_take_the_consent_tab(page)
    card = _notion(page)
    card.get_by_role("link", name="Re-open approval").wait_for(timeout=WAIT_MS)
    assert _crew_servers()["notion"] == {"url": oauth_mcp_server.mcp_url}
    assert _mint_processes(), "the mint holds a kiro-cli while the user consents"

    card.get_by_role("button", name="Cancel").click()
    card.get_by_text("Not connected", exact=True).wait_for(timeout=WAIT_MS)
    _wait_until(lambda: "notion" not in _crew_servers(), "the entry the connect created was uninstalled")
    _wait_until(lambda: not _mint_processes(), "the mint's kiro-cli exited")
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is False
    assert card.get_by_role("button", name="Connect").is_enabled()
    assert opened.console_errors == []


def test_the_page_searches_shows_gated_providers_behind_their_switch_and_fits_400px(plain_dashboard: Any) -> None:
    opened = _open(plain_dashboard, color_scheme="dark")
    page = opened.page
    plain_dashboard.screenshot(opened, "connections-dark")
    search = page.get_by_role("searchbox", name="Search services")
    assert page.get_by_role("article", name="Sentry").is_hidden()
    page.get_by_role("switch", name="Show providers not offered yet").check()
    assert page.get_by_role("article", name="Sentry").is_visible()
    assert page.get_by_role("article", name="Sentry").get_by_role("button").count() == 0
    search.fill("linear")
    assert page.get_by_role("article", name="Linear").is_visible()
    assert _notion(page).is_hidden()
    search.fill("no such service")
    assert page.get_by_text("No services match this search.").is_visible()
    github = page.get_by_role("article", name="GitHub")
    search.fill("github")
    assert github.get_by_text("Needs configuration", exact=True).is_visible()
    assert github.get_by_role("button").count() == 0

    narrow = _open(plain_dashboard, width=400)
    assert narrow.page.evaluate("document.documentElement.scrollWidth <= 400")
    plain_dashboard.screenshot(narrow, "connections-narrow-light")
    assert opened.csp_violations() == [] and narrow.csp_violations() == []


def _write_crew_servers(servers: dict[str, Any]) -> None:
    path = home.crew_home() / "mcp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))


def test_reconnect_re_enables_a_disabled_entry_and_a_cancelled_reconnect_keeps_it(
        dashboard: Any, oauth_mcp_server: Any) -> None:
    fixture_url = oauth_mcp_server.mcp_url
    _write_crew_servers({"notion": {"url": fixture_url, "disabled": True, "timeout": 30000}})
    opened = _open(dashboard)
    page = opened.page
    card = _notion(page)
    assert card.get_by_text("Needs attention", exact=True).is_visible()

    with page.context.expect_page() as opened_tab:
        card.get_by_role("button", name="Reconnect").click()
    opened_tab.value.wait_for_url("**/consent?request=*", timeout=WAIT_MS)
    card.get_by_role("link", name="Re-open approval").wait_for(timeout=WAIT_MS)
    assert _crew_servers()["notion"] == {"url": fixture_url, "timeout": 30000}  # enabled, other keys kept

    card.get_by_role("button", name="Cancel").click()
    _wait_until(lambda: not _mint_processes(), "the mint's kiro-cli exited")
    card.get_by_text("Not verified", exact=True).wait_for(timeout=WAIT_MS)
    assert _crew_servers()["notion"] == {"url": fixture_url, "timeout": 30000}  # a reconnect's entry is kept
    assert card.get_by_role("button", name="Connect").is_enabled()

    consent = _connect_and_take_the_consent_tab(page)
    consent.get_by_role("link", name="Allow").click()
    card.get_by_text("Connected", exact=True).wait_for(timeout=WAIT_MS)
    assert grants.grant_presence(fixture_url) is True
    assert opened.console_errors == []


def test_a_refused_connect_leaves_the_card_as_it_was_with_the_error_and_closes_the_blank_tab(
        dashboard: Any) -> None:
    crew = home.crew_home() / "mcp.json"
    crew.parent.mkdir(parents=True, exist_ok=True)
    crew.write_text("{ not json")
    opened = _open(dashboard)
    page = opened.page
    card = _notion(page)
    card.get_by_role("button", name="Connect").click()
    alert = card.get_by_role("alert")
    alert.wait_for(timeout=WAIT_MS)
    assert alert.inner_text().startswith("Action failed: ")
    assert "fix it, then connect again" in alert.inner_text()
    _wait_for_no_other_tab(page)  # the tab opened on the click: no blank "Connecting…" tab is left behind
    assert card.get_by_text("Not connected", exact=True).is_visible()
    assert crew.read_text() == "{ not json"
    assert not _mint_processes()


@pytest.fixture(scope="module")
def plain_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A plain ``kirocrew serve`` in homes of its own (no fake kiro-cli, no routed origin, nothing connected),
    shared by the module's tests that only read the page as a fresh gateway shows it."""
    from kirocrew_testing.browser import serving_in_own_homes

    with serving_in_own_homes(tmp_path_factory.mktemp("connections-plain")) as (served, _):
        yield served


@pytest.fixture
def plain_dashboard(module_chromium: Any, plain_gateway: Any, tmp_path: Any) -> Iterator[Any]:
    """Pages of :func:`plain_gateway` in the module's chromium; the test's contexts close when it ends."""
    from kirocrew_testing.browser import Dashboard

    with Dashboard(module_chromium, plain_gateway, tmp_path / "screenshots") as pages:
        yield pages


@pytest.fixture(scope="module")
def script_page(module_chromium: Any, plain_gateway: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Connections page for the tests of the page script's pure functions: they read nothing from the
    gateway but the script, so their cases share it instead of each starting a gateway, an OAuth fixture
    server and a fake kiro-cli of their own."""
    from kirocrew_testing.browser import Dashboard

    with Dashboard(module_chromium, plain_gateway, tmp_path_factory.mktemp("connections-script")) as pages:
        yield _open(pages).page


@pytest.mark.parametrize(("reply", "kind", "text"), [
    ({"grantRemoved": True, "entryRemoved": True}, "success",
     "Disconnected locally. Revoke access at the provider to cancel the grant completely."),
    ({"grantRemoved": False, "grantSurviving": ["token"], "entryRemoved": True}, "error",
     "Part of the stored grant could not be removed. Revoke access at the provider."),
    ({"grantRemoved": False, "entryRemoved": True, "grantCensusIncomplete": True,
      "grantCensusUnreadable": ["/x/mcp.json"]}, "warning",
     "The stored grant was kept because /x/mcp.json could not be read to rule out another server using it. "
     "Fix or remove that file and disconnect again."),
    ({"grantRemoved": True, "entryRemoved": False}, "success", "The stored grant was removed."),
    ({"grantRemoved": False, "entryRemoved": False}, "warning",
     "Your server configuration was left unchanged. You can manage this entry from the MCP servers page."),
])
def test_the_disconnect_message_is_two_clauses_and_its_kind_follows_the_reply(
        script_page: Any, reply: dict[str, Any], kind: str, text: str) -> None:
    message = script_page.evaluate(
        "async (reply) => (await import('/static/kirocrew_connections/connections.js')).disconnectMessage(reply)",
        reply)
    assert message == {"kind": kind, "text": text}


def test_a_return_address_pasted_from_another_computer_completes_the_consent(
        dashboard: Any, oauth_mcp_server: Any) -> None:
    import httpx

    opened = _open(dashboard)
    page = opened.page
    consent = _connect_and_take_the_consent_tab(page)
    consent.close()  # the user approves in a browser on another computer instead
    card = _notion(page)
    card.get_by_role("link", name="Re-open approval").wait_for(timeout=WAIT_MS)
    pending = oauth_mcp_server.wait_for_pending()
    landed = httpx.get(pending["allow_url"]).headers["location"]  # where that browser ended up, unreachable there
    assert landed.startswith("http://127.0.0.1:") and "code=" in landed

    card.get_by_text("Approved in a browser on another computer?").click()
    dashboard.screenshot(opened, "connections-relay-light")
    field = card.get_by_role("textbox", name="Return address")
    complete = card.get_by_role("button", name="Complete")
    field.fill("http://127.0.0.1:1/?state=x")  # no code: refused before anything is sent
    complete.click()
    assert field.get_attribute("aria-invalid") == "true"
    assert card.get_by_text("Paste the full http://127.0.0.1:PORT/?code=… address from your browser.").is_visible()

    port = landed.split(":")[2].split("/")[0]
    wrong_port = landed.replace(f":{port}/", ":1/", 1)  # a listener this consent never opened
    field.fill(wrong_port)
    complete.click()
    card.get_by_text("Action failed: that address is not the one this consent is waiting for").wait_for()
    assert field.input_value() == wrong_port
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is False

    field.fill(landed)
    complete.click()
    card.get_by_text("Connected", exact=True).wait_for(timeout=WAIT_MS)
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is True
    # The refused address's 400 is the only thing the browser logged.
    assert [e for e in opened.console_errors if "status of 400" not in e] == []


def _seed_grant(url: str) -> None:
    """Grant files where kiro-cli keeps them (what a card stats; their content is never read by kirocrew)."""
    token, registration = grants.artifact_paths(url)
    token.parent.mkdir(parents=True, exist_ok=True)
    registration.write_text("{}")
    token.write_text("{}")


# The Test's kiro-cli holds back its report until the cards were checked (60 s only bounds a failed test).
@pytest.mark.parametrize("kiro_switches", [{"commands_until": "tested", "commands_delay": "60"}])
def test_one_connection_test_runs_at_a_time_and_the_other_cards_say_which_is_testing(
        dashboard: Any, oauth_mcp_server: Any, kiro_switches: dict[str, str], tmp_path: Any) -> None:
    _write_crew_servers({"notion": {"url": oauth_mcp_server.mcp_url}, "linear": {"url": LINEAR_ROUTED_URL}})
    _seed_grant(oauth_mcp_server.mcp_url)
    _seed_grant(LINEAR_ROUTED_URL)
    opened = _open(dashboard)
    page = opened.page
    notion, linear = _notion(page), page.get_by_role("article", name="Linear")
    assert linear.get_by_text("Connected", exact=True).is_visible()

    notion.get_by_role("button", name="Test").click()
    testing = notion.get_by_role("button", name="Testing…")
    testing.wait_for()
    assert testing.is_disabled() and notion.get_by_role("button", name="Disconnect").is_disabled()
    locked = linear.get_by_role("button", name="One connection test runs at a time — Notion is testing")
    assert locked.is_disabled() and locked.inner_text() == "Test"  # the visible text stays "Test"

    released(tmp_path, "tested")
    notion.get_by_role("alert").or_(notion.get_by_role("status")).wait_for(timeout=WAIT_MS)  # a verdict
    assert linear.get_by_role("button", name="Test", exact=True).is_enabled()
    assert notion.get_by_role("button", name="Test", exact=True).is_enabled()


@pytest.mark.parametrize("file_privileges", [False])
def test_a_grant_that_could_not_be_removed_is_an_alert_with_the_revoke_link(
        dashboard: Any, oauth_mcp_server: Any, file_privileges: bool) -> None:
    _write_crew_servers({"notion": {"url": oauth_mcp_server.mcp_url}})
    _seed_grant(oauth_mcp_server.mcp_url)
    cache = home.oauth_cache_dir()
    opened = _open(dashboard)
    card = _notion(opened.page)
    assert card.get_by_text("Connected", exact=True).is_visible()
    cache.chmod(0o555)  # the grant files cannot be unlinked by the (unprivileged) gateway
    try:
        card.get_by_role("button", name="Disconnect").click()
        alert = card.get_by_role("alert")
        alert.wait_for(timeout=WAIT_MS)
        assert alert.inner_text() == "Part of the stored grant could not be removed. Revoke access at the provider."
        assert grants.grant_presence(oauth_mcp_server.mcp_url) is True
    finally:
        cache.chmod(0o700)
    assert card.get_by_role("link", name="Revoke at Notion").get_attribute("href") == "https://app.notion.com"
    assert "notion" not in _crew_servers()
    dashboard.screenshot(opened, "connections-grant-surviving-light")


def test_a_mint_that_fails_says_why_on_the_card_and_keeps_the_entry(dashboard: Any) -> None:
    opened = _open(dashboard)
    page = opened.page
    linear = page.get_by_role("article", name="Linear")  # routed to a closed port: nothing answers
    linear.get_by_role("button", name="Connect").click()
    alert = linear.get_by_role("alert")
    alert.wait_for(timeout=WAIT_MS)
    assert alert.inner_text().startswith("Action failed: ")
    assert "Try connecting again." in alert.inner_text()
    assert _crew_servers()["linear"] == {"url": LINEAR_ROUTED_URL}  # no terminal state deletes configuration
    assert linear.get_by_role("button", name="Connect").is_enabled()
    _wait_for_no_other_tab(page)


def test_the_status_poll_updates_a_card_without_a_reload(dashboard: Any, oauth_mcp_server: Any) -> None:
    _write_crew_servers({"notion": {"url": oauth_mcp_server.mcp_url}})
    opened = _open(dashboard, controlled_clock=True)
    card = _notion(opened.page)
    assert card.get_by_text("Not verified", exact=True).is_visible()
    opened.page.evaluate("window.__sameDocument = true")
    _seed_grant(oauth_mcp_server.mcp_url)  # a grant appears outside the page (kiro-cli elsewhere)
    opened.page.clock.fast_forward(29_000)
    opened.page.wait_for_timeout(500)
    assert card.get_by_text("Not verified", exact=True).is_visible()  # nothing reads the status before 30 s
    opened.page.clock.fast_forward(1_500)  # past the 30 s poll
    card.get_by_text("Connected", exact=True).wait_for(timeout=15_000)
    assert opened.page.evaluate("window.__sameDocument === true")  # not a reload


@pytest.mark.parametrize("premint", ["on"])
def test_the_page_premints_on_mount_and_connect_adopts_the_warm_approval_url(
        dashboard: Any, oauth_mcp_server: Any) -> None:
    opened = _open(dashboard)
    page = opened.page
    card = _notion(page)

    def mint_state() -> dict[str, Any]:
        return dict(page.request.get(f"{dashboard.gateway.url}/api/connections/mint?slug=notion").json())

    _wait_until(lambda: mint_state()["state"] == "waiting", "the premint holds Notion's approval URL", timeout=90)
    assert "oauth_url" not in mint_state(), "an unclaimed premint serves its URL to nobody"
    assert card.get_by_text("Not connected", exact=True).is_visible(), "a premint is not a consent under way"
    (warm,) = _mint_processes(b"kirocrew-mint-warm-base")

    consent = _connect_and_take_the_consent_tab(page)
    card.get_by_role("link", name="Re-open approval").wait_for(timeout=WAIT_MS)
    assert _mint_processes() == [], "the click adopted the premint: no dedicated cold kiro-cli"
    assert _mint_processes(b"kirocrew-mint-warm-base") == [warm]
    dashboard.screenshot(opened, "connections-warm-waiting-light")

    consent.get_by_role("link", name="Allow").click()
    card.get_by_text("Connected", exact=True).wait_for(timeout=WAIT_MS)
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is True
    dashboard.screenshot(opened, "connections-warm-connected-light")
    assert opened.csp_violations() == []
    assert opened.console_errors == []
