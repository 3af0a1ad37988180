"""Finding kiro-cli and asking it its version and models."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kirocrew_core import kiro, kiro_sessions, proc, processes
from kirocrew_testing.fixtures import FakeKiroCli


@pytest.fixture(autouse=True)
def _fresh_caches():
    kiro.clear_caches()
    yield
    kiro.clear_caches()


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _bin_dir(tmp_path: Path, name: str = "bin") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


# -- resolution ---------------------------------------------------------------------


def test_without_kiro_cli_anywhere_it_is_a_not_installed_state(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(_bin_dir(tmp_path)))
    binary = kiro.resolve_kiro_cli()
    assert not binary.installed
    assert "KIRO_CLI_PATH" in binary.problem
    with pytest.raises(kiro.KiroNotInstalledError) as caught:
        kiro.kiro_cli_version(binary)
    assert caught.value.code == "kiro_cli_not_installed"
    assert isinstance(caught.value, FileNotFoundError)  # what the doctor catches


def test_kiro_cli_path_wins_over_kirocrew_kiro_bin_and_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    on_path = _script(_bin_dir(tmp_path, "path") / "kiro-cli", "echo kiro-cli 1.0.0\n")
    named = _script(tmp_path / "named-kiro", "echo kiro-cli 2.0.0\n")
    other = _script(tmp_path / "other-kiro", "echo kiro-cli 3.0.0\n")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert kiro.resolve_kiro_cli() == kiro.KiroBinary(on_path, "PATH")
    monkeypatch.setenv("KIROCREW_KIRO_BIN", str(other))
    assert kiro.resolve_kiro_cli() == kiro.KiroBinary(other, "KIROCREW_KIRO_BIN")
    monkeypatch.setenv("KIRO_CLI_PATH", str(named))
    assert kiro.resolve_kiro_cli() == kiro.KiroBinary(named, "KIRO_CLI_PATH")
    assert kiro.kiro_cli_version() == "2.0.0"


def test_an_explicit_path_to_a_non_executable_file_does_not_fall_back_to_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _script(_bin_dir(tmp_path) / "kiro-cli", "echo kiro-cli 1.0.0\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    plain = tmp_path / "not-executable"
    plain.write_text("echo hi\n")
    monkeypatch.setenv("KIRO_CLI_PATH", str(plain))
    binary = kiro.resolve_kiro_cli()
    assert binary.path is None and binary.source == "KIRO_CLI_PATH"
    assert str(plain) in binary.problem


# -- quick probes ---------------------------------------------------------------------


def test_version_drops_the_program_name_and_is_served_from_cache_until_cleared(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    counter = tmp_path / "calls"
    fake = _script(tmp_path / "kiro", f'echo x >> "{counter}"\necho "kiro-cli 2.11.1"\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    assert kiro.version() == "2.11.1"
    assert kiro.kiro_cli_version() == "2.11.1"
    assert counter.read_text().count("x") == 1
    kiro.clear_caches()
    assert kiro.kiro_cli_version() == "2.11.1"
    assert counter.read_text().count("x") == 2


def test_a_replaced_binary_is_asked_again_despite_the_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = _script(tmp_path / "kiro", 'echo "kiro-cli 2.11.1"\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    assert kiro.kiro_cli_version() == "2.11.1"
    _script(fake, 'echo "kiro-cli 2.16.0"     \n')  # an upgrade: another size
    assert kiro.kiro_cli_version() == "2.16.0"


def test_a_failing_version_probe_reports_its_status_and_stderr(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    fake = _script(tmp_path / "kiro", 'echo "You are not logged in" >&2\nexit 3\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    with pytest.raises(kiro.KiroCliError) as caught:
        kiro.kiro_cli_version()
    assert isinstance(caught.value, RuntimeError)  # what the doctor catches
    assert "exited 3" in str(caught.value) and "not logged in" in str(caught.value)


def test_a_probe_gets_no_stdin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # `cat` would block for ever on an inherited terminal or an open pipe.
    fake = _script(tmp_path / "kiro", 'n=$(cat | wc -c)\necho "kiro-cli 1.0.$n"\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    assert kiro.kiro_cli_version() == "1.0.0"


def test_a_hung_probe_is_killed_with_everything_it_forked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    fake = _script(tmp_path / "kiro", f'sleep 300 &\necho $! > "{pid_file}"\nsleep 300\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    monkeypatch.setattr(kiro, "VERSION_TIMEOUT_SECS", 0.5)
    monkeypatch.setattr(proc, "TERM_WAIT_SECS", 2.0)
    with pytest.raises(kiro.KiroCliError) as caught:
        kiro.kiro_cli_version()
    assert caught.value.code == "kiro_cli_timeout"
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while processes.alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes.alive(grandchild) is False


# -- models ---------------------------------------------------------------------------


NEW_SHAPE = """{"models": [
  {"model_name": "auto", "model_id": "auto", "description": "Picks for you", "context_window_tokens": 200000},
  {"model_name": "Claude Sonnet 4.5", "model_id": "claude-sonnet-4.5", "description": "Sonnet"},
  {"description": "no id: skipped"}
], "default_model": "auto"}"""


def test_parse_model_list_reads_the_current_object_shape() -> None:
    import json

    catalog = kiro.parse_model_list(json.loads(NEW_SHAPE))
    assert catalog.ids() == ["auto", "claude-sonnet-4.5"]
    assert catalog.default_model == "auto"
    assert catalog.models[0].context_window_tokens == 200000
    assert catalog.models[1].name == "Claude Sonnet 4.5"


def test_parse_model_list_reads_the_older_flat_array() -> None:
    catalog = kiro.parse_model_list([{"model_id": "a", "model_name": "A"}, "b"])
    assert catalog.ids() == ["a", "b"]
    assert catalog.default_model is None


@pytest.mark.parametrize("payload", [{"models": "auto"}, "auto", 3, {"default_model": "auto"}])
def test_any_other_model_list_shape_is_a_clear_error(payload: object) -> None:
    with pytest.raises(kiro.KiroCliError) as caught:
        kiro.parse_model_list(payload)
    assert caught.value.code == "kiro_cli_bad_output"


def test_list_models_runs_chat_list_models_as_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv_file = tmp_path / "argv"
    fake = _script(tmp_path / "kiro", f'echo "$@" > "{argv_file}"\ncat <<\'EOF\'\n{NEW_SHAPE}\nEOF\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    assert kiro.list_models().ids() == ["auto", "claude-sonnet-4.5"]
    assert argv_file.read_text().split() == ["chat", "--list-models", "--format", "json"]


def test_list_models_output_that_is_not_json_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    fake = _script(tmp_path / "kiro", 'echo "Welcome to Kiro!"\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    with pytest.raises(kiro.KiroCliError) as caught:
        kiro.list_models()
    assert caught.value.code == "kiro_cli_bad_output"


def test_list_models_is_cached_per_kiro_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    counter = tmp_path / "calls"
    fake = _script(tmp_path / "kiro", f'echo x >> "{counter}"\necho \'["m1"]\'\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    kiro.list_models()
    kiro.list_models()
    assert counter.read_text().count("x") == 1
    monkeypatch.setenv("KIRO_HOME", str(tmp_path / "another-kiro-home"))
    kiro.list_models()
    assert counter.read_text().count("x") == 2


def test_os_environ_reaches_the_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = _script(tmp_path / "kiro", 'echo "kiro-cli $KIRO_PROBE_MARK"\n')
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake))
    monkeypatch.setenv("KIRO_PROBE_MARK", "7.7.7")
    assert kiro.kiro_cli_version() == "7.7.7"


# -- against the fake kiro-cli --------------------------------------------------------


def test_the_fake_kiro_cli_reports_its_version_through_the_seam(fake_kiro_cli: FakeKiroCli) -> None:
    fake_kiro_cli.switch(version="2.16.0")
    assert kiro.resolve_kiro_cli().source == "KIRO_CLI_PATH"
    assert kiro.version() == "2.16.0"


def test_list_models_reads_both_shapes_kiro_cli_prints(fake_kiro_cli: FakeKiroCli) -> None:
    fake_kiro_cli.switch(models="auto,claude-sonnet-4.5")
    current = kiro.list_models()
    assert current.ids() == ["auto", "claude-sonnet-4.5"] and current.default_model == "auto"
    kiro.clear_caches()
    fake_kiro_cli.switch(models_format="flat")
    older = kiro.list_models()
    assert older.ids() == ["auto", "claude-sonnet-4.5"] and older.default_model is None



def test_a_sessions_files_are_removed_only_when_its_lock_is_absent_or_stale(tmp_path: Path) -> None:
    def files(session_id: str, lock: str | None) -> list[Path]:
        made = [tmp_path / f"{session_id}{suffix}" for suffix in kiro_sessions.SESSION_FILE_SUFFIXES]
        for path in made:
            path.write_text("transcript")
        if lock is not None:
            (tmp_path / f"{session_id}.lock").write_text(lock)
        return made

    live = files("live", json.dumps({"pid": os.getpid()}))
    unreadable = files("garbled", "not json")
    dead_child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_child.wait()
    stale = files("stale", json.dumps({"pid": dead_child.pid}))
    unlocked = files("unlocked", None)

    for session_id, kept in (("live", live), ("garbled", unreadable)):
        assert kiro_sessions.session_in_use(session_id, tmp_path)
        assert kiro_sessions.remove_session_files(session_id, tmp_path) is False
        assert all(p.exists() for p in kept) and (tmp_path / f"{session_id}.lock").exists()
    for session_id in ("stale", "unlocked"):
        assert not kiro_sessions.session_in_use(session_id, tmp_path)
        assert kiro_sessions.remove_session_files(session_id, tmp_path) is True
    assert not any(p.exists() for p in stale + unlocked) and not (tmp_path / "stale.lock").exists()
