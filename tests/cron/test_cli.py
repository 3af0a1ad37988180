"""``kirocrew cron …``: the real CLI (a subprocess, or click's runner where a process adds nothing).

The twins run the kirocrew-cron tools in process here (``KIROCREW_NO_HOST=1``) against a real
store; the test with a real host that the twin and the tool agree is at the end of the file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from kirocrew_core.errors import KirocrewError

from kirocrew_cron import store as store_module
from kirocrew_cron.cli import cron
from kirocrew_cron.model import Job, Schedule
from kirocrew_cron.store import CronStore

NO_HOST = {"KIROCREW_NO_HOST": "1"}


@pytest.fixture
def offline(kirocrew: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``offline(*args)``: the real ``kirocrew`` in a subprocess, working in process (no host)."""
    import os

    monkeypatch.setenv("KIROCREW_NO_HOST", "1")

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return kirocrew(*args, env=dict(os.environ), input=input)

    return run


@pytest.fixture
def store() -> Iterator[CronStore]:
    with CronStore.open() as opened:
        yield opened


def _job(job_id: str = "0a1b2c3d", **fields: Any) -> Job:
    import dataclasses

    base = Job(id=job_id, name="nightly", schedule=Schedule("every", every_secs=3600), message="check the build",
               created_ts=1_000.0, updated_ts=1_000.0)
    return dataclasses.replace(base, **fields)


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


# -- history (reads the store) ----------------------------------------------------------------------

def test_history_lists_a_jobs_runs_newest_first_with_their_conversation(offline: Any, store: CronStore) -> None:
    job = store.add(_job())
    first = store.start_run(job.id, "scheduled", due_ts=3600.0, started_at=3601.0, conversation_id="conv_ab")
    store.finish_run(first.id, "success", finished_at=3603.5, summary="all green", run_id="run_1")
    store.record_missed(job.id, due_ts=10_800.0, count=2, at=11_000.0)
    store.record(job.id, "manual", "denied", started_at=12_000.0, error="governance denied cron")
    done = _ok(offline("cron", "history", job.id))
    lines = done.stdout.splitlines()
    assert lines[0] == "3 run(s) of nightly (0a1b2c3d), newest first:"
    assert "manual" in lines[1] and "denied" in lines[1]
    assert lines[2].strip() == "governance denied cron"
    assert "catch-up" in lines[3] and "2 due run(s) missed" in lines[3]
    assert "scheduled" in lines[4] and "success in 2.5s" in lines[4]
    assert lines[5].strip() == "all green"
    assert lines[6].strip() == "conversation conv_ab, run run_1"


def test_history_json_has_every_field_of_each_run(offline: Any, store: CronStore) -> None:
    job = store.add(_job())
    run = store.start_run(job.id, "manual", due_ts=None, started_at=10.0)
    store.finish_run(run.id, "failure", finished_at=11.0, error="exit 1")
    document = json.loads(_ok(offline("cron", "history", job.id, "--json", "--limit", "1")).stdout)
    assert document["job_id"] == job.id
    [record] = document["runs"]
    assert record | {"id": 0} == {"id": 0, "job_id": job.id, "trigger": "manual", "status": "failure",
                                  "started_at": 10.0, "due_ts": None, "finished_at": 11.0, "summary": "",
                                  "error": "exit 1", "conversation_id": "", "run_id": "", "missed": 0,
                                  "duration_ms": 1000}


def test_history_of_an_unknown_job_is_job_not_found(offline: Any, store: CronStore) -> None:
    done = offline("cron", "history", "ffffffff")
    assert done.returncode == 1
    assert done.stderr.strip() == "kirocrew: error[job_not_found]: job not found: ffffffff"


def test_history_of_a_job_that_never_ran_says_so(offline: Any, store: CronStore) -> None:
    store.add(_job())
    assert _ok(offline("cron", "history", "0a1b2c3d")).stdout.strip() == "nightly (0a1b2c3d) has not run yet."


# -- import without a host --------------------------------------------------------------------------

ORIGINAL = {"version": 2, "jobs": [
    {"id": "a1b2c3d4", "name": "standup", "message": "summarise PRs", "channel": "C0123ABCD",
     "schedule": {"kind": "cron", "cron_expr": "0 9 * * 1-5"}, "session_key": "dashboard:slot-1"},
    {"id": "d4e5f6a7", "name": "scripted", "script": "check.py:run", "schedule": {"kind": "every", "every_secs": 600}},
]}


def test_import_without_a_host_adds_the_jobs_and_reports_what_it_left(offline: Any, tmp_path: Path,
                                                                       store: CronStore) -> None:
    source = tmp_path / "crons.json"
    source.write_text(json.dumps(ORIGINAL, indent=2))
    text = _ok(offline("cron", "import", str(source))).stdout
    assert f"Imported 1 job(s) from {source}: a1b2c3d4" in text
    assert "Skipped entry #1: d4e5f6a7: script jobs are not supported" in text
    assert "Dropped fields with no meaning here: channel" in text
    assert [job.id for job in store.jobs()] == ["a1b2c3d4"]
    again = json.loads(_ok(offline("cron", "import", str(source), "--json")).stdout)
    assert (again["imported"], again["already"]) == ([], ["a1b2c3d4"])


def test_import_defaults_to_the_crew_homes_crons_json(offline: Any, store: CronStore) -> None:
    from kirocrew_core import home

    home.ensure_crew_home()
    (home.crew_home() / "crons.json").write_text(json.dumps(ORIGINAL))
    assert "a1b2c3d4" in _ok(offline("cron", "import")).stdout
    assert store.get("a1b2c3d4") is not None


def test_import_of_a_file_that_is_not_a_crons_json_exits_1_with_its_code(offline: Any, tmp_path: Path) -> None:
    source = tmp_path / "crons.json"
    source.write_text("{oops")
    done = offline("cron", "import", str(source))
    assert done.returncode == 1
    assert done.stderr.startswith("kirocrew: error[import_unreadable]: ")


_HOLDER = textwrap.dedent("""
    import time
    from kirocrew_cron.store import acquire_owner_lock
    held = acquire_owner_lock(wait=0)
    print("held", flush=True)
    time.sleep(60)
""")


@pytest.fixture
def lock_holder() -> Iterator[subprocess.Popen[str]]:
    """Another process holding the store's owner lock (as a running host does)."""
    with subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
        holder.kill()  # leaving the block reaps it and closes its pipe


def test_a_command_without_a_host_finds_the_store_busy_while_another_writer_holds_it(
        lock_holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KIROCREW_NO_HOST", "1")
    monkeypatch.setattr(store_module, "CLI_LOCK_WAIT_SECS", 0.2)
    source = tmp_path / "crons.json"
    source.write_text(json.dumps(ORIGINAL))
    result = CliRunner().invoke(cron, ["import", str(source)])
    assert isinstance(result.exception, KirocrewError), result.output
    assert result.exception.code == "cron_store_busy"
    assert str(lock_holder.pid) in result.exception.message
    with CronStore.open() as opened:
        assert opened.jobs() == []


def test_remove_all_asks_first_and_a_no_changes_nothing(monkeypatch: pytest.MonkeyPatch, store: CronStore) -> None:
    monkeypatch.setenv("KIROCREW_NO_HOST", "1")
    store.add(_job())
    result = CliRunner().invoke(cron, ["remove-all"], input="n\n")
    assert result.exit_code == 1
    assert "Remove every cron job and its history?" in result.output
    assert len(store.jobs()) == 1


# -- the twins without a host (the tools run in process) --------------------------------------------

@pytest.fixture
def twin(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``twin(*args)``: ``kirocrew cron ARGS`` through click's runner, in process (``KIROCREW_NO_HOST=1``)."""
    monkeypatch.setenv("KIROCREW_NO_HOST", "1")

    def run(*args: str) -> Any:
        return CliRunner().invoke(cron, list(args), catch_exceptions=True)

    return run


def _stored() -> list[Job]:
    with CronStore.open() as opened:
        return opened.jobs()


def _printed(result: Any) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return str(result.output).rstrip("\n")


def test_add_prints_the_tools_text_and_the_job_is_the_persons_in_the_current_directory(
        twin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = _printed(twin("add", "nightly", "run the tests", "--cron", "0 2 * * *", "--timezone", "Europe/Paris",
                         "--skip-date", "2026-12-25", "--agent", "reviewer", "--fresh-session", "--catch-up", "all",
                         "--catch-up-max", "3"))
    [job] = _stored()
    assert text == f"Added job: {job.id} (nightly) [At 02:00 (Europe/Paris)]. Tell the user: scheduled for " \
                   "At 02:00 (Europe/Paris)."
    assert (job.owner, job.workspace, job.message, job.schedule.cron_expr, job.timezone, job.skip_dates, job.agent,
            job.persistent_session, job.catch_up, job.catch_up_max) == (
        "", str(tmp_path), "run the tests", "0 2 * * *", "Europe/Paris", ("2026-12-25",), "reviewer", False, "all", 3)


def test_a_command_job_with_its_own_directory_and_authority(twin: Any, tmp_path: Path) -> None:
    _printed(twin("add", "disk", "--command", "df -h /", "--every", "3600", "--silent", "--cwd", str(tmp_path),
                  "--authority", "unrestricted", "--timeout", "30"))
    [job] = _stored()
    assert (job.kind, job.command, job.workspace, job.silent, job.timeout, job.schedule.every_secs) == (
        "command", "df -h /", str(tmp_path), True, 30, 3600)


def test_bad_input_exits_2_with_the_tools_code_and_stores_nothing(twin: Any) -> None:
    result = twin("add", "fast", "too often", "--every", "30")
    assert isinstance(result.exception, KirocrewError)
    assert (result.exception.code, result.exception.exit_code) == ("invalid_arguments", 2)
    assert "minimum of 60" in result.exception.message
    refused = twin("add", "leaky", "--command", "cat ~/.aws/credentials", "--every", "60")
    assert refused.exception.code == "command_refused"
    assert _stored() == []


def test_list_update_pause_resume_and_remove_answer_with_the_reference_texts(twin: Any) -> None:
    _printed(twin("add", "nightly", "run the tests", "--every", "3600"))
    [job] = _stored()
    listed = _printed(twin("list"))
    assert listed.splitlines()[0] == "1 cron job(s): 1 active, 0 paused"
    assert f"ID: {job.id} | every 1h" in listed
    assert _printed(twin("update", job.id, "--cron", "30 2 * * 1-5", "--name", "weekdays")).startswith(
        f"Updated job: {job.id} (weekdays) [")
    assert _printed(twin("pause", job.id)) == f"Paused job: {job.id}"
    assert _printed(twin("list")).splitlines()[0] == "1 cron job(s): 0 active, 1 paused"
    assert _printed(twin("resume", job.id)) == f"Resumed job: {job.id}"
    assert _printed(twin("remove", job.id)) == f"Removed job: {job.id}"
    assert _printed(twin("remove-all", "--yes")) == "No cron jobs to remove."


def test_json_answers_are_the_job_as_the_tools_show_it(twin: Any) -> None:
    added = json.loads(_printed(twin("add", "nightly", "run the tests", "--every", "3600", "--json")))
    assert (added["name"], added["kind"], added["enabled"], added["schedule_text"]) == (
        "nightly", "agent", True, "every 1h")
    paused = json.loads(_printed(twin("pause", added["id"], "--json")))
    assert (paused["id"], paused["user_paused"], paused["enabled"]) == (added["id"], True, False)
    listed = json.loads(_printed(twin("list", "--json", "--id", added["id"])))
    assert [j["id"] for j in listed["jobs"]] == [added["id"]]


def test_update_sets_and_clears_skip_dates_and_resets_the_agent(twin: Any) -> None:
    _printed(twin("add", "n", "m", "--every", "3600", "--agent", "reviewer", "--skip-date", "2026-12-25"))
    [job] = _stored()
    _printed(twin("update", job.id, "--skip-date", "2027-01-01", "--skip-date", "2026-12-31", "--agent", ""))
    [changed] = _stored()
    assert (changed.skip_dates, changed.agent) == (("2026-12-31", "2027-01-01"), "")
    _printed(twin("update", job.id, "--no-skip-dates", "--no-silent", "--jitter"))
    [cleared] = _stored()
    assert (cleared.skip_dates, cleared.silent, cleared.strict_schedule) == ((), False, False)


def test_trigger_without_a_host_is_host_required_and_an_unknown_job_not_found(twin: Any) -> None:
    _printed(twin("add", "n", "m", "--every", "3600"))
    [job] = _stored()
    assert twin("trigger", job.id).exception.code == "host_required"
    assert twin("trigger", "ffffffff").exception.code == "job_not_found"
    with CronStore.open() as opened:
        assert opened.history(job.id) == []


def test_the_real_command_prints_a_refusal_as_error_code_and_exits_1(offline: Any) -> None:
    done = offline("cron", "pause", "ffffffff")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.strip() == "kirocrew: error[job_not_found]: job not found: ffffffff"


# -- with a real host -------------------------------------------------------------------------------

def _undated(text: str) -> str:
    import re

    return re.sub(r"\(in [^)]*\)", "(in …)", text)


def test_the_cli_twin_and_the_tool_agree_through_a_real_host(isolated_homes: Any, tmp_path: Path) -> None:
    """One host for every check (a host start costs seconds): the twin and the tool, the person and a stranger."""
    import asyncio
    import os

    from kirocrew_core.host.mcp_client import host_session
    from kirocrew_testing.core_sessions import stdio_session
    from kirocrew_testing.fixtures import kirocrew_argv, run_kirocrew

    env = {k: v for k, v in os.environ.items() if k not in ("KIROCREW_NO_HOST", "KIROCREW_SESSION_KEY")}
    source = tmp_path / "crons.json"
    source.write_text(json.dumps(ORIGINAL))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = run_kirocrew("cron", *args, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done

    added = cli("add", "nightly", "run the tests", "--every", "3600").stdout  # starts the host in the background
    assert added.startswith("Added job: ")
    imported = cli("import", str(source)).stdout  # through the host's admin server: the host holds the store
    assert "Imported 1 job(s)" in imported and "a1b2c3d4" in imported
    twin_text = cli("list").stdout.rstrip("\n")
    assert twin_text.splitlines()[0] == "2 cron job(s): 2 active, 0 paused"

    async def through_the_host() -> None:
        async with host_session("kirocrew-cron") as person:  # session type cli, no session key: the person
            result = await person.session.call_tool("cron_list", {})
            assert not result.is_error
            # The same text, but for "(in 59m)" against "(in 1h 0m)": the two answers were given moments apart.
            assert _undated("".join(block.text for block in result.content)) == _undated(twin_text)
        async with stdio_session(kirocrew_argv("mcp-cron"), env, tmp_path, tmp_path / "relay.stderr") as stranger:
            result = await stranger.session.call_tool("cron_list", {})  # a relay client without a session
            text = "".join(block.text for block in result.content)
            assert text.startswith("0 cron job(s): 0 active, 0 paused")
            assert "a1b2c3d4" not in text and "nightly" not in text
            refused = await stranger.session.call_tool("cron_remove_all", {})
            assert refused.is_error and "error[caller_unverified]" in refused.content[0].text
        async with host_session("kirocrew-cron-admin", session_type="relay") as relayed:
            result = await relayed.session.call_tool("cron_import", {"path": str(source)})
            assert result.is_error and "error[caller_unverified]" in result.content[0].text

        async with host_session("kirocrew-cron") as person:  # nothing the stranger did changed anything
            result = await person.session.call_tool("cron_list", {})
            assert "".join(block.text for block in result.content).startswith("2 cron job(s)")

    asyncio.run(asyncio.wait_for(through_the_host(), 90))


def test_cron_help_imports_no_sdk_store_or_scheduler() -> None:
    probe = ("import sys\nfrom kirocrew_core.cli import main\n"
             "try:\n    main(['cron', '--help'])\nexcept SystemExit:\n    pass\n"
             "print('LOADED=' + ','.join(m for m in ('mcp', 'asyncio', 'sqlite3', 'kirocrew_cron.store', "
             "'kirocrew_cron.tools', 'kirocrew_cron.service', 'cronsim') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "history" in done.stdout and "remove-all" in done.stdout
    assert done.stdout.strip().endswith("LOADED="), done.stdout[-300:]


def test_without_a_host_history_answers_a_removed_one_shot_preview_runs_and_adopt_needs_the_host(
        offline: Any, store: CronStore, tmp_path: Path) -> None:
    job = store.add(_job(schedule=Schedule("at", at_ts=3600.0), delete_after_run=True))
    store.record(job.id, "scheduled", "denied", started_at=3601.0, error="governance denied cron")
    store.remove(job.id, keep_history=True)
    lines = _ok(offline("cron", "history", job.id)).stdout.splitlines()
    assert lines[0].startswith("nightly (0a1b2c3d) ran once and removed itself at ")
    assert lines[1] == "1 run(s) of nightly (0a1b2c3d), newest first:" and lines[3].strip() == "governance denied cron"

    report = json.loads(_ok(offline("cron", "preview", "--command", "echo previewed", "--cwd", str(tmp_path),
                                    "--json")).stdout)
    assert (report["status"], report["result"], report["notification"]["body"]) == ("success", "previewed",
                                                                                     "previewed")
    assert store.history("0") == [] and store.jobs() == []
    adopted = offline("cron", "adopt", job.id, "--release")
    assert adopted.returncode == 1 and adopted.stderr.startswith("kirocrew: error[host_required]: ")
