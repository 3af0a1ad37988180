"""ask_question answered on the conversation's page: real ``kirocrew serve``, headless Chromium, the fake kiro-cli.

The conversation runs on the ``kirocrew`` agent (it mounts kirocrew-core), so its fake kiro-cli's
``!mcp kirocrew-core ask_question`` reaches the serve's host through the relay; the card is drawn
by the page's poll, survives a reload (it is rendered from the host's pending list, which
``GET /api/conversations/{id}/questions`` also returns), and is answered with a click and a typed
answer. The run then goes on and the exchange is on its events.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kirocrew_testing.core_sessions import AGENT, CrewHarness
from playwright.sync_api import expect

TIMEOUT_MS = 60_000
COLOUR = {"question": "Which colour should the button be?", "header": "Design",
          "options": [{"label": "Blue", "description": "the brand colour"}, {"label": "Green"}]}
EXTRAS = {"question": "Which extras?", "multiSelect": True,
          "options": [{"label": "Icons"}, {"label": "Tooltips"}, {"label": "Sounds"}]}


@pytest.fixture
def gateway_env(crew: CrewHarness) -> dict[str, str]:
    """``kirocrew serve`` in the harness's environment: fake kiro-cli, the rendered ``kirocrew`` agent."""
    return crew.env


def test_a_question_card_is_answered_on_the_page_and_the_run_goes_on(
        crew: CrewHarness, dashboard: Any, owner_client: Any) -> None:
    script = f"!mcp kirocrew-core ask_question {json.dumps({'questions': [COLOUR, EXTRAS]})}\n!say after"
    started = owner_client.post("/api/conversations", json={
        "name": "asks", "workspace": str(crew.workspace), "message": script, "mode": AGENT})
    assert started.status_code == 200, started.text
    cid = started.json()["conversationId"]
    opened = dashboard.open(f"/conversations/{cid}")
    page = opened.page
    card = page.get_by_role("alert", name="Kiro asks you 2 questions")
    card.wait_for(timeout=TIMEOUT_MS)

    page.reload()  # the card is rehydrated from the host's pending list
    card.wait_for(timeout=TIMEOUT_MS)
    pending = owner_client.get(f"/api/conversations/{cid}/questions").json()["pending"]
    assert [q["question"] for q in pending[0]["questions"]] == [COLOUR["question"], EXTRAS["question"]]
    expect(card.get_by_text("Design", exact=True)).to_be_visible()
    dashboard.screenshot(opened, "question-card-light")

    submit = card.get_by_role("button", name="Submit")
    submit.click()  # nothing chosen yet: refused on the page, the card stays
    problem = card.get_by_text("Choose an option or type an answer first")
    expect(problem).to_be_visible()
    card.get_by_label("Green").check()
    expect(problem).to_be_hidden()  # stale once an answer changes
    card.get_by_label("Icons").check()
    card.get_by_label("Tooltips").check()
    card.get_by_label("Or your own answer (added to the choices)").fill("no sounds")
    dashboard.screenshot(opened, "question-card-filled-light")
    submit.click()
    expect(card).to_have_count(0, timeout=TIMEOUT_MS)
    page.get_by_text("after", exact=True).wait_for(timeout=TIMEOUT_MS)
    dashboard.screenshot(opened, "question-card-answered-light")
    assert opened.console_errors == [] and opened.csp_violations() == []

    detail = owner_client.get(f"/api/conversations/{cid}").json()
    [run] = detail["runs"]
    assert run["status"] == "completed" and detail["questions"] == []
    record = [e["summary"] for e in run["events"] if e["kind"] == "question"][-1]
    assert '"Which colour should the button be?" -> "Green"' in record
    assert '"Which extras?" -> "Icons, Tooltips, no sounds"' in record

    late = owner_client.post(f"/api/conversations/{cid}/questions/{pending[0]['askId']}", json={"dismissed": True})
    assert late.status_code == 400 and late.json()["code"] == "question_not_found"
