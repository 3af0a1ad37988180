"""The dashboard's Computer use page and its read-only JSON routes, through the in-process gateway."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import write_keystone

from kirocrew_computer import page


@pytest.fixture
def plugin_manager(plugin_manager):
    import kirocrew_computer.plugin

    plugin_manager.register(kirocrew_computer.plugin, name="computer")
    return plugin_manager


def _refused_call() -> None:
    """One call through the real chokepoint; the keystone is off, so it is refused and audited."""
    from kirocrew_computer.chokepoint import Chokepoint

    chokepoint = Chokepoint()
    try:
        (reply,) = asyncio.run(chokepoint.run_calls([("computer_list_apps", {})], session="page-test"))
    finally:
        chokepoint.close()
    assert reply.code == "keystone_off"


def test_the_page_is_in_the_navigation_and_shows_keystone_doctor_and_no_calls_yet(gateway_client) -> None:
    overview = gateway_client.get("/")
    assert '<a href="/computer">Computer use</a>' in overview.text
    answer = gateway_client.get("/computer")
    assert answer.status_code == 200
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    html = answer.text
    assert 'role="switch"' in html and " checked" not in html.split('id="keystone-enabled"')[1].split(">")[0]
    assert "kirocrew computer keystone enable" in html  # the off reason says how to turn it on
    for check in ("Platform", "Keystone", "Display", "Accessibility bus", "Backend"):
        assert f'<td data-label="Check">{check}</td>' in html
    assert "No computer-use call has been audited yet." in html
    assert "Stored in <code>~/.kiro/crew/computer_use.json</code>" in html
    assert "<style" not in html and "<script>" not in html  # nothing inline


def test_the_page_escapes_app_names_from_the_keystone(gateway_client) -> None:
    write_keystone({"enabled": True, "allowed_apps": ["</textarea><script>alert(1)</script>"],
                    "extra_denied_apps": ["a&b"]})
    html = gateway_client.get("/computer").text
    assert "<script>alert(1)" not in html
    assert "&lt;/textarea&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "a&amp;b</textarea>" in html
    assert 'role="switch" checked' in html


def test_an_audited_call_appears_on_the_page_and_in_the_calls_route_newest_first(gateway_client) -> None:
    from kirocrew_core import audit

    audit.record("computer_use.keystone", actor="owner", action="disable", enabled=False)
    audit.record("something.else", actor="owner")
    _refused_call()
    answer = gateway_client.get("/api/computer-use/calls").json()["calls"]
    assert [(c["event"], c["outcome"]) for c in answer] == [("computer_use.call", "refused"),
                                                          ("computer_use.keystone", "ok")]
    assert answer[0]["actor"] == "page-test" and answer[0]["fields"] == {"tool": "computer_list_apps",
                                                                        "code": "keystone_off"}
    html = gateway_client.get("/computer").text
    assert "computer_list_apps" in html and "<code>keystone_off</code>" in html and "page-test" in html
    assert html.index("computer_use.call") < html.index("computer_use.keystone")


def test_the_calls_route_is_bounded_and_skips_other_events(gateway_client) -> None:
    from kirocrew_core import audit

    for number in range(page.MAX_CALLS + 5):
        audit.record("computer_use.call", actor="owner", outcome="refused", tool="computer_click", element_index=number)
        audit.record("gateway.other", actor="owner")
    calls = gateway_client.get("/api/computer-use/calls").json()["calls"]
    assert len(calls) == page.MAX_CALLS
    assert [c["fields"]["element_index"] for c in calls] == list(range(page.MAX_CALLS + 4, 4, -1))


def test_the_doctor_route_answers_what_the_cli_doctor_prints(gateway_client, kirocrew) -> None:
    import json

    answer = gateway_client.get("/api/computer-use/doctor")
    assert answer.status_code == 200
    report = answer.json()
    printed = json.loads(kirocrew("computer", "doctor", "--json").stdout)
    assert set(report) == set(printed) == {"platform", "keystone", "display", "accessibility_bus", "backend"}
    assert report["keystone"] == printed["keystone"]
    findings = page.doctor_findings(report)
    assert findings[1] == {"name": "Keystone", "status": "warn", "summary": report["keystone"]["reason"]}


def test_the_page_and_its_routes_refuse_a_caller_without_the_owner_session(gateway_client) -> None:
    from starlette.testclient import TestClient

    with TestClient(gateway_client.app, base_url="http://127.0.0.1") as anonymous:
        for path in ("/api/computer-use/calls", "/api/computer-use/doctor"):
            assert anonymous.get(path).status_code == 401
        refused = anonymous.get("/computer")
        assert refused.status_code in (401, 403) and "Keystone" not in refused.text


def test_an_app_name_from_the_audit_log_is_shown_as_text_never_markup(gateway_client) -> None:
    from kirocrew_core import audit

    audit.record("computer_use.call", actor="owner", outcome="refused", tool="computer_click",
                 app='<img src=x onerror="alert(1)">', code="app_denied")
    html = gateway_client.get("/computer").text
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html
