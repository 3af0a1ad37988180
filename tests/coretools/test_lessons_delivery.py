"""A lesson reaches later sessions through the rendered `kirocrew` agent: a kiro-cli started with it is told.

Global lessons ride on a `file://` resource (the file changes, the agent does not); workspace
lessons on the agent's `agentSpawn` hook, which runs in the session's directory. The fake
kiro-cli loads resources and runs agentSpawn hooks as kiro-cli does, and `!context` shows
what the session was told.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.lessons import store

from kirocrew_testing.fake_kiro.harness import start_fake_kiro


def _render(plugin_manager: Any) -> dict[str, Any]:
    import kirocrew_mcp.plugin
    from kirocrew_mcp.render import rebuild_agent_config

    plugin_manager.register(kirocrew_mcp.plugin, name="mcp")
    # No managed servers: a kiro-cli that mounted kirocrew-core would start a host, whose own render
    # at start is not what this test is about (the end-to-end test runs through a host).
    plugin_manager.unregister(name="kirocrew_core.builtin.coretools")
    report = rebuild_agent_config(pm=plugin_manager)
    assert not report.warnings and not report.servers, report.as_dict()
    return json.loads(home.rendered_agent_file().read_text())


def _learn(rule: str, **kw: Any) -> None:
    store.add(store.validate_new(rule, **kw), author=store.OWNER)


def _told(fake_kiro_cli: Any, *cwds: Path) -> list[str]:
    """What a new kirocrew session in each of ``cwds`` was told at start (one kiro-cli, a session each)."""
    async def scenario() -> list[str]:
        async with start_fake_kiro(fake_kiro_cli.path, "acp", "--agent", "kirocrew", env=dict(os.environ),
                                   cwd=cwds[0]) as kiro:
            await kiro.initialize()
            out = []
            for cwd in cwds:
                sid = (await kiro.new_session(str(cwd)))["sessionId"]
                await kiro.prompt(sid, "!context")
                out.append("".join(kiro.client.texts("agent_message_chunk", sid)))
            return out

    return asyncio.run(scenario())


def test_later_sessions_are_told_the_global_lessons_and_only_their_own_workspaces(
        plugin_manager, fake_kiro_cli, tmp_path):
    project, other = tmp_path / "project", tmp_path / "other"
    (project / "src").mkdir(parents=True)
    other.mkdir()
    _learn("Answer in British English", category="preference")
    _learn("Run make check before committing", scope="workspace", workspace=str(project))

    agent = _render(plugin_manager)
    assert agent["resources"][0] == "file://.kiro/steering/**/*.md"  # the agent's own stays
    assert f"file://{home.crew_home()}/state/lessons/lessons.md" in agent["resources"]

    inside, outside = _told(fake_kiro_cli, project / "src", other)
    assert "- [preference] Answer in British English" in inside
    assert "- [knowledge] Run make check before committing" in inside
    assert "Answer in British English" in outside and "make check" not in outside


def test_a_new_lesson_reaches_the_next_session_without_a_rebuild_and_a_removed_one_leaves(
        plugin_manager, fake_kiro_cli, tmp_path):
    _render(plugin_manager)
    rendered = home.rendered_agent_file().read_bytes()
    _learn("Never push to main")
    _learn("Use uv here", scope="workspace", workspace=str(tmp_path))
    (told,) = _told(fake_kiro_cli, tmp_path)
    assert "Never push to main" in told and "Use uv here" in told
    store.remove("push to main", author=store.OWNER)
    (told,) = _told(fake_kiro_cli, tmp_path)
    assert "Never push to main" not in told and "Use uv here" in told
    assert home.rendered_agent_file().read_bytes() == rendered  # the agent file never changed
