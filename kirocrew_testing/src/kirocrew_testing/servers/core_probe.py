"""Test-only ``kirocrew-core`` tools, for tests of the server, session identity and the tool policy.

Not an entry point of ``kirocrew-testing``: :func:`core_probe_distribution` lays out a
throwaway distribution registering this module as the plugin ``core-probe``; put it on the
``PYTHONPATH`` of a host and only that host serves these tools.

Each handler that runs appends one JSON line to ``$KIROCREW_PROBE_LOG`` (when set): the tool,
the session it saw (without the key), the caller's origin and its arguments, so a test can see what a tool
observed when it was called by a fake kiro-cli inside a conversation.

Tools: ``probe_whoami`` (strict), ``probe_lenient`` (lenient, read-only), ``probe_sleep``
(strict, async: ``seconds``), ``probe_echo`` (no identity: ``text``), ``probe_refuse``
(raises ToolRefused ``probe_refused``), ``probe_crash`` (raises RuntimeError), and a second
``probe_echo`` (a duplicate name the server must drop).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from kirocrew_core import hookimpl
from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.coretools.contract import ToolCall, ToolRefused

LOG_ENV = "KIROCREW_PROBE_LOG"
PLUGIN_SOURCE = "from kirocrew_testing.servers.core_probe import core_mcp_tools\n"


def _seen(call: ToolCall, args: dict[str, Any]) -> dict[str, Any]:
    session = call.session
    seen = None if session is None else {"kind": session.kind, "targetId": session.target_id,
                                         "agent": session.agent, "workspace": session.workspace}
    record = {"tool": call.tool, "session": seen, "origin": call.origin, "args": args, "pid": os.getpid()}
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    return record


def _whoami(args: dict[str, Any], call: ToolCall) -> str:
    return json.dumps(_seen(call, args)["session"])


def _lenient(args: dict[str, Any], call: ToolCall) -> str:
    session = _seen(call, args)["session"]
    return f"session: {session['targetId'] if session else 'none'}"


async def _sleep(args: dict[str, Any], call: ToolCall) -> str:
    await asyncio.sleep(float(args.get("seconds", 0)))
    return json.dumps(_seen(call, args)["session"])


def _echo(args: dict[str, Any], call: ToolCall) -> str:
    _seen(call, args)
    return str(args["text"])


def _refuse(args: dict[str, Any], call: ToolCall) -> str:
    raise ToolRefused("the probe refuses, as asked", code="probe_refused")


def _crash(args: dict[str, Any], call: ToolCall) -> str:
    raise RuntimeError("secret-detail-that-stays-in-the-log")


_EMPTY = {"type": "object", "properties": {}}


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    return [
        CoreMcpTool("probe_whoami", "The calling session (strict).", _EMPTY, _whoami, identity="strict"),
        CoreMcpTool("probe_lenient", "The calling session, if verified (lenient).", _EMPTY, _lenient,
                    read_only=True, identity="lenient"),
        CoreMcpTool("probe_sleep", "Sleeps, then names the calling session (strict).",
                    {"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 30}},
                     "required": ["seconds"]}, _sleep, identity="strict"),
        CoreMcpTool("probe_echo", "Echoes text (no identity).",
                    {"type": "object", "properties": {"text": {"type": "string", "maxLength": 200000}},
                     "required": ["text"]}, _echo, read_only=True, identity="none"),
        CoreMcpTool("probe_refuse", "Refuses.", _EMPTY, _refuse, identity="none"),
        CoreMcpTool("probe_crash", "Crashes.", _EMPTY, _crash, identity="none"),
        CoreMcpTool("probe_echo", "A duplicate name: dropped.", _EMPTY, _refuse, identity="none"),
    ]


def core_probe_distribution(root: Path) -> Path:
    """A throwaway distribution registering this module as the plugin ``core-probe``; its folder for PYTHONPATH."""
    from kirocrew_testing.distributions import make_plugin_distribution

    return make_plugin_distribution(root, distribution="kirocrew-core-probe", module="kirocrew_core_probe_plugin",
                                    source=PLUGIN_SOURCE, entry_point="core-probe")
