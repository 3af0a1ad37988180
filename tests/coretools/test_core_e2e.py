"""kirocrew-core end to end: a conversation's kiro-cli calls kirocrew-core through the relay and the host."""

from __future__ import annotations

from typing import Any

from kirocrew_testing.core_sessions import CrewHarness


def test_a_conversations_kiro_cli_calls_a_strict_tool_and_the_tool_sees_that_conversation(
        crew: CrewHarness, run_async: Any) -> None:
    document = crew.render_agent()
    assert document["mcpServers"]["kirocrew-core"]["args"] == ["mcp-core"]

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with crew.conversations() as conv:
            started = await crew.spawn(conv, "!mcp kirocrew-core probe_whoami {}\n!say done", name="caller")
            return started, await crew.wait(conv, started)

    started, run = run_async(main())
    assert run["status"] == "completed" and run["reply"]["text"] == "done", run
    [seen] = crew.probe_records()
    assert seen["tool"] == "probe_whoami"
    assert seen["session"] == {"kind": "conversation", "targetId": started["conversationId"], "agent": "kirocrew",
                               "workspace": str(crew.workspace)}
