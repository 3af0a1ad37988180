"""``select_crew`` and ``route_crew``: how a session learns which crew to hand work to.

Both only read the owner's ``config.toml`` and depend on nobody's identity (``none``), so they
run for any caller; the spawn itself (``spawn_run(crew=NAME)``, kirocrew-conversations) is where
the caller's session and its limits are checked. Results are JSON a model reads: the roster or
one binding, and the ranking with the call to make. A broken config file is the call's error
(``config_invalid``), never an empty roster that would hide it.
"""

from __future__ import annotations

import json
from typing import Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.crews.bindings import all_crews, find_crew
from kirocrew_core.crews.routing import rank
from kirocrew_core.home import RENDERED_AGENT

CREW_ARG_MAX_CHARS = 500
TASK_MAX_CHARS = 5000
ROSTER_GUIDANCE = ("Pick the crew whose triggers fit the task and run it with spawn_run(crew=<name>, task=...), "
                   "not agent=: the crew brings its own agent, model, workspace and authority. route_crew(task) "
                   "ranks the crews for a task. For work no crew fits, spawn_run(task=...) runs on your own agent.")
NO_MATCH_GUIDANCE = ("No crew's triggers match this task: run it with spawn_run(task=...) on your own agent, or "
                     "call select_crew() to read the roster.")

SELECT_CREW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "crew": {"type": "string", "maxLength": CREW_ARG_MAX_CHARS, "default": "",
                 "description": "A crew's name for its binding; leave out (or empty) for the roster."},
    },
    "additionalProperties": False,
}
ROUTE_CREW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 1, "maxLength": TASK_MAX_CHARS,
                 "description": "The task, in the words you would give the sub-agent."},
    },
    "required": ["task"],
    "additionalProperties": False,
}


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def select_crew(args: dict[str, Any], call: Any) -> str:
    name = args.get("crew", "")
    if not name:
        roster = [{"name": crew.name, "triggers": list(crew.triggers)} for crew in all_crews() if crew.triggers]
        return _json({"default_agent": RENDERED_AGENT, "crews": roster, "guidance": ROSTER_GUIDANCE})
    crew = find_crew(name)
    return _json({"crew": crew.name, "bound": crew.bound(),
                  "run": f"spawn_run(crew={json.dumps(crew.name)}, task=...)"})


def route_crew(args: dict[str, Any], call: Any) -> str:
    ranked = rank(args["task"], all_crews())
    if not ranked:
        return _json({"ranked": [], "tool": "spawn_run", "arguments": {}, "guidance": NO_MATCH_GUIDANCE})
    best = ranked[0].crew.name
    return _json({
        "ranked": [{"crew": r.crew.name, "score": r.score, "matched": list(r.matched)} for r in ranked],
        "tool": "spawn_run",
        "arguments": {"crew": best},
        "guidance": f"Run the task with spawn_run(crew={json.dumps(best)}, task=...)"
                    + (" (ties are broken by name)" if len(ranked) > 1 and ranked[1].score == ranked[0].score
                       else "") + ".",
    })


def crew_tools() -> list[CoreMcpTool]:
    return [
        CoreMcpTool(
            "select_crew",
            "The crews the owner configured. Without crew: the roster (each crew's name and the words that "
            "route work to it) and the default agent. With crew: that crew's binding (Kiro agent, workspace, "
            "model, authority; null means yours). Run a crew with spawn_run(crew=<name>), NOT agent=<name>.",
            SELECT_CREW_SCHEMA, select_crew, read_only=True, identity="none"),
        CoreMcpTool(
            "route_crew",
            "Rank the configured crews for a task by their triggers (whole words or phrases, case-insensitive; "
            "a phrase scores its word count; ties by name) and say which spawn_run call to make. Crews whose "
            "triggers the task does not name are left out.",
            ROUTE_CREW_SCHEMA, route_crew, read_only=True, identity="none"),
    ]
