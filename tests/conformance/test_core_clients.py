"""``kirocrew mcp-core`` as third-party MCP clients see it (the relay, the host, the test-only probe tools)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_clients import Runner, StdioServer, call_result, text_of

from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv


@pytest.fixture
def core_server(fake_kiro_cli: Any, tmp_path: Path) -> StdioServer:
    """Bare ``kirocrew mcp-core``: a relay to a host it starts, which serves the probe tools."""
    from kirocrew_mcp.render import rebuild_agent_config

    crew = CrewHarness(tmp_path, {**os.environ, "KIRO_CLI_PATH": str(fake_kiro_cli.sandboxable_path)},
                       rebuild_agent_config)
    return StdioServer(kirocrew_argv("mcp-core"), crew.env, tmp_path, tmp_path / "server.stderr")


def test_a_client_lists_and_calls_kirocrew_core_tools_and_reads_refusals_by_their_code(
        mcp_client: Runner, core_server: StdioServer) -> None:
    report = mcp_client(core_server, [
        {"name": "probe_echo", "arguments": {"text": "hello"}},
        {"name": "probe_whoami", "arguments": {}},
        {"name": "probe_echo", "arguments": {"text": "x", "unknown": 1}},
    ])
    if "serverInfo" in report:  # the TypeScript client reports it
        assert report["serverInfo"]["name"] == "kirocrew-core"
    names = [tool["name"] for tool in report["tools"]]
    assert "probe_echo" in names and "probe_whoami" in names and len(names) == len(set(names))
    assert report["schemaProblems"] == []
    echoed = call_result(report, 0)
    assert echoed.get("isError") is not True and text_of(echoed) == "hello"
    for index, code in ((1, "caller_unverified"), (2, "invalid_arguments")):
        result = call_result(report, index)
        assert result["isError"] is True and "structuredContent" not in result
        assert text_of(result).startswith(f"error[{code}]: ")


def test_a_connection_whose_opener_exited_answers_calls_with_a_caller_gone_tool_error(
        mcp_client: Runner, core_server: StdioServer) -> None:
    """The fork-and-exit relay (``forking_relay.py``): the process the host pinned is gone after ``tools/list``."""
    relay = Path(__file__).with_name("forking_relay.py")
    forked = StdioServer([sys.executable, str(relay)], core_server.env, core_server.cwd, core_server.stderr)
    report = mcp_client(forked, [{"name": "probe_echo", "arguments": {"text": "hello"}},
                                 {"name": "probe_whoami", "arguments": {}}])
    assert "probe_echo" in [tool["name"] for tool in report["tools"]]  # listed before the opener exited
    for index in (0, 1):
        result = call_result(report, index)
        assert result["isError"] is True and "structuredContent" not in result
        assert text_of(result).startswith("error[caller_gone]: ")
