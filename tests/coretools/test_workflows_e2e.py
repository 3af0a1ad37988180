"""Workflows end to end: ``kirocrew workflow`` commands and a session's ``workflow_run`` through a real host.

The workflow process runs sandboxed (bubblewrap) and its agent calls are real sub-agents whose
kiro-cli is the fake, answering the prompts as scripts (``!say …``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.policy import write_policy
from kirocrew_testing.requirements import executable

FLOW = '''META = {"name": "fan-out", "wall_secs": 120}

async def workflow(ctx):
    ctx.log("hello " + ctx.args["who"])
    both = await ctx.parallel([ctx.agent("!say one", label="a", phase="fan"), ctx.agent("!say two", label="b")])
    counted = await ctx.agent('!say {"n": 3}', schema={"type": "object", "required": ["n"]})
    wrong = await ctx.agent('!say {"m": 3}', schema={"type": "object", "required": ["n"]})
    return {"both": both, "counted": counted, "wrong": wrong}
'''


@pytest.fixture
def kirocrew(crew: CrewHarness) -> Any:
    executable("bwrap", apt="bubblewrap")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(kirocrew_argv(*args), env=crew.env, cwd=crew.workspace, capture_output=True,
                              text=True, timeout=120, check=False)

    return run


def test_the_person_runs_a_workflow_whose_agents_are_real_sub_agents_and_follows_lists_and_cancels_runs(
        crew: CrewHarness, kirocrew: Any, tmp_path: Path, conversations_rows: Any) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text(FLOW)
    done = kirocrew("workflow", "run", str(flow), "--arg", "who=me", "--wait")
    assert done.returncode == 0, done.stderr
    run_id, result = done.stdout.splitlines()
    assert json.loads(result) == {"both": ["one", "two"], "counted": {"n": 3}, "wrong": None}
    shown = json.loads(kirocrew("workflow", "show", run_id, "--events", "100").stdout)
    assert shown["status"] == "finished" and shown["owner"] == "person" and shown["agent_calls"] == 4
    types = [e["type"] for e in shown["events"]]
    assert types[0] == "run_started" and types[-1] == "run_finished" and types.count("agent_finished") == 4
    assert {"log", "phase_started"} <= set(types)
    assert [e["data"].get("error") for e in shown["events"] if e["type"] == "agent_finished"].count(
        "schema_mismatch") == 1
    # each agent call was a sub-agent of nobody, released once it answered
    children = conversations_rows("SELECT parent_id, released_at FROM conversations WHERE spawn_batch IS NOT NULL")
    assert len(children) == 4 and all(parent is None and released for parent, released in children)

    # a rerun from index 2 replays the parallel pair and runs the two schema calls again
    rerun = kirocrew("workflow", "rerun", run_id, "--from", "2", "--wait")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout.splitlines()[1]) == json.loads(result)
    assert len(conversations_rows("SELECT id FROM conversations WHERE spawn_batch IS NOT NULL")) == 6

    # 10,000 agent calls stop at the run's agent ceiling, with where: ceiling, and --wait exits 1
    greedy = tmp_path / "greedy.py"
    greedy.write_text('META = {"name": "greedy"}\n\nasync def workflow(ctx):\n'
                      '    for i in range(10000):\n        await ctx.agent("!say " + str(i))\n')
    assert kirocrew("workflow", "save", str(greedy), "greedy").returncode == 0  # then run by its saved name
    stopped = kirocrew("workflow", "run", "greedy", "--budget", "2", "--wait")
    assert stopped.returncode == 1
    assert "ended failed (where: ceiling): agent call 3 passes the run's ceiling of 2" in stopped.stderr

    # an agent call that makes more tool calls than the script's ceiling per step ends the run there
    busy = tmp_path / "busy.py"
    busy.write_text('META = {"name": "busy", "tool_calls_per_step": 2}\n\nasync def workflow(ctx):\n'
                    '    return await ctx.agent("!tool t1\\n!tool t2\\n!tool t3\\n!say done", label="busy")\n')
    too_busy = kirocrew("workflow", "run", str(busy), "--wait")
    assert too_busy.returncode == 1
    assert "(where: ceiling): agent call busy made more than 2 tool calls in one step" in too_busy.stderr
    busy_run = json.loads(kirocrew("workflow", "show", too_busy.stdout.splitlines()[0]).stdout)
    progress = [e["data"]["tool_calls"] for e in busy_run["events"] if e["type"] == "agent_progress"]
    assert progress == [1, 2]  # shown at 1, 2, 4…; the third passed the ceiling

    # a run cancelled from another command ends cancelled, its agent stopped
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text('META = {"name": "sleeper"}\n\nasync def workflow(ctx):\n'
                       '    return await ctx.agent("!sleep 600")\n')
    started = kirocrew("workflow", "run", str(sleeper))
    assert started.returncode == 0, started.stderr
    sleeping = started.stdout.strip()
    cancelled = kirocrew("workflow", "cancel", sleeping)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"Run `{sleeping}`: cancelled"
    again = kirocrew("workflow", "cancel", sleeping)
    assert again.returncode != 0 and "workflow_not_cancellable" in again.stderr
    listed = kirocrew("workflow", "list").stdout
    assert f"`{sleeping}` sleeper → cancelled" in listed and f"`{run_id}` fan-out → finished" in listed

    # an agent call whose tool call waits on the owner: the run records approval_requested naming the call, the
    # tool and where to answer; the owner's answer there lets the call go on (the person's run has no session to
    # nudge, so its nudge is skipped)
    write_policy(rules=[{"decision": "ask", "tool": "deploy", "reason": "deploys are the owner's call"}])
    gated = tmp_path / "gated.py"
    gated.write_text('META = {"name": "gated"}\n\nasync def workflow(ctx):\n'
                     '    nudged = await ctx.nudge("look again")\n'
                     '    said = await ctx.agent("!tool deploy\\n!say deployed", label="ship", phase="release")\n'
                     '    return {"nudged": nudged, "said": said}\n')
    waiting_run = kirocrew("workflow", "run", str(gated)).stdout.strip()
    with crew.owner_http() as owner:
        asked = _event_of(owner, waiting_run, "approval_requested")
        assert {k: asked[k] for k in ("index", "label", "phase", "tool")} == {
            "index": 0, "label": "ship", "phase": "release", "tool": "deploy"}
        assert owner.get(f"/api/workflows/runs/{waiting_run}").json()["status"] == "running"
        answer = (f"/api/conversations/{asked['conversation_id']}/runs/{asked['conversation_run_id']}"
                  f"/permissions/{asked['permission_id']}")
        assert owner.post(answer, json={"decision": "allow_once"}).status_code == 200
        settled = _event_of(owner, waiting_run, "agent_progress", approval="settled")
        assert settled["permission_id"] == asked["permission_id"] and settled["index"] == 0
        _event_of(owner, waiting_run, "run_finished")
        gated_record = owner.get(f"/api/workflows/runs/{waiting_run}").json()
    assert gated_record["result"] == {"nudged": False, "said": "deployed"}
    logs = [e["data"] for e in gated_record["events"] if e["type"] == "log"]
    assert logs == [{"message": "nudge skipped: the person's run has no session to nudge", "nudge": "not armed"}]

    # a hostile script is refused before it runs, and nothing is stored
    hostile = tmp_path / "hostile.py"
    hostile.write_text('META = {}\nimport os\n\nasync def workflow(ctx):\n    return 1\n')
    refused = kirocrew("workflow", "run", str(hostile))
    assert refused.returncode != 0 and "workflow_import_forbidden" in refused.stderr
    assert "where: validate" in refused.stderr
    assert kirocrew("workflow", "save", str(hostile), "hostile").returncode != 0
    listed = kirocrew("workflow", "list").stdout
    assert listed.count("`wf_") == 6 and listed.startswith("Saved workflows: greedy\n")
    unknown = kirocrew("workflow", "show", "wf_0000000000000000")
    assert unknown.returncode != 0 and "workflow_run_not_found" in unknown.stderr

    # the Workflows page and its owner routes show the same runs; its cancel stops a running one
    again_sleeping = kirocrew("workflow", "run", str(sleeper)).stdout.strip()
    with crew.owner_http() as owner:
        page = owner.get("/workflows")
        assert page.status_code == 200 and f"<code>{run_id}</code>" in page.text and "where: ceiling" in page.text
        assert 'data-do="cancel" aria-label="Cancel ' + again_sleeping in page.text
        assert "<li><code>greedy</code></li>" in page.text
        listed_api = owner.get("/api/workflows/runs").json()
        assert [r["run_id"] for r in listed_api["runs"]].count(run_id) == 1 and listed_api["saved"] == ["greedy"]
        assert owner.get(f"/api/workflows/runs/{run_id}").json()["result"] == json.loads(result)
        assert owner.post(f"/api/workflows/runs/{run_id}/cancel").status_code == 409
        assert owner.post("/api/workflows/runs/wf_0000000000000000/cancel").status_code == 404
        shown_api = owner.get(f"/api/workflows/runs/{run_id}").json()
        assert shown_api["event_count"] == len(shown_api["events"]) and "source" not in shown_api
        later = owner.get(f"/api/workflows/runs/{run_id}?since=3").json()["events"]
        assert [e["seq"] for e in later] == list(range(4, shown_api["event_count"] + 1))
        busy = owner.post(f"/api/workflows/runs/{again_sleeping}/rerun", json={"from_index": 0})
        assert (busy.status_code, busy.json()["code"]) == (409, "workflow_not_rerunnable")
        assert owner.post(f"/api/workflows/runs/{again_sleeping}/cancel").json() == {"cancelled": again_sleeping}
        assert owner.get(f"/api/workflows/runs/{again_sleeping}").json()["status"] == "cancelled"


def _event_of(owner: Any, run_id: str, kind: str, **having: Any) -> dict[str, Any]:
    """The data of the run's first ``kind`` event (with the fields ``having``), once it has one (asked of the
    owner's route, as the page does)."""
    for _ in range(1200):
        events = owner.get(f"/api/workflows/runs/{run_id}").json()["events"]
        found = [e["data"] for e in events
                 if e["type"] == kind and all(e["data"].get(k) == v for k, v in having.items())]
        if found:
            return dict(found[0])
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never recorded {kind}: {[e['type'] for e in events]}")


def _mcp(tool: str, **args: Any) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}"


def test_only_the_owner_saves_a_workflow_and_a_saved_name_is_never_overwritten_unasked(
        crew: CrewHarness, kirocrew: Any, tmp_path: Path, run_async: Any) -> None:
    flow = tmp_path / "flow.py"
    flow.write_text(FLOW)
    assert kirocrew("workflow", "save", str(flow), "fan").returncode == 0
    again = kirocrew("workflow", "save", str(flow), "fan")
    assert again.returncode != 0 and "workflow_exists" in again.stderr
    assert kirocrew("workflow", "save", str(flow), "fan", "--replace").returncode == 0
    bad_name = kirocrew("workflow", "save", str(flow), "../x")
    assert bad_name.returncode != 0 and "invalid_arguments" in bad_name.stderr
    from kirocrew_conversations.workflow_library import library_dir

    saved = library_dir()  # this test's crew home, the host's too
    assert [p.name for p in saved.iterdir()] == ["fan.py"] and (saved / "fan.py").read_text() == FLOW
    assert saved.stat().st_mode & 0o777 == 0o700 and (saved / "fan.py").stat().st_mode & 0o777 == 0o600

    # an authored script is checked, kept as a 0600 draft and handed over: never run
    script = r'META = {"name": "drafted"}\n\nasync def workflow(ctx):\n    return await ctx.agent("!say hi")\n'
    drafted = kirocrew("workflow", "author", "!say ```python\\n" + script + "```", "--output",
                       str(tmp_path / "drafted.py"))
    assert drafted.returncode == 0, drafted.stderr
    assert drafted.stdout.startswith("Authored workflow (draft `draft_")
    expected = script.replace("\\n", "\n")
    assert (tmp_path / "drafted.py").read_text() == expected
    [draft] = list((saved.parent / "drafts").iterdir())
    assert draft.read_text() == expected and draft.stat().st_mode & 0o777 == 0o600
    assert "No workflow runs yet." in kirocrew("workflow", "list").stdout
    hostile = kirocrew("workflow", "author", "!say ```python\\nimport os\\n```")
    assert hostile.returncode != 0 and "workflow_import_forbidden" in hostile.stderr
    assert "where: author" in hostile.stderr
    assert len(list((saved.parent / "drafts").iterdir())) == 1

    async def main() -> str:
        async with crew.conversations() as conv:
            session = await crew.delegate(conv, "\n".join([_mcp("workflow_save", name="mine", source=FLOW),
                                                            "!result"]), name="saver")
            return str(session["reply"]["text"])

    assert "owner_only" in run_async(main())
    assert not (saved / "mine.py").exists()


def test_a_session_runs_a_saved_workflow_gets_its_result_as_a_message_and_only_it_sees_the_run(
        crew: CrewHarness, kirocrew: Any, tmp_path: Path, run_async: Any, conversations_rows: Any) -> None:
    crew.env["KIROCREW_MONITOR_INTERVAL_SECS"] = "0.2"  # the host's monitor loops wait this long
    script = tmp_path / "mine.py"
    script.write_text('META = {"name": "mine"}\n\nasync def workflow(ctx):\n'
                      '    armed = await ctx.nudge("check the run again", idle_secs=15, max_cycles=1)\n'
                      '    return [armed, await ctx.agent("!say from a child")]\n')
    assert kirocrew("workflow", "save", str(script), "mine").returncode == 0

    async def main() -> tuple[dict[str, Any], list[str], str, str]:
        async with crew.conversations() as conv:
            parent = await crew.delegate(conv, _mcp("workflow_run", workflow="mine") + "\n!result", name="owner")
            run_id = parent["reply"]["text"].split("`")[1]
            other = await crew.delegate(conv, "\n".join([_mcp("workflow_show", run_id=run_id), "!result"]),
                                        name="other")
            listed = await crew.delegate(conv, _mcp("workflow_list") + "\n!result", name="third")
            for _ in range(600):
                rows = conversations_rows("SELECT reply_text, status FROM runs WHERE conversation_id = ? AND seq > 1",
                                          parent["conversationId"])
                if len(rows) == 2 and all(status not in ("queued", "running") for _, status in rows):
                    replies = sorted(str(text) for text, _ in rows)
                    return parent, replies, other["reply"]["text"], listed["reply"]["text"]
                await asyncio.sleep(0.1)
            raise AssertionError("the workflow's result and its nudge never both reached its session")

    parent, (announced, nudged), other, listed = run_async(main())  # sorted: "[kirocrew…" < "[monitor…"
    assert parent["status"] == "completed", parent
    assert "[kirocrew workflow] Run wf_" in announced and "ended finished" in announced
    assert '[true, "from a child"]' in announced
    # ctx.nudge armed the session's own monitor loop, which queued its message once the session was idle
    assert nudged == "[monitor cycle 1/1] check the run again"
    [(directive,)] = conversations_rows("SELECT payload_json FROM events WHERE conversation_id = ? "
                                        "AND kind = 'directive'", parent["conversationId"])
    assert json.loads(directive)["directive"] == "monitor_start" and json.loads(directive)["outcome"] == "applied"
    # the child was the session's own sub-agent
    [(child_parent,)] = conversations_rows("SELECT parent_id FROM conversations WHERE spawn_batch IS NOT NULL")
    assert child_parent == parent["conversationId"]
    # another session neither sees nor lists it; the person sees it with its owner
    assert "workflow_run_not_found" in other, other
    assert listed.strip() == "result: Saved workflows: mine\nNo workflow runs yet."
    assert f"owner=conversation:{parent['conversationId']}" in kirocrew("workflow", "list").stdout
