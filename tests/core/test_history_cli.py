"""``kirocrew history``: the owner's list, show, search and export over kiro-cli's session files (real subprocesses)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kirocrew_testing.kiro_store_files import write_flat, write_tui


def test_list_show_search_and_export_and_an_existing_file_is_never_replaced(
        kirocrew: Any, isolated_homes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    write_flat(isolated_homes.kiro_home, "c0ffee00-0000-4000-8000-000000000001", title="Tidy the build", cwd="/srv/a",
               messages=[("user", "why is the build slow?"), ("assistant", "The cache key changes on every run.")])
    write_tui(tmp_path / "data" / "kiro-cli" / "data.sqlite3", "t-1", cwd="/srv/b",
              messages=[("user", "rename the cache folder"), ("assistant", "Done: it is .cache now.")])

    listed = json.loads(kirocrew("history", "list", "--json").stdout)
    assert [(s["title"], s["source"], s["workspace"], s["messages"]) for s in listed] == [
        ("Tidy the build", "kiro-cli", "/srv/a", 2), ("rename the cache folder", "kiro-tui", "/srv/b", 2)]
    key = listed[0]["key"]
    only_b = kirocrew("history", "list", "--workspace", "/srv/b").stdout
    assert "rename the cache folder" in only_b and "Tidy the build" not in only_b

    shown = kirocrew("history", "show", key, "--limit", "1").stdout.splitlines()
    assert shown[:2] == ["Tidy the build  ·  kiro-cli  ·  2 messages  ·  /srv/a",
                         "resume: cd /srv/a && kiro-cli chat --resume-id c0ffee00-0000-4000-8000-000000000001"]
    assert shown[3:] == ["[2] assistant", "The cache key changes on every run."]

    found = kirocrew("history", "search", "cache").stdout
    assert found.count("\n> ") == 2 and "The <<<cache>>> key changes" in found
    assert kirocrew("history", "search", "cache", "--before", "2026-11-01").stdout.count("\n> ") == 1
    bad_day = kirocrew("history", "search", "cache", "--after", "2026-02-30")
    assert bad_day.returncode == 2 and "Invalid 'after' date" in bad_day.stderr

    target = tmp_path / "out" / "build.md"
    target.parent.mkdir()
    done = kirocrew("history", "export", key, "--output", str(target))
    assert done.returncode == 0, done.stderr
    document = target.read_text()
    assert document.startswith("# Tidy the build\n\n- Source: kiro-cli\n- Workspace: /srv/a\n")
    assert re.search(r"## User[^\n]*\n\nwhy is the build slow\?\n\n## Assistant[^\n]*\n\nThe cache key", document)
    target.write_text("my own notes")
    again = kirocrew("history", "export", key, "--output", str(target))
    assert again.returncode == 2 and "error[export_exists]" in again.stderr
    assert target.read_text() == "my own notes" and sorted(p.name for p in target.parent.iterdir()) == ["build.md"]

    for bad in ("../../etc/passwd", "c0ffee00-0000-4000-8000-000000000001", "h1-" + "0" * 24):
        missing = kirocrew("history", "show", bad)
        assert missing.returncode == 2 and "error[session_not_found]" in missing.stderr


def test_list_summarize_writes_summaries_once_and_says_why_when_it_cannot(
        kirocrew: Any, isolated_homes: Any, fake_kiro_cli: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    write_flat(isolated_homes.kiro_home, "c0ffee00-0000-4000-8000-000000000001", title="Tidy the build", cwd="/srv/a",
               messages=[("user", "why is the build slow?"), ("assistant", "The cache key changes on every run.")])

    done = kirocrew("history", "list", "--summarize", "--json")
    [listed] = json.loads(done.stdout)
    assert "> User: why is the build slow? > Assistant: The cache key changes on every run." in listed["summary"]
    assert "warning" not in done.stderr

    monkeypatch.setenv("KIRO_CLI_PATH", str(tmp_path / "no-kiro-cli"))  # a model run now fails, and says so
    again = kirocrew("history", "list", "--summarize")
    assert again.stdout.splitlines()[1] == f"    {listed['summary']}"  # from the index's cache
    assert "warning" not in again.stderr

    write_flat(isolated_homes.kiro_home, "c0ffee00-0000-4000-8000-000000000002", title="New one", cwd="/srv/a",
               messages=[("user", "a new question")], updated="2026-11-02T11:00:00Z")
    failed = kirocrew("history", "list", "--summarize")
    assert failed.returncode == 0 and "New one" in failed.stdout
    assert ("warning: Summaries not available for 1 session: the model could not be run (kiro_cli_not_installed)."
            in failed.stderr)
