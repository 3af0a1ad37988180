"""The Conversations pages in a real headless Chromium (Playwright, Debian's chromium) against a real `kirocrew serve`.

The host runs the conversations with the fake kiro-cli: a conversation is started from the
page, the fake asks a permission (a write under the read_only authority), the card is answered
on the page, the reply renders as safe Markdown, and the store on disk is checked; a follow-up,
a cancel, an archive and a delete with the exact name go through the page too. Elements are
found by role and accessible name.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.requirements import executable
from playwright.sync_api import expect

from kirocrew_conversations.state_paths import DATABASE_NAME
from kirocrew_core import kiro_sessions

TIMEOUT_MS = 60_000


@pytest.fixture
def gateway_env(hosted_gateway_env: dict[str, str]) -> dict[str, str]:
    """``kirocrew serve`` with the fake kiro-cli; its host runs conversations in ``conversations_state_dir``."""
    return hosted_gateway_env


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def tab_to(page: Any, target: Any, limit: int = 60) -> None:
    """Press Tab from the top of the page until ``target`` has the focus (it is reachable by keyboard)."""
    page.locator("body").focus()
    for _ in range(limit):
        page.keyboard.press("Tab")
        if target.evaluate("el => el === document.activeElement"):
            return
    pytest.fail(f"{target} was not reached with {limit} Tab presses")


def start_from_page(page: Any, workspace: Path, name: str, message: str, authority: str | None = None) -> str:
    """Fill and submit the Start form; the conversation's id from the page it opens."""
    page.get_by_label("Name").fill(name)
    page.get_by_label("Workspace", exact=True).fill(str(workspace))
    page.get_by_label("Message").fill(message)
    if authority:
        page.get_by_text("Settings", exact=True).click()
        page.get_by_label("Authority").select_option(authority)
    page.get_by_role("button", name="Start conversation").click()
    page.wait_for_url(re.compile(r"/conversations/conv_[0-9a-f]+$"), timeout=TIMEOUT_MS)
    page.get_by_role("heading", name=name, level=1).wait_for()
    return str(page.url.rsplit("/", 1)[1])


def test_a_conversation_started_on_the_page_asks_a_permission_answered_on_the_page_then_takes_a_follow_up(
        dashboard: Any, workspace: Path, conversations_rows: Any) -> None:
    executable("bwrap", apt="bubblewrap")  # read_only runs in its sandbox
    opened = dashboard.open("/conversations")
    page = opened.page
    assert page.get_by_role("heading", name="Conversations", level=1).is_visible()
    assert page.get_by_text("No conversation yet.").is_visible()
    dashboard.screenshot(opened, "conversations-empty-light")

    cid = start_from_page(page, workspace, "browser-run",
                          "!tool fs_write {}\n!say # Written\\n\\n**bold** <script>window.pwned=1</script> "
                          "[bad](javascript:window.pwned=2)", authority="read_only")
    card = page.get_by_role("alert", name="Kiro asks to use fs_write")
    card.wait_for(timeout=TIMEOUT_MS)
    assert conversations_rows("SELECT status FROM runs WHERE conversation_id = ?", cid) == [("needs_attention",)]
    dashboard.screenshot(opened, "conversation-attention-light")
    allow = card.get_by_role("button", name="Allow once")
    tab_to(page, allow)
    page.keyboard.press("Enter")

    reply = page.get_by_role("region", name="Reply of run 1")
    reply.get_by_role("heading", name="Written").wait_for(timeout=TIMEOUT_MS)
    assert reply.locator("strong").inner_text() == "bold"
    assert "<script>window.pwned=1</script>" in reply.inner_text()  # shown as text, never run
    assert reply.get_by_role("link").count() == 0
    assert page.evaluate("window.pwned === undefined")
    assert page.get_by_role("alert", name="Kiro asks to use fs_write").count() == 0
    assert conversations_rows("SELECT status, reply_text IS NOT NULL FROM runs WHERE conversation_id = ?", cid) == [
        ("completed", 1)]
    assert conversations_rows("SELECT state, decided_option FROM permission_requests WHERE run_id IN "
                           "(SELECT id FROM runs WHERE conversation_id = ?)", cid) == [("decided", "allow_once")]

    page.get_by_role("textbox", name="Message").fill("!say second *reply*")
    page.get_by_role("button", name="Send").click()
    page.get_by_role("region", name="Reply of run 2").locator("em").filter(has_text="reply").wait_for(
        timeout=TIMEOUT_MS)
    assert conversations_rows("SELECT COUNT(*) FROM runs WHERE conversation_id = ? AND status = 'completed'", cid) == [
        (2,)]
    page.get_by_text("Events of run 2").click()
    assert page.get_by_text("final reply of", exact=False).last.is_visible()
    dashboard.screenshot(opened, "conversation-light")
    assert opened.csp_violations() == []
    assert opened.console_errors == []

    listing = dashboard.open("/conversations", color_scheme="dark")
    row = listing.page.get_by_role("row").filter(has=listing.page.get_by_role("link", name="browser-run"))
    assert "completed" in row.inner_text() and "read_only" in row.inner_text()
    dashboard.screenshot(listing, "conversations-dark")
    dark = dashboard.open(f"/conversations/{cid}", color_scheme="dark")
    dark.page.get_by_role("region", name="Reply of run 2").wait_for()
    dashboard.screenshot(dark, "conversation-dark")
    narrow = dashboard.open(f"/conversations/{cid}", width=400)
    narrow.page.get_by_role("region", name="Reply of run 1").wait_for()
    assert narrow.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    dashboard.screenshot(narrow, "conversation-400px")


def test_a_refused_start_is_shown_at_its_field(dashboard: Any, workspace: Path, conversations_rows: Any,
                                               conversations_state_dir: Path) -> None:
    # Each refusal is the host's answer to a real start request: on a loaded machine it takes
    # longer than Playwright's 5 s default, so the waits are the module's bound.
    opened = dashboard.open("/conversations")
    page = opened.page
    page.get_by_label("Name").fill("Not Lowercase")
    page.get_by_label("Workspace", exact=True).fill(str(workspace))
    page.get_by_label("Message").fill("hello")
    page.get_by_role("button", name="Start conversation").click()
    name = page.get_by_label("Name")
    expect(name).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT_MS)
    expect(name).to_have_accessible_description(re.compile("invalid_arguments"), timeout=TIMEOUT_MS)
    assert name.evaluate("el => el === document.activeElement")
    name.fill("fine")
    page.get_by_label("Workspace", exact=True).fill(str(workspace / "missing"))
    page.get_by_role("button", name="Start conversation").click()
    workspace_field = page.get_by_label("Workspace", exact=True)
    expect(workspace_field).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT_MS)
    expect(workspace_field).to_have_accessible_description(re.compile("workspace_not_found"),
                                                          timeout=TIMEOUT_MS)
    assert not (conversations_state_dir / DATABASE_NAME).exists() or conversations_rows(
        "SELECT COUNT(*) FROM conversations") == [(0,)]
    assert opened.csp_violations() == []


def test_a_run_is_cancelled_then_the_conversation_archived_and_deleted_with_its_exact_name(
        dashboard: Any, workspace: Path, conversations_rows: Any) -> None:
    opened = dashboard.open("/conversations")
    page = opened.page
    cid = start_from_page(page, workspace, "to-delete", "!hang")
    page.get_by_role("heading", name=re.compile("Run 1: running")).wait_for(timeout=TIMEOUT_MS)
    page.get_by_role("button", name="Cancel run 1").click()
    page.get_by_role("heading", name=re.compile("Run 1: cancelled")).wait_for(timeout=TIMEOUT_MS)
    assert conversations_rows("SELECT status FROM runs WHERE conversation_id = ?", cid) == [("cancelled",)]

    page.get_by_label("Effort").select_option("high")
    page.get_by_label("Model").fill("no-such-model")
    page.get_by_role("button", name="Save settings").click()
    model = page.get_by_label("Model")
    expect(model).to_have_attribute("aria-invalid", "true")
    expect(model).to_have_accessible_description(re.compile("unknown_model"))
    assert conversations_rows("SELECT model, effort FROM conversations WHERE id = ?", cid) == [(None, None)]
    model.fill("")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("definition").filter(has_text="high")).to_be_visible()
    assert conversations_rows("SELECT model, effort FROM conversations WHERE id = ?", cid) == [(None, "high")]

    # The Kiro session: the worker is released and the resume command shown; a repair with nothing to mend.
    page.get_by_role("button", name="Release worker and show command").click()
    command = page.get_by_label("Command that resumes the Kiro session")
    expect(command).to_have_text(re.compile(rf"^cd {re.escape(str(workspace))} && \S+ chat --resume-id \S+$"),
                                 timeout=TIMEOUT_MS)
    session_id = command.inner_text().rsplit(" ", 1)[1]
    assert conversations_rows("SELECT acp_session_id FROM conversations WHERE id = ?", cid) == [(session_id,)]
    assert kiro_sessions.locate(session_id) is not None and not kiro_sessions.session_in_use(session_id)
    page.get_by_role("button", name="Repair session").click()
    expect(page.locator("#session-report")).to_have_text(
        "Repaired: 0 image(s) found, 0 downscaled, 0 removed, 0 left; originals kept as nothing (nothing changed).",
        timeout=TIMEOUT_MS)

    page.get_by_role("button", name="Archive conversation").click()
    confirm = page.get_by_label(re.compile("Type the name"))
    confirm.wait_for(timeout=TIMEOUT_MS)
    assert conversations_rows("SELECT state FROM conversations WHERE id = ?", cid) == [("archived",)]
    assert page.get_by_role("button", name="Send").count() == 0

    confirm.fill("to-delet")
    page.get_by_role("button", name="Delete permanently").click()
    expect(confirm).to_have_attribute("aria-invalid", "true")
    expect(confirm).to_have_accessible_description(re.compile("confirmation_mismatch"))
    assert conversations_rows("SELECT name FROM conversations WHERE id = ?", cid) == [("to-delete",)]
    confirm.fill("to-delete")
    page.get_by_role("button", name="Delete permanently").click()
    page.wait_for_url(re.compile(r"/conversations\?archive=archived$"), timeout=TIMEOUT_MS)
    assert page.get_by_text("No archived conversation.").is_visible()
    assert conversations_rows("SELECT COUNT(*) FROM conversations WHERE id = ?", cid) == [(0,)]
    assert opened.csp_violations() == []
    # The refused model's 400 is the one failed request the browser logs.
    assert [e for e in opened.console_errors if "status of 400" not in e] == []


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout


def test_a_worktree_conversation_is_inspected_and_cleaned_up_from_the_page(
        dashboard: Any, tmp_path: Path, conversations_rows: Any) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("hello\n")
    _git(repo, "add", "README")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first")
    opened = dashboard.open("/conversations")
    page = opened.page
    page.get_by_label("Name").fill("tree")
    page.get_by_label("Workspace", exact=True).fill(str(repo))
    page.get_by_role("radio", name=re.compile("Worktree")).check()
    page.get_by_label("Message").fill("!write notes.txt scratch\n!say wrote")
    page.get_by_role("button", name="Start conversation").click()
    page.wait_for_url(re.compile(r"/conversations/conv_[0-9a-f]+$"), timeout=TIMEOUT_MS)
    cid = page.url.rsplit("/", 1)[1]
    page.get_by_role("heading", name=re.compile("Run 1: completed")).wait_for(timeout=TIMEOUT_MS)
    ((path, branch),) = conversations_rows("SELECT worktree_path, worktree_branch FROM conversations WHERE id = ?", cid)
    assert (Path(path) / "notes.txt").read_text() == "scratch"

    page.get_by_role("button", name="Inspect worktree").click()
    report = page.get_by_role("status").filter(has_text="Branch")
    expect(report).to_contain_text(f"Branch {branch}")
    expect(report).to_contain_text("Uncommitted changes")
    expect(report).to_contain_text("notes.txt")
    page.get_by_role("button", name="Clean up worktree").click()
    expect(page.get_by_role("alert").filter(has_text="worktree_dirty")).to_be_attached()
    assert Path(path).exists()

    (Path(path) / "notes.txt").unlink()
    page.get_by_role("button", name="Clean up worktree").click()
    expect(page.get_by_role("definition").filter(has_text="retired")).to_be_visible(timeout=TIMEOUT_MS)
    assert not Path(path).exists() and _git(repo, "branch", "--list", branch) == ""
    assert page.get_by_role("button", name="Inspect worktree").count() == 0
    assert opened.csp_violations() == []


def test_the_crews_section_shows_each_binding_escaped_and_a_broken_config_only_there(
        dashboard: Any, tmp_path: Path) -> None:
    from kirocrew_core import home
    from kirocrew_core.crews.bindings import Crew, add_crew

    add_crew(Crew("reviewer", kiro_agent="reviewer", authority="read_only", triggers=("code review", "diff")))
    add_crew(Crew("writer", model="claude-haiku-4.5", workspace=str(tmp_path / "docs"),
                  triggers=("docs", "<img src=x onerror=window.pwned=1>")))
    add_crew(Crew("solo"))
    opened = dashboard.open("/conversations")
    page = opened.page
    section = page.get_by_role("region", name="Crews")
    rows = section.get_by_role("row")
    expect(rows).to_have_count(4)  # the header and three crews, sorted by name
    assert [rows.nth(i).get_by_role("rowheader").inner_text() for i in (1, 2, 3)] == ["reviewer", "solo", "writer"]
    assert [cell.inner_text() for cell in rows.nth(1).get_by_role("cell").all()] == [
        "reviewer", "spawner's", "spawner's", "read_only", "code review, diff"]
    assert [cell.inner_text() for cell in rows.nth(2).get_by_role("cell").all()][-1] == "none: selected by name"
    writer = rows.nth(3).inner_text()
    assert "claude-haiku-4.5" in writer and str(tmp_path / "docs") in writer
    assert "<img src=x onerror=window.pwned=1>" in writer and page.evaluate("window.pwned") is None
    dashboard.screenshot(opened, "conversations-crews-light")
    narrow = dashboard.open("/conversations", color_scheme="dark", width=400)
    narrow_rows = narrow.page.get_by_role("region", name="Crews").get_by_role("row")
    assert narrow.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    expect(narrow_rows.nth(3)).to_contain_text("claude-haiku-4.5")
    dashboard.screenshot(narrow, "conversations-crews-dark-narrow")

    broken = home.config_file().read_text() + '\n[crews.bad]\ncolour = "red"\n'
    home.config_file().write_text(broken)
    page.reload()
    problem = page.get_by_role("alert").filter(has_text="Crews could not be read")
    expect(problem).to_contain_text("config_invalid")
    expect(problem).to_contain_text("colour: unknown crew field")
    assert page.get_by_role("button", name="Start conversation").is_visible()  # the rest of the page still works
    assert home.config_file().read_text() == broken  # reported, never rewritten
    assert opened.csp_violations() == [] and narrow.csp_violations() == []
