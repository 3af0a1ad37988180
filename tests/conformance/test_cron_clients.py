"""``kirocrew mcp-cron`` as the official TypeScript SDK client sees it (the relay, the host, the eight cron tools).

The client is not a session kirocrew started: it lists every tool and reads, but sees no job
and may write nothing, and its refusals arrive as ``error[<code>]: …`` results the SDK's strict
validation accepts. (The Python SDK's client drives the same server in tests/cron/test_tools_e2e.py.)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_clients import StdioServer, call_result, run_typescript_client, text_of

from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.requirements import unavailable

TOOLS = ["cron_add", "cron_list", "cron_pause", "cron_remove", "cron_remove_all", "cron_resume", "cron_trigger",
         "cron_update"]


@pytest.fixture
def cron_server(fake_kiro_cli: Any, tmp_path: Path) -> StdioServer:
    """Bare ``kirocrew mcp-cron``: a relay to a host it starts."""
    from kirocrew_mcp.render import rebuild_agent_config

    crew = CrewHarness(tmp_path, {**os.environ, "KIRO_CLI_PATH": str(fake_kiro_cli.sandboxable_path)},
                       rebuild_agent_config)
    return StdioServer(kirocrew_argv("mcp-cron"), crew.env, tmp_path, tmp_path / "server.stderr")


def test_the_typescript_client_lists_the_cron_tools_reads_an_empty_list_and_reads_refusals_by_their_code(
        node_sdk_problem: str | None, cron_server: StdioServer) -> None:
    if node_sdk_problem:
        unavailable(node_sdk_problem)
    report = run_typescript_client(cron_server, [
        {"name": "cron_list", "arguments": {"verbose": True}},
        {"name": "cron_add", "arguments": {"name": "x", "message": "m", "every": 3600}},
        {"name": "cron_remove", "arguments": {"job_id": "NOT-HEX"}},
    ])
    assert report["serverInfo"]["name"] == "kirocrew-cron"
    assert sorted(tool["name"] for tool in report["tools"]) == TOOLS
    assert report["schemaProblems"] == []
    listing = {tool["name"]: tool for tool in report["tools"]}["cron_list"]
    assert listing["annotations"]["readOnlyHint"] is True
    listed = call_result(report, 0)
    assert listed.get("isError") is not True and text_of(listed).startswith("0 cron job(s): 0 active, 0 paused")
    for index, code in ((1, "caller_unverified"), (2, "invalid_arguments")):
        result = call_result(report, index)
        assert result["isError"] is True and "structuredContent" not in result
        assert text_of(result).startswith(f"error[{code}]: ")
