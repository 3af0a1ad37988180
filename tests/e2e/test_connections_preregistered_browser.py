"""A configured GitHub connects end to end in a real headless Chromium against a real ``kirocrew serve``.

GitHub is pre-registered: the served gateway has the operator's client in its
environment, GitHub's origin is routed (``--override-origin``) to the OAuth
fixture server in pre-registered mode (that client only, its one callback
``http://127.0.0.1:48101/callback``, no dynamic registration), and the fake
kiro-cli listens on GitHub's registered port. The port is registered, not
chosen, so the test holds it alone (:func:`kirocrew_testing.ports.exclusive_port`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from kirocrew_core import grants, home

CLIENT_ID = "Iv1.kirocrew-browser-app"
SECRET = "browser-secret-that-must-never-leak-9876543210"
GITHUB_ORIGIN = "https://api.githubcopilot.com"
GITHUB_APPROVAL_ORIGIN = "https://github.com"
WAIT_MS = 90_000


@pytest.fixture
def github_port() -> Iterator[int]:
    from kirocrew_testing.ports import exclusive_port

    with exclusive_port(48101) as port:
        yield port


@pytest.fixture
def github_server(github_port: int, start_oauth_mcp_server: Any) -> Any:
    return start_oauth_mcp_server(
        "--mcp-path", "/mcp/", "--scopes", "read:user,read:org,public_repo", "--client-id", CLIENT_ID,
        "--client-secret", SECRET, "--redirect-uri", f"http://127.0.0.1:{github_port}/callback", "--no-dcr")


@pytest.fixture
def gateway_env(fake_kiro_cli: Any, isolated_homes: Any) -> dict[str, str]:
    env = fake_kiro_cli.env()
    env["KIROCREW_CONNECTIONS_GITHUB_CLIENT_ID"] = CLIENT_ID
    env["KIROCREW_CONNECTIONS_GITHUB_CLIENT_SECRET"] = SECRET
    return env


@pytest.fixture
def gateway_args(github_server: Any) -> list[str]:
    # GitHub's consent page (github.com) is the fixture's too, or the approval gate refuses its URL.
    return ["--override-origin", f"{GITHUB_ORIGIN}={github_server.base_url}",
            "--override-origin", f"{GITHUB_APPROVAL_ORIGIN}={github_server.base_url}"]


def test_a_configured_github_connects_through_its_own_oauth_app_then_tests_healthy(
        dashboard: Any, github_server: Any) -> None:
    opened = dashboard.open("/connections")
    page = opened.page
    card = page.get_by_role("article", name="GitHub")
    assert card.get_by_text("Not connected", exact=True).is_visible()  # no longer "Needs configuration"
    asana = page.get_by_role("article", name="Asana")
    assert asana.get_by_text("Needs configuration", exact=True).is_visible()
    assert "http://127.0.0.1:48102/callback" in asana.inner_text()
    assert "kirocrew connections client set asana --client-id" in asana.inner_text()

    with page.context.expect_page() as opened_tab:
        card.get_by_role("button", name="Connect").click()
    consent = opened_tab.value
    consent.wait_for_url("**/consent?request=*", timeout=WAIT_MS)
    (pending,) = github_server.pending_consents()
    assert pending["client_id"] == CLIENT_ID
    assert pending["redirect_uri"] == "http://127.0.0.1:48101/callback"
    card.get_by_role("link", name="Re-open approval").wait_for(timeout=WAIT_MS)
    approval = card.get_by_role("link", name="Re-open approval").get_attribute("href") or ""
    assert parse_qs(urlsplit(approval).query)["client_id"] == [CLIENT_ID]
    assert CLIENT_ID in consent.get_by_role("heading").inner_text()  # the provider asks about our app
    dashboard.screenshot(opened, "connections-github-waiting-light")

    consent.get_by_role("link", name="Allow").click()
    card.get_by_text("Connected", exact=True).wait_for(timeout=WAIT_MS)
    assert grants.grant_presence(github_server.mcp_url) is True
    card.get_by_role("button", name="Test").click()
    card.get_by_role("status").filter(has_text="Connection is healthy").wait_for(timeout=WAIT_MS)
    dashboard.screenshot(opened, "connections-github-connected-light")

    assert SECRET not in page.content()
    assert "registrations" not in github_server.state()["counters"]
    for root in (home.kiro_home(), home.crew_home()):
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert SECRET.encode() not in path.read_bytes(), path
    assert opened.csp_violations() == [] and opened.console_errors == []
