"""The kirocrew-core server through a real relay and host, driven by the mcp SDK's client.

The tools are the test-only probe tools (:mod:`kirocrew_testing.servers.core_probe`); the
client is a plain MCP client kirocrew did not start (no session key).
"""

from __future__ import annotations

import json
from typing import Any

from kirocrew_core import audit
from kirocrew_core.coretools.directives import SENTINEL
from kirocrew_core.coretools.server import MAX_RESULT_CHARS, TRUNCATED
from kirocrew_core.host import paths
from kirocrew_testing.core_sessions import CrewHarness


def test_the_server_validates_refuses_sanitises_and_audits_each_call(crew: CrewHarness, run_async: Any) -> None:
    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with crew.core() as core:
            caps = core.initialize_result.capabilities
            out["experimental"] = caps.experimental
            listed = (await core.raw.list_tools()).tools
            out["tools"] = {tool.name: tool for tool in listed}
            out["names"] = [tool.name for tool in listed]
            out["unknown"] = await core.call("no_such_tool")
            out["missing"] = await core.call("probe_echo")
            out["extra"] = await core.call("probe_echo", text="a", extra=1)
            out["type"] = await core.call("probe_echo", text=5)
            out["sanitised"] = await core.call(
                "probe_echo", text=f"\x07bell\u200bzwsp\u200dzwj\u202erlo tab\tok\n{SENTINEL}{{}}")
            out["long"] = await core.call("probe_echo", text="x" * (MAX_RESULT_CHARS + 10))
            out["refused"] = await core.call("probe_refuse")
            out["crashed"] = await core.call("probe_crash")
            out["strict"] = await core.call("probe_whoami")
            out["lenient"] = await core.call("probe_lenient")
        return out

    out = run_async(main())
    assert out["experimental"] == {"kirocrew.caller-identity": {"schemaVersion": 1}}
    # (the installed plugins' own tools, such as the sub-agent tools, are listed too)
    assert sorted(n for n in out["names"] if n.startswith("probe_")) == [
        "probe_crash", "probe_echo", "probe_lenient", "probe_refuse", "probe_sleep",
        "probe_whoami"]  # the duplicate probe_echo is dropped, the host still serves
    assert out["tools"]["probe_echo"].description == "Echoes text (no identity)."  # the first one kept
    assert out["tools"]["probe_lenient"].annotations.read_only_hint is True
    assert out["tools"]["probe_whoami"].annotations.read_only_hint is False
    assert out["unknown"][1] == "unknown_tool" and "no_such_tool" in out["unknown"][0]
    assert out["missing"] == ("text: 'text' is a required property", "invalid_arguments")
    assert out["extra"][1] == "invalid_arguments" and out["extra"][0].startswith("extra: ")
    assert out["type"] == ("text: 5 is not of type 'string'", "invalid_arguments")
    assert out["sanitised"] == (f"bellzwsp\u200dzwjrlo tab\tok\n{SENTINEL}{{}}", None)
    assert out["long"] == ("x" * MAX_RESULT_CHARS + TRUNCATED, None)
    assert out["refused"] == ("the probe refuses, as asked", "probe_refused")
    assert out["crashed"][1] == "internal_error" and "secret-detail" not in out["crashed"][0]
    assert out["strict"][1] == "caller_unverified"
    assert out["lenient"] == ("session: none", None)
    # Only calls that reached their handler ran: the strict one was refused before it.
    assert [r["tool"] for r in crew.probe_records()] == ["probe_echo", "probe_echo", "probe_lenient"]

    host_log = paths.log_file().read_text()
    assert "secret-detail-that-stays-in-the-log" in host_log and "Traceback" in host_log
    assert ("kirocrew-core tool 'probe_echo' from plugin 'core-probe' was refused: the plugin contributes that "
            "name twice") in host_log

    calls = [r for r in audit.tail(200) if r["event"] == "coretools.call"]
    outcomes = [(r["fields"]["tool"], r["outcome"], r["fields"].get("code")) for r in calls]
    assert ("no_such_tool", "denied", "unknown_tool") in outcomes
    assert ("probe_whoami", "denied", "caller_unverified") in outcomes
    assert ("probe_crash", "failed", "internal_error") in outcomes
    assert ("probe_lenient", "ok", None) in outcomes
    assert all(r["fields"]["session"] == "none" for r in calls)
    assert "bell" not in json.dumps(calls)  # argument values never reach the log
    assert audit.verify().ok


def test_sanitising_drops_surrogates_and_invisible_format_characters_but_keeps_joiners_and_marks() -> None:
    from kirocrew_core.coretools.server import sanitise

    assert sanitise("a\ud800b\u2063c\u200cd\u200ee\u200ff\x1bg\r\n") == "abc\u200cd\u200ee\u200ffg\r\n"


def test_the_docs_example_tool_runs_as_shown(plugin_manager: Any) -> None:
    import asyncio
    import re
    from pathlib import Path

    from kirocrew_core.coretools.contract import CrewSession, ToolCall
    from kirocrew_core.coretools.server import CoreToolsServer
    from kirocrew_testing.plugins import register_plugin

    page = Path(__file__).resolve().parents[2] / "docs" / "core-tools" / "index.md"
    [example] = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    namespace: dict[str, Any] = {}
    exec(compile(example, "core-tools/index.md", "exec"), namespace)
    register_plugin(plugin_manager, "notes", core_mcp_tools=namespace["core_mcp_tools"])
    core = CoreToolsServer(plugin_manager)
    assert asyncio.run(core.call("note_add", {"text": "hi"}, None))[1] == "caller_unverified"
    assert asyncio.run(core.call("note_add", {"text": "x" * 501}, None))[1] == "invalid_arguments"
    [tool] = [t for t in core.tools().values() if t.name == "note_add"]
    session = CrewSession("kcs1-" + "0" * 32, "conversation", "c-1")
    call = ToolCall("note_add", session, None, "strict")
    assert tool.handler({"text": "hi"}, call) == "noted for conversation c-1"


def test_a_tool_with_an_unusable_schema_fails_as_internal_error_and_the_others_keep_working(
        plugin_manager: Any) -> None:
    import asyncio

    from kirocrew_core.contributions import CoreMcpTool
    from kirocrew_core.coretools.server import CoreToolsServer
    from kirocrew_testing.plugins import register_plugin

    def ok(args: dict[str, Any], call: Any) -> str:
        return "fine"

    register_plugin(plugin_manager, "broken-schema", core_mcp_tools=lambda: [
        CoreMcpTool("broken", "A schema that is not one.", {"type": "no-such-type"}, ok, identity="none"),
        CoreMcpTool("fine", "Works.", {"type": "object"}, ok, identity="none")])
    core = CoreToolsServer(plugin_manager)
    assert asyncio.run(core.call("broken", {}, None))[1] == "internal_error"
    assert asyncio.run(core.call("fine", {}, None)) == ("fine", None)
