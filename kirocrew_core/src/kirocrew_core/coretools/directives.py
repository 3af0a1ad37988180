"""Session directives: how a ``kirocrew-core`` tool acts on *the calling session* without trusting who called.

A directive tool only validates its arguments and returns a confirmation followed by one
ASCII marker line: :data:`SENTINEL` then compact JSON ``{"kind": tool, "args": payload}``,
never a session key. The consumer is the conversations worker running the session: it
honours a marker only under a tool call that kiro-cli's out-of-band ``_meta`` recorded as
served by ``kirocrew-core`` under a directive tool's canonical name (never the
model-written title), applies it to its own conversation, and strips markers from what it
stores. A shell command printing a forged marker, a marker under another server's tool,
or a call without ``_meta`` identity is ignored.

The marker is ASCII on purpose: result sanitizers legitimately strip invisible Unicode, and
a framing token that depends on such characters silently disappears. A marker longer than
:data:`MAX_DIRECTIVE_CHARS` is refused at encode time (ACP result parsers cut long outputs,
and the marker sits at the tail), so an oversized payload fails loudly instead of being lost.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kirocrew_core.coretools.contract import ToolRefused

SENTINEL = "[[KIROCREW_SESSION_DIRECTIVE]]"
CORE_MCP_SERVER = "kirocrew-core"
DIRECTIVE_TOOLS = frozenset({"ask_question", "suggest_followup", "monitor_start", "monitor_update",
                             "autonudge_stop", "set_project"})
MAX_DIRECTIVE_CHARS = 3800
# kiro-cli reports "<server>___<tool>"; the canonical MCP form is "mcp__<server>__<tool>".
_SEPARATOR = re.compile(r"_{2,}")


def encode(kind: str, args: dict[str, Any], human: str) -> str:
    """``human`` plus the marker line; :class:`ToolRefused` ``directive_too_large`` above the limit."""
    if kind not in DIRECTIVE_TOOLS:
        raise ValueError(f"{kind!r} is not a directive tool")
    marker = SENTINEL + json.dumps({"kind": kind, "args": args}, separators=(",", ":"), ensure_ascii=True)
    text = f"{human}\n{marker}"
    if len(text) > MAX_DIRECTIVE_CHARS:
        raise ToolRefused(f"{kind} arguments are too large to deliver ({len(text)} characters, limit "
                          f"{MAX_DIRECTIVE_CHARS}); shorten them (a briefer message, fewer items) and call the tool "
                          "again. Nothing was applied.", code="directive_too_large")
    return text


def decode(text: str, expected_tool: str) -> dict[str, Any] | None:
    """The payload of the last marker in ``text`` when it is ``expected_tool``'s; else None.

    ``expected_tool`` must come from ``_meta`` (see :func:`directive_tool_for`), never from
    the text itself or a model-written title.
    """
    if expected_tool not in DIRECTIVE_TOOLS or SENTINEL not in text:
        return None
    for line in reversed(text.splitlines()):
        at = line.find(SENTINEL)
        if at < 0:
            continue
        try:
            body = json.loads(line[at + len(SENTINEL):])
        except ValueError:
            return None
        if not isinstance(body, dict) or body.get("kind") != expected_tool:
            return None
        args = body.get("args")
        return args if isinstance(args, dict) else {}
    return None


def has_marker(text: str) -> bool:
    return SENTINEL in text


def strip_markers(text: str) -> str:
    """``text`` with every marker removed (each sentinel to the end of its line), for storing and showing."""
    if SENTINEL not in text:
        return text
    kept = []
    for line in text.split("\n"):
        at = line.find(SENTINEL)
        if at < 0:
            kept.append(line)
        elif line[:at].strip():
            kept.append(line[:at].rstrip())
    return "\n".join(kept).rstrip("\n")


def match_tool(raw: str) -> str:
    """The directive tool ``raw`` names (bare, ``<server>___<tool>`` or ``mcp__<server>__<tool>``), or ``""``."""
    if raw in DIRECTIVE_TOOLS:
        return raw
    parts = _SEPARATOR.split(raw)
    tail = parts[-1] if len(parts) > 1 else ""
    return tail if tail in DIRECTIVE_TOOLS else ""


def directive_tool_for(mcp_server_name: Any, tool_name: Any) -> str:
    """The directive a tool call may carry, from kiro-cli's ``_meta.kiro`` only; ``""`` for anything else."""
    if mcp_server_name != CORE_MCP_SERVER or not isinstance(tool_name, str):
        return ""
    return match_tool(tool_name)
