"""Small helpers the conversations test modules share for calling the server's tools."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

SETTLE_TIMEOUT = 30.0


def ref(out: dict[str, Any]) -> dict[str, str]:
    """The ``conversationId`` / ``runId`` pair of a spawn, send or result."""
    return {"conversationId": out["conversationId"], "runId": out["runId"]}


async def expect_error(client: Any, code: str, tool: str, **arguments: Any) -> str:
    """Call ``tool`` expecting the error ``code``; its message."""
    with pytest.raises(client.ToolCallError) as caught:
        await client.call(tool, **arguments)
    assert caught.value.code == code, caught.value.message
    return caught.value.message


async def until_status(client: Any, ref: dict[str, str], *statuses: str) -> dict[str, Any]:
    """Read the run until it reaches one of ``statuses`` (tests may poll; clients should wait)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_TIMEOUT
    while True:
        run = await client.call("kiro_result", conversationId=ref["conversationId"], runId=ref["runId"])
        if run["status"] in statuses:
            return run
        assert loop.time() < deadline, f"run stayed {run['status']}, wanted {statuses}"
        await asyncio.sleep(0.05)
