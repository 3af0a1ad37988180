"""The webhook route's place in the gateway and the Hooks page, against one real ``kirocrew serve`` whose host
runs conversations on the fake kiro-cli, shared by the module.

HTTP first (httpx): a POST under ``/webhooks/`` reaches the route without the owner's credential (its own
401 ``unauthorized``), every other method there still needs the owner, and the loopback ``Host`` guard still
holds; a delivery to a conversation that cannot take a run reaches the owner's feed; the owner's routes list
and revoke. Then the page in headless Chromium: the hooks and their counters, Revoke asking first, in light,
dark and at 400 px. Screenshots land in the module's ``screenshots`` folder (run with ``--basetemp`` to keep
them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kirocrew_testing.browser import Dashboard, OpenedPage, ServedGateway, pages_for_a_test
from kirocrew_testing.homes import IsolatedHomes, isolate_homes
from playwright.sync_api import expect

from kirocrew_core.notifications import store as notifications
from kirocrew_core.webhooks import store as hooks

TIMEOUT_MS = 30_000
FIRST_PAGE = "/hooks"  # the test kit's module_dashboard opens it first


@pytest.fixture(scope="module")
def module_served_homes(module_hosted_homes: tuple[ServedGateway, IsolatedHomes]) -> tuple[ServedGateway,
                                                                                          IsolatedHomes]:
    return module_hosted_homes


@pytest.fixture
def owner(module_owner: httpx.Client, module_homes: IsolatedHomes) -> Iterator[httpx.Client]:
    """The owner's client, with this process in the served homes (the stores the host reads and writes)."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        for hook in hooks.all_hooks():
            hooks.revoke(hook.hook_id)
        yield module_owner


@pytest.fixture
def dashboard(module_dashboard: Dashboard) -> Iterator[Dashboard]:
    with pages_for_a_test(module_dashboard) as pages:
        yield pages


def _deliver(base: str, hook_id: str, token: str | None, **extra: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{base}/webhooks/{hook_id}", json={"message": "hello"}, headers={**headers, **extra},
                      timeout=30)


def test_the_webhook_path_takes_a_hook_token_not_the_owner_and_the_host_guard_still_holds(
        owner: httpx.Client, module_served: ServedGateway) -> None:
    base = module_served.url
    registered = hooks.register("gw-check", "no-such-conversation", "Checking the gateway")
    no_token = _deliver(base, "gw-check", None)
    assert (no_token.status_code, no_token.json()["code"]) == (401, "unauthorized")
    assert 'realm="kirocrew-webhook"' in no_token.headers["WWW-Authenticate"]
    owner_token = owner.headers["Authorization"].removeprefix("Bearer ")
    assert _deliver(base, "gw-check", owner_token).json()["code"] == "unauthorized"  # the owner's is not a hook's
    for method in ("GET", "PUT", "DELETE"):  # only POST is the webhook's; the rest is the owner's as ever
        refused = httpx.request(method, f"{base}/webhooks/gw-check", timeout=30)
        assert refused.status_code == 401 and "unauthenticated" in refused.text, (method, refused.text)
    rebound = _deliver(base, "gw-check", registered.token, Host="evil.example")
    assert (rebound.status_code, rebound.json()["code"]) == (421, "bad_host")
    assert hooks.get("gw-check").deliveries == 0

    saved = hooks.store_file().read_bytes()
    hooks.store_file().write_text("{broken")
    try:
        broken = _deliver(base, "gw-check", registered.token)
        assert (broken.status_code, broken.json()["code"]) == (503, "hooks_unavailable")
        assert str(hooks.store_file()) not in broken.text and "broken" not in broken.text
        assert hooks.store_file().read_text() == "{broken"  # reported, never overwritten
    finally:
        hooks.store_file().write_bytes(saved)


def test_a_delivery_for_a_conversation_that_cannot_take_a_run_reaches_the_feed_and_the_owner_revokes(
        owner: httpx.Client, module_served: ServedGateway) -> None:
    registered = hooks.register("orphan", "c-gone", "A conversation that no longer exists")
    before = {n.id for n in notifications.all_notifications()}
    accepted = _deliver(module_served.url, "orphan", registered.token)
    assert (accepted.status_code, accepted.json()["queued_as"]) == (202, "notification"), accepted.text
    [note] = [n for n in notifications.all_notifications() if n.id not in before]
    assert note.title == "Webhook orphan" and "> hello" in note.body and "could not take a run" in note.body
    assert note.source == notifications.Source("conversation", "c-gone", None)

    [listed] = owner.get("/api/hooks").json()["hooks"]
    assert (listed["hook_id"], listed["deliveries"], listed["url"]) == (
        "orphan", 1, f"{module_served.url}/webhooks/orphan")
    assert "token_sha256" not in listed
    missing = owner.delete("/api/hooks/nope")
    assert (missing.status_code, missing.json()["code"]) == (404, "hook_not_found")
    assert owner.delete("/api/hooks/orphan").json() == {"revoked": "orphan"}
    assert _deliver(module_served.url, "orphan", registered.token).status_code == 401
    assert owner.get("/api/hooks").json() == {"hooks": []}


def _clean(opened: OpenedPage) -> None:
    assert opened.csp_violations() == []
    assert opened.console_errors == []


def test_the_hooks_page_lists_each_hook_and_revoke_asks_first(dashboard: Dashboard, owner: httpx.Client,
                                                              module_served: ServedGateway) -> None:
    empty = dashboard.open("/hooks")
    expect(empty.page.get_by_text("No hooks.")).to_be_visible()
    first = hooks.register("ci-build", "c-0000000000000001", "Wait for CI on main; summarise failures.",
                           agent="kirocrew")
    hooks.register("deploy.prod", "c-0000000000000002", "When the deploy finishes, check the health page.")
    _deliver(module_served.url, "ci-build", first.token)

    opened = dashboard.open("/hooks")
    page = opened.page
    rows = page.locator("#hooks tbody tr")
    expect(rows).to_have_count(2)
    ci = page.locator("#hooks tbody tr[data-id='ci-build']")
    expect(ci.locator("td[data-label='Hook']")).to_contain_text(f"{module_served.url}/webhooks/ci-build")
    expect(ci.locator("td[data-label='Conversation']")).to_contain_text("c-0000000000000001")
    expect(ci.locator("td[data-label='Context']")).to_have_text("Wait for CI on main; summarise failures.")
    expect(ci.locator("td[data-label='Deliveries']")).to_have_text("1")
    assert first.token not in page.content()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    expect(ci.get_by_role("button", name="Revoke ci-build")).to_be_in_viewport(ratio=1)
    dashboard.screenshot(opened, "hooks-page-light")

    asked: list[str] = []

    def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    button = ci.get_by_role("button", name="Revoke ci-build")
    page.once("dialog", dismiss)
    button.click()
    assert asked == ["Revoke the hook ci-build? Its URL will refuse every delivery."]
    expect(rows).to_have_count(2)
    page.once("dialog", lambda dialog: dialog.accept())
    button.click()
    expect(rows).to_have_count(1, timeout=TIMEOUT_MS)
    assert [h.hook_id for h in hooks.all_hooks()] == ["deploy.prod"]
    assert _deliver(module_served.url, "ci-build", first.token).status_code == 401
    _clean(opened)

    for scheme, width in (("dark", 1280), ("light", 400)):
        shown = dashboard.open("/hooks", color_scheme=scheme, width=width)  # type: ignore[arg-type]
        expect(shown.page.locator("#hooks tbody tr")).to_have_count(1)
        assert shown.page.evaluate("document.documentElement.scrollWidth") <= width  # nothing scrolls sideways
        dashboard.screenshot(shown, f"hooks-page-{scheme}-{width}px")
        _clean(shown)
