"""``kirocrew-computer``: the computer-use MCP server on stdio.

A thin translation to :class:`~kirocrew_computer.chokepoint.Chokepoint`.
``tools/list`` re-reads the keystone on every request and lists nothing while
it is off, so a session started before the owner enabled computer use sees no
tools; every call re-checks it too (inside the chokepoint). Results take the shapes of
:mod:`kirocrew_core.tool_results`: a reply is one text block (no tool declares an
``outputSchema``), a refusal is ``isError`` with the text ``error[<code>]: <message>``,
so an MCP client sees the same stable code the audit record keeps.

The mcp SDK is imported inside functions: ``kirocrew --help`` must not pay for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kirocrew_core import tool_results

from kirocrew_computer import __version__
from kirocrew_computer.schemas import TOOLS, tool_annotations

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from kirocrew_computer.chokepoint import Chokepoint

log = logging.getLogger(__name__)

SERVER_NAME = "kirocrew-computer"
INSTRUCTIONS = """\
Operates desktop applications through their accessibility tree.
- Call computer_get_state for an app before acting on it; element indices come from its latest state and \
expire after 90 s. Every mutating tool returns the refreshed state.
- Prefer element_index over x/y coordinates. Password fields cannot be typed into or read.
- A reply flagged isError (text "error[<code>]: <message>") was refused or failed; nothing was done unless it \
says so."""


def _tool_list() -> Any:
    from mcp import types

    return [types.Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema,
                       annotations=types.ToolAnnotations(**tool_annotations(tool))) for tool in TOOLS]


def build_server(chokepoint: Chokepoint) -> Server[Any]:
    from mcp import types
    from mcp.server.lowlevel import Server

    from kirocrew_computer.keystone import read_keystone

    async def list_tools(ctx: Any, params: Any) -> Any:
        keystone = await asyncio.to_thread(read_keystone)
        return types.ListToolsResult(tools=_tool_list() if keystone.enabled else [])

    async def call_tool(ctx: Any, params: Any) -> Any:
        reply = await chokepoint.call(params.name, params.arguments)
        if reply.ok:
            return tool_results.text_result(reply.text)
        return tool_results.error_result(reply.code, reply.message)

    return Server(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(chokepoint: Chokepoint | None = None) -> None:
    """Serve MCP on stdin/stdout until EOF; the driver is closed on the way out."""
    from mcp.server.stdio import stdio_server

    from kirocrew_computer.chokepoint import Chokepoint

    chokepoint = chokepoint or Chokepoint()
    server = build_server(chokepoint)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await asyncio.to_thread(chokepoint.close)
