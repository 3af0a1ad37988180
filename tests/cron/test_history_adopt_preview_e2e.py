"""``kirocrew cron history``, ``adopt`` and ``preview`` through the real CLI against a real host.

The commands are not kirocrew-cron tools: they go to the host's ``kirocrew-cron-admin`` server,
which knows who calls. The person runs them from the test (a process that descends from no
session); a session runs them from its shell as a command job of its own (a process that
descends from its kiro-cli's session key), which is how a session reaches ``kirocrew`` at all.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv, run_kirocrew
from kirocrew_testing.requirements import executable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_e2e import SESSION_AGENT, cron_line, eventually, person

BOUND_SECS = 150.0


@pytest.fixture
def crew(cron_crew: CrewHarness) -> CrewHarness:
    return cron_crew


def _cli(crew: CrewHarness, *args: str) -> subprocess.CompletedProcess[str]:
    """``kirocrew cron ARGS`` as the person (the test process descends from no session)."""
    return run_kirocrew("cron", *args, env=crew.env, timeout=120)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def _rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
    from kirocrew_core import home
    from kirocrew_testing.browser import sqlite_rows

    return sqlite_rows(home.state_dir("cron") / "cron.db", sql, *params)


def _ended(job_id: str) -> Any:
    """The job's last finished history row, ``(status, summary, error)``, once there is one."""
    def found() -> Any:
        rows = _rows("SELECT status, summary, error FROM history WHERE job_id = ? AND status != 'running' "
                     "ORDER BY id DESC LIMIT 1", job_id)
        return rows[0] if rows else None

    return eventually(f"a run of {job_id} ended", found, BOUND_SECS)


async def _session_runs(crew: CrewHarness, owner: Any, conv: Any, conversation_id: str,
                        commands: dict[str, str]) -> dict[str, tuple[str, str, str]]:
    """Each command run once from the session's shell (a command job of the session, triggered by the person):
    its run's ``(status, summary, error)`` by name."""
    sent = await conv.structured("kiro_send", conversationId=conversation_id, delivery="queue", message="\n".join(
        [cron_line("cron_add", name=name, command=command, every=3600) for name, command in commands.items()]
        + ["!say added"]))
    assert (await crew.wait(conv, sent))["status"] == "completed"
    listed, code = await owner.call("cron_list", json=True)
    assert code is None, listed
    ids = {job["name"]: job["id"] for job in json.loads(listed)["jobs"]}
    ended = {}
    for name in commands:
        _, code = await owner.call("cron_trigger", job_id=ids[name])
        assert code is None
        ended[name] = await _ended(ids[name])
    return ended


def test_a_one_shots_history_outlives_it_for_its_owner_only(crew: CrewHarness) -> None:
    added = json.loads(_ok(_cli(crew, "add", "once", "--command", "echo done-once", "--delay", "1", "--json")))
    gone_id = added["id"]

    async def main() -> dict[str, tuple[str, str, str]]:
        await eventually("the one-shot ran and removed itself",
                         lambda: not _rows("SELECT 1 FROM jobs WHERE id = ?", gone_id), BOUND_SECS)
        async with crew.conversations() as conv, person(crew) as owner:
            made = await crew.delegate(conv, cron_line("cron_add", name="own-once", command="echo own", delay=1)
                                       + "\n!say scheduled", name="scheduler", mode=SESSION_AGENT)
            assert made["status"] == "completed", made
            own_id = await eventually("the session's one-shot", lambda: _rows(
                "SELECT job_id FROM history WHERE status = 'success' AND summary = 'own'"), BOUND_SECS)
            own_id = own_id[0][0]
            await eventually("the session's one-shot removed itself",
                             lambda: not _rows("SELECT 1 FROM jobs WHERE id = ?", own_id), BOUND_SECS)
            history = shlex.join(kirocrew_argv("cron", "history", "--json"))
            ended = await _session_runs(crew, owner, conv, made["conversationId"], {
                "read-own": f"{history} {own_id}", "read-persons": f"{history} {gone_id}"})
            return {**ended, "own id": (own_id, "", "")}

    ended = asyncio.run(asyncio.wait_for(main(), BOUND_SECS * 2))

    text = _ok(_cli(crew, "history", gone_id))
    assert text.splitlines()[0].startswith(f"once ({gone_id}) ran once and removed itself at ")
    assert text.splitlines()[1] == f"1 run(s) of once ({gone_id}), newest first:"
    assert "scheduled  success in " in text and "    done-once" in text
    document = json.loads(_ok(_cli(crew, "history", gone_id, "--json")))
    assert document["removed_at"] is not None and [r["summary"] for r in document["runs"]] == ["done-once"]
    # The person reads any removed job's history; the session its own, never the person's.
    assert json.loads(_ok(_cli(crew, "history", ended["own id"][0], "--json")))["name"] == "own-once"
    status, summary, _ = ended["read-own"]
    assert status == "success" and '"name": "own-once"' in summary
    status, _, error = ended["read-persons"]
    assert status == "failure" and f"error[job_not_found]: job not found: {gone_id}" in error, error
    unknown = _cli(crew, "history", "abcdef12")
    assert (unknown.returncode, unknown.stderr.strip()) == (1, "kirocrew: error[job_not_found]: job not found: "
                                                               "abcdef12")


def test_adopt_gives_a_job_to_a_conversations_session_narrowed_and_capped_and_release_returns_it(
        crew: CrewHarness) -> None:
    executable("bwrap", apt="bubblewrap")  # the adopting conversation is made read_only, which runs sandboxed
    job = json.loads(_ok(_cli(crew, "add", "nightly", "--command", "echo nightly", "--every", "3600",
                              "--cwd", str(crew.root), "--json")))

    async def main() -> tuple[str, dict[str, tuple[str, str, str]]]:
        async with crew.conversations() as conv, person(crew) as owner:
            made = await crew.delegate(conv, "!say ready", name="adopter", mode=SESSION_AGENT)
            cid = made["conversationId"]
            ended = await _session_runs(crew, owner, conv, cid, {
                "adopt-back": shlex.join(kirocrew_argv("cron", "adopt", job["id"], "--release")),
                "preview-it": shlex.join(kirocrew_argv("cron", "preview", "--command", "echo hi"))})
            # The person narrows the conversation: a job it adopts from now on is narrowed with it.
            await conv.structured("kiro_configure", conversationId=cid, authority="read_only")
            return cid, ended

    cid, ended = asyncio.run(asyncio.wait_for(main(), BOUND_SECS))
    for name in ("adopt-back", "preview-it"):  # from a session's shell, the person's commands are refused
        status, _, error = ended[name]
        assert status == "failure" and "error[person_only_command]" in error, (name, error)

    missing = _cli(crew, "adopt", job["id"], "--session-of", "conv_doesnotexist")
    assert missing.returncode == 1 and "error[conversation_not_found]" in missing.stderr
    both = _cli(crew, "adopt", job["id"], "--session-of", cid, "--release")
    assert both.returncode == 2 and "exactly one of --session-of" in both.stderr
    assert _rows("SELECT owner, authority FROM jobs WHERE id = ?", job["id"]) == [("", "unrestricted")]

    adopted = _ok(_cli(crew, "adopt", job["id"], "--session-of", cid))
    assert adopted.startswith(f"Adopted job: {job['id']} (nightly): now owned by conversation:{cid}, authority "
                              "read_only, working in ")
    assert _rows("SELECT owner, authority, workspace FROM jobs WHERE id = ?", job["id"]) == [
        (f"conversation:{cid}", "read_only", str(crew.workspace))]
    listed = _ok(_cli(crew, "list"))
    assert f"owner=conversation:{cid}" in listed

    released = _ok(_cli(crew, "adopt", job["id"], "--release"))
    assert released == f"Released job: {job['id']} (nightly): it is yours again\n"
    assert _rows("SELECT owner, authority FROM jobs WHERE id = ?", job["id"]) == [("", "read_only")]

    # A session at its cap takes no adopted job: the count and the change are one transaction.
    from kirocrew_cron.model import MAX_JOBS_PER_SESSION
    from kirocrew_cron.store import CronStore

    owned = len(_rows("SELECT 1 FROM jobs WHERE owner = ?", f"conversation:{cid}"))
    with CronStore.open() as store:
        template = store.get(job["id"])
        assert template is not None
        import dataclasses

        for index in range(MAX_JOBS_PER_SESSION - owned):
            store.add(dataclasses.replace(template, id=f"ca{index:06x}", owner=f"conversation:{cid}"))
    full = _cli(crew, "adopt", job["id"], "--session-of", cid)
    assert full.returncode == 1 and "error[session_jobs_full]" in full.stderr
    assert _rows("SELECT owner FROM jobs WHERE id = ?", job["id"]) == [("",)]


def test_preview_runs_a_command_once_as_a_run_would_and_stores_nothing(crew: CrewHarness) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    job = json.loads(_ok(_cli(crew, "add", "disk", "--command", f"echo checked {token}", "--every", "3600",
                              "--json")))
    agent = json.loads(_ok(_cli(crew, "add", "think", "Think about it.", "--every", "3600", "--json")))

    text = _ok(_cli(crew, "preview", job["id"]))
    lines = text.splitlines()
    assert lines[0].startswith(f"Preview of job {job['id']} (disk) under unrestricted: success in ")
    assert lines[0].endswith("(nothing was stored)")
    assert lines[1] == "Result:" and lines[2].startswith("  checked ") and token not in text
    assert lines[3] == "It would publish: Cron: disk" and lines[4] == lines[2]
    assert _rows("SELECT COUNT(*) FROM history") == [(0,)]
    assert _rows("SELECT last_run_ts, last_result FROM jobs WHERE id = ?", job["id"]) == [(None, "")]
    from kirocrew_core.notifications.store import store_file

    assert not store_file().exists() or f"cron:{job['id']}" not in store_file().read_text()

    report = json.loads(_ok(_cli(crew, "preview", "--command", "sleep 5", "--timeout", "1", "--json")))
    assert (report["job_id"], report["status"], report["error"]) == (None, "failure", "Command timed out after 1s")
    assert report["notification"]["title"] == "Cron: preview"
    refused = _cli(crew, "preview", "--command", "cat ~/.ssh/id_rsa")
    assert refused.returncode == 1 and "error[command_refused]" in refused.stderr
    not_command = _cli(crew, "preview", agent["id"])
    assert not_command.returncode == 1 and "error[not_a_command_job]" in not_command.stderr
    assert _rows("SELECT COUNT(*) FROM history") == [(0,)]
