"""The History page in headless Chromium against one real ``kirocrew serve`` shared by the module.

kiro-cli session files (flat and TUI forms) are written into the served homes: the list pages
through them newest first, a search shows its snippet with the match highlighted and a secret
redacted, filters narrow it, a session opens newest message first with its resume command, and
its Markdown export downloads. Screenshots land in the module's ``screenshots`` folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kirocrew_testing.browser import Dashboard, OpenedPage, ServedGateway, pages_for_a_test, serving_in_own_homes
from kirocrew_testing.homes import IsolatedHomes
from kirocrew_testing.kiro_store_files import write_flat, write_tui
from playwright.sync_api import expect

SECRET = "hist-7c1e9a5b3d2f4e6a8c0b"
SESSIONS = 120


@pytest.fixture(scope="module")
def module_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("history-page-browser")


@pytest.fixture(scope="module")
def module_served_homes(module_root: Path) -> Iterator[tuple[ServedGateway, IsolatedHomes]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HISTORY_DEPLOY_TOKEN", SECRET)  # a secret-named variable: the redactor knows its value
        with serving_in_own_homes(module_root) as pair:
            yield pair


@pytest.fixture(scope="module")
def stores(module_homes: IsolatedHomes) -> IsolatedHomes:
    homes = module_homes
    for n in range(SESSIONS):
        write_flat(homes.kiro_home, f"00000000-0000-4000-8000-{n:012d}", title=f"Routine check {n:03d}",
                   cwd="/srv/routine", messages=[("user", f"run check {n}"), ("assistant", "all green")],
                   updated=f"2026-10-{1 + n % 28:02d}T{n % 24:02d}:00:00Z")
    write_flat(homes.kiro_home, "11111111-2222-4333-8444-555555555555", title="Deploy the gateway",
               cwd="/srv/gateway", updated="2026-11-20T09:00:00Z",
               messages=[("user", f"deploy it with token {SECRET}"),
                         ("assistant", "Rolled out: the canary passed, then every region took the new build."),
                         ("user", "what broke last time?"),
                         ("assistant", "The health check timed out because the canary port was closed.")])
    write_tui(homes.user_home / ".local" / "share" / "kiro-cli" / "data.sqlite3", "tui-1", cwd="/srv/tui",
              messages=[("user", "summarise the canary results"), ("assistant", "Three of three passed.")],
              updated_ms=1_763_000_000_000)
    return homes


@pytest.fixture
def dashboard(module_dashboard: Dashboard) -> Iterator[Dashboard]:
    with pages_for_a_test(module_dashboard) as pages:
        yield pages


def clean(opened: OpenedPage) -> None:
    assert opened.csp_violations() == [] and opened.console_errors == []


def test_the_list_pages_newest_first_and_a_search_finds_and_opens_a_session(
        dashboard: Dashboard, stores: IsolatedHomes, tmp_path: Path) -> None:
    opened = dashboard.open("/history")
    page = opened.page
    expect(page.get_by_role("heading", name="Sessions, newest first")).to_contain_text(str(SESSIONS + 2))
    rows = page.locator("table.sessions tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first).to_contain_text("Deploy the gateway")
    assert SECRET not in page.content()
    dashboard.screenshot(opened, "history-list-light")
    page.get_by_role("link", name="Older").click()
    expect(page.get_by_text("Page 2 of 3")).to_be_visible()
    expect(rows).to_have_count(50)

    page.get_by_label("Search").fill("canary")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("heading", name="2 matching sessions")).to_be_visible()
    first = page.locator("ol.hits > li").first
    expect(first.get_by_role("link")).to_have_text("Deploy the gateway")
    expect(first.locator("mark")).to_have_text("canary")
    dashboard.screenshot(opened, "history-search-light")

    page.get_by_label("Workspace").select_option("/srv/tui")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_role("heading", name="1 matching session")).to_be_visible()
    page.get_by_label("Workspace").select_option("")
    page.get_by_label("Active on or after").fill("2026-11-21")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_text("No matching conversations found. Try different keywords.")).to_be_visible()
    page.get_by_label("Active on or after").fill("")
    page.get_by_label("Search").fill("?!")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#history-q-error")).to_contain_text("give at least one word")
    expect(page.get_by_label("Search")).to_have_attribute("aria-invalid", "true")

    page.get_by_label("Search").fill("canary")
    page.get_by_role("button", name="Search").click()
    page.get_by_role("link", name="Deploy the gateway").click()
    expect(page.get_by_role("heading", name="Deploy the gateway", level=1)).to_be_visible()
    messages = page.locator("ol.messages > li")
    expect(messages).to_have_count(4)
    expect(messages.first).to_contain_text("The health check timed out")  # newest first
    expect(messages.last).to_contain_text("deploy it with token <redacted>")
    expect(page.get_by_label("Open in terminal")).to_have_value(
        "cd /srv/gateway && kiro-cli chat --resume-id 11111111-2222-4333-8444-555555555555")
    assert SECRET not in page.content()
    dashboard.screenshot(opened, "history-session-light")
    with page.expect_download() as download:
        page.get_by_role("link", name="Export as Markdown").click()
    saved = tmp_path / "export.md"
    download.value.save_as(saved)
    document = saved.read_text()
    assert document.startswith("# Deploy the gateway\n") and "token <redacted>" in document and SECRET not in document
    clean(opened)


def test_narrow_dark_and_an_unknown_session(dashboard: Dashboard, stores: IsolatedHomes) -> None:
    opened = dashboard.open("/history?q=canary", color_scheme="dark", width=400)
    page = opened.page
    expect(page.locator("ol.hits > li")).to_have_count(2)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    dashboard.screenshot(opened, "history-search-dark-narrow")
    missing = dashboard.open("/history?session=h1-" + "0" * 24)
    expect(missing.page.locator("p[role=alert]")).to_contain_text("No past session has that key")
    clean(opened)
