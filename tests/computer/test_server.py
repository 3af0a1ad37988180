"""``kirocrew mcp-computer --standalone`` over real stdio through the mcp SDK client; its managed registration."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import audit_records, runner_argv, text_of, write_keystone
from fake_desktop import mcp_client as client

from kirocrew_core import home
from kirocrew_testing.fixtures import kirocrew_argv

ON = {"enabled": True, "allowed_apps": [], "extra_denied_apps": []}


def test_with_the_keystone_off_tools_list_is_empty_and_calls_are_refused(tmp_path: Path) -> None:
    async def scenario() -> tuple[Any, Any]:
        async with client(kirocrew_argv("mcp-computer", "--standalone"), tmp_path) as session:
            return await session.list_tools(), await session.call_tool("computer_list_apps", {})

    listed, called = asyncio.run(scenario())
    assert listed.tools == []
    assert called.is_error and text_of(called).startswith("error[keystone_off]: computer use is off")
    assert [(r["fields"]["tool"], r["fields"]["code"]) for r in audit_records()] == [
        ("computer_list_apps", "keystone_off")]


def test_turning_the_keystone_on_lists_ten_annotated_tools_on_the_next_request(tmp_path: Path) -> None:
    async def scenario() -> tuple[Any, Any, Any]:
        async with client(kirocrew_argv("mcp-computer", "--standalone"), tmp_path) as session:
            before = await session.list_tools()
            write_keystone(ON)  # while the server runs: the keystone is re-read per request
            during = await session.list_tools()
            write_keystone({**ON, "enabled": False})
            return before, during, await session.list_tools()

    before, during, after = asyncio.run(scenario())
    assert before.tools == [] and after.tools == []
    tools = {tool.name: tool for tool in during.tools}
    assert len(tools) == 10 and "computer_call" not in tools
    read_only = {name for name, tool in tools.items() if tool.annotations.read_only_hint}
    assert read_only == {"computer_list_apps", "computer_get_state"}
    destructive = {name for name, tool in tools.items() if tool.annotations.destructive_hint}
    assert destructive == set(tools) - read_only - {"computer_end_turn"}
    click = tools["computer_click"].input_schema
    assert click["additionalProperties"] is False
    assert click["properties"]["x"] == {"type": "number", "minimum": -32768, "maximum": 32767}
    assert "app_post" in click["properties"]["click_method"]["enum"]


def test_calls_over_stdio_run_through_the_chokepoint_and_are_each_audited(tmp_path: Path) -> None:
    write_keystone(ON)

    async def scenario() -> list[Any]:
        async with client(runner_argv("mcp-computer", "--standalone"), tmp_path,
                          KIROCREW_SESSION_KEY="agent:beta:7") as session:
            return [await session.call_tool("computer_get_state", {"app": "Notes"}),
                    await session.call_tool("computer_click", {"app": "Notes", "element_index": 3}),
                    await session.call_tool("computer_type_text", {"app": "Notes", "element_index": 2, "text": "x"}),
                    await session.call_tool("computer_click", {"app": "Notes", "element_index": 3, "x": 1, "y": 1})]

    state, click, password, ambiguous = asyncio.run(scenario())
    assert not state.is_error and '3 push button "Save"' in text_of(state)
    assert not click.is_error and 'saved 1 times' in text_of(click)
    assert password.is_error and text_of(password).startswith("error[password_field]: ")
    assert "password field" in text_of(password)
    assert ambiguous.is_error and text_of(ambiguous).startswith("error[ambiguous_target]: ")
    records = audit_records()
    assert [(r["fields"]["tool"], r["fields"]["code"]) for r in records] == [
        ("computer_get_state", "ok"), ("computer_click", "ok"), ("computer_type_text", "password_field"),
        ("computer_click", "ambiguous_target")]
    assert {r["actor"] for r in records} == {"agent:beta:7"}


def test_the_keystone_is_rechecked_on_every_call_not_only_at_listing(tmp_path: Path) -> None:
    write_keystone(ON)

    async def scenario() -> tuple[Any, Any]:
        async with client(runner_argv("mcp-computer", "--standalone"), tmp_path) as session:
            first = await session.call_tool("computer_get_state", {"app": "Notes"})
            write_keystone({**ON, "enabled": False})
            return first, await session.call_tool("computer_click", {"app": "Notes", "element_index": 3})

    first, second = asyncio.run(scenario())
    assert not first.is_error
    assert second.is_error and text_of(second).startswith("error[keystone_off]: computer use is off")


def test_the_managed_registration_is_never_auto_approved(kirocrew) -> None:
    result = kirocrew("mcp", "rebuild")
    assert result.returncode == 0, result.stderr
    agent = json.loads(home.rendered_agent_file().read_text())
    entry = agent["mcpServers"]["kirocrew-computer"]
    assert entry["args"] == ["mcp-computer"]
    assert "autoApprove" not in entry
    assert not [tool for tool in agent.get("allowedTools", []) if "kirocrew-computer" in tool]


@pytest.mark.parametrize("name", ["computer_call", "nope"])
def test_an_unknown_tool_is_refused_even_with_the_keystone_on(tmp_path: Path, name: str) -> None:
    write_keystone(ON)

    async def scenario() -> Any:
        async with client(kirocrew_argv("mcp-computer", "--standalone"), tmp_path) as session:
            return await session.call_tool(name, {})

    result = asyncio.run(scenario())
    assert result.is_error and text_of(result).startswith("error[unknown_tool]: no such computer-use tool")


def test_the_governance_ceiling_withholds_every_computer_tool_from_auto_approve(installed_plugin_manager) -> None:
    from kirocrew_core.governance import may_auto_approve

    assert not may_auto_approve("@kirocrew-computer", pm=installed_plugin_manager)
    assert not may_auto_approve("@kirocrew-computer/computer_list_apps", pm=installed_plugin_manager)
