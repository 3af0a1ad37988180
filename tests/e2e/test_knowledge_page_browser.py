"""The Knowledge page in headless Chromium against one real ``kirocrew serve`` shared by the module.

The owner adds a folder holding a link out of it, a binary file and a file named as markup, watches
the host read it (the progress, then the state), sees why the hostile files were skipped, searches,
finds one document by name, removes it and sees it stay removed after a reindex, includes it again,
and sees the Skills section with a broken skill and why; a registry skill's files are shown before it
is installed. Elements are found by role and accessible name; screenshots land in the module's
``screenshots`` folder, desktop and 400 px wide.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from kirocrew_testing.browser import Dashboard, OpenedPage, pages_for_a_test
from kirocrew_testing.homes import IsolatedHomes, isolate_homes
from kirocrew_testing.servers.skills_registry import skills_registry
from kirocrew_testing.skill_folders import write_skill
from playwright.sync_api import Dialog, expect

#: Long enough for the host to read a few thousand files on a loaded machine.
LIVE_MS = 30_000
FILES = 2000
#: Words in each of those files: reading them in takes the host seconds (several of the page's 1 s polls).
WORDS = 300
#: A file name that is markup: the page shows it as text.
HOSTILE_NAME = "<img src=x onerror=alert(1)>.md"


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
    filler = " ".join(f"w{i % 97}" for i in range(WORDS)) + "\n"
    for n in range(FILES):
        (root / "zz-bulk" / f"entry-{n:04d}.md").write_text(f"# Entry {n}\nroutine log line {n}\n" + filler)
    (root / "harbour.md").write_text("# Harbour\n\n## Moorings\nThe lighthouse keeper logs every ship.\n")
    (root / "storms.md").write_text("# Storms\nThe lighthouse lamp failed twice in the gale.\n")
    (root / "blob.bin").write_bytes(b"\x00\x01binary")
    (root / HOSTILE_NAME).write_text("# Quay\nthe quay wall\n")
    (root / "escape.md").symlink_to(homes.root / "outside.md")
    write_skill(homes.crew_home / "skills", "ship-log", "Keep the ship's log tidy", always=True)
    (homes.crew_home / "skills" / "broken-one").mkdir()
    (homes.crew_home / "skills" / "broken-one" / "SKILL.md").write_text("---\nname: [unclosed\n---\n")

    opened = dashboard.open("/knowledge")
    page = opened.page
    dialogs: list[str] = []

    def answer(dialog: Dialog) -> None:  # the only dialog the page opens itself is a removal's confirm
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    expect(page.get_by_role("heading", name="Knowledge", level=1)).to_be_visible()
    expect(page.get_by_text("The library is empty")).to_be_visible()
    page.get_by_label("Folder or file").fill(str(root))
    page.get_by_role("button", name="Add", exact=True).first.click()
    row = page.locator("table.sources tbody tr").first
    expect(row.locator("progress")).to_be_visible(timeout=LIVE_MS)  # the host's progress, live
    dashboard.screenshot(opened, "knowledge-indexing-light")
    expect(row.locator(".state")).to_have_text("ready", timeout=LIVE_MS)
    expect(row.get_by_role("cell").nth(3)).to_contain_text(f"{FILES + 3}")
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
    page.get_by_label("Find a document by name").fill("onerror")
    page.get_by_role("button", name="Find").click()
    expect(page.locator("table.documents tbody tr")).to_have_count(1)
    expect(page.locator("table.documents tbody tr code")).to_have_text(HOSTILE_NAME)  # text, never markup
    page.get_by_label("Find a document by name").fill("storms")
    page.get_by_role("button", name="Find").click()
    expect(page.locator("table.documents tbody tr")).to_have_count(1)
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
    assert (report.files, report.rechunked) == (FILES + 3, 0)
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
    assert dialogs == []  # the hostile name ran nothing (and a document's removal asks nothing)
    clean(opened)
    clean(narrow)


def test_a_registry_skill_is_installed_only_after_its_files_are_shown(dashboard: Dashboard,
                                                                     module_homes: IsolatedHomes) -> None:
    from kirocrew_core.config import set_value

    target = module_homes.crew_home / "skills" / "pdf-forms"
    with skills_registry() as registry:
        set_value("skills.registry_url", registry.url)
        set_value("skills.registry_allow_private", "true")
        opened = dashboard.open("/knowledge")
        page = opened.page
        page.get_by_label("Search the registry").fill("forms")
        page.get_by_role("button", name="Search", exact=True).last.click()
        page.get_by_role("link", name="pdf-forms").click()
        preview = page.locator("article.preview")
        expect(preview.get_by_role("heading")).to_have_text("acme/tools/pdf-forms: 2 file(s)")
        expect(preview.locator("details[open] pre")).to_contain_text("Use pdftk.")  # SKILL.md shown in full
        expect(preview.locator("summary").nth(1)).to_contain_text("scripts/fill.sh")
        assert not target.exists()  # shown, not installed
        dashboard.screenshot(opened, "knowledge-registry-light")
        page.get_by_role("button", name="Install acme/tools/pdf-forms").click()
        expect(page.locator("#skills table.skills")).to_contain_text("pdf-forms")
        expect(page.locator("article.preview")).to_contain_text("already installed")
        assert (target / "scripts" / "fill.sh").read_text().startswith("#!/bin/sh")

        page.goto(dashboard.gateway.url + "/knowledge?skill=acme/tools/broken#registry")
        expect(page.locator("article.preview")).to_contain_text("Cannot be installed")
        expect(page.get_by_role("button", name=re.compile("^Install"))).to_have_count(0)
        narrow = dashboard.open("/knowledge?skill=acme/tools/pdf-forms#registry", width=400)
        expect(narrow.page.locator("article.preview")).to_be_visible()
        no_sideways_scroll(narrow)
        clean(opened)
        clean(narrow)
    set_value("skills.registry_url", "")
    assert not (module_homes.crew_home / "skills" / "broken").exists()
