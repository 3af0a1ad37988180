"""Tools only the person's own ``kirocrew`` command may call: the owner's decisions served by the host.

The artifact, knowledge, skill, messages and hooks admin servers hold decisions that are no model's to make. Each of
their tools refuses every caller but the person's own command (:attr:`ToolCall.is_person_command`,
decided by process ancestry): the same command run from a session's shell is that session and is
refused ``person_only_command``; anyone else ``caller_unverified``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer
    from kirocrew_core.coretools.contract import ToolCall

ToolSource = Callable[[], "dict[str, CoreMcpTool]"]


def object_schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A tool's input schema: these properties, these required, nothing else."""
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def require_person(call: ToolCall, verb: str) -> None:
    """Refuse anyone but the person's own ``kirocrew`` command: a session by name, anyone else as nobody."""
    from kirocrew_core.coretools.contract import ToolRefused

    if call.is_person_command:
        return
    if call.origin == "session":
        raise ToolRefused(f"only the owner may {verb}: a session's kirocrew command cannot (run it from your own "
                          "shell)", code="person_only_command")
    raise ToolRefused(f"only the owner's kirocrew command may {verb}", code="caller_unverified")


def person_tool(name: str, verb: str, schema: dict[str, Any], fn: Callable[[dict[str, Any]], str], *,
                read_only: bool = False) -> CoreMcpTool:
    """A tool that runs ``fn(arguments)`` in a worker thread for the person only (``verb`` names it in refusals)."""
    from kirocrew_core.contributions import CoreMcpTool

    async def handler(args: dict[str, Any], call: ToolCall) -> str:
        require_person(call, verb)
        return await asyncio.to_thread(fn, args)

    return CoreMcpTool(name, f"The owner's: {verb}.", schema, handler, read_only=read_only, identity="lenient")


def admin_server(name: str, command: str, tools: ToolSource, instructions: str, description: str) -> HostedMcpServer:
    """An owner's admin server as the host serves it: its tools built on first use, no agent config naming it."""
    from kirocrew_core.contributions import HostedMcpServer
    from kirocrew_core.coretools.server import LazyToolServer

    return HostedMcpServer(name, command, LazyToolServer(tools, name, instructions), description)


def person_call(server: str, tools: ToolSource, tool: str, arguments: dict[str, Any]) -> str:
    """One admin tool call through the host, or in this process as the person when none runs; a refusal raised
    with its code. The CLI's twin of each admin tool calls this."""
    from kirocrew_core.host import twin

    async def in_process() -> tuple[str, str | None]:
        from kirocrew_core.coretools.server import CoreToolsServer
        from kirocrew_core.host.caller import CallerContext
        from kirocrew_core.host.protocol import SESSION_TYPE_CLI

        caller = CallerContext(session_key="", session_type=SESSION_TYPE_CLI, relay_pid=0, host_pid=None, raw={})
        return await CoreToolsServer(tool_source=tools, server_name=server).call(tool, arguments, caller,
                                                                                as_person=True)

    return twin.call(server, tool, arguments, in_process)
