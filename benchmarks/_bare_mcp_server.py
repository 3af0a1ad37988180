#!/usr/bin/env python3
"""A bare mcp-SDK low-level stdio server with 16 trivial tools: the floor any Python MCP server on this SDK pays.

Not a benchmark itself: ``relay_start.py`` spawns it (``python benchmarks/_bare_mcp_server.py``)
next to kirocrew's servers, so the cost of the SDK import and its stdio transport is measured
the same way as theirs.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [types.Tool(name=f"tool_{i}", description="A trivial tool.",
                    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
                    output_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}})
         for i in range(16)]


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text='{"ok":true}')],
                                structured_content={"ok": True})


async def main() -> None:
    server = Server("bare", version="0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
