"""send_notification and the notification center: identity and governance fail closed, the store's bounds,
the JSON routes on a real `kirocrew serve`, and the feed page in a real browser (its Mute button too).

The route and page tests share one ``kirocrew serve`` and its homes (a host costs seconds to start); each
starts with the store empty, as a fresh install has it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kirocrew_testing.aio import run_bounded
from kirocrew_testing.browser import Dashboard, ServedGateway
from kirocrew_testing.homes import IsolatedHomes, isolate_homes

from kirocrew_core.config import set_value
from kirocrew_core.coretools.contract import CrewSession, ToolCall
from kirocrew_core.errors import KirocrewError
from kirocrew_core.messages import store as messages
from kirocrew_core.notifications import store, tools

KEY = "kcs1-" + "7" * 32


def session(kind: str = "conversation", target: str = "conv-42") -> CrewSession:
    return CrewSession(KEY, kind, target, agent="kirocrew", workspace="/srv/a")  # type: ignore[arg-type]


def send(args: dict[str, Any], who: CrewSession | None = None) -> str:
    # run_bounded: the feed page's test may have left this module's browser (and its event loop) open.
    return run_bounded(tools.send_notification(args, ToolCall("send_notification", who, None, "strict")), 60)


def refused(args: dict[str, Any], who: CrewSession | None = None) -> KirocrewError:
    with pytest.raises(KirocrewError) as caught:
        send(args, who)
    return caught.value


def test_a_session_publishes_a_notification_that_names_its_conversation_but_not_its_key(isolated_homes):
    assert send({"title": "Build finished", "priority": "critical"}, session()) == \
        "Notification published to the notification center (priority=critical)."
    assert send({"title": "FYI"}, session(kind="cron", target="nightly")) == \
        "Notification published to the notification center (priority=default)."
    newest, older = store.all_notifications()
    assert (newest.title, newest.source) == ("FYI", store.Source("cron", "nightly", "kirocrew"))
    assert newest.source is not None and newest.source.link is None and older.source is not None
    assert older.source.link == "/conversations/conv-42"
    assert KEY not in store.store_file().read_text()


def test_a_caller_without_a_verified_session_is_refused_and_nothing_is_published(isolated_homes):
    error = refused({"title": "anonymous"}, None)
    assert error.code == "caller_unverified" and "cannot verify caller identity for send_notification" in error.message
    assert not store.store_file().exists()


def test_governance_denying_messaging_refuses_and_an_unreadable_policy_does_too(isolated_homes):
    from kirocrew_core import home

    set_value("governance.messaging", "deny")
    assert refused({"title": "blocked"}, session()).code == "governance_denied"
    home.config_file().write_text("governance = [broken\n")
    assert refused({"title": "blocked"}, session()).code == "governance_denied"
    assert not store.store_file().exists()


BAD = [
    ({"title": "t" * 501}, "title_too_long"),
    ({"title": "  "}, "title_required"),
    ({"title": "t", "body": "b" * 20001}, "body_too_long"),
    ({"title": "t", "priority": "urgent"}, "bad_priority"),
    ({"title": "t", "url": "//evil.example/x"}, "bad_url"),
    ({"title": "t", "url": "https://evil.example/"}, "bad_url"),
    ({"title": "t", "url": "/has space"}, "bad_url"),
    ({"title": "t", "url": "/\\evil.example/"}, "bad_url"),  # a browser reads /\ as //
    ({"title": "t", "actions": [{"id": str(n), "label": "x"} for n in range(5)]}, "too_many_actions"),
    ({"title": "t", "actions": [{"id": "a", "label": "x"}, {"id": "a", "label": "y"}]}, "duplicate_action_id"),
    ({"title": "t", "actions": [{"id": "a", "label": "l" * 41}]}, "action_label_too_long"),
    ({"title": "t", "actions": [{"id": "a", "label": "go", "url": "javascript:alert(1)"}]}, "bad_url"),
]


@pytest.mark.parametrize("args, code", BAD)
def test_bad_input_is_refused_with_a_stable_code_and_the_schema_refuses_it_too(isolated_homes, args, code):
    import jsonschema

    assert refused(args, session()).code == code
    assert not store.store_file().exists()
    if code not in ("title_required", "duplicate_action_id"):  # checks only the handler can make
        assert not jsonschema.Draft202012Validator(tools.SEND_NOTIFICATION_SCHEMA).is_valid(args)


def test_a_group_key_replaces_the_previous_one_of_its_group_and_the_store_keeps_the_newest(isolated_homes,
                                                                                          monkeypatch):
    monkeypatch.setattr(store, "MAX_NOTIFICATIONS", 3)
    send({"title": "progress 1/3", "group_key": "deploy"}, session())
    send({"title": "other"}, session())
    send({"title": "progress 2/3", "group_key": "deploy"}, session())
    assert [n.title for n in store.all_notifications()] == ["progress 2/3", "other"]
    for n in range(3):
        send({"title": f"flood {n}"}, session())
    assert [n.title for n in store.all_notifications()] == ["flood 2", "flood 1", "flood 0"]


def test_a_group_key_replaces_only_the_same_senders_card(isolated_homes):
    """Session B reusing session A's group key, cron's or the host's stacks its own card; it replaces none of theirs."""
    a, b = session(target="conv-a"), session(target="conv-b")
    send({"title": "A: deploy needs you", "priority": "critical", "group_key": "deploy"}, a)
    store.publish(store.NewNotification(title="Cron: nightly", group_key="cron:3f9a0b1c"),
                  store.Source("conversation", "conv-cron-run", None), sender=store.CRON)
    store.publish(store.NewNotification(title="Kiro asks to run shell", priority="critical",
                                        group_key="permission:p1"), None)
    for key in ("deploy", "cron:3f9a0b1c", "permission:p1"):
        send({"title": f"B forged {key}", "group_key": key}, b)
    send({"title": "A: deploy done", "group_key": "deploy"}, a)  # its own card, replaced
    titles = [n.title for n in store.all_notifications()]
    assert titles == ["A: deploy done", "B forged permission:p1", "B forged cron:3f9a0b1c", "B forged deploy",
                      "Kiro asks to run shell", "Cron: nightly"]
    senders = {n.title: n.publisher for n in store.all_notifications()}
    assert senders["Cron: nightly"] == "cron" and senders["Kiro asks to run shell"] == "host"
    assert senders["A: deploy done"] == "session:conversation:conv-a"


def test_a_sessions_flood_of_505_notifications_leaves_every_other_senders_newest(isolated_homes):
    a, b = session(target="conv-a"), session(target="conv-b")
    store.publish(store.NewNotification(title="Kiro asks to run shell", priority="critical"), None)
    store.publish(store.NewNotification(title="Cron: nightly", group_key="cron:1"),
                  store.Source("conversation", "conv-run", None), sender=store.CRON)
    send({"title": "A: review my change", "priority": "critical"}, a)
    for n in range(505):  # the attack's 505; a full-size body on every tenth keeps the test quick
        send({"title": f"flood {n}", "body": "x" * (store.BODY_MAX_CHARS if n % 10 == 0 else 100)}, b)
    notes = store.all_notifications()
    floods = [n.title for n in notes if n.publisher == "session:conversation:conv-b"]
    assert floods == [f"flood {n}" for n in range(504, 504 - store.MAX_PER_SESSION, -1)]  # its own newest
    assert [n.title for n in notes if n.publisher != "session:conversation:conv-b"] == [
        "A: review my change", "Cron: nightly", "Kiro asks to run shell"]


def test_over_the_total_the_session_holding_the_most_loses_its_oldest_and_the_host_and_cron_keep_theirs(
        isolated_homes, monkeypatch):
    monkeypatch.setattr(store, "MAX_NOTIFICATIONS", 8)
    monkeypatch.setattr(store, "MAX_PER_SESSION", 4)
    monkeypatch.setattr(store, "MAX_FROM_HOST", 2)
    monkeypatch.setattr(store, "MAX_FROM_CRON", 2)
    for n in range(3):  # the host's and cron's own caps keep their newest two
        store.publish(store.NewNotification(title=f"host {n}"), None)
        store.publish(store.NewNotification(title=f"cron {n}"), None, sender=store.CRON)
    send({"title": "quiet"}, session(target="quiet"))
    for n in range(4):  # two sessions at their cap: 2 + 2 + 1 + 4 + 4 is over 8
        send({"title": f"b {n}"}, session(target="b"))
        send({"title": f"c {n}"}, session(target="c"))
    titles = {n.title for n in store.all_notifications()}
    assert len(titles) == 8
    assert {"host 1", "host 2", "cron 1", "cron 2", "quiet"} <= titles
    assert "host 0" not in titles and "cron 0" not in titles
    # the two floods shared the loss, each keeping its newest
    assert {"b 3", "c 3"} <= titles and len({t for t in titles if t[:2] in ("b ", "c ")}) == 3


def test_a_store_written_before_senders_reads_sourceless_cards_as_the_hosts(isolated_homes):
    import json

    store.store_file().parent.mkdir(parents=True)
    store.store_file().write_text(json.dumps({"version": 1, "notifications": [
        {"id": "n" + "1" * 16, "title": "old ask", "priority": "critical", "created": 1.0, "group_key": "permission:x"},
        {"id": "n" + "2" * 16, "title": "old card", "priority": "default", "created": 0.5,
         "source": {"kind": "conversation", "target_id": "conv-9", "agent": None}}]}))
    assert [n.publisher for n in store.all_notifications()] == ["host", "session:conversation:conv-9"]
    send({"title": "forged", "group_key": "permission:x"}, session())
    assert [n.title for n in store.all_notifications()] == ["forged", "old ask", "old card"]


# -- the JSON routes and the feed, on a real `kirocrew serve` -----------------------------------------------------


@pytest.fixture
def served_homes(module_homes: IsolatedHomes) -> Iterator[IsolatedHomes]:
    """The module's served homes, with this process in them (it publishes where the host reads) and no store."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        store.store_file().unlink(missing_ok=True)
        yield module_homes


@pytest.fixture
def owner_client(module_owner: httpx.Client, served_homes: IsolatedHomes) -> httpx.Client:
    """The owner's client on the module's gateway."""
    return module_owner


@pytest.fixture
def dashboard(module_chromium: Any, module_served: ServedGateway, served_homes: IsolatedHomes,
              tmp_path: Path) -> Iterator[Dashboard]:
    """Pages of the module's gateway in the module's chromium; the test's contexts close when it ends."""
    with Dashboard(module_chromium, module_served, tmp_path / "screenshots") as pages:
        yield pages


def _publish(title: str, **fields: Any) -> store.Notification:
    source = fields.pop("source", store.Source("conversation", "conv-42", "kirocrew"))
    return store.publish(store.validate_new({"title": title, **fields}), source)


def test_the_json_routes_list_mark_read_record_an_action_and_dismiss(owner_client):
    first = _publish("Deploy?", actions=[{"id": "yes", "label": "Deploy", "url": "/conversations/conv-42"},
                                         {"id": "no", "label": "Not now"}])
    second = _publish("Tests failed", priority="critical", body="**3** failures")

    listing = owner_client.get("/api/notifications").json()
    assert [n["id"] for n in listing["notifications"]] == [second.id, first.id] and listing["unread"] == 2
    assert listing["notifications"][0]["source"]["link"] == "/conversations/conv-42"

    read = owner_client.post(f"/api/notifications/{second.id}/read")
    assert read.status_code == 200 and read.json()["notification"]["read"] is True
    chosen = owner_client.post(f"/api/notifications/{first.id}/actions/yes", json={})
    assert chosen.json()["url"] == "/conversations/conv-42"
    assert chosen.json()["notification"]["chosen"]["id"] == "yes"
    assert owner_client.get("/api/notifications").json()["unread"] == 0

    missing = owner_client.post(f"/api/notifications/{first.id}/actions/maybe")
    assert (missing.status_code, missing.json()["code"]) == (400, "action_not_found")
    assert owner_client.post(f"/api/notifications/{first.id}/read", json={"x": 1}).json()["code"] == "bad_request"
    assert owner_client.post(f"/api/notifications/{first.id}/dismiss").json() == {"ok": True, "id": first.id}
    gone = owner_client.post(f"/api/notifications/{first.id}/read")
    assert (gone.status_code, gone.json()["code"]) == (400, "notification_not_found")
    assert [n["id"] for n in owner_client.get("/api/notifications").json()["notifications"]] == [second.id]


def test_the_feed_page_shows_priority_source_safe_markdown_and_its_buttons_work(dashboard):
    from playwright.sync_api import expect

    _publish("Nightly report", priority="passive", body="All green.", source=store.Source("cron", "nightly"))
    _publish("Review the migration", body="# Plan\n\n- step *one*\n\n<script>alert(1)</script> "
             "[bad](javascript:alert(1)) [docs](https://example.com)", url="/conversations/conv-42",
             actions=[{"id": "open", "label": "Open it", "url": "/conversations/conv-42"}])
    critical = _publish("Disk almost full", priority="critical")

    opened = dashboard.open("/notifications")
    page = opened.page
    assert page.locator("#unread-count").inner_text() == "3 unread"
    cards = page.locator("article.notification")
    assert cards.count() == 3
    assert re.search(r"\bpriority-critical\b", cards.nth(0).get_attribute("class") or "")
    review = page.locator("article", has_text="Review the migration")
    assert review.locator("h4", has_text="Plan").count() == 1  # the body's heading, under the card's h3
    body_html = review.locator(".body").inner_html()
    assert "<script>" not in body_html and "&lt;script&gt;" in body_html
    assert 'href="javascript:' not in body_html and 'href="https://example.com"' in body_html
    assert review.get_by_role("link", name="conversation conv-42").get_attribute("href") == "/conversations/conv-42"
    assert page.locator("article", has_text="Nightly report").get_by_text("from cron nightly").count() == 1
    dashboard.screenshot(opened, "notifications-feed")
    dashboard.screenshot(dashboard.open("/notifications", color_scheme="dark", width=420), "notifications-narrow-dark")

    page.locator(f"#n-{critical.id}").get_by_role("button", name="Mark read").click()
    expect(page.locator("#unread-count")).to_have_text("2 unread")
    page.locator(f"#n-{critical.id}").get_by_role("button", name="Dismiss").click()
    expect(page.locator(f"#n-{critical.id}")).to_have_count(0)
    expect(page.locator("article.notification")).to_have_count(2)
    review.get_by_role("button", name="Mute this session").click()  # the messages' per-session mute
    expect(review.get_by_role("button", name="Unmute this session")).to_have_count(1)
    assert messages.mutes() == ["conversation:conv-42"]
    assert opened.csp_violations() == [] and opened.console_errors == []
    review.get_by_role("button", name="Open it").click()
    page.wait_for_url("**/conversations/conv-42")
    chosen = next(n for n in store.all_notifications() if n.title == "Review the migration")
    assert chosen.chosen is not None and chosen.chosen["id"] == "open" and chosen.read
