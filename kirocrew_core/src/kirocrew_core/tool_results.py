"""The ``CallToolResult`` shapes every kirocrew MCP server answers with, and how to read an error back.

* success with structured output: ``structuredContent`` is the payload (valid for the tool's
  ``outputSchema``), and one text block holds the same JSON, for clients without structured output;
* success as text: one text block (tools without an ``outputSchema``);
* error: ``isError: true`` and one text block ``error[<code>]: <message>``, with **no**
  ``structuredContent``.

Why errors carry no structured content: a tool's ``outputSchema`` describes its success, and the
official TypeScript SDK client (the one most MCP hosts are built on) validates ``structuredContent``
against it whenever it is present, error or not; a mismatch rejects the whole result with
``-32602 Structured content does not match the tool's output schema``, so the user would never see
the code. Widening every output schema to also admit an error object would blur the success shape
that hosts generate types from, for no gain: both SDK clients accept an error without structured
content (the MCP spec reports tool errors in ``content``), and the code stays machine-readable in
the text, which :func:`read_error` parses. The text is the same ``error[code]: message`` that the
``kirocrew`` CLI prints, so a user sees one form everywhere.

The mcp SDK is imported inside functions: ``kirocrew --help`` must not pay for it.
"""

from __future__ import annotations

import json
import re
from typing import Any

_ERROR_TEXT = re.compile(r"error\[([A-Za-z0-9_.-]{1,64})\]: (.*)", re.DOTALL)


def error_text(code: str, message: str) -> str:
    """``error[<code>]: <message>``: the one text form of an error, for people and for parsers."""
    return f"error[{code}]: {message}"


def structured_result(payload: dict[str, Any]) -> Any:
    """A successful ``CallToolResult``: ``payload`` as ``structuredContent`` and as compact JSON text."""
    from mcp import types

    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=payload, is_error=False)


def text_result(text: str) -> Any:
    """A successful ``CallToolResult`` of one text block, for a tool without an ``outputSchema``."""
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=False)


def error_result(code: str, message: str) -> Any:
    """An ``isError`` ``CallToolResult`` that every conforming client accepts and shows (see the module doc)."""
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=error_text(code, message))],
                                is_error=True)


def read_error(result: Any) -> tuple[str, str]:
    """``(code, message)`` of an ``isError`` result, read from its text as :func:`error_result` wrote it."""
    return error_from_text("".join(getattr(block, "text", "") for block in result.content))


def error_from_text(text: str) -> tuple[str, str]:
    """``(code, message)`` of an error result's text (``error[<code>]: <message>``).

    A text in any other form (a server that is not ours) is ``internal_error`` with that text,
    shortened, as the message: the caller still gets a code to branch on.
    """
    matched = _ERROR_TEXT.fullmatch(text)
    if matched:
        return matched.group(1), matched.group(2)
    return "internal_error", text[:300] or "the server reported an error"
