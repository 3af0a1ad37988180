"""``browse_outline`` and ``browse_search``: the reference's text transforms over an accessibility snapshot."""

from __future__ import annotations

import asyncio

from kirocrew_core.coretools.server import CoreToolsServer
from kirocrew_core.skills.browse import OUTLINE_ROLES, browse_tools, outline, pattern_of, search

SNAPSHOT = """\
- document:
  - banner:
    - heading "Acme Store" [level=1] [ref=e1]
    - navigation "Main":
      - link "Home" [ref=e2]
      - link "Cart (2)" [ref=e3]
  - main:
    - paragraph: Welcome back.
    - textbox "Search products" [ref=e4]
    - button "Search" [ref=e5]
    - generic [ref=e6]: Free shipping
    - list:
      - listitem: First item
    - table:
      - row "Name Price":
        - cell "Name"
    - text: Terms (c) 2026
    - menuitem "Settings"
    - buttonish "not a role"
"""


def test_the_outline_keeps_the_reference_roles_and_every_ref_line_in_order() -> None:
    assert outline(SNAPSHOT).splitlines() == [
        "Page outline (9 elements):",
        '    - heading "Acme Store" [level=1] [ref=e1]',
        '      - link "Home" [ref=e2]',
        '      - link "Cart (2)" [ref=e3]',
        '    - textbox "Search products" [ref=e4]',
        '    - button "Search" [ref=e5]',
        "    - generic [ref=e6]: Free shipping",
        "      - listitem: First item",
        '      - row "Name Price":',
        '        - cell "Name"',
    ]  # not the paragraph, the text, a menuitem (no role of the list) or "buttonish"


def test_every_reference_role_is_kept_and_max_lines_cuts_with_a_count() -> None:
    snapshot = "\n".join(f'- {role} "x{i}"' for i, role in enumerate(OUTLINE_ROLES))
    assert outline(snapshot).splitlines()[0] == f"Page outline ({len(OUTLINE_ROLES)} elements):"
    assert len(outline(snapshot).splitlines()) == len(OUTLINE_ROLES) + 1
    assert outline(snapshot, max_lines=2).splitlines() == [
        f"Page outline ({len(OUTLINE_ROLES)} elements):", '- heading "x0"', '- link "x1"',
        f"… {len(OUTLINE_ROLES) - 2} more (raise max_lines)"]
    assert outline("plain text\nno roles") == "Page outline (0 elements):"


def test_search_is_a_case_insensitive_regex_with_one_based_line_numbers() -> None:
    assert search(SNAPSHOT, r"link \"(home|cart)").splitlines() == [
        "Found 2 matches:", 'L5: - link "Home" [ref=e2]', 'L6: - link "Cart (2)" [ref=e3]']
    assert search(SNAPSHOT, "SEARCH").splitlines() == [
        "Found 2 matches:", 'L9: - textbox "Search products" [ref=e4]', 'L10: - button "Search" [ref=e5]']


def test_text_that_is_no_regex_is_matched_literally_and_a_valid_regex_is_not() -> None:
    assert search(SNAPSHOT, "Cart (2").splitlines() == ["Found 1 matches:", 'L6: - link "Cart (2)" [ref=e3]']
    assert search(SNAPSHOT, "(c) 2026") == "No matches for '(c) 2026' in snapshot (19 lines)."  # a regex: "c 2026"
    assert search(SNAPSHOT, r"\(c\) 2026").splitlines() == ["Found 1 matches:", "L17: - text: Terms (c) 2026"]


def test_a_quantified_group_is_taken_literally_so_a_long_line_cannot_hang_the_search() -> None:
    assert pattern_of("(a+)+$").pattern == r"\(a\+\)\+\$"
    assert search("a" * 50_000 + "!", "(a+)+$") == "No matches for '(a+)+$' in snapshot (1 lines)."


def test_no_match_names_the_query_and_the_line_count_and_max_results_cuts() -> None:
    assert search(SNAPSHOT, "checkout") == "No matches for 'checkout' in snapshot (19 lines)."
    assert search(SNAPSHOT, "ref=", max_results=1).splitlines() == [
        "Found 6 matches:", 'L3: - heading "Acme Store" [level=1] [ref=e1]', "… 5 more (raise max_results)"]


def test_the_tools_need_no_identity_and_validate_their_arguments() -> None:
    server = CoreToolsServer(tool_source=lambda: {t.name: t for t in browse_tools()})
    text, code = asyncio.run(server.call("browse_outline", {"snapshot": SNAPSHOT, "max_lines": 1}, None))
    assert code is None and text.splitlines() == ["Page outline (9 elements):",
                                                  '    - heading "Acme Store" [level=1] [ref=e1]',
                                                  "… 8 more (raise max_lines)"]
    assert asyncio.run(server.call("browse_search", {"snapshot": SNAPSHOT}, None))[1] == "invalid_arguments"
    assert asyncio.run(server.call("browse_outline", {"snapshot": "x", "max_lines": 0}, None))[1] == (
        "invalid_arguments")
