"""A stdio MCP server serving the session-directive tools' real handlers, without the host.

``python tests/coretools/directive_server.py`` (a script of the tests: kirocrew-testing does not
depend on kirocrew-conversations, whose tools it serves).

It lets the conversations consumer be tested against the tools' real results over real MCP
(through the fake kiro-cli) without a host: mounted as ``kirocrew-core`` in an agent file it
stands in for the host's server (every call unverified: ``ToolCall.session`` is None, so a
strict tool's identity is not checked here); mounted under another name it is "another
server's tool" returning a genuine-looking marker. A ``ToolRefused`` becomes an MCP error
result naming its code, as the host's server reports it. ``echo`` answers its ``text``
argument verbatim (a marker any tool could print).
"""

from __future__ import annotations

from typing import Any


def main() -> None:
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    from kirocrew_conversations.directive_tools import tools
    from kirocrew_core.coretools.contract import ToolCall, ToolRefused, tool_args
    from kirocrew_core.tool_results import error_result, text_result

    by_name = {tool.name: tool for tool in tools()}
    echo = types.Tool(name="echo", description="Answer text verbatim.",
                      input_schema={"type": "object", "properties": {"text": {"type": "string"}}})
    listed = types.ListToolsResult(tools=[echo, *(
        types.Tool(name=t.name, description=t.description, input_schema=dict(t.input_schema))
        for t in by_name.values())])

    async def list_tools(ctx: Any, params: Any) -> Any:
        return listed

    async def call_tool(ctx: Any, params: Any) -> Any:
        args = tool_args(params.arguments)
        if params.name == "echo":
            return text_result(str(args.get("text", "")))
        tool = by_name[params.name]
        try:
            return text_result(tool.handler(args, ToolCall(params.name, None, None, tool.identity)))
        except ToolRefused as exc:
            return error_result(exc.code, exc.message)

    server: Server[Any] = Server("kirocrew-core", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


if __name__ == "__main__":
    main()
