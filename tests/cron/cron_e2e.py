"""Helpers of the kirocrew-cron end-to-end tests (the fixtures are in this folder's ``conftest.py``).

Imported as ``cron_e2e`` with this folder on ``sys.path`` (``--import-mode=importlib``)::

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cron_e2e import cron_line, person, tool_outcomes
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from kirocrew_testing.core_sessions import CrewHarness, McpClient

SERVER = "kirocrew-cron"
#: A lean agent the harness writes beside ``kirocrew``: it mounts kirocrew-cron alone, so a session's kiro-cli
#: starts only the relay it uses (``mode=SESSION_AGENT``).
SESSION_AGENT = "cron-session"


def cron_harness(fake_kiro_cli: Any, root: Path, **env: str) -> CrewHarness:
    """A harness over the test's homes: the fake kiro-cli, ``env`` added to the host's environment, the
    ``kirocrew`` agent rendered with every managed server, and :data:`SESSION_AGENT` written."""
    import os

    from kirocrew_mcp.render import rebuild_agent_config

    harness = CrewHarness(root, {**os.environ, "KIRO_CLI_PATH": str(fake_kiro_cli.sandboxable_path), **env},
                          rebuild_agent_config)
    document = harness.render_agent()
    harness.write_agent(SESSION_AGENT, {**document, "name": SESSION_AGENT,
                                        "mcpServers": {SERVER: document["mcpServers"][SERVER]}})
    return harness


def cron_line(tool: str, /, **args: Any) -> str:
    """A fake kiro-cli script line calling ``tool`` of kirocrew-cron."""
    return f"!mcp {SERVER} {tool} {json.dumps(args)}"


@contextlib.asynccontextmanager
async def person(crew: CrewHarness) -> AsyncIterator[McpClient]:
    """The person's MCP client on the host's kirocrew-cron: a ``kirocrew`` command on the socket, no session key."""
    from kirocrew_core.host.mcp_client import host_session

    async with host_session(SERVER, env=crew.env) as opened:
        yield McpClient(opened.session, None, crew.root / "person.stderr")


def tool_outcomes(rows: Callable[..., list[Any]], run_id: str) -> list[tuple[str, str]]:
    """``(tool name, final status)`` of each tool call of ``run_id``, in order, from its recorded events."""
    ended = []
    for (payload,) in rows("SELECT payload_json FROM events WHERE run_id = ? AND kind = 'tool_call_update' "
                           "ORDER BY cursor", run_id):
        event = json.loads(payload)
        if event.get("status") in ("completed", "failed"):
            ended.append((event.get("toolName"), event["status"]))
    return ended


async def eventually(what: str, found: Callable[[], Any], bound: float = 150.0) -> Any:
    """``found()``'s first truthy value: the host's work happens in other processes, so look until it is there
    (every 0.1 s, failing with ``what`` after ``bound`` seconds)."""
    import asyncio

    for _ in range(int(bound * 10)):
        value = found()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"never happened: {what}")
