"""Skills reach sessions: the rendered agent's ``agentSpawn`` hook tells each new session its ``always`` skills
in full and one line for the others, and a session's kiro-cli calls ``skill_search`` through its relay and host.

The fake kiro-cli runs agentSpawn hooks as kiro-cli does and ``!context`` shows what a session was told; the
end-to-end run goes through a real host, relay and the fake kiro-cli speaking real ACP.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fake_kiro.harness import start_fake_kiro
from kirocrew_testing.skill_folders import project_skills, write_skill


def _render(plugin_manager: Any) -> dict[str, Any]:
    import kirocrew_mcp.plugin
    from kirocrew_mcp.render import rebuild_agent_config

    plugin_manager.register(kirocrew_mcp.plugin, name="mcp")
    plugin_manager.unregister(name="kirocrew_core.builtin.coretools")  # no host: see test_lessons_delivery
    report = rebuild_agent_config(pm=plugin_manager)
    assert not report.warnings and not report.servers, report.as_dict()
    return json.loads(home.rendered_agent_file().read_text())


def _told(fake_kiro_cli: Any, *cwds: Path) -> list[str]:
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


def test_every_session_is_told_its_always_skills_in_full_and_the_others_in_one_line(
        plugin_manager: Any, fake_kiro_cli: Any, tmp_path: Path) -> None:
    project, other = tmp_path / "project", tmp_path / "other"
    (project / "src").mkdir(parents=True)
    other.mkdir()
    write_skill(project_skills(project), "house-style", "How this repo writes code", always=True,
                body="Always run make check.\n")
    write_skill(home.crew_home() / "skills", "pdf", "Fill PDF forms", body="Use pdftk.\n")
    write_skill(home.kiro_home() / "skills", "kiro-own", "kiro-cli lists this one itself")

    agent = _render(plugin_manager)
    assert any("skills context" in hook["command"] for hook in agent["hooks"]["agentSpawn"])

    inside, outside = _told(fake_kiro_cli, project / "src", other)
    assert "## Skill: house-style (always)\nAlways run make check." in inside
    assert "- pdf — Fill PDF forms" in inside and "Use pdftk." not in inside  # a summary, not the body
    assert "kiro-own" not in inside  # kiro-cli's own folders are kiro-cli's to list
    assert "house-style" not in outside and "- pdf — Fill PDF forms" in outside


def test_a_sessions_kiro_cli_finds_and_reads_a_project_skill_through_the_host(crew: CrewHarness,
                                                                            run_async: Any) -> None:
    write_skill(project_skills(crew.workspace), "release", "Cut a release of this project",
                body="1. Tag.\n2. Push the tag.\n")
    calls = [("skill_search", {"query": "release"}), ("skill_search", {"action": "read", "key": "release"}),
             ("skill_search", {"action": "read", "key": "../outside"})]
    script = "\n".join(f"!mcp kirocrew-core {tool} {json.dumps(args)}\n!result" for tool, args in calls)

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv:
            return await crew.delegate(conv, script + "\n!say done", name="skills")

    run = run_async(main())
    assert run["status"] == "completed"
    found, read, refused = run["reply"]["text"].split("result: ")[1:4]
    assert found.startswith("Skills matching 'release' (1; 1–1 shown):\n- `release` (project): Cut a release")
    assert read.startswith("# release (`release`, project)\nCut a release of this project\nLines 1–2 of 2:\n1. Tag.")
    assert "error[outside_scope]" in refused
