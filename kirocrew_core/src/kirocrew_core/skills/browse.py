"""``browse_outline`` and ``browse_search``: pure text transforms over an accessibility snapshot.

A session that drove a browser (a Playwright MCP server's ``browser_snapshot``) hands the snapshot
text in; these shrink it to what matters. No I/O, no identity: the same text in gives the same
text out.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import ToolCall

#: The roles an outline keeps (a line whose first word, after the ``- `` bullet, is one), plus any ``ref=`` line.
OUTLINE_ROLES = ("heading", "link", "button", "textbox", "combobox", "checkbox", "radio", "tab", "menu", "img",
                 "image", "landmark", "alert", "dialog", "listitem", "row", "cell")
_ROLE_LINE = re.compile(r"^\s*(?:-\s*)?(" + "|".join(OUTLINE_ROLES) + r")\b(?![-\w])")
#: A group quantified again (``(a+)+``) can take exponential time on a long line: such a query is taken literally.
_NESTED_QUANTIFIER = re.compile(r"\)[*+{]")
SNAPSHOT_MAX_CHARS = 2_000_000
OUTLINE_DEFAULT, SEARCH_DEFAULT, LINES_MAX = 100, 50, 5000

OUTLINE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "snapshot": {"type": "string", "maxLength": SNAPSHOT_MAX_CHARS,
                     "description": "An accessibility snapshot's text (e.g. a browser_snapshot result)."},
        "max_lines": {"type": "integer", "minimum": 1, "maximum": LINES_MAX, "default": OUTLINE_DEFAULT},
    },
    "required": ["snapshot"],
    "additionalProperties": False,
}
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "snapshot": {"type": "string", "maxLength": SNAPSHOT_MAX_CHARS},
        "query": {"type": "string", "minLength": 1, "maxLength": 500,
                  "description": "A case-insensitive regular expression; text that is not one is matched literally."},
        "max_results": {"type": "integer", "minimum": 1, "maximum": LINES_MAX, "default": SEARCH_DEFAULT},
    },
    "required": ["snapshot", "query"],
    "additionalProperties": False,
}


def is_outline_line(line: str) -> bool:
    return bool(_ROLE_LINE.match(line)) or "ref=" in line


def outline(snapshot: str, max_lines: int = OUTLINE_DEFAULT) -> str:
    """``Page outline (N elements):`` and the first ``max_lines`` kept lines (N counts every kept line)."""
    kept = [line.rstrip() for line in snapshot.splitlines() if is_outline_line(line)]
    text = "\n".join([f"Page outline ({len(kept)} elements):", *kept[:max_lines]])
    if len(kept) > max_lines:
        text += f"\n… {len(kept) - max_lines} more (raise max_lines)"
    return text


def pattern_of(query: str) -> re.Pattern[str]:
    """The query as a case-insensitive regex, or as literal text when it is no regex (or a risky one)."""
    if not _NESTED_QUANTIFIER.search(query):
        try:
            return re.compile(query, re.IGNORECASE)
        except re.error:
            pass
    return re.compile(re.escape(query), re.IGNORECASE)


def search(snapshot: str, query: str, max_results: int = SEARCH_DEFAULT) -> str:
    """``Found N matches:`` then ``L{i}: line`` (1-based) for the first ``max_results``; or the no-match line."""
    lines = snapshot.splitlines()
    pattern = pattern_of(query)
    hits = [f"L{i}: {line.strip()}" for i, line in enumerate(lines, 1) if pattern.search(line)]
    if not hits:
        return f"No matches for '{query}' in snapshot ({len(lines)} lines)."
    text = "\n".join([f"Found {len(hits)} matches:", *hits[:max_results]])
    if len(hits) > max_results:
        text += f"\n… {len(hits) - max_results} more (raise max_results)"
    return text


async def browse_outline(args: dict[str, Any], call: ToolCall) -> str:
    return outline(str(args["snapshot"]), int(args.get("max_lines", OUTLINE_DEFAULT)))


async def browse_search(args: dict[str, Any], call: ToolCall) -> str:
    return search(str(args["snapshot"]), str(args["query"]), int(args.get("max_results", SEARCH_DEFAULT)))


def browse_tools() -> list[CoreMcpTool]:
    return [
        CoreMcpTool("browse_outline", "Shrink an accessibility snapshot to its interactive and structural lines "
                    "(headings, links, buttons, inputs, rows…, and every ref= line).",
                    OUTLINE_SCHEMA, browse_outline, read_only=True, identity="none"),
        CoreMcpTool("browse_search", "Find lines of an accessibility snapshot matching a case-insensitive regex "
                    "(or literal text), as L<line>: text.",
                    SEARCH_SCHEMA, browse_search, read_only=True, identity="none"),
    ]
