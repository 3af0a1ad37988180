"""The Policy page in headless Chromium against one real ``kirocrew serve`` shared by the module.

A rule is added through the form (a refusal shown at its field first) and listed in precedence
order; a project's rules are listed for its workspace; Remove asks before it removes; "Would this
be allowed?" shows the deciding rule and each part of a chained command; a malformed policy file
shows the banner saying the last good policy stays in force. The page is looked at in light, dark
and at 400 px. Screenshots land in the module's ``screenshots`` folder (run with ``--basetemp`` to
keep them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from kirocrew_testing.browser import (
    Dashboard,
    OpenedPage,
    pages_for_a_test,
)
from kirocrew_testing.homes import IsolatedHomes, isolate_homes
from playwright.sync_api import expect

TIMEOUT_MS = 30_000
FIRST_PAGE = "/policy"  # the test kit's module_dashboard opens it first


@pytest.fixture(scope="module")
def owner(module_owner: httpx.Client) -> httpx.Client:
    return module_owner


@pytest.fixture
def dashboard(module_dashboard: Dashboard) -> Iterator[Dashboard]:
    """The module's browser; every page a test opened is closed when it ends (no renderer outlives it)."""
    with pages_for_a_test(module_dashboard) as pages:
        yield pages


def owner_rules(owner: httpx.Client) -> list[dict[str, Any]]:
    return [r for r in owner.get("/api/policy").json()["rules"] if r["tier"] == "owner"]


def add(owner: httpx.Client, **fields: Any) -> dict[str, Any]:
    answer = owner.post("/api/policy/rules", json=fields)
    assert answer.status_code == 200, answer.text
    rule: dict[str, Any] = answer.json()["rule"]
    return rule


def clean(opened: OpenedPage) -> None:
    """No policy violation, and no console error but the refusals the test provoked on purpose."""
    assert opened.csp_violations() == []
    assert [e for e in opened.console_errors if "status of 400" not in e] == []


def test_a_rule_added_through_the_form_is_listed_and_a_refusal_shows_at_its_field(
        dashboard: Dashboard, owner: httpx.Client) -> None:
    opened = dashboard.open("/policy")
    page = opened.page
    rows = page.locator("table.rules tbody tr")
    expect(rows.first).to_contain_text("builtin:")
    before = owner_rules(owner)

    form = page.locator("#add-form")
    form.get_by_label("Decision").select_option("deny")
    form.get_by_label("Tool").fill("shell")
    form.get_by_label("Command prefixes").fill("rm\ngit push --force")
    form.get_by_label("Workspace").fill("projects/app")
    form.get_by_role("button", name="Add rule").click()
    error = page.locator("#add-workspace-error")
    expect(error).to_contain_text("workspace must be an absolute path")
    expect(error).to_contain_text("policy_invalid")
    expect(form.get_by_label("Workspace")).to_have_attribute("aria-invalid", "true")
    expect(form.get_by_label("Workspace")).to_be_focused()
    dashboard.screenshot(opened, "policy-form-error-light")
    assert owner_rules(owner) == before, "a refused form adds nothing"

    form.get_by_label("Workspace").fill("")
    form.get_by_label("Reason").fill("ask me before deleting anything")
    form.get_by_label("Reason").press("Enter")  # the keyboard submits the form
    added = page.locator("table.rules tbody tr.tier-owner", has_text="git push --force")
    expect(added).to_have_count(1, timeout=TIMEOUT_MS)
    (rule,) = [r for r in owner_rules(owner) if r not in before]
    assert (rule["decision"], rule["command"], rule["reason"]) == (
        "deny", ["rm", "git push --force"], "ask me before deleting anything")
    expect(added).to_have_attribute("data-id", rule["id"])
    expect(added.locator("td[data-label='Decision']")).to_have_text("deny")
    expect(added.locator("td[data-label='Where']")).to_have_text("everywhere")
    expect(added.get_by_role("button", name=f"Remove rule {rule['id']}")).to_be_enabled()
    expect(form.get_by_label("Tool")).to_have_value("")  # ready for the next rule
    expect(form.get_by_label("Workspace")).not_to_have_attribute("aria-invalid", "true")
    tiers = [t.split("-", 1)[1] for t in page.locator("table.rules tbody tr").evaluate_all(
        "rows => rows.map(r => r.className)")]
    assert tiers == sorted(tiers, key=["builtin", "owner", "project", "default"].index), "precedence order"
    assert page.locator("tr.tier-builtin button, tr.tier-default button").count() == 0, "those cannot be removed"
    clean(opened)


def test_remove_asks_first_and_removes_only_when_confirmed(dashboard: Dashboard, owner: httpx.Client) -> None:
    rule = add(owner, decision="ask", tool="web_fetch", domain=["*.example.com"], reason="who is this?")
    opened = dashboard.open("/policy")
    page = opened.page
    row = page.locator(f"table.rules tbody tr[data-id='{rule['id']}']")
    button = row.get_by_role("button", name=f"Remove rule {rule['id']}")
    asked: list[str] = []

    def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    button.click()
    expect(row).to_have_count(1)
    assert asked == [f"Remove your rule {rule['id']} (ask web_fetch domain *.example.com)?"]
    assert rule["id"] in [r["id"] for r in owner_rules(owner)], "dismissed: nothing removed"

    page.once("dialog", lambda dialog: dialog.accept())
    button.focus()
    page.keyboard.press("Enter")
    expect(row).to_have_count(0, timeout=TIMEOUT_MS)
    assert rule["id"] not in [r["id"] for r in owner_rules(owner)]
    expect(page.locator("#rules-heading")).to_be_focused()  # the keyboard stays in the list
    clean(opened)


def test_a_projects_rules_are_listed_for_its_workspace_and_stay_listed_after_an_edit(
        dashboard: Dashboard, owner: httpx.Client, module_homes: IsolatedHomes) -> None:
    project = module_homes.user_home / "projects" / "shop"
    (project / ".kiro" / "crew").mkdir(parents=True, exist_ok=True)
    (project / ".kiro" / "crew" / "policy.toml").write_text(
        '[[rule]]\nid = "no-publish"\ndecision = "deny"\ntool = "shell"\ncommand = "npm publish"\n')
    opened = dashboard.open("/policy")
    page = opened.page
    expect(page.locator("tr.tier-project")).to_have_count(0)
    form = page.locator("#project-form")
    form.get_by_label("Workspace").fill("projects/shop")
    form.get_by_role("button", name="Show its rules").click()
    expect(page.locator("#project-workspace-error")).to_contain_text("workspace must be an absolute path")
    expect(page.locator("tr.tier-project")).to_have_count(0)

    page.locator("#project-form").get_by_label("Workspace").fill("~/projects/shop")
    page.locator("#project-form").get_by_role("button", name="Show its rules").click()
    row = page.locator("tr.tier-project[data-id='no-publish']")
    expect(row).to_contain_text("npm publish")
    expect(row).to_contain_text("in the project's file")
    expect(page.locator("#check-form").get_by_label("Workspace")).to_have_value(str(project))

    add_form = page.locator("#add-form")
    add_form.get_by_label("Tool").fill("@github/merge_pull_request")
    add_form.get_by_role("button", name="Add rule").click()
    expect(page.locator("tr.tier-owner", has_text="merge_pull_request")).to_have_count(1, timeout=TIMEOUT_MS)
    expect(row).to_have_count(1)  # the page redrawn for the same workspace
    clean(opened)


def test_would_this_be_allowed_shows_deny_for_a_chained_rm_with_the_rule_and_each_part(
        dashboard: Dashboard, owner: httpx.Client, module_root: Path) -> None:
    rule = add(owner, decision="deny", tool="shell", command="rm", reason="sessions never delete")
    workspace = module_root / "work"
    workspace.mkdir(exist_ok=True)
    opened = dashboard.open("/policy")
    page = opened.page
    box = page.locator("#check-form")
    box.get_by_label("Input").fill("{not json")
    box.get_by_role("button", name="Check").click()
    expect(page.locator("#check-input-error")).to_contain_text("bad_json")
    expect(box.get_by_label("Input")).to_have_attribute("aria-invalid", "true")

    box.get_by_label("Tool").fill("@github")
    box.get_by_label("Input").fill(json.dumps({"command": "git status; rm -rf x"}))
    box.get_by_role("button", name="Check").click()
    expect(page.locator("#check-tool-error")).to_contain_text("an MCP tool is @server/tool")

    box.get_by_label("Tool").fill("shell")
    box.get_by_label("Workspace").fill(str(workspace))  # where `x` is: a path kirocrew can read
    box.get_by_role("button", name="Check").click()
    verdict = page.locator("#verdict .verdict")
    expect(verdict.locator(".verdict-head .status")).to_have_text("deny", timeout=TIMEOUT_MS)
    first_deny = next(r["id"] for r in owner_rules(owner) if r["decision"] == "deny" and "rm" in r["command"])
    expect(verdict.locator(".verdict-head code")).to_have_text(first_deny)
    expect(verdict).to_contain_text("refused `rm -rf x`")
    parts = verdict.locator("table.parts tbody tr")
    expect(parts).to_have_count(2)
    expect(parts.nth(0)).to_contain_text("git status")
    expect(parts.nth(0).locator("td[data-label='Decision']")).to_have_text("allow")
    expect(parts.nth(1)).to_contain_text("rm -rf x")
    expect(parts.nth(1).locator("td[data-label='Decision']")).to_have_text("deny")
    expect(page.locator("#check-tool-error")).to_be_hidden()
    assert rule["id"] in [r["id"] for r in owner_rules(owner)]
    dashboard.screenshot(opened, "policy-check-light")

    box.get_by_label("Input").fill(json.dumps({"command": "git status"}))
    box.get_by_role("button", name="Check").click()
    expect(verdict.locator(".verdict-head .status")).to_have_text("allow", timeout=TIMEOUT_MS)
    expect(verdict.locator("table.parts tbody tr")).to_have_count(1)
    clean(opened)


def test_a_malformed_policy_file_shows_the_banner_and_the_last_good_rules(
        dashboard: Dashboard, owner: httpx.Client, module_homes: IsolatedHomes) -> None:
    kept = add(owner, decision="deny", tool="shell", command="shred", reason="kept by the last good copy")
    owner.get("/api/policy")  # read whole and sound: the last good copy is this file
    path = module_homes.crew_home / "policy.toml"
    good = path.read_bytes()
    path.write_bytes(good + b"\n[[rule]\nnot toml at all\n")
    try:
        opened = dashboard.open("/policy")
        page = opened.page
        banner = page.get_by_role("alert").filter(has_text="Your policy file cannot be used")
        expect(banner).to_be_visible()
        expect(banner).to_contain_text("The last good policy stays in force")
        expect(banner).to_contain_text("not valid TOML")
        expect(banner).to_contain_text("~/.kiro/crew/policy.toml")
        row = page.locator(f"table.rules tbody tr[data-id='{kept['id']}']")
        expect(row).to_contain_text("last good copy")
        expect(row.get_by_role("button")).to_have_count(0)
        dashboard.screenshot(opened, "policy-malformed-light")

        form = page.locator("#add-form")
        form.get_by_label("Tool").fill("write")
        form.get_by_role("button", name="Add rule").click()
        expect(page.locator("#add-form-error")).to_contain_text("policy_file_malformed")
        assert path.read_bytes().endswith(b"not toml at all\n"), "the file is never rewritten"
        dark = dashboard.open("/policy", color_scheme="dark", width=400)
        expect(dark.page.get_by_role("alert").filter(has_text="cannot be used")).to_be_visible()
        assert dark.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        dashboard.screenshot(dark, "policy-malformed-dark-400px")
        clean(opened)
    finally:
        path.write_bytes(good)


def test_the_page_reads_well_in_light_and_dark_and_at_400_px(dashboard: Dashboard, owner: httpx.Client,
                                                            module_homes: IsolatedHomes) -> None:
    from kirocrew_core.gate import decisions

    project = "~/projects/a-project-with-a-long-name/and-a-deeper-folder-that-is-long-too"
    (module_homes.user_home / project.removeprefix("~/")).mkdir(parents=True, exist_ok=True)
    add(owner, decision="allow", tool="shell", command=["git status", "git diff", "npm run test:*"],
        workspace=str(module_homes.user_home / project.removeprefix("~/")),
        reason="everyday read-only commands in this project")
    add(owner, decision="ask", tool="@github/create_pull_request", authority="workspace_write")
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        decisions.record("deny", rule="r-example", tool="shell", fingerprint="f6ced0ca65cf1af4",
                         conversation="conv-0a1b2c3d")
        decisions.record("owner_allow", rule="default:workspace_write", tool="@github/create_pull_request",
                         fingerprint="0a1b2c3d4e5f6789", conversation="conv-0a1b2c3d")
    views: tuple[tuple[Literal["light", "dark"], int], ...] = (("light", 1280), ("dark", 1280), ("light", 1024),
                                                              ("light", 400), ("dark", 400))
    for scheme, width in views:
        opened = dashboard.open("/policy", color_scheme=scheme, width=width, height=1300 if width == 1280 else 900)
        page = opened.page
        expect(page.locator("#decisions tbody tr").first).to_contain_text("you allowed")
        expect(page.locator("table.rules")).to_contain_text(project)  # paths are shown from ~
        too_wide = page.evaluate(
            "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > innerWidth)"
            ".map(e => `${e.tagName} ${e.textContent.slice(0, 40)}`)")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), too_wide
        assert page.evaluate("[...document.querySelectorAll('.table-scroll')].every("
                             "e => e.scrollWidth <= e.clientWidth)"), "a table scrolls sideways"
        if width == 1280:  # the docs' picture of the top of the page: the rules in order
            dashboard.screenshot(opened, f"policy-top-{scheme}", full_page=False)
        box = page.locator("#check-form")
        box.get_by_label("Input").fill(json.dumps({"command": "git status && npm run test:unit; rm -rf build"}))
        box.get_by_label("Workspace").fill(project)
        box.get_by_role("button", name="Check").click()
        expect(page.locator("#verdict .verdict")).to_be_visible(timeout=TIMEOUT_MS)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "the verdict fits"
        dashboard.screenshot(opened, f"policy-page-{scheme}-{width}px")
        if width == 1280:  # and of its answer to "Would this be allowed?"
            page.locator("#check-heading").scroll_into_view_if_needed()
            page.evaluate("document.getElementById('check-heading').scrollIntoView({block: 'start'})")
            dashboard.screenshot(opened, f"policy-answer-{scheme}", full_page=False)
        clean(opened)
