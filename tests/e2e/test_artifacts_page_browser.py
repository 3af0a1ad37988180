"""The Artifacts page in headless Chromium against one real ``kirocrew serve`` shared by the module.

Artifacts are saved into the served homes through the store (as the host's tools save them). The
owner selects a passage and comments on it, resolves it, compares two versions, sees an agent's
comment arrive while the page is open, confirms a pending deploy into the configured web root, and
hostile HTML stays inside its sandbox: nothing it tries reaches the dashboard. Elements are found by
role and accessible name; screenshots land in the module's ``screenshots`` folder.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.browser import Dashboard, OpenedPage, pages_for_a_test
from kirocrew_testing.homes import IsolatedHomes, isolate_homes
from playwright.sync_api import expect

#: Long enough for one poll of the open page (it asks every 3 s) on a loaded machine.
LIVE_MS = 15_000

HOSTILE = """<!doctype html><title>hostile</title>
<h1 id="shown">Hostile prototype</h1>
<script>
  try { parent.document.body.innerHTML = "pwned"; } catch (e) {}
  try { top.document.title = "pwned"; } catch (e) {}
  try { new Image().src = "/api/artifacts?cookie=" + encodeURIComponent(document.cookie); } catch (e) {}
  try { fetch("/api/artifacts/hostile-victim/star", {method: "POST", credentials: "include",
        headers: {"Content-Type": "application/json"}, body: '{"starred": true}'}); } catch (e) {}
  try { top.location = "/api/deploys"; } catch (e) {}
  try { document.forms[0].submit(); } catch (e) {}
</script>
<form method="post" action="/api/artifacts/hostile-victim/star"><input name="starred" value="true">
  <button id="go" type="submit">Send</button></form>
<img src="/api/artifacts?from=img" alt="">
<link rel="stylesheet" href="/api/artifacts?from=css">
<iframe src="/api/deploys?from=frame"></iframe>
<a id="away" href="/api/deploys?from=link" target="_top">Away</a>
<meta http-equiv="refresh" content="0; url=/api/deploys?from=refresh">
"""


@pytest.fixture(scope="module")
def module_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("artifacts-page-browser")


@pytest.fixture
def dashboard(module_dashboard: Dashboard, module_homes: IsolatedHomes) -> Iterator[Dashboard]:
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)  # the store in this process writes what the host reads
        with pages_for_a_test(module_dashboard) as pages:
            yield pages


def save(slug: str, content: str, *, kind: str = "markdown", actor: Any = None, **more: Any) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    new = store.NewArtifact(name=more.pop("name", slug.replace("-", " ").capitalize()), content=content, kind=kind,
                            slug=slug, **more)
    store.save(new, actor or OWNER)


def clean(opened: OpenedPage, refused: int = 0) -> None:
    """No policy violation, and no console error but the ``refused`` requests the test meant to be refused."""
    expected = ["Failed to load resource: the server responded with a status of 400 (Bad Request)"] * refused
    assert opened.csp_violations() == [] and opened.console_errors == expected


def no_sideways_scroll(opened: OpenedPage) -> None:
    assert opened.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def select_text(opened: OpenedPage, text: str) -> None:
    """Select ``text`` in the rendered content as a mouse would, ending with the mouse button's release."""
    expect(opened.page.get_by_role("button", name="Comment", exact=True)).to_be_enabled()  # the script listens
    opened.page.evaluate("""(text) => {
        const area = document.getElementById("artifact-text");
        const nodes = [];
        const walker = document.createTreeWalker(area, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) nodes.push(node);
        const whole = nodes.map((node) => node.data).join("");
        const at = whole.indexOf(text);
        if (at < 0) throw new Error("not in the content: " + text);
        const place = (offset) => {  // the text node and the offset in it of a character of `whole`
          for (const node of nodes) {
            if (offset <= node.data.length) return [node, offset];
            offset -= node.data.length;
          }
          throw new Error("past the end");
        };
        const range = document.createRange();
        range.setStart(...place(at));
        range.setEnd(...place(at + text.length));
        window.getSelection().removeAllRanges();
        window.getSelection().addRange(range);
        area.dispatchEvent(new MouseEvent("mouseup", {bubbles: true}));
    }""", text)


def test_the_owner_comments_on_a_selected_passage_resolves_it_and_compares_versions(dashboard: Dashboard) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER, Actor

    agent = Actor(tree="conv-weekly", conversation="conv-weekly", source="chat")
    save("weekly-report", "# Weekly report\n\nSignups **grew** this week.\n\n- churn fell\n", actor=agent,
         tags=("report",), folder="/reports", description="What changed this week")
    store.update("weekly-report", agent, content="# Weekly report\n\nRevenue grew 5% this week.\n\n- churn fell\n"
                 "- <script>alert(1)</script> stays text\n\nThe **canary** passed.\n")
    opened = dashboard.open("/artifacts")
    page = opened.page
    expect(page.get_by_role("heading", name="Artifacts", level=1)).to_be_visible()
    page.get_by_label("Search").fill("weekly")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("table.artifacts tbody tr")).to_have_count(1)
    dashboard.screenshot(opened, "artifacts-list-light")
    page.get_by_role("link", name="Weekly report").click()

    expect(page.get_by_role("heading", name="Weekly report", level=1)).to_be_visible()
    content = page.locator("#artifact-text")
    expect(content.get_by_role("heading", name="Weekly report")).to_be_visible()  # Markdown, rendered
    expect(content).to_contain_text("<script>alert(1)</script> stays text")  # raw HTML shown as text
    select_text(opened, "The canary passed")  # rendered text whose saved form has markup in it
    expect(page.get_by_label("On the passage")).to_have_value("The canary passed")
    page.get_by_label("Comment", exact=True).fill("Which canary?")
    page.get_by_role("button", name="Comment", exact=True).click()
    expect(page.get_by_label("On the passage")).to_have_accessible_description(re.compile("quote_not_found"))
    assert store.comments("weekly-report", OWNER) == []  # refused: nothing posted
    select_text(opened, "grew 5%")
    expect(page.get_by_label("On the passage")).to_have_value("grew 5%")
    page.get_by_label("Comment", exact=True).fill("Cite the source of this figure")
    page.get_by_role("button", name="Comment", exact=True).click()
    comment = page.locator("li.comment").filter(has_text="Cite the source of this figure")
    expect(comment).to_be_visible()
    expect(comment.locator("blockquote")).to_have_text("grew 5%")
    posted = store.comments("weekly-report", OWNER)
    assert [(c["body"], c.get("anchor_quote"), c["author"]) for c in posted] == [
        ("Cite the source of this figure", "grew 5%", "owner")]

    store.post_comment("weekly-report", agent, "Added the source.", parent_id=posted[0]["id"])  # the agent answers
    expect(page.locator("li.comment.reply")).to_contain_text("Added the source.", timeout=LIVE_MS)  # live refresh
    dashboard.screenshot(opened, "artifact-comments-light")

    comment.get_by_role("button", name="Resolve").click()
    expect(comment.locator(".status-label")).to_have_text("resolved")
    assert store.comments("weekly-report", OWNER)[0]["status"] == "resolved"

    page.get_by_label("Compare with").select_option("1")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_role("heading", name="Changes from v1 to v2")).to_be_visible()
    diff = page.locator("pre.diff")
    expect(diff.locator(".op-add").first).to_contain_text("Revenue grew 5% this week.")
    expect(diff.locator(".op-del")).to_contain_text("Signups **grew** this week.")
    dashboard.screenshot(opened, "artifact-diff-light")
    clean(opened, refused=1)


def test_hostile_html_stays_inside_its_sandbox(dashboard: Dashboard) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    save("hostile-victim", "nothing to see", kind="text")
    save("hostile-proto", HOSTILE, kind="html")
    victim = store.get("hostile-victim", OWNER)[0]

    opened = dashboard.open("/")
    page = opened.page
    requests: list[str] = []
    answered: list[str] = []
    blocked: dict[str, str] = {}
    page.on("request", lambda request: requests.append(request.url))
    page.on("response", lambda response: answered.append(response.url))
    page.on("requestfailed", lambda request: blocked.update({request.url: request.failure or ""}))
    page.goto(dashboard.gateway.url + "/artifacts/hostile-proto")
    frame = page.frame_locator("iframe.sandboxed")
    expect(frame.get_by_role("heading", name="Hostile prototype")).to_be_visible()  # the content is shown
    frame.locator("#go").click()  # a person pressing its submit button: the sandbox allows no form
    frame.locator("#away").click()  # nor a link that targets the dashboard's window
    page.wait_for_load_state("networkidle")

    expect(page.get_by_role("heading", name="Hostile proto", level=1)).to_be_visible()
    assert page.url == dashboard.gateway.url + "/artifacts/hostile-proto"
    assert page.title() == "Hostile proto · kirocrew"  # its script could not retitle the dashboard
    expect(page.get_by_role("heading", name="Actions")).to_be_visible()  # nor rewrite its body
    reached = [url for url in answered if "/api/" in url and "/api/artifact-changes" not in url]
    assert reached == [], reached  # no script, image, style, frame, form, link or refresh reached an API
    tried = {url for url in requests if "/api/" in url and "/api/artifact-changes" not in url}
    assert tried == {url for url, why in blocked.items() if why == "csp"}  # what the parser asked for, the CSP stopped
    sandboxed = [url for url in requests if "/sandbox" in url]
    assert sandboxed == [dashboard.gateway.url + "/artifacts/hostile-proto/sandbox?version=1"]
    assert store.get("hostile-victim", OWNER)[0] == victim  # not starred, not changed
    assert page.locator("iframe.sandboxed").get_attribute("sandbox") == ""
    dashboard.screenshot(opened, "artifact-sandboxed-html-light")


def test_a_pending_deploy_confirmed_on_the_page_publishes_into_the_web_root(
        dashboard: Dashboard, module_homes: IsolatedHomes) -> None:
    from kirocrew_core.artifacts import deploy
    from kirocrew_core.artifacts.access import Actor
    from kirocrew_core.config import set_value

    web_root = module_homes.root / "public_html"
    web_root.mkdir(exist_ok=True)
    set_value(deploy.DEPLOY_DIR_KEY, str(web_root))
    agent = Actor(tree="conv-launch", conversation="conv-launch", source="chat")
    save("launch-page", "<h1>We launched</h1>", kind="html", actor=agent)
    first, _ = deploy.request(agent, "launch-page", "launch", "local", 1)
    second, _ = deploy.request(agent, "launch-page", "launch-draft", "local", 1)

    opened = dashboard.open("/artifacts")
    page = opened.page
    expect(page.get_by_role("heading", name="Deploys waiting for you")).to_contain_text("2")
    page.get_by_role("button", name=f"Discard deploy {second.id} of launch-page").click()
    expect(page.get_by_role("button", name=f"Discard deploy {second.id} of launch-page")).to_have_count(0)
    page.get_by_role("button", name=f"Confirm deploy {first.id} of launch-page").click()
    expect(page.get_by_role("status")).to_contain_text("Published launch-page v1")
    expect(page.get_by_text("No deploy waits for confirmation.")).to_be_visible()
    assert (web_root / "launch" / "index.html").read_text() == "<h1>We launched</h1>"
    assert not (web_root / "launch-draft").exists()
    assert deploy.pending() == []
    clean(opened)


def test_dark_and_narrow_without_sideways_scrolling_and_by_keyboard(dashboard: Dashboard) -> None:
    long_word = "x" * 300
    save("narrow-notes", "# Release notes\n\nThe gateway now serves the **Artifacts** page.\n\n- comments anchored "
         f"to a passage\n- versions compared\n\n```\n{long_word}\n```\n\nhttps://example.com/{long_word}\n",
         tags=("narrow",), name="Notes whose lines are far wider than a phone")
    opened = dashboard.open("/artifacts?tag=narrow", color_scheme="dark", width=400)
    page = opened.page
    expect(page.locator("table.artifacts tbody tr")).to_have_count(1)
    no_sideways_scroll(opened)
    dashboard.screenshot(opened, "artifacts-list-dark-narrow")

    page.goto(dashboard.gateway.url + "/artifacts/narrow-notes")
    expect(page.get_by_role("heading", name="Notes whose lines are far wider than a phone")).to_be_visible()
    no_sideways_scroll(opened)
    dashboard.screenshot(opened, "artifact-dark-narrow")

    wide = dashboard.open("/artifacts/narrow-notes", color_scheme="dark")
    dashboard.screenshot(wide, "artifact-dark")
    field = wide.page.get_by_label("Comment", exact=True)
    expect(wide.page.get_by_role("button", name="Comment", exact=True)).to_be_enabled()  # the script listens
    wide.page.locator("body").focus()
    for _ in range(40):
        wide.page.keyboard.press("Tab")
        if field.evaluate("el => el === document.activeElement"):
            break
    else:
        pytest.fail("the comment field was not reached by keyboard")
    wide.page.keyboard.type("Typed without a mouse")
    wide.page.keyboard.press("Tab")
    wide.page.keyboard.press("Enter")
    expect(wide.page.locator("li.comment")).to_contain_text("Typed without a mouse")
    clean(opened)
    clean(wide)
