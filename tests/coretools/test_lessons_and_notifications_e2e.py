"""Lessons and notifications end to end: conversations' kiro-cli call kirocrew-core through the relay and the host.

One host (the harness starts it on the first relay): a conversation keeps lessons and publishes
a notification; then, with governance denying memory writes, a later conversation in the same
workspace is told the lessons at start and its own learn_add is refused; a plain MCP client (no
session key) is refused the strict tools and sees only the global lessons. (That another
workspace's session is not told a workspace lesson: test_lessons_delivery.py.)
"""

from __future__ import annotations

import json
from typing import Any

from kirocrew_core import home
from kirocrew_core.config import set_value
from kirocrew_core.lessons import store as lessons
from kirocrew_core.notifications import store as notifications

from kirocrew_testing.core_sessions import CrewHarness


def _mcp(tool: str, args: dict[str, Any]) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}"


def test_a_session_keeps_lessons_a_later_session_is_told_them_and_its_notification_reaches_the_feed(
        crew: CrewHarness, run_async: Any) -> None:
    script = "\n".join([
        _mcp("learn_add", {"rule": "Answer in British English", "category": "preference"}),
        _mcp("learn_add", {"rule": "Run make check before committing", "scope": "workspace"}),
        _mcp("send_notification", {"title": "Lessons saved", "body": "Two **rules**.", "priority": "critical",
                                   "actions": [{"id": "ok", "label": "Thanks"}]}),
        "!say done",
    ])

    async def main() -> tuple[dict[str, Any], dict[str, Any], list[tuple[str, str | None]]]:
        async with crew.conversations() as conv:
            first = await crew.spawn(conv, script, name="teacher")
            first_run = await crew.wait(conv, first)
            set_value("governance.memory_writes", "deny")  # read by the host at each call
            later = await crew.delegate(conv, "!context\n" + _mcp("learn_add", {"rule": "sneaky"}), name="pupil")
        async with crew.core() as plain:
            answers = [await plain.call("learn_add", rule="from nowhere"),
                       await plain.call("learn_list"),
                       await plain.call("send_notification", title="spoofed")]
        return first | {"run": first_run}, later, answers

    first, later, answers = run_async(main())
    assert first["run"]["status"] == "completed" and first["run"]["reply"]["text"] == "done", first

    saved = lessons.all_lessons()
    assert [(x.rule, x.scope, x.workspace) for x in saved] == [
        ("Answer in British English", "global", None),
        ("Run make check before committing", "workspace", str(crew.workspace))]

    told = later["reply"]["text"]
    assert "- [preference] Answer in British English" in told
    assert "- [knowledge] Run make check before committing" in told
    assert [x.rule for x in lessons.all_lessons()] == [x.rule for x in saved]  # "sneaky" was refused:
    calls = [json.loads(line) for line in home.audit_log_file().read_text().splitlines()]
    codes = [(c["fields"]["tool"], c["fields"].get("code")) for c in calls if c["event"] == "coretools.call"]
    assert ("learn_add", "governance_denied") in codes

    [note] = notifications.all_notifications()
    assert (note.title, note.priority, note.source) == (
        "Lessons saved", "critical", notifications.Source("conversation", first["conversationId"], "kirocrew"))

    (_, add_code), (listed, list_code), (_, send_code) = answers
    assert add_code == "caller_unverified" and send_code == "caller_unverified"
    assert (listed, list_code) == ("[preference] Answer in British English", None)
    assert len(lessons.all_lessons()) == 2 and len(notifications.all_notifications()) == 1
