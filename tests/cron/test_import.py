"""Importing the original's crons.json v2: what is kept, what is dropped, what is skipped and why."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import home
from kirocrew_core.errors import KirocrewError

from kirocrew_cron.importer import IMPORTED_META, import_crons_json, import_once
from kirocrew_cron.model import PERSON, Job, Schedule
from kirocrew_cron.store import CronStore

NOW = 1_790_000_000.0

# A crons.json as the original writes it (indent 2, every field of its record, Slack and dashboard fields too).
FULL_AGENT_JOB: dict[str, Any] = {
    "id": "a1b2c3d4", "name": "weekday standup notes", "message": "Summarise yesterday's merged PRs",
    "schedule": {"kind": "cron", "every_secs": None, "at_ts": None, "cron_expr": "0 9 * * 1-5"},
    "channel": "C0123ABCD", "thread_ts": "1712345678.000100", "enabled": True, "user_paused": False,
    "auto_paused": False, "last_run_ts": 1_780_000_000.5, "last_status": "ok", "last_error": "",
    "created_ts": 1_700_000_000.0, "delete_after_run": False, "last_result": "3 PRs merged",
    "context_enabled": True, "agent_id": "reviewer", "approval_mode": "auto", "acked_items": ["PR 12"],
    "created_by": "U0456EFGH", "silent": False, "session_key": "dashboard:slot-7",
    "last_posted_hash": "9f8e", "consecutive_dupes": 0, "last_posted_at": 1_780_000_001.0,
    "last_failure_hash": "", "last_failure_at": 0, "consecutive_failures": 0,
    "skip_dates": ["2026-12-25", "2026-12-24"], "timezone": "Europe/Paris", "persistent_session": True,
    "minimal_context": True, "hide_in_chat": False, "folder_id": "f-1", "model": "auto",
    "agent_sequence": [], "env": {"API_TOKEN": "secret-value-never-shown"}, "timeout_secs": 900,
    "strict_schedule": True, "script": None, "command": None, "timeout": 0,
}
ENTRIES: list[Any] = [
    FULL_AGENT_JOB,
    {"id": "b2c3d4e5", "name": "hourly check", "message": "check the queue",
     "schedule": {"kind": "every", "every_secs": 3600}, "enabled": False, "user_paused": True,
     "created_ts": 1_700_000_100.0, "session_key": ""},
    {"id": "c3d4e5f6", "name": "disk", "command": "df -h /", "timeout": 60,
     "schedule": {"kind": "every", "every_secs": 600}, "enabled": False, "auto_paused": True,
     "consecutive_failures": 5, "last_status": "error", "last_error": "exit 1", "created_ts": 1_700_000_200.0},
    {"id": "d4e5f6a7", "name": "scripted", "script": "~/.kiro/crew/crons/check.py:run", "message": "m",
     "schedule": {"kind": "every", "every_secs": 600}},
    "not an object",
    {"id": "e5f6a7b8", "name": "bad cron", "message": "m", "schedule": {"kind": "cron", "cron_expr": "61 * * * *"}},
    {"id": "f6a7b8c9", "name": "odd kind", "message": "m", "schedule": {"kind": "weekly"}},
    {"id": "a7b8c9d0", "name": 42, "message": "m", "schedule": {"kind": "every", "every_secs": 600}},
    {"id": "My-Job", "name": "legacy id", "message": "m", "schedule": {"kind": "every", "every_secs": 7200},
     "agent_sequence": ["planner", "writer"], "agent_id": "planner"},
    {"id": "b8c9d0e1", "name": "one-shot never run", "message": "ping me",
     "schedule": {"kind": "at", "at_ts": 1_785_000_000.0}, "delete_after_run": True, "created_ts": 1_784_000_000.0},
    {"id": "c9d0e1f2", "name": "leaky", "command": "cat ~/.aws/credentials", "schedule": {"kind": "every",
                                                                                       "every_secs": 600}},
    {"name": "no id", "message": "m", "schedule": {"kind": "every", "every_secs": 600}},
]


def _write(path: Path, entries: list[Any], version: int = 2) -> Path:
    path.write_text(json.dumps({"version": version, "jobs": entries}, indent=2))
    return path


@pytest.fixture
def store() -> Iterator[CronStore]:
    with CronStore.open() as opened:
        yield opened


@pytest.fixture
def crons_json(tmp_path: Path) -> Path:
    return _write(tmp_path / "crons.json", ENTRIES)


def test_an_original_agent_job_keeps_its_schedule_options_and_last_run(store: CronStore, crons_json: Path) -> None:
    import_crons_json(store, crons_json, now=NOW)
    assert store.get("a1b2c3d4") == Job(
        id="a1b2c3d4", name="weekday standup notes", schedule=Schedule("cron", cron_expr="0 9 * * 1-5"),
        message="Summarise yesterday's merged PRs", owner=PERSON, timezone="Europe/Paris",
        skip_dates=("2026-12-24", "2026-12-25"), strict_schedule=True, agent="reviewer", model="",
        workspace=str(home.user_home()), persistent_session=True, minimal_context=True, timeout_secs=900,
        created_ts=1_700_000_000.0, updated_ts=NOW, last_due_ts=NOW, last_run_ts=1_780_000_000.5,
        last_status="ok", last_result="3 PRs merged")


def test_paused_auto_paused_and_command_jobs_come_across_as_they_were(store: CronStore, crons_json: Path) -> None:
    import_crons_json(store, crons_json, now=NOW)
    paused = store.get("b2c3d4e5")
    assert paused is not None and paused.user_paused and not paused.auto_paused
    disk = store.get("c3d4e5f6")
    assert disk is not None
    assert (disk.command, disk.message, disk.timeout, disk.auto_paused, disk.user_paused, disk.consecutive_failures,
            disk.last_status, disk.last_error) == ("df -h /", "", 60, True, False, 5, "error", "exit 1")


def test_a_one_shot_that_never_ran_is_still_due(store: CronStore, crons_json: Path) -> None:
    report = import_crons_json(store, crons_json, now=NOW)
    once = store.get("b8c9d0e1")
    assert once is not None and "b8c9d0e1" in report.imported
    assert (once.schedule.kind, once.schedule.at_ts, once.delete_after_run, once.last_due_ts) == (
        "at", 1_785_000_000.0, True, None)


def test_entries_the_store_cannot_hold_are_reported_with_index_and_reason(store: CronStore, crons_json: Path) -> None:
    report = import_crons_json(store, crons_json, now=NOW)
    reasons = dict(report.skipped)
    assert sorted(reasons) == [3, 4, 5, 6, 7, 10, 11]
    assert "script jobs are not supported" in reasons[3]
    assert reasons[4] == "not an object"
    assert "e5f6a7b8" in reasons[5] and "61" in reasons[5]
    assert "weekly" in reasons[6]
    assert "name must be a string" in reasons[7]
    assert "command is refused" in reasons[10]
    assert reasons[11] == "id is missing"
    for skipped in ("d4e5f6a7", "e5f6a7b8", "f6a7b8c9", "a7b8c9d0", "c9d0e1f2"):
        assert store.get(skipped) is None
    assert len(store.jobs()) == len(report.imported) == 5


def test_an_id_that_is_not_a_job_id_here_gets_a_new_one_and_the_report_says_so(store: CronStore,
                                                                                 crons_json: Path) -> None:
    report = import_crons_json(store, crons_json, now=NOW)
    [(old, new)] = report.renamed
    assert old == "My-Job" and new in report.imported
    legacy = store.get(new)
    assert legacy is not None and legacy.name == "legacy id"
    assert legacy.agent == "planner"
    assert "agent_sequence" in report.dropped


def test_an_id_already_taken_by_a_job_here_is_imported_under_a_new_id(store: CronStore, tmp_path: Path) -> None:
    mine = store.add(Job(id="a1b2c3d4", name="mine", schedule=Schedule("every", every_secs=60), message="x"))
    report = import_crons_json(store, _write(tmp_path / "c.json", [FULL_AGENT_JOB]), now=NOW)
    [(old, new)] = report.renamed
    assert old == "a1b2c3d4" and new != old
    assert store.get("a1b2c3d4") == mine
    assert store.get(new).name == "weekday standup notes"  # type: ignore[union-attr]


def test_dropped_fields_and_session_owned_entries_are_named_and_no_secret_is_shown(store: CronStore,
                                                                                  crons_json: Path) -> None:
    report = import_crons_json(store, crons_json, now=NOW)
    assert {"channel", "thread_ts", "created_by", "approval_mode", "hide_in_chat", "folder_id", "acked_items", "env",
            "last_posted_hash", "last_posted_at"} <= set(report.dropped)
    assert report.session_keys == ["a1b2c3d4"]
    text = report.text(crons_json)
    assert "env" in text and "a1b2c3d4" in text
    assert "secret-value" not in text and "secret-value" not in json.dumps(report.as_dict())
    assert all(job.owner == PERSON for job in store.jobs())


def test_the_source_file_is_never_written(store: CronStore, crons_json: Path) -> None:
    before = (crons_json.read_bytes(), crons_json.stat().st_mtime_ns)
    import_crons_json(store, crons_json, now=NOW)
    assert (crons_json.read_bytes(), crons_json.stat().st_mtime_ns) == before


def test_importing_twice_adds_nothing_and_a_removed_job_stays_removed(store: CronStore, crons_json: Path) -> None:
    first = import_crons_json(store, crons_json, now=NOW)
    store.remove("b2c3d4e5")
    second = import_crons_json(store, crons_json, now=NOW + 60)
    assert second.imported == []
    assert sorted(second.already) == sorted(["a1b2c3d4", "b2c3d4e5", "c3d4e5f6", "My-Job", "b8c9d0e1"])
    assert store.get("b2c3d4e5") is None
    assert len(store.jobs()) == len(first.imported) - 1


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "cannot be read as JSON"),
    ("", "cannot be read as JSON"),
    ('{"version": 1, "jobs": []}', "version 1"),
    ('{"version": 2}', "is not a crons.json"),
    ("[]", "is not a crons.json"),
])
def test_a_file_that_is_not_a_crons_json_v2_is_refused_and_nothing_changes(store: CronStore, tmp_path: Path,
                                                                           content: str, why: str) -> None:
    path = tmp_path / "crons.json"
    path.write_text(content)
    with pytest.raises(KirocrewError) as refused:
        import_crons_json(store, path)
    assert refused.value.code == "import_unreadable"
    assert why in refused.value.message
    assert store.jobs() == []


def test_a_repeated_id_in_one_file_is_imported_once_and_the_repeat_reported(store: CronStore,
                                                                            tmp_path: Path) -> None:
    twin = {**FULL_AGENT_JOB, "name": "a copy"}
    report = import_crons_json(store, _write(tmp_path / "c.json", [FULL_AGENT_JOB, twin]), now=NOW)
    assert report.imported == ["a1b2c3d4"]
    assert report.skipped == [(1, "a1b2c3d4: the same id as entry #0")]
    assert [job.name for job in store.jobs()] == ["weekday standup notes"]


def test_a_missing_file_is_refused(store: CronStore, tmp_path: Path) -> None:
    with pytest.raises(KirocrewError) as refused:
        import_crons_json(store, tmp_path / "absent.json")
    assert refused.value.code == "import_unreadable"


def test_the_first_start_imports_the_crew_homes_crons_json_once(store: CronStore) -> None:
    home.ensure_crew_home()
    _write(home.crew_home() / "crons.json", [FULL_AGENT_JOB])
    report = import_once(store)
    assert report is not None and report.imported == ["a1b2c3d4"]
    assert json.loads(store.meta(IMPORTED_META) or "{}")["imported"] == 1
    store.remove("a1b2c3d4")
    assert import_once(store) is None
    assert store.jobs() == []


def test_a_first_start_without_a_crons_json_is_marked_done(store: CronStore) -> None:
    assert import_once(store) is None
    assert json.loads(store.meta(IMPORTED_META) or "{}")["found"] is False
    home.ensure_crew_home()
    _write(home.crew_home() / "crons.json", [FULL_AGENT_JOB])
    assert import_once(store) is None, "a later crons.json is imported by kirocrew cron import, not by a restart"


def test_an_unreadable_crons_json_at_first_start_is_tried_again_next_start(store: CronStore) -> None:
    home.ensure_crew_home()
    path = home.crew_home() / "crons.json"
    path.write_text("{broken")
    report = import_once(store)
    assert report is not None and "cannot be read as JSON" in report.problem
    assert store.meta(IMPORTED_META) is None
    _write(path, [FULL_AGENT_JOB])
    again = import_once(store)
    assert again is not None and again.imported == ["a1b2c3d4"]
    assert os.path.exists(path)


def test_an_imported_last_result_and_error_are_stored_redacted(store: CronStore, tmp_path: Path) -> None:
    # Readers (the page, --json) show stored results as they are: the importer redacts, as the runner does.
    leaky = {"id": "d0e1f2a3", "name": "leaky result", "message": "m", "schedule": {"kind": "every", "every_secs": 600},
             "last_result": "deployed with GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789",
             "last_error": "curl: Authorization: Bearer sk-live-0123456789abcdef0123"}
    import_crons_json(store, _write(tmp_path / "crons.json", [leaky]), now=NOW)
    job = store.get("d0e1f2a3")
    assert job is not None
    assert "ghp_abcdefghij" not in job.last_result and "<redacted>" in job.last_result
    assert "sk-live-0123" not in job.last_error and "<redacted>" in job.last_error


def test_an_import_past_the_stores_total_skips_the_rest_and_says_why(store: CronStore, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from kirocrew_cron import model

    monkeypatch.setattr(model, "MAX_JOBS", 2)
    entries = [{"id": f"0000000{n}", "name": f"j{n}", "message": "m", "schedule": {"kind": "every", "every_secs": 60}}
               for n in range(4)]
    report = import_crons_json(store, _write(tmp_path / "many.json", entries), now=NOW)
    assert report.imported == ["00000000", "00000001"]
    assert [(index, why.split(":")[0]) for index, why in report.skipped] == [(2, "00000002"), (3, "00000003")]
    assert all("the most it keeps (2)" in why for _, why in report.skipped)
    assert [job.id for job in store.jobs()] == ["00000000", "00000001"]
    monkeypatch.setattr(model, "MAX_JOBS", 4)  # room again: the skipped entries come in with the next import
    assert import_crons_json(store, tmp_path / "many.json", now=NOW).imported == ["00000002", "00000003"]


def test_an_imported_name_or_message_with_control_characters_is_skipped_and_noise_dropped(
        store: CronStore, tmp_path: Path) -> None:
    """An imported job reaches the same screens and prompts as one added here: the same plain-text rules."""
    every = {"kind": "every", "every_secs": 600}
    path = _write(tmp_path / "crons.json", [
        {"id": "aa00aa00", "name": "two\nlines", "message": "m", "schedule": every},
        {"id": "bb00bb00", "name": "flip \u202eevil", "message": "m", "schedule": every},
        {"id": "cc00cc00", "name": "ok", "message": "bell \x07 rings", "schedule": every},
        {"id": "dd00dd00", "name": "tab\tand\u200bnoise", "message": "line one\r\nline two\tok", "schedule": every},
    ])
    report = import_crons_json(store, path, now=NOW)
    reasons = dict(report.skipped)
    assert sorted(reasons) == [0, 1, 2]
    assert "line" in reasons[0] and "U+202E" in reasons[1] and "U+0007" in reasons[2], reasons
    for skipped in ("aa00aa00", "bb00bb00", "cc00cc00"):
        assert store.get(skipped) is None
    kept = store.get("dd00dd00")
    assert kept is not None and kept.name == "tab andnoise" and kept.message == "line one\nline two\tok"
