"""The Knowledge page in headless Chromium against one real ``kirocrew serve`` shared by the module.

The owner adds a folder holding a link out of it and a binary file, watches the host read it (the
progress, then the state), sees why the hostile files were skipped, searches, removes one document
and sees it stay removed after a reindex, includes it again, and sees the Skills section with a
broken skill and why. Elements are found by role and accessible name; screenshots land in the
module's ``screenshots`` folder, desktop and 400 px wide.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kirocrew_testing.browser import Dashboard, OpenedPage, ServedGateway, pages_for_a_test
from kirocrew_testing.browser import shared_dashboard
from kirocrew_testing.homes import IsolatedHomes, isolate_homes
from kirocrew_testing.skill_folders import write_skill
from playwright.sync_api import expect

#: Long enough for the host to read a few thousand small files and the page's poll (every 2 s) to see it.
LIVE_MS = 30_000
FILES = 3000


@pytest.fixture(scope="module")
def module_dashboard(module_served: ServedGateway, module_root: Path, chromium_path: str) -> Iterator[Dashboard]:
    with shared_dashboard(module_served, module_root / "screenshots", chromium_path, "/") as shared:
        yield shared


@pytest.fixture
def dashboard(module_dashboard: Dashboard, module_homes: IsolatedHomes) -> Iterator[Dashboard]:
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)  # the library in this process is the one the host reads
        with pages_for_a_test(module_dashboard) as pages:
            yield pages


def clean(opened: OpenedPage) -> None:
    assert opened.csp_violations() == [] and opened.console_errors == []


def no_sideways_scroll(opened: OpenedPage) -> None:
    assert opened.page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_a_folder_is_read_with_progress_searched_and_a_removed_document_stays_removed(
        dashboard: Dashboard, module_homes: IsolatedHomes) -> None:
    from kirocrew_core.knowledge.store import shared

    homes = module_homes
    root = homes.user_home / "a-rather-long-folder-name-for-the-ships-log-and-its-harbour-notes" / "notes"
    (root / "zz-bulk").mkdir(parents=True)
    for n in range(FILES):
        (root / "zz-bulk" / f"entry-{n:04d}.md").write_text(f"# Entry {n}\nroutine log line {n}\n")
    (root / "harbour.md").write_text("# Harbour\n\n## Moorings\nThe lighthouse keeper logs every ship.\n")
    (root / "storms.md").write_text("# Storms\nThe lighthouse lamp failed twice in the gale.\n")
    (root / "blob.bin").write_bytes(b"\x00\x01binary")
    (root / "escape.md").symlink_to(homes.root / "outside.md")
    write_skill(homes.crew_home / "skills", "ship-log", "Keep the ship's log tidy", always=True)
    (homes.crew_home / "skills" / "broken-one").mkdir()
    (homes.crew_home / "skills" / "broken-one" / "SKILL.md").write_text("---\nname: [unclosed\n---\n")

    opened = dashboard.open("/knowledge")
    page = opened.page
    expect(page.get_by_role("heading", name="Knowledge", level=1)).to_be_visible()
    expect(page.get_by_text("The library is empty")).to_be_visible()
    page.get_by_label("Folder or file").fill(str(root))
    page.get_by_role("button", name="Add", exact=True).first.click()
    row = page.locator("table.sources tbody tr").first
    expect(row.locator("progress")).to_be_visible(timeout=LIVE_MS)  # the host's progress, live
    dashboard.screenshot(opened, "knowledge-indexing-light")
    expect(row.locator(".state")).to_have_text("ready", timeout=LIVE_MS)
    expect(row.get_by_role("cell").nth(3)).to_contain_text(f"{FILES + 2}")
    expect(row.get_by_role("cell").nth(4)).to_contain_text("2")  # the link and the binary file

    section = page.locator("#skills")
    expect(section.get_by_role("cell", name=re.compile("ship-log"))).to_be_visible()
    expect(section.get_by_role("cell", name="always")).to_be_visible()
    broken = section.locator("ul.problems li")
    expect(broken).to_contain_text("broken-one")
    expect(broken).to_contain_text("the front matter is not valid YAML")
    expect(page.locator("#registry")).to_contain_text("No skills registry is configured")

    page.get_by_label("Search the library").fill("lighthouse")
    page.get_by_role("button", name="Search", exact=True).click()
    results = page.locator("ol.hits li")
    expect(results).to_have_count(2)
    expect(results.first).to_contain_text("lines")
    dashboard.screenshot(opened, "knowledge-page-light")
    no_sideways_scroll(opened)
    clean(opened)

    narrow = dashboard.open("/knowledge?q=lighthouse", width=400, height=900)
    expect(narrow.page.locator("ol.hits li")).to_have_count(2)
    no_sideways_scroll(narrow)
    dashboard.screenshot(narrow, "knowledge-page-400px")
    dark = dashboard.open("/knowledge?q=lighthouse", color_scheme="dark")
    expect(dark.page.locator("ol.hits li")).to_have_count(2)
    dashboard.screenshot(dark, "knowledge-page-dark")

    page.get_by_role("link", name=re.compile("notes$")).click()
    expect(page.locator("#source-heading")).to_contain_text("notes")
    skipped = page.locator("ul.skipped-files")
    expect(skipped.locator("li").filter(has_text="blob.bin")).to_contain_text("binary")
    expect(skipped.locator("li").filter(has_text="escape.md")).to_contain_text("link")
    page.get_by_role("button", name="Remove storms.md").click()
    removed = page.locator("ul.excluded-files li")
    expect(removed).to_have_count(1)
    expect(removed).to_contain_text("storms.md")
    expect(page.get_by_role("button", name="Remove storms.md")).to_have_count(0)
    page.get_by_role("button", name="Reindex").click()
    expect(page.locator("#source-head .state")).to_have_text("ready", timeout=LIVE_MS)
    library = shared()
    source = library.sources()[0]
    report = library.reindex(str(source.id))  # a reindex of its own: storms.md is not read in again
    assert (report.files, report.rechunked) == (FILES + 2, 0)
    assert "storms.md" not in [d.name for d in library.documents(str(source.id))[0]]
    dashboard.screenshot(opened, "knowledge-source-light", full_page=False)
    narrow.page.goto(page.url)
    expect(narrow.page.locator("ul.excluded-files li")).to_have_count(1)
    no_sideways_scroll(narrow)
    dashboard.screenshot(narrow, "knowledge-source-400px", full_page=False)

    page.goto(dashboard.gateway.url + "/knowledge?q=lighthouse")
    expect(page.locator("ol.hits li")).to_have_count(1)  # still out after the reindex
    expect(page.locator("ol.hits li")).to_contain_text("harbour.md")

    page.go_back()
    page.get_by_role("button", name="Include storms.md again").click()
    expect(page.locator("ul.excluded-files li")).to_have_count(0)
    expect(page.get_by_role("button", name="Remove storms.md")).to_be_visible(timeout=LIVE_MS)  # read in again, live
    page.goto(dashboard.gateway.url + "/knowledge?q=lighthouse")
    expect(page.locator("ol.hits li")).to_have_count(2)
    clean(opened)
    clean(narrow)
