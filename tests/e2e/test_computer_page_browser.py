"""The Computer use page in a real headless Chromium (Playwright, Debian's chromium) against a real `kirocrew serve`.

The keystone is toggled and its app lists edited from the page and checked on disk; a refused
list is shown at its field; the doctor's findings and an audited call (driven through the real
chokepoint by the CLI harness) are read from the page. Elements are found by role and accessible name.
The tests share one ``kirocrew serve`` and its homes; each starts with the keystone absent, as a fresh
install has it. The long-path tests serve a crew home of their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.browser import Dashboard, ServedGateway
from kirocrew_testing.homes import IsolatedHomes, isolate_homes

from kirocrew_computer.keystone import keystone_file


@pytest.fixture
def served_dashboard(module_chromium: Any, module_served: ServedGateway, module_homes: IsolatedHomes,
                     tmp_path: Path) -> Iterator[Dashboard]:
    """Pages of the module's gateway, with this process (and the CLI it runs) in the served homes and no keystone."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        keystone_file().unlink(missing_ok=True)
        with Dashboard(module_chromium, module_served, tmp_path / "screenshots") as pages:
            yield pages


def _open_computer(dashboard, **kwargs):
    opened = dashboard.open("/computer", **kwargs)
    assert opened.page.get_by_role("heading", name="Computer use", level=1).is_visible()
    return opened


def _save(page, expected: str) -> None:
    page.get_by_role("button", name="Save keystone").click()
    page.get_by_role("status").filter(has_text=expected).wait_for()


def _stored() -> dict:
    return json.loads(keystone_file().read_text())


def test_the_keystone_is_switched_on_and_off_from_the_page_and_written_to_disk(served_dashboard) -> None:
    opened = _open_computer(served_dashboard)
    page = opened.page
    switch = page.get_by_role("switch", name="Computer use")
    assert not switch.is_checked()
    assert "password fields are never typed into or read" in page.get_by_text("Turning it on lets agents").inner_text()
    assert not keystone_file().exists()

    switch.check()
    _save(page, "Saved: computer use is on")
    assert _stored() == {"enabled": True, "allowed_apps": [], "extra_denied_apps": []}
    assert page.get_by_text("computer use is on", exact=True).is_visible()

    page.reload()
    switch = page.get_by_role("switch", name="Computer use")
    assert switch.is_checked()
    switch.uncheck()
    _save(page, "Saved: computer use is off")
    assert _stored()["enabled"] is False
    api = page.evaluate("async () => (await import('/static/core/shell.js')).api('/api/computer-use/config')")
    assert api["enabled"] is False
    assert opened.csp_violations() == []
    assert opened.console_errors == []


def test_the_app_lists_are_edited_and_a_refused_entry_is_shown_at_its_field(served_dashboard) -> None:
    opened = _open_computer(served_dashboard)
    page = opened.page
    page.get_by_label("Allowed apps").fill("gedit\n\n  xterm  \ngedit")
    page.get_by_label("Denied apps").fill("Firefox")
    _save(page, "Saved: computer use is off")
    assert _stored() == {"enabled": False, "allowed_apps": ["gedit", "xterm"], "extra_denied_apps": ["Firefox"]}
    assert page.get_by_label("Allowed apps").input_value() == "gedit\nxterm"  # as stored

    before = keystone_file().read_bytes()
    denied = page.get_by_label("Denied apps")
    denied.fill("Firefox\n" + "x" * 300)
    page.get_by_role("button", name="Save keystone").click()
    alert = page.get_by_role("alert")
    alert.filter(has_text="Not saved").wait_for()
    assert "extra_denied_apps entries must be" in alert.inner_text()
    error = page.get_by_text("extra_denied_apps entries must be non-empty strings of at most 256 characters",
                             exact=True)
    assert error.is_visible()
    assert denied.get_attribute("aria-invalid") == "true"
    assert denied.evaluate("e => e === document.activeElement")
    described = denied.evaluate("e => e.getAttribute('aria-describedby').split(' ')"
                                ".map(id => document.getElementById(id).textContent).join(' ')")
    assert "extra_denied_apps entries must be" in described  # screen readers hear it with the box
    assert page.get_by_label("Allowed apps").get_attribute("aria-invalid") is None
    assert keystone_file().read_bytes() == before  # refused: nothing changed

    denied.fill("Firefox")
    _save(page, "Saved: computer use is off")
    assert not error.is_visible() and denied.get_attribute("aria-invalid") is None
    assert [e for e in opened.console_errors if "400" not in e] == [], opened.console_errors


def test_the_doctor_findings_and_an_audited_call_are_on_the_page(served_dashboard, kirocrew) -> None:
    refused = kirocrew("computer", "call", "computer_list_apps", "--json")
    assert refused.returncode == 1 and json.loads(refused.stdout)[0]["code"] == "keystone_off"

    page = _open_computer(served_dashboard).page
    doctor = page.get_by_role("region", name="Doctor")
    for check in ("Platform", "Keystone", "Display", "Accessibility bus", "Backend"):
        assert doctor.get_by_role("cell", name=check, exact=True).is_visible()
    assert doctor.get_by_role("row").filter(has_text="Keystone").get_by_text("kirocrew computer keystone enable",
                                                                           exact=False).is_visible()

    calls = page.get_by_role("region", name="Recent audited calls")
    first = calls.get_by_role("row").nth(1)  # the newest, under the header row
    assert first.get_by_role("cell", name="computer_list_apps").is_visible()
    assert first.get_by_text("keystone_off").is_visible()
    assert first.get_by_text("refused").is_visible()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_page_works_by_keyboard_at_400_px_in_light_and_dark(served_dashboard, kirocrew, scheme: str) -> None:
    kirocrew("computer", "keystone", "allow", "gedit")
    kirocrew("computer", "call", "computer_list_apps")
    opened = _open_computer(served_dashboard, color_scheme=scheme, width=400)
    page = opened.page
    too_wide = page.evaluate(
        "[...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > 400)"
        ".map(e => `${e.tagName} ${e.textContent.slice(0, 40)}`)")
    assert page.evaluate("document.documentElement.scrollWidth") <= 400, too_wide  # nothing scrolls sideways
    page.get_by_role("link", name="Skip to main content").focus()
    page.keyboard.press("Enter")
    reached = []
    for _ in range(5):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.labels?.[0]?.textContent"
                                     " || document.activeElement.textContent"))
    assert reached[:4] == ["Computer use", "Allowed apps", "Denied apps", "Save keystone"], reached
    for _ in range(4):
        page.keyboard.press("Shift+Tab")  # back to the switch
    page.keyboard.press("Space")
    assert page.get_by_role("switch", name="Computer use").is_checked()
    for _ in range(3):
        page.keyboard.press("Tab")  # over both lists to the button
    page.keyboard.press("Enter")
    page.get_by_role("status").filter(has_text="Saved: computer use is on").wait_for()
    assert _stored()["enabled"] is True and _stored()["allowed_apps"] == ["gedit"]
    assert opened.csp_violations() == []
    page.reload()
    served_dashboard.screenshot(opened, f"computer-{scheme}-400")
    wide = _open_computer(served_dashboard, color_scheme=scheme)
    served_dashboard.screenshot(wide, f"computer-{scheme}")



# An app given by a path and a crew home in a deep folder, as long as real ones get: each holds
# a word without a break opportunity wider than a 400 px screen.
LONG_APP_PATH = ("/opt/vendor_applications/org.example.AnApplicationWithAVeryLongIdentifier/current/bin/"
                 "an_application_binary_with_a_long_name")
LONG_FOLDER = "crew_homes_of_the_whole_team_kept_together_on_the_shared_disk"

# Every element of the page's main part that scrolls sideways, or sticks out of a 400 px screen.
_TOO_WIDE = """() => [...document.querySelectorAll('main *')]
  .filter(e => e.scrollWidth > e.clientWidth + 1 && ['auto', 'scroll'].includes(getComputedStyle(e).overflowX)
               || e.getBoundingClientRect().right > 400)
  .map(e => `${e.tagName}.${e.className} ${e.textContent.trim().slice(0, 60)}`)"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_long_paths_wrap_so_the_page_never_scrolls_sideways_at_400_px(request, monkeypatch, isolated_homes, kirocrew,
                                                                      module_chromium, scheme: str) -> None:
    crew_home = isolated_homes.root / LONG_FOLDER / "kirocrew"
    monkeypatch.setenv("KIROCREW_HOME", str(crew_home))  # before the gateway starts: it serves this crew home
    refused = kirocrew("computer", "call", "computer_get_state", f"app={LONG_APP_PATH}", "--json")
    assert json.loads(refused.stdout)[0]["code"] == "keystone_off"
    dashboard = request.getfixturevalue("dashboard")

    opened = _open_computer(dashboard, color_scheme=scheme, width=400)
    page = opened.page
    assert f"({keystone_file()} is absent" in page.locator("#keystone-state").inner_text()  # the absolute path
    app_cell = page.get_by_role("region", name="Recent audited calls").get_by_role("cell", name=LONG_APP_PATH)
    assert app_cell.is_visible()
    scrolling = page.evaluate("[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]")
    too_wide = page.evaluate(_TOO_WIDE)
    assert scrolling[0] <= scrolling[1], (scrolling, too_wide)  # the page does not scroll sideways
    assert too_wide == []  # nor does a region inside it, and nothing sticks out of the screen
    box = app_cell.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 400 and box["height"] > 40  # wrapped over lines
    assert dashboard.screenshot(opened, f"computer-long-paths-{scheme}-400").stat().st_size > 1000
