"""A session's command job runs under that session's authority: a real host, the fake kiro-cli, real sandboxes.

Never more than its conversation's authority, read when the job fires (the person may have narrowed
the conversation since the job was made), and never the person's identity: a ``kirocrew`` command
the job runs acts for the session, which sees only its own jobs.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.requirements import executable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_e2e import SESSION_AGENT, cron_line, person

BOUND_SECS = 150.0


@pytest.fixture
def crew(cron_crew: CrewHarness) -> CrewHarness:
    return cron_crew


def _history(job_id: str) -> list[tuple[str, str]]:
    from kirocrew_core import home
    from kirocrew_testing.browser import sqlite_rows

    return sqlite_rows(home.state_dir("cron") / "cron.db",
                       "SELECT status, error FROM history WHERE job_id = ? AND status != 'running' ORDER BY id",
                       job_id)


async def _ended(job_id: str) -> tuple[str, str]:
    for _ in range(int(BOUND_SECS * 10)):
        rows = _history(job_id)
        if rows:
            return rows[-1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} never ended a run")


async def _jobs(owner: Any) -> dict[str, dict[str, Any]]:
    listed, code = await owner.call("cron_list", json=True)
    assert code is None, listed
    return {job["name"]: job for job in json.loads(listed)["jobs"]}


def test_a_sessions_command_job_runs_sandboxed_once_the_person_made_its_conversation_read_only(
        crew: CrewHarness) -> None:
    executable("bwrap", apt="bubblewrap")  # read_only runs in its sandbox
    command = "touch made-by-cron && grep -rh . $HOME/.kiro/*/gateway.t*"

    async def main() -> tuple[dict[str, Any], tuple[str, str]]:
        async with crew.conversations() as conv:
            made = await crew.delegate(conv, cron_line("cron_add", name="writer", command=command, every=3600)
                                       + "\n!say scheduled", name="narrowed", mode=SESSION_AGENT)
            assert made["status"] == "completed", made
            # The person no longer trusts the conversation: read-only from now on, its jobs included.
            await conv.structured("kiro_configure", conversationId=made["conversationId"], authority="read_only")
            async with person(crew) as owner:
                job = (await _jobs(owner))["writer"]
                _, code = await owner.call("cron_trigger", job_id=job["id"])
                assert code is None
                return job, await _ended(job["id"])

    job, (status, error) = asyncio.run(asyncio.wait_for(main(), BOUND_SECS))
    assert job["authority"] == "unrestricted"  # what the conversation had when the job was made
    assert status == "failure" and error.startswith("exit status 1: touch: ")  # the workspace is read-only there
    assert not (crew.workspace / "made-by-cron").exists()


def test_a_sessions_command_job_acts_as_its_session_never_as_the_person(crew: CrewHarness) -> None:
    kirocrew = shlex.join(kirocrew_argv("cron", "pause"))

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv, person(crew) as owner:
            mine, code = await owner.call("cron_add", name="the person's", command="echo mine", every=3600,
                                          cwd=str(crew.workspace), json=True)
            assert code is None, mine
            made = await crew.delegate(conv, cron_line("cron_add", name="own", command="echo own", every=3600)
                                       + "\n!say scheduled", name="attacker", mode=SESSION_AGENT)
            jobs = await _jobs(owner)
            # The session learnt both ids (say, from a log): its jobs try to pause each.
            sent = await conv.structured("kiro_send", conversationId=made["conversationId"], delivery="queue",
                                         message="\n".join([
                                             cron_line("cron_add", name="pause-person", every=3600,
                                                       command=f"{kirocrew} {json.loads(mine)['id']}"),
                                             cron_line("cron_add", name="pause-own", every=3600,
                                                       command=f"{kirocrew} {jobs['own']['id']}"),
                                             "!say added"]))
            assert (await crew.wait(conv, sent))["status"] == "completed"
            jobs = await _jobs(owner)
            for name in ("pause-person", "pause-own"):
                _, code = await owner.call("cron_trigger", job_id=jobs[name]["id"])
                assert code is None
                jobs[name]["ended"] = await _ended(jobs[name]["id"])
            return {**jobs, **{f"{name} after": job for name, job in (await _jobs(owner)).items()}}

    jobs = asyncio.run(asyncio.wait_for(main(), BOUND_SECS))
    # Its own job: paused, as the session may. The person's: not found, as for any session.
    assert jobs["pause-own"]["ended"][0] == "success" and jobs["own after"]["user_paused"] is True
    status, error = jobs["pause-person"]["ended"]
    assert status == "failure" and "job not found" in error, error
    assert jobs["the person's after"]["user_paused"] is False


def test_the_persons_command_job_acts_as_the_person(crew: CrewHarness) -> None:
    """The host vouches for the command of a job the person made: a ``kirocrew`` command it runs is the person's."""
    pause = shlex.join(kirocrew_argv("cron", "pause"))

    async def main() -> tuple[tuple[str, str], dict[str, Any]]:
        async with person(crew) as owner:
            target, code = await owner.call("cron_add", name="target", command="echo target", every=3600,
                                            cwd=str(crew.workspace), json=True)
            assert code is None, target
            pauser, code = await owner.call("cron_add", name="pauser", every=3600, cwd=str(crew.workspace),
                                            command=f"{pause} {json.loads(target)['id']}", json=True)
            assert code is None, pauser
            _, code = await owner.call("cron_trigger", job_id=json.loads(pauser)["id"])
            assert code is None
            return await _ended(json.loads(pauser)["id"]), await _jobs(owner)

    (status, error), jobs = asyncio.run(asyncio.wait_for(main(), BOUND_SECS))
    assert status == "success", error
    assert jobs["target"]["user_paused"] is True
