"""Jobs firing in a real host: a session's jobs run as conversation runs through the fake kiro-cli.

One host (started by the first relay, as a kiro-cli session's would be) serves the whole
story: a session adds jobs with ``!mcp kirocrew-cron cron_add``, a one-shot fires by itself,
the session triggers another (its run is in the conversations store and linked from history,
its result in the notification feed), a hung job is timed out; then the host is stopped, the
store is set back as an hour of downtime would leave it, and the next host start applies the
catch-up policy.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_e2e import SESSION_AGENT, cron_harness, eventually, person

BOUND_SECS = 150.0
JOB_AGENT = "plain"


@pytest.fixture
def crew(fake_kiro_cli: Any, tmp_path: Path) -> CrewHarness:
    """The harness, and a lean agent for the jobs' runs (``plain``: no server at all)."""
    harness = cron_harness(fake_kiro_cli, tmp_path)
    document = harness.render_agent()
    assert "kirocrew-cron" in document["mcpServers"]
    harness.write_agent(JOB_AGENT, {**document, "name": JOB_AGENT, "mcpServers": {}})
    return harness


def _add(**args: Any) -> str:
    return f"!mcp kirocrew-cron cron_add {json.dumps({**args, 'agent': JOB_AGENT})}"


def _cron_rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
    from kirocrew_core import home

    db = sqlite3.connect(home.state_dir("cron") / "cron.db")
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


REPORT = {"name": "Weekly report", "content": "# This week", "slug": "weekly-report"}


def test_an_agent_job_that_names_no_agent_runs_as_the_kirocrew_agent_and_what_it_saves_is_crons(
        cron_crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    async def main() -> str:
        async with person(cron_crew) as owner:
            message = f"!mcp kirocrew-core artifact_save {json.dumps(REPORT)}\n!settings"
            added, code = await owner.call("cron_add", name="plain", message=message, every=3600,
                                           cwd=str(cron_crew.workspace), json=True)
            assert code is None, added
            job = json.loads(added)
            assert job["agent"] == "", job
            _, code = await owner.call("cron_trigger", job_id=job["id"])
            assert code is None
            return str(job["id"])

    job_id = run_async(main())
    [(mode, reply)] = run_async(eventually("the job's run", lambda: conversations_rows(
        "SELECT r.mode, r.reply_text FROM runs r JOIN conversations c ON c.id = r.conversation_id"
        " WHERE c.name = ? AND r.status = 'completed'", f"cron-{job_id}")))
    assert mode == "kirocrew" and "settings: model=" in reply and " mode=kirocrew " in reply
    assert conversations_rows("SELECT created_by FROM conversations WHERE name = ?", f"cron-{job_id}") == [(None,)]
    # The job's report is recorded as cron's, decided from the verified caller (the job's conversation).
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    [(conversation_id,)] = conversations_rows("SELECT id FROM conversations WHERE name = ?", f"cron-{job_id}")
    meta, content = store.get(REPORT["slug"], OWNER)
    assert (meta["source"], meta["conversation"], content) == ("cron", conversation_id, REPORT["content"])


def test_a_sessions_jobs_fire_as_conversation_runs_time_out_and_catch_up_after_a_restart(
        crew: CrewHarness, conversations_rows: Any) -> None:
    from kirocrew_core.notifications.store import all_notifications

    async def main() -> None:
        async with crew.conversations() as conv:
            added = await crew.delegate(conv, "\n".join([
                _add(name="greet", message="!say hello from cron", delay=1),
                _add(name="daily", message="!say daily report", every=3600),
                _add(name="hang", message="!sleep 60", every=3600, timeout_secs=2),
                "!say added"]), name="scheduler", mode=SESSION_AGENT)
            assert added["status"] == "completed", added
            owner = f"conversation:{added['conversationId']}"
            ids = dict(_cron_rows("SELECT name, id FROM jobs WHERE owner = ?", owner))
            assert set(ids) == {"greet", "daily", "hang"}

            # the one-shot fires by itself, as a run of its own conversation, then it is gone
            greet = await eventually("the one-shot's run", lambda: conversations_rows(
                "SELECT c.workspace_path, r.status, r.reply_text, c.created_by FROM conversations c JOIN runs r"
                " ON r.conversation_id = c.id WHERE c.name = ? AND r.status = 'completed'", f"cron-{ids['greet']}"))
            # (its conversation is in the session's tree: the session may follow it with the conversations tools)
            assert greet == [(str(crew.workspace.resolve()), "completed", "hello from cron", added["conversationId"])]
            await eventually("the one-shot's removal", lambda: not _cron_rows("SELECT 1 FROM jobs WHERE id = ?",
                                                                          ids["greet"]))

            # the session triggers its two others from its own conversation
            sent = await conv.structured("kiro_send", conversationId=added["conversationId"], delivery="queue",
                                         message="\n".join(f"!mcp kirocrew-cron cron_trigger "
                                                           f"{json.dumps({'job_id': ids[name]})}"
                                                           for name in ("daily", "hang")) + "\n!say triggered")
            assert (await crew.wait(conv, sent))["status"] == "completed"

            daily = await eventually("the daily job's run", lambda: _cron_rows(
                "SELECT trigger, status, conversation_id, run_id, summary FROM history WHERE job_id = ?"
                " AND status != 'running'", ids["daily"]))
            [(trigger, status, conversation_id, run_id, summary)] = daily
            assert (trigger, status, summary) == ("manual", "success", "daily report")
            assert conversations_rows("SELECT c.name, r.reply_text FROM runs r JOIN conversations c"
                                      " ON c.id = r.conversation_id WHERE r.id = ?", run_id) == [
                (f"cron-{ids['daily']}", "daily report")]
            # The history row ends first; the job's last result, then its notification, follow it.
            await eventually("the daily job's last result", lambda: _cron_rows(
                "SELECT conversation_id, last_result FROM jobs WHERE id = ?", ids["daily"]) == [
                (conversation_id, "daily report")])
            [note] = await eventually("the daily job's notification", lambda: [
                n for n in all_notifications() if n.group_key == f"cron:{ids['daily']}"])
            assert note.title == "Cron: daily" and note.body == "daily report"
            assert note.url == f"/conversations/{conversation_id}#run-{run_id}-heading"

            hung = await eventually("the hung job's timeout", lambda: _cron_rows(
                "SELECT status, error, run_id FROM history WHERE job_id = ? AND status != 'running'", ids["hang"]))
            [(status, error, hung_run)] = hung
            assert (status, error) == ("timeout", "Timed out after 2s")
            assert conversations_rows("SELECT status FROM runs WHERE id = ?", hung_run) == [("cancelled",)]

        # the host stops; the store is set back as an hour of downtime would leave it
        stopped = subprocess.run(kirocrew_argv("host", "stop"), env=crew.env, capture_output=True, text=True,
                                 timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        [(created,)] = _cron_rows("SELECT created_ts FROM jobs WHERE id = ?", ids["daily"])
        db = sqlite3.connect(_cron_db())
        with db:
            db.execute("UPDATE jobs SET last_due_ts = ? WHERE id = ?", (created - 3 * 3600, ids["daily"]))
        db.close()

        async with crew.conversations() as conv:  # a relay starts the next host; it catches up at start
            def caught_up() -> list[tuple[Any, ...]]:
                rows = _cron_rows("SELECT trigger, status, missed FROM history WHERE job_id = ?"
                                  " AND trigger = 'catch-up' ORDER BY id", ids["daily"])
                return rows if len(rows) == 2 and rows[1][1] != "running" else []

            rows = await eventually("the catch-up", caught_up)
            assert rows == [("catch-up", "missed", 2), ("catch-up", "success", 0)]  # policy "once"
            assert {name for (name,) in _cron_rows("SELECT name FROM jobs")} == {"daily", "hang"}
            await conv.tool_names()

    asyncio.run(asyncio.wait_for(main(), BOUND_SECS))


def _cron_db() -> Path:
    from kirocrew_core import home

    return home.state_dir("cron") / "cron.db"

