"""``kirocrew mcp-computer`` as third-party MCP clients see it (the real CLI and chokepoint on a fake desktop)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "computer"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_clients import Runner, StdioServer, assert_refused, call_result, text_of
from fake_desktop import fake_desktop_host_env, runner_argv, write_keystone

from kirocrew_computer.schemas import TOOLS
from kirocrew_testing.fixtures import kirocrew_argv

ON = {"enabled": True, "allowed_apps": [], "extra_denied_apps": []}


@pytest.fixture(params=["hosted", "standalone"])
def computer_server(request: pytest.FixtureRequest, tmp_path: Path) -> StdioServer:
    """The fake desktop's Notes app, in this test's isolated homes, each way a client reaches it.

    ``hosted``: the relay (bare ``kirocrew mcp-computer``) to a host it starts, which drives the
    fake desktop; ``standalone``: ``kirocrew mcp-computer --standalone`` in its own process.
    """
    if request.param == "hosted":
        return StdioServer(kirocrew_argv("mcp-computer"), fake_desktop_host_env(tmp_path), tmp_path,
                           tmp_path / "server.stderr")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return StdioServer(runner_argv("mcp-computer", "--standalone"), env, tmp_path, tmp_path / "server.stderr")


def test_with_the_keystone_off_no_tool_is_listed_and_a_call_is_refused_readably(
        mcp_client: Runner, computer_server: StdioServer) -> None:
    report = mcp_client(computer_server, [{"name": "computer_list_apps", "arguments": {}}])
    assert report["tools"] == []
    result = call_result(report, 0)
    assert result["isError"] is True and "structuredContent" not in result
    assert text_of(result).startswith("error[keystone_off]: computer use is off")


def test_with_the_keystone_on_every_tool_is_listed_with_an_input_schema_the_client_compiles(
        mcp_client: Runner, computer_server: StdioServer) -> None:
    write_keystone(ON)
    report = mcp_client(computer_server, [])
    assert [tool["name"] for tool in report["tools"]] == [tool.name for tool in TOOLS]
    assert all("inputSchema" in tool and "outputSchema" not in tool for tool in report["tools"])
    assert report["schemaProblems"] == []


def test_a_successful_call_is_text_and_refusals_reach_the_client_with_their_code_as_text(
        mcp_client: Runner, computer_server: StdioServer) -> None:
    write_keystone(ON)
    report = mcp_client(computer_server, [
        {"name": "computer_get_state", "arguments": {"app": "Notes"}},
        {"name": "computer_type_text", "arguments": {"app": "Notes", "element_index": 2, "text": "x"}},
        {"name": "computer_click", "arguments": {"app": "Notes", "element_index": 3, "x": 1, "y": 1}},
        {"name": "computer_call", "arguments": {}},
    ])
    state = call_result(report, 0)
    assert state.get("isError") is not True and '3 push button "Save"' in text_of(state)
    for index, code in enumerate(["password_field", "ambiguous_target", "unknown_tool"], start=1):
        assert_refused(report, index, code)
