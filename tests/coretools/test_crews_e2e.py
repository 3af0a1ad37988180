"""Crews end to end: a conversation's kiro-cli reads the crews, routes a task and spawns on a crew through the
relay and the host; ``resource_status`` counts that session's own kiro-cli; the person does the same with
``kirocrew spawn run --crew``. (The binding's rules on a real service: test_subagents_handlers.py.)
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from typing import Any

from kirocrew_core.crews.bindings import Crew, add_crew

from kirocrew_conversations.limits import SUBAGENTS_DEFAULT
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv

HAIKU = "claude-haiku-4.5"


def _mcp(tool: str, **args: Any) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}"


def _results(reply: str) -> list[str]:
    """The texts ``!result`` replied, in order (a result's own lines never start with ``result: ``)."""
    return [part.rstrip("\n") for part in re.split(r"^result: ", reply, flags=re.MULTILINE) if part.strip()]


def test_a_session_routes_a_task_to_a_crew_and_spawns_on_it_and_the_person_does_from_the_cli(
        crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    add_crew(Crew("writer", model=HAIKU, triggers=("docs", "write up")))
    add_crew(Crew("reviewer", triggers=("code review", "diff")))
    add_crew(Crew("here", workspace=str(crew.workspace)))  # no triggers: selected by name only
    script = "\n".join([
        _mcp("select_crew"), "!result",
        _mcp("select_crew", crew="here"), "!result",
        _mcp("route_crew", task="Write up the docs for the diff"), "!result",
        _mcp("resource_status"), "!result",
        _mcp("spawn_run", task="!settings", crew="writer"), "!result",
        _mcp("spawn_run", task="x", crew="writer", agent="kirocrew"), "!result",
        _mcp("spawn_run", task="x", crew="nobody"), "!result"])

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv:
            parent = await crew.delegate(conv, script, name="router")
            for _ in range(600):  # the crew child's own run
                rows = conversations_rows("SELECT r.status, r.reply_text, r.model FROM conversations c JOIN runs r "
                                          "ON r.conversation_id = c.id WHERE c.parent_id = ?",
                                          parent["conversationId"])
                if rows and rows[0][0] not in ("queued", "running"):
                    return {"parent": parent, "child": rows[0]}
                await asyncio.sleep(0.1)
            raise AssertionError("the crew's child did not finish")

    out = run_async(main())
    parent = out["parent"]
    assert parent["status"] == "completed", parent
    roster, here, routed, status, spawned, both, unknown = _results(parent["reply"]["text"])
    assert json.loads(roster)["crews"] == [{"name": "reviewer", "triggers": ["code review", "diff"]},
                                           {"name": "writer", "triggers": ["docs", "write up"]}]
    assert json.loads(here)["bound"] == {"kiro_agent": None, "workspace": str(crew.workspace), "model": None,
                                         "authority": None}
    ranked = json.loads(routed)
    assert ranked["ranked"] == [{"crew": "writer", "score": 3, "matched": ["docs", "write up"]},
                                {"crew": "reviewer", "score": 1, "matched": ["diff"]}]
    assert ranked["arguments"] == {"crew": "writer"}
    workers = re.search(r"^  kiro-cli workers \(conversations\): (\d+) running of at most \d+, (\d+) runs? in "
                        r"progress, \d+ (?:MiB|GiB) resident$", status, re.MULTILINE)
    assert workers and int(workers[1]) >= 1 and int(workers[2]) >= 1, status  # this session's own kiro-cli
    assert f"\n  Concurrent sub-agent cap: {SUBAGENTS_DEFAULT}\nGuidance (" in status
    assert spawned.startswith("Spawned 1 sub-agent(s).") and "(kirocrew, crew writer): !settings" in spawned
    assert both.startswith("error[crew_and_agent]: ")
    assert unknown.startswith("error[unknown_crew]: ") and "available crews: here, reviewer, writer" in unknown
    assert out["child"] == ("completed", f"settings: model={HAIKU} mode=kirocrew effort=none", HAIKU)

    def kirocrew(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(kirocrew_argv(*args), env=crew.env, cwd=crew.root, capture_output=True, text=True,
                              timeout=120, check=False)

    from_cli = kirocrew("spawn", "run", "--crew", "here", "!say from the cli")  # no --cwd: the crew's workspace
    assert from_cli.returncode == 0 and "(kirocrew, crew here): !say from the cli" in from_cli.stdout, from_cli.stderr
    [(workspace,)] = conversations_rows("SELECT workspace_path FROM conversations WHERE parent_id IS NULL "
                                        "AND spawn_batch IS NOT NULL")
    assert workspace == str(crew.workspace.resolve())
    refused = kirocrew("spawn", "run", "--crew", "writer", "--agent", "kirocrew", "x")
    assert refused.returncode != 0 and "error[crew_and_agent]" in refused.stderr
