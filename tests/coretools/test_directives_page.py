"""What session directives leave on a conversation, as kiro_result, kiro_status and its page show it.

A real ``kirocrew serve`` runs conversations on the fake kiro-cli, whose default agent reads the
global MCP file: there ``kirocrew-core`` is the directive tools' real handlers over stdio
(``directive_server.py``). The page is driven in Debian's chromium.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from kirocrew_core import home

SERVER = {"command": sys.executable, "args": [str(Path(__file__).with_name("directive_server.py"))]}
FOLLOWUPS = {"items": [
    {"title": "Write the changelog", "description": "Summarise <b>today's</b> changes.", "prompt": "!say picked one"},
    {"title": "Open a branch", "description": "Start the refactor.", "prompt": "!say picked two",
     "branch": "feature/refactor"},
]}


@pytest.fixture
def gateway_env(hosted_gateway_env: dict[str, str]) -> dict[str, str]:
    settings = home.kiro_home() / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "mcp.json").write_text(json.dumps({"mcpServers": {"kirocrew-core": SERVER}}))
    return hosted_gateway_env


def detail_when(owner: httpx.Client, conversation_id: str, ready: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        detail = owner.get(f"/api/conversations/{conversation_id}").json()
        if ready(detail):
            return detail
        assert time.monotonic() < deadline, f"never ready: {detail}"
        time.sleep(0.2)


def test_follow_ups_and_the_monitor_show_in_the_results_and_a_follow_up_is_sent_only_when_the_person_sends_it(
        owner_client: httpx.Client, dashboard: Any, tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    message = "\n".join([f"!mcp kirocrew-core suggest_followup {json.dumps(FOLLOWUPS)}",
                         '!mcp kirocrew-core monitor_start {"message": "check CI", "interval_secs": 3600}',
                         "!say suggested"])
    started = owner_client.post("/api/conversations", json={"name": "directed", "workspace": str(workspace),
                                                            "message": message}).json()
    cid = started["conversationId"]
    detail = detail_when(owner_client, cid, lambda d: not d["live"])
    assert detail["runs"][0]["reply"]["text"] == "suggested"
    session = detail["session"]
    assert [i["title"] for i in session["followUps"]["items"]] == ["Write the changelog", "Open a branch"]
    assert session["followUps"]["items"][1]["branch"] == "feature/refactor"
    assert session["monitor"]["active"] is True and session["monitor"]["intervalSecs"] == 3600
    [listed] = owner_client.get("/api/conversations").json()["conversations"]
    assert (listed["followUps"], listed["monitorActive"]) == (2, True)

    opened = dashboard.open(f"/conversations/{cid}")
    page = opened.page
    card = page.locator("#followups")
    assert card.is_visible()
    assert "Summarise <b>today's</b> changes." in card.inner_text()  # the model's text, escaped
    assert "every 3600 s idle, cycle 0 of 24" in page.locator(".facts").inner_text()
    page.get_by_role("button", name="Use follow-up: Write the changelog").click()
    box = page.locator("#send-message")
    assert box.input_value() == "!say picked one"
    assert len(owner_client.get(f"/api/conversations/{cid}").json()["runs"]) == 1  # nothing sent yet
    dashboard.screenshot(opened, "follow-ups")
    page.get_by_role("button", name="Send").click()
    detail = detail_when(owner_client, cid, lambda d: len(d["runs"]) == 2 and not d["live"])
    assert detail["runs"][1]["reply"]["text"] == "picked one"

    page.reload()
    page.get_by_role("button", name="Skip").click()
    assert not card.is_visible()
    page.reload()
    assert page.locator("#followups").count() == 1 and not page.locator("#followups").is_visible()
    assert opened.console_errors == [] and opened.csp_violations() == []
