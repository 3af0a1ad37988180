"""The dashboard shell in a real headless Chromium (Playwright, Debian's chromium) against a real `kirocrew serve`.

The served gateway also loads the example page plugin (kirocrew_testing.dashboard_demo,
``/demo/echo``), so a third-party page, its template, its module and the shared
``shell.js`` are driven end to end. Elements are found by role and accessible name.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from kirocrew_core.gateway.shell import CONTENT_SECURITY_POLICY
from kirocrew_testing.browser import DEMO_PLUGIN_SOURCE, Dashboard, ServedGateway, serving_in_own_homes


@pytest.fixture(scope="module")
def demo_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedGateway]:
    """One ``kirocrew serve`` with the example page plugin, in homes of its own, for the module's tests: they
    only read pages (a gateway costs seconds to start), and each opens its own browser contexts."""
    from kirocrew_testing.distributions import make_plugin_distribution

    root = tmp_path_factory.mktemp("dashboard-browser")
    plugin = make_plugin_distribution(root / "dashboard-demo-plugin", distribution="kirocrew-dashboard-demo",
                                      module="kirocrew_dashboard_demo_plugin", source=DEMO_PLUGIN_SOURCE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(plugin), os.environ.get("PYTHONPATH", "")) if p))
        with serving_in_own_homes(root) as (served, _):
            yield served


@pytest.fixture
def dashboard(module_chromium, demo_gateway, tmp_path) -> Iterator[Dashboard]:
    """Signed-in pages of the module's gateway in the module's chromium; the test's contexts close when it ends."""
    with Dashboard(module_chromium, demo_gateway, tmp_path / "screenshots") as opened:
        yield opened


def _nav(page):
    return page.get_by_role("navigation", name="Dashboard")


def _focused_name(page) -> str:
    return page.evaluate(
        "(() => { const e = document.activeElement;"
        " return (e.getAttribute('aria-label') || e.labels?.[0]?.textContent || e.textContent || e.id).trim(); })()"
    )


def test_the_printed_url_signs_the_owner_in_to_the_overview_of_doctor_and_plugins(dashboard):
    opened = dashboard.open("/")
    page = opened.page
    assert page.url == dashboard.gateway.url + "/"  # the token left the address bar
    assert page.get_by_role("heading", name="Overview", level=1).is_visible()
    assert page.get_by_role("heading", name="Doctor", level=2).is_visible()
    plugins = page.get_by_role("region", name="Plugins")
    assert plugins.get_by_role("cell", name="kirocrew-mcp").first.is_visible()
    assert page.get_by_role("region", name="Doctor").get_by_role("cell", name="core.homes").is_visible()
    overview = _nav(page).get_by_role("link", name="Overview")
    assert overview.get_attribute("aria-current") == "page"
    assert page.get_by_role("link", name="kirocrew", exact=True).get_attribute("href") == "/"
    assert page.get_by_role("main").is_visible()


def test_the_bare_address_gets_the_styled_sign_in_page_and_nothing_of_the_dashboard(dashboard):
    opened = dashboard.open("/", signed_in=False)
    page = opened.page
    assert page.get_by_role("heading", name="Sign in to kirocrew", level=1).is_visible()
    assert "kirocrew serve" in page.get_by_role("main").inner_text()
    assert page.get_by_role("navigation").count() == 0
    assert "kirocrew-mcp" not in page.content()
    # The stylesheet loaded without a credential: the skip link is positioned off-screen by it.
    assert page.get_by_role("link", name="Skip to main content").evaluate("e => getComputedStyle(e).position") \
        == "absolute"
    assert opened.csp_violations() == []


def test_the_navigation_leads_to_a_third_party_page_by_its_accessible_name(dashboard):
    page = dashboard.open("/").page
    _nav(page).get_by_role("link", name="Echo").click()
    page.wait_for_url(dashboard.gateway.url + "/demo/echo")
    assert page.get_by_role("heading", name="Echo", level=1).is_visible()
    assert _nav(page).get_by_role("link", name="Echo").get_attribute("aria-current") == "page"
    assert _nav(page).get_by_role("link", name="Overview").get_attribute("aria-current") is None
    assert page.title() == "Echo · kirocrew"


def test_the_skip_link_comes_first_and_every_control_is_reachable_by_keyboard(dashboard):
    page = dashboard.open("/demo/echo").page
    page.keyboard.press("Tab")
    assert _focused_name(page) == "Skip to main content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    page.keyboard.press("Tab")
    assert _focused_name(page) == "Message"  # the first control inside main
    page.keyboard.press("Tab")
    assert _focused_name(page) == "Send"

    page.evaluate("document.activeElement.blur()")
    reached: list[str] = []
    while "Send" not in reached and len(reached) < 40:  # the navigation grows with the installed pages
        page.keyboard.press("Tab")
        reached.append(_focused_name(page))
    for name in ("Skip to main content", "kirocrew", "Overview", "Echo", "Message", "Send"):
        assert name in reached, reached


def test_a_plugin_page_posts_through_the_shared_module_and_announces_the_answer(dashboard):
    opened = dashboard.open("/demo/echo")
    page = opened.page
    page.get_by_label("Message").fill("<b>hello</b> & goodbye")
    page.get_by_role("button", name="Send").click()
    answer = page.get_by_role("status", name="Answer")  # the <output>
    answer.filter(has_text="goodbye").wait_for()
    assert answer.inner_text() == "<b>hello</b> & goodbye"  # text, never markup
    status = page.get_by_role("status").filter(has_text="Echoed:")  # the shell's announcer
    status.wait_for()
    assert status.inner_text() == "Echoed: <b>hello</b> & goodbye"

    page.get_by_label("Message").fill("   ")
    page.get_by_role("button", name="Send").click()
    alert = page.get_by_role("alert")
    alert.filter(has_text="bad_request").wait_for()
    assert alert.inner_text() == "type a message to echo (bad_request)"
    # The browser logs the refused POST itself; nothing else went wrong.
    assert [e for e in opened.console_errors if "400" not in e] == [], opened.console_errors


_CALL_API = """async (calls) => {
  const { api } = await import("/static/core/shell.js");
  const out = {};
  for (const [name, path, options] of calls) {
    try {
      out[name] = {answer: await api(path, options)};
    } catch (e) {
      out[name] = {name: e.name, code: e.code, status: e.status, message: e.message};
    }
  }
  return out;
}"""


def test_the_shared_api_helper_sends_what_the_gateway_requires_and_reads_its_errors(dashboard):
    opened = dashboard.open("/")
    page = opened.page
    results = page.evaluate(_CALL_API, [
        ["health", "/api/health", {}],
        ["missing", "/api/no-such-route", {}],
        ["not json", "/no-such-page", {}],
        # Answered by the route, not refused with foreign_origin: the POST carried this gateway's Origin.
        ["bad body", "/api/dashboard-demo/echo", {"method": "POST", "body": [1]}],
    ])
    assert results["health"]["answer"]["ok"] is True
    assert results["missing"] == {"name": "ApiError", "code": "not_found", "status": 404,
                                  "message": results["missing"]["message"]}
    assert (results["not json"]["code"], results["not json"]["status"]) == ("bad_response", 404)
    assert (results["bad body"]["code"], results["bad body"]["status"]) == ("bad_json", 400)
    assert results["bad body"]["message"] == "the request body is not a JSON object"

    page.context.clear_cookies()
    signed_out = page.evaluate(_CALL_API, [["health", "/api/health", {}]])["health"]
    assert (signed_out["code"], signed_out["status"]) == ("unauthenticated", 401)


def test_every_page_sends_the_strict_policy_and_nothing_on_them_violates_it(dashboard):
    opened = dashboard.open("/")
    page = opened.page
    for path in ("/", "/demo/echo"):
        response = page.goto(dashboard.gateway.url + path)
        assert response is not None and response.status == 200
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert opened.csp_violations() == [], path
    assert opened.console_errors == []

    # The policy is really enforced (and the watch really sees it): an inline script does not run.
    page.evaluate("(() => { const s = document.createElement('script');"
                  " s.textContent = 'window.__inline = 1'; document.body.append(s); })()")
    assert page.evaluate("window.__inline") is None
    assert any(v.startswith("script-src") for v in opened.csp_violations()), opened.csp_violations()


def test_the_pages_fit_a_400_px_wide_screen_without_sideways_scrolling(dashboard):
    for path, name in (("/", "overview"), ("/demo/echo", "echo")):
        opened = dashboard.open(path, width=400, height=800)
        page = opened.page
        assert page.evaluate("document.documentElement.scrollWidth") <= 400, path
        assert _nav(page).get_by_role("link", name="Echo").is_visible()
        assert page.get_by_role("heading", level=1).is_visible()
        assert dashboard.screenshot(opened, f"{name}-400px").stat().st_size > 1000
        assert dashboard.screenshot(opened, f"{name}-400px-top", full_page=False).stat().st_size > 1000


@pytest.mark.parametrize("scheme, background", [("light", "rgb(255, 255, 255)"), ("dark", "rgb(22, 22, 22)")])
def test_the_overview_follows_the_light_or_dark_preference(dashboard, scheme, background):
    opened = dashboard.open("/", color_scheme=scheme)
    page = opened.page
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == background
    shot = dashboard.screenshot(opened, f"overview-{scheme}")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    echo = dashboard.open("/demo/echo", color_scheme=scheme)
    assert dashboard.screenshot(echo, f"echo-{scheme}").stat().st_size > 1000
