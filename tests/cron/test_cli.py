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
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield holder
    holder.kill()
    holder.wait()


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
