"""``kirocrew computer apps|doctor|call|keystone`` as the real CLI in a subprocess, and a cheap ``--help``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import audit_records, runner_argv, write_keystone

ON = {"enabled": True, "allowed_apps": [], "extra_denied_apps": []}


def fake(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI with the test-only fake-desktop backend plugin registered."""
    return subprocess.run(runner_argv(*args), capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env={**os.environ, "TMPDIR": str(tmp_path)})


def test_kirocrew_help_lists_the_commands_without_importing_the_mcp_sdk_or_the_chokepoint() -> None:
    probe = ("import sys\nfrom kirocrew_core.cli import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "heavy = sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'starlette', "
             "'kirocrew_computer.chokepoint', 'kirocrew_computer.server')))\nprint('HEAVY', heavy)\n")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "mcp-computer" in result.stdout and "  computer " in result.stdout
    assert "HEAVY []" in result.stdout


def test_apps_is_gated_by_the_keystone(kirocrew) -> None:
    result = kirocrew("computer", "apps")
    assert result.returncode == 1
    assert result.stdout.startswith("Error: computer use is off")
    assert audit_records()[-1]["fields"] == {"code": "keystone_off", "tool": "computer_list_apps"}


def test_apps_lists_what_policy_allows_once_the_keystone_is_on(tmp_path: Path) -> None:
    write_keystone({**ON, "extra_denied_apps": ["Calculator"]})
    result = fake("computer", "apps", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Notes (app id org.example.Notes" in result.stdout and "Calculator" not in result.stdout


def test_doctor_is_not_gated_and_reports_keystone_and_backend(kirocrew, tmp_path: Path) -> None:
    plain = kirocrew("computer", "doctor", "--json")
    assert plain.returncode == 0, plain.stderr
    report = json.loads(plain.stdout)
    assert report["platform"] == sys.platform and report["keystone"]["enabled"] is False
    assert set(report) >= {"display", "accessibility_bus", "backend"}
    with_fake = json.loads(fake("computer", "doctor", "--json", tmp_path=tmp_path).stdout)
    assert (with_fake["backend"]["name"], with_fake["backend"]["available"]) == ("fake-desktop", True)
    assert audit_records() == []  # doctor acts on nothing, so it records nothing


def test_call_runs_a_sequence_in_one_process_so_indices_stay_valid(tmp_path: Path) -> None:
    write_keystone(ON)
    calls = [{"tool": "computer_get_state", "args": {"app": "Notes"}},
             {"tool": "computer_click", "args": {"app": "Notes", "element_index": 3}},
             {"tool": "computer_click", "args": {"app": "Notes", "element_index": 3}}]
    result = fake("computer", "call", "--calls", json.dumps(calls), "--json", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    replies = json.loads(result.stdout)
    assert [reply["code"] for reply in replies] == ["ok", "ok", "ok"]
    assert "saved 2 times" in replies[2]["text"]


def test_call_exits_non_zero_when_any_call_was_refused_but_runs_the_rest(tmp_path: Path) -> None:
    write_keystone(ON)
    calls = [{"tool": "computer_click", "args": {"app": "Notes", "element_index": 3}},
             {"tool": "computer_get_state", "args": {"app": "Notes"}}]
    result = fake("computer", "call", "--calls", json.dumps(calls), "--json", tmp_path=tmp_path)
    assert result.returncode == 1
    assert [reply["code"] for reply in json.loads(result.stdout)] == ["no_state", "ok"]


def test_call_with_key_value_words_keeps_strings_as_strings(tmp_path: Path) -> None:
    write_keystone(ON)
    result = fake("computer", "call", "computer_get_state", "app=Notes", "max_tree_nodes=3", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "[tree truncated at 3 nodes]" in result.stdout


def test_call_is_gated_and_audited_like_an_agent_call(kirocrew) -> None:
    result = kirocrew("computer", "call", "computer_get_state", "app=Notes")
    assert result.returncode == 1 and result.stdout.startswith("Error: computer use is off")
    assert audit_records()[-1]["outcome"] == "refused"


def test_bad_call_input_is_a_clear_error_with_a_code(kirocrew) -> None:
    result = kirocrew("computer", "call", "--calls", "{not json")
    assert result.returncode == 2 and "error[invalid_arguments]" in result.stderr
