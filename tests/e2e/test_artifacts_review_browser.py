"""The review loop of an artifact, end to end in Chromium: a conversation's run saves it through the relay and the
host, the owner finds it from the conversation's page and comments on a selected passage, a second run reads the
comment, revises and marks it for review while the owner's page is open (it refreshes by itself), and the owner
resolves it on the page.

One real ``kirocrew serve`` whose host runs the conversations with the fake kiro-cli (it speaks ACP and calls
``kirocrew-core`` through its relay, so the artifact records the conversation that made it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

#: Bounds each wait for a run or the page's refresh on a loaded machine; measures nothing.
TIMEOUT_MS = 60_000


@pytest.fixture
def gateway_env(hosted_gateway_env: dict[str, str]) -> dict[str, str]:
    return hosted_gateway_env


def _mcp(tool: str, args: dict[str, Any]) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}\n!result"


def settled(owner: httpx.Client, conversation_id: str) -> dict[str, Any]:
    """The conversation once its runs ended (every 0.2 s, bounded)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while True:
        detail: dict[str, Any] = owner.get(f"/api/conversations/{conversation_id}").json()
        if not detail["live"]:
            return detail
        assert time.monotonic() < deadline, f"never settled: {detail}"
        time.sleep(0.2)


def test_a_run_saves_the_owner_comments_on_the_page_a_second_run_revises_and_the_owner_resolves(
        dashboard: Any, owner_client: httpx.Client, tmp_path: Path) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    workspace = tmp_path / "project"
    workspace.mkdir()
    save = {"name": "Weekly report", "content": "# Weekly\n\nRevenue grew 5% this quarter.\n", "slug": "weekly-report"}
    started = owner_client.post("/api/conversations", json={
        "name": "reporter", "workspace": str(workspace), "message": _mcp("artifact_save", save) + "\n!say saved"})
    assert started.status_code == 200, started.text
    cid = started.json()["conversationId"]
    first = settled(owner_client, cid)
    assert first["runs"][-1]["status"] == "completed", first
    meta = store.get("weekly-report", OWNER)[0]
    assert (meta["conversation"], meta["source"], meta["created_by"]) == (cid, "chat", "agent")

    opened = dashboard.open(f"/conversations/{cid}")
    page = opened.page
    page.get_by_role("region", name="Artifacts").get_by_role("link", name="Weekly report").click()
    expect(page.get_by_role("heading", name="Weekly report", level=1)).to_be_visible()
    expect(page.get_by_role("button", name="Comment", exact=True)).to_be_enabled()  # the page's script listens
    page.locator("#artifact-text").get_by_text("Revenue grew 5% this quarter.").select_text()
    page.locator("#artifact-text").dispatch_event("mouseup")
    expect(page.get_by_label("On the passage")).to_have_value("Revenue grew 5% this quarter.")
    page.get_by_label("On the passage").fill("grew 5%")  # narrowed by hand, as the owner may
    page.get_by_label("Comment", exact=True).fill("Cite the source")
    page.get_by_role("button", name="Comment", exact=True).click()
    comment = page.locator("li.comment").filter(has_text="Cite the source")
    expect(comment.locator(".status-label")).to_have_text("open")
    (posted,) = store.comments("weekly-report", OWNER)

    script = "\n".join([
        _mcp("artifact_get_comments", {"slug": "weekly-report"}),
        _mcp("artifact_update", {"slug": "weekly-report", "content": "# Weekly\n\nRevenue rose 5% (Q3 filing).\n"}),
        _mcp("artifact_mark_review", {"slug": "weekly-report", "comment_id": posted["id"]}),
        "!say revised",
    ])
    sent = owner_client.post(f"/api/conversations/{cid}/messages", json={"message": script})
    assert sent.status_code == 200, sent.text
    second = settled(owner_client, cid)
    assert "Cite the source" in second["runs"][-1]["reply"]["text"]  # the run read the owner's comment

    # The open page refreshes by itself: the new version, the comment in review, its quote gone from the text.
    expect(page.locator("#artifact-text")).to_contain_text("Revenue rose 5% (Q3 filing).", timeout=TIMEOUT_MS)
    expect(comment.locator(".status-label")).to_have_text("review")
    expect(comment.locator(".orphaned-flag")).to_contain_text("no longer contains this passage")
    comment.get_by_role("button", name="Resolve").click()
    expect(comment.locator(".status-label")).to_have_text("resolved")
    resolved = store.comments("weekly-report", OWNER)[0]
    assert (resolved["status"], resolved["anchor_orphaned"]) == ("resolved", True)
    events = [(e["type"], e.get("action"), e["by"]) for e in store.get("weekly-report", OWNER)[0]["events"]]
    assert events == [("created", None, f"conversation:{cid}"), ("comment", "posted", "owner"),
                      ("iterated", None, f"conversation:{cid}"), ("comment", "reviewed", f"conversation:{cid}"),
                      ("comment", "resolved", "owner")]
    assert opened.csp_violations() == [] and opened.console_errors == []
