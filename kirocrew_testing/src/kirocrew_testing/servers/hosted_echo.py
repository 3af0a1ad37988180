"""A tiny MCP server the host serves, for tests of the host, the relay and caller identity.

Not an entry point of ``kirocrew-testing``: :func:`kirocrew_testing.fixtures.echo_host_env`
lays out a throwaway distribution registering this module as the plugin ``echo-host``
and puts it on ``PYTHONPATH``, so only a host started with that environment serves it.

Tools: ``whoami`` (the caller the host verified, and the caller block the tool's request
carried), ``noop`` (with ``chat: true`` it first sends the client a notification, a ``ping``
and a ``roots/list`` request, and answers how the client answered those), ``sleep`` (seconds;
a request held in flight) and ``busy`` (marks the ``echo`` service busy, or not, so tests can
hold a host from idling out or retiring).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kirocrew_core import hookimpl, tool_results
from kirocrew_core.contributions import HostedMcpServer, HostService

SERVER_NAME = "kirocrew-echo"
COMMAND = "mcp-echo"

_state = {"busy": False, "started": 0, "stopped": 0}


def _server() -> Any:
    from mcp import types
    from mcp.server.lowlevel import Server

    from kirocrew_core.host.caller import current_caller
    from kirocrew_core.host.protocol import CALLER_META_KEY

    tools = [
        types.Tool(name="whoami", description="The verified caller.", input_schema={"type": "object"}),
        types.Tool(name="noop", description="Does nothing.", input_schema={"type": "object"}),
        types.Tool(name="sleep", description="Sleeps.", input_schema={
            "type": "object", "properties": {"seconds": {"type": "number"}}}),
        types.Tool(name="busy", description="Sets the echo service busy.", input_schema={
            "type": "object", "properties": {"busy": {"type": "boolean"}}}),
    ]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        arguments = params.arguments or {}
        if params.name == "whoami":
            caller = current_caller()
            meta = ctx.meta or {}
            stamped = meta.get(CALLER_META_KEY) if isinstance(meta, dict) else getattr(meta, CALLER_META_KEY, None)
            return tool_results.structured_result({
                "caller": dict(caller.raw) if caller is not None else None,
                "stamped": stamped,
                "service": dict(_state),
            })
        if params.name == "noop":
            return tool_results.structured_result(await _chat(ctx.session) if arguments.get("chat") else {})
        if params.name == "sleep":
            await asyncio.sleep(float(arguments.get("seconds", 1)))
            return tool_results.structured_result({"slept": arguments.get("seconds", 1)})
        if params.name == "busy":
            _state["busy"] = bool(arguments.get("busy", True))
            return tool_results.structured_result({"busy": _state["busy"]})
        return tool_results.error_result("unknown_tool", "no such tool")

    return Server(SERVER_NAME, version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def _chat(session: Any) -> dict[str, Any]:
    """Talk to the client in the middle of a call: a notification, then two requests; how each was answered."""
    from mcp import MCPError

    await session.send_tool_list_changed()
    answers: dict[str, Any] = {}
    for name, request in (("ping", session.send_ping), ("roots", session.list_roots)):
        try:
            answers[name] = {"result": (await request()).model_dump(exclude_none=True)}
        except MCPError as exc:
            answers[name] = {"error": exc.code}
    return answers


_shared: list[Any] = []


def _shared_server() -> Any:
    if not _shared:
        _shared.append(_server())
    return _shared[0]


async def _start() -> None:
    _state["started"] += 1


async def _stop() -> None:
    _state["stopped"] += 1


def _busy() -> str | None:
    return "a test said so" if _state["busy"] else None


@hookimpl
def host_services() -> list[HostService]:
    return [HostService("echo", _start, _stop, _busy)]


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    return [HostedMcpServer(SERVER_NAME, COMMAND, _shared_server, "Echo server for host tests.")]
