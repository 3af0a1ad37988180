"""``kirocrew mcp …``, ``kirocrew cli-setup`` and the MCP doctor checks, run as the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_testing.mcp_fixtures import stdio_server_argv
from kirocrew_testing.plugins import installed_managed_server_names
from kirocrew_testing.scope_files import write_kiro_global, write_mcp_file

CAT = {"command": "/bin/cat", "args": ["-u"]}
STALE = {"command": "/opt/old/kirocrew", "args": ["mcp-core"]}


def stdio_spec(*options: str) -> dict[str, Any]:
    argv = stdio_server_argv(*options)
    return {"command": argv[0], "args": argv[1:]}


write = write_mcp_file
kiro_global = write_kiro_global


def without_companion() -> dict[str, str]:
    return {**os.environ, "KIROCREW_DISABLE_PLUGINS": "companion"}


def rendered() -> dict[str, Any]:
    return json.loads(home.rendered_agent_file().read_text())


def user_servers(servers: dict[str, Any]) -> dict[str, Any]:
    """``servers`` without the installed plugins' managed ones (every render has those too)."""
    managed = installed_managed_server_names()
    return {name: spec for name, spec in servers.items() if name not in managed}


# -- registration --------------------------------------------------------------------------


def test_help_lists_the_mcp_group_and_cli_setup(kirocrew):
    result = kirocrew("--help")
    assert result.returncode == 0
    assert "mcp " in result.stdout and "cli-setup" in result.stdout
    sub = kirocrew("mcp", "--help")
    assert all(command in sub.stdout for command in ("list", "probe", "apply", "rebuild"))


# -- rebuild ------------------------------------------------------------------------------------


def test_rebuild_writes_the_agent_file_then_finds_nothing_to_change(kirocrew):
    kiro_global({"srv": CAT})

    first = kirocrew("mcp", "rebuild")
    second = kirocrew("mcp", "rebuild")

    assert first.returncode == 0 and first.stdout.startswith("wrote ")
    assert second.returncode == 0 and second.stdout.startswith("unchanged:")
    assert user_servers(rendered()["mcpServers"]) == {"srv": CAT}
    assert rendered()["includeMcpJson"] is False


def test_rebuild_says_which_servers_left_because_no_scope_declares_them_any_more(kirocrew):
    kiro_global({"srv": CAT, "gone": CAT})
    assert kirocrew("mcp", "rebuild").returncode == 0
    kiro_global({"srv": CAT})  # kiro-cli mcp remove --name gone

    done = kirocrew("mcp", "rebuild")

    assert done.returncode == 0, done.stderr
    assert "removed (no scope declares them any more): gone" in done.stdout
    assert user_servers(rendered()["mcpServers"]) == {"srv": CAT}


def _rendered_with(servers: dict[str, Any], kirocrew: Any) -> bytes:
    kiro_global(servers)
    assert kirocrew("mcp", "rebuild").returncode == 0
    return home.rendered_agent_file().read_bytes()


def test_rebuild_refuses_a_malformed_scope_file_exits_2_and_writes_nothing(kirocrew):
    agent = _rendered_with({"srv": CAT}, kirocrew)
    home.kiro_global_mcp_file().write_text("{ nope")

    result = kirocrew("mcp", "rebuild")

    assert result.returncode == 2, result.stderr
    assert "error[scope_file_malformed]" in result.stderr and str(home.kiro_global_mcp_file()) in result.stderr
    assert home.kiro_global_mcp_file().read_text() == "{ nope"
    assert home.rendered_agent_file().read_bytes() == agent


def test_rebuild_refuses_a_crew_store_whose_mcp_servers_is_a_list(kirocrew):
    agent = _rendered_with({"srv": CAT}, kirocrew)
    store = write(home.crew_mcp_file(), [CAT])

    result = kirocrew("mcp", "rebuild", "--clean")

    assert result.returncode == 2
    assert "error[scope_file_malformed]" in result.stderr and "mcpServers is not a JSON object" in result.stderr
    assert home.crew_mcp_file().read_bytes() == store
    assert home.rendered_agent_file().read_bytes() == agent


def test_rebuild_refuses_an_unreadable_scope_file_exits_1_and_leaves_it_alone(kirocrew):
    import subprocess
    import sys

    from kirocrew_testing.requirements import without_file_privileges

    agent = _rendered_with({"srv": CAT}, kirocrew)
    store = write(home.crew_mcp_file(), {"mine": CAT})
    home.crew_mcp_file().chmod(0o000)
    exe = Path(sys.executable).with_name("kirocrew")
    result = subprocess.run(without_file_privileges([str(exe), "mcp", "rebuild"]), capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)
    home.crew_mcp_file().chmod(0o600)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "error[scope_file_unreadable]" in result.stderr and "Permission denied" in result.stderr
    assert home.crew_mcp_file().read_bytes() == store
    assert home.rendered_agent_file().read_bytes() == agent


def test_rebuild_refuses_a_scope_file_that_is_a_fifo_without_blocking_on_it(kirocrew):
    agent = _rendered_with({"srv": CAT}, kirocrew)
    home.kiro_global_mcp_file().unlink()
    os.mkfifo(home.kiro_global_mcp_file())

    result = kirocrew("mcp", "rebuild", timeout=30)  # a reader blocked on the FIFO would time out

    assert result.returncode == 1
    assert "error[scope_file_unreadable]" in result.stderr and "not a regular file" in result.stderr
    assert home.rendered_agent_file().read_bytes() == agent


def test_a_refused_rebuild_exits_non_zero_with_its_code(kirocrew):
    home.rendered_agent_file().mkdir(parents=True)
    result = kirocrew("mcp", "rebuild")
    assert result.returncode == 1
    assert "error[agent_file_unreadable]" in result.stderr


def test_rebuild_clean_and_json(kirocrew):
    home.rendered_agent_file().parent.mkdir(parents=True)
    home.rendered_agent_file().write_text(json.dumps({"name": "kirocrew", "mcpServers": {"hand": CAT}}))

    report = json.loads(kirocrew("mcp", "rebuild", "--clean", "--json").stdout)

    assert report["written"] is True
    assert set(report["servers"]) == installed_managed_server_names(), "--clean dropped the hand-added server"


# -- list and probe ---------------------------------------------------------------------------------


def test_list_shows_every_server_with_its_scopes(kirocrew):
    kiro_global({"from-kiro": CAT})
    write(home.crew_mcp_file(), {"from-crew": CAT})
    kirocrew("mcp", "rebuild")

    result = kirocrew("mcp", "list", env=without_companion())

    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "SCOPES", "TOOLS"]
    table = user_servers({line.split()[0]: line.split()[1:] for line in lines[1:]})
    assert table == {"from-kiro": ["unknown", "kirocrew,kiro", "0"], "from-crew": ["unknown", "kirocrew", "0"]}


def test_list_json_with_the_installed_companion_has_its_scope_on_every_row(kirocrew):
    kiro_global({"srv": CAT})
    answer = json.loads(kirocrew("mcp", "list", "--json").stdout)
    assert answer["servers"][0]["presence"] == {"kirocrew": True, "kiro": True, "cc": False}


def test_without_the_companion_claude_json_is_never_consulted(kirocrew):
    (home.user_home() / ".claude.json").write_text("{ nope")
    kiro_global({"srv": CAT})

    answer = json.loads(kirocrew("mcp", "list", "--json", env=without_companion()).stdout)

    assert answer["problems"] == []
    assert answer["servers"][0]["presence"] == {"kirocrew": True, "kiro": True}


def test_list_probe_starts_the_servers_and_shows_their_tools(kirocrew):
    kiro_global({"srv": stdio_spec("--names", "alpha,beta")})
    answer = json.loads(kirocrew("mcp", "list", "--probe", "--json").stdout)
    [row] = answer["servers"]
    assert (row["status"], row["tools"]) == ("ok", ["alpha", "beta"])


def test_probe_one_server_exits_zero_when_it_answers(kirocrew):
    kiro_global({"good": stdio_spec("--tools", "3"), "bad": stdio_spec("--exit-during-handshake")})

    result = kirocrew("mcp", "probe", "good")

    assert result.returncode == 0
    assert result.stdout.splitlines()[1].split()[:2] == ["good", "ok"]
    assert "bad" not in result.stdout


def test_probe_all_exits_one_when_a_server_fails_and_says_why(kirocrew):
    kiro_global({"good": stdio_spec(), "bad": stdio_spec("--exit-during-handshake")})

    result = kirocrew("mcp", "probe", "--all", "--json")

    assert result.returncode == 1
    statuses = {row["name"]: row["status"] for row in json.loads(result.stdout)["servers"]}
    assert statuses == {"good": "ok", "bad": "error"}


def test_probing_an_unknown_server_is_bad_input(kirocrew):
    result = kirocrew("mcp", "probe", "nope")
    assert result.returncode == 2
    assert "error[unknown_server]" in result.stderr


# -- apply ---------------------------------------------------------------------------------------------


def test_apply_from_a_file_changes_the_scopes_and_rebuilds(kirocrew, tmp_path):
    kiro_global({"srv": CAT, "gone": CAT})
    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps({"changes": [{"name": "srv", "kirocrew": False},
                                               {"name": "gone", "uninstall": True}]}))

    result = kirocrew("mcp", "apply", str(changes))

    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["ok"] is True and answer["applied"] == 2
    assert user_servers(rendered()["mcpServers"]) == {"srv": {**CAT, "disabled": True}}
    assert json.loads(home.kiro_global_mcp_file().read_text())["mcpServers"] == {"srv": CAT}


def test_apply_reads_stdin_and_exits_one_when_a_change_is_refused(kirocrew):
    kiro_global({"srv": CAT})
    payload = json.dumps({"changes": [{"name": "bad;name", "kiro": True}]})

    result = kirocrew("mcp", "apply", "-", input=payload)

    assert result.returncode == 1
    assert json.loads(result.stdout)["results"][0]["code"] == "invalid_name"


def test_apply_with_bad_json_changes_nothing_and_exits_two(kirocrew):
    before = kiro_global({"srv": CAT})
    result = kirocrew("mcp", "apply", "-", input="{nope")
    assert result.returncode == 2
    assert "error[bad_json]" in result.stderr
    assert home.kiro_global_mcp_file().read_bytes() == before
    assert not home.rendered_agent_file().exists()


def test_apply_naming_cc_needs_the_companion(kirocrew):
    kiro_global({"srv": CAT})
    payload = json.dumps({"changes": [{"name": "srv", "cc": True}]})
    claude = home.user_home() / ".claude.json"

    refused = kirocrew("mcp", "apply", "-", input=payload, env=without_companion())
    assert refused.returncode == 2 and "error[unknown_scope]" in refused.stderr
    assert not claude.exists()

    accepted = kirocrew("mcp", "apply", "-", input=payload)
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(claude.read_text())["mcpServers"] == {"srv": CAT}


# -- cli-setup -------------------------------------------------------------------------------------------


def test_cli_setup_removes_only_stale_managed_entries_and_reports_them(kirocrew):
    kiro_global({"kirocrew-core": STALE, "mine": CAT}, theme="dark")

    result = kirocrew("cli-setup", env=without_companion())

    assert result.returncode == 0
    assert result.stdout.strip() == f"removed kirocrew-core from {home.kiro_global_mcp_file()}"
    assert json.loads(home.kiro_global_mcp_file().read_text()) == {"theme": "dark", "mcpServers": {"mine": CAT}}
    again = kirocrew("cli-setup", env=without_companion())
    assert again.returncode == 0 and again.stdout.startswith("no stale kirocrew-managed MCP entries")


def test_cli_setup_dry_run_and_json_write_nothing(kirocrew):
    before = kiro_global({"kirocrew-cron": STALE})
    dry = kirocrew("cli-setup", "--dry-run", env=without_companion())
    assert dry.stdout.startswith("would remove kirocrew-cron")
    report = json.loads(kirocrew("cli-setup", "--dry-run", "--json", env=without_companion()).stdout)
    assert report["scopes"][0]["removed"] == ["kirocrew-cron"]
    assert home.kiro_global_mcp_file().read_bytes() == before


def test_cli_setup_with_the_companion_cleans_claude_json_too(kirocrew):
    claude = home.user_home() / ".claude.json"
    write(claude, {"kirocrew-core": STALE, "theirs": CAT}, numStartups=2)

    result = kirocrew("cli-setup")

    assert result.returncode == 0
    assert f"removed kirocrew-core from {claude}" in result.stdout
    assert json.loads(claude.read_text()) == {"numStartups": 2, "mcpServers": {"theirs": CAT}}


def test_cli_setup_leaves_a_malformed_global_alone_and_exits_one(kirocrew):
    home.kiro_global_mcp_file().parent.mkdir(parents=True)
    home.kiro_global_mcp_file().write_text('{"mcpServers": ')
    result = kirocrew("cli-setup", env=without_companion())
    assert result.returncode == 1
    assert "malformed" in result.stderr
    assert home.kiro_global_mcp_file().read_text() == '{"mcpServers": '


# -- doctor ---------------------------------------------------------------------------------------------------


def doctor_checks(kirocrew: Any) -> dict[str, dict[str, str]]:
    result = kirocrew("doctor", "--json", env=without_companion())
    return {row["check"]: row for row in json.loads(result.stdout) if row["check"].startswith("mcp.")}


def test_doctor_runs_every_mcp_check(kirocrew):
    checks = doctor_checks(kirocrew)
    assert sorted(checks) == ["mcp.agent-file", "mcp.probe-status", "mcp.provider-globals", "mcp.scope-files"]
    assert checks["mcp.agent-file"]["status"] == "warn"  # not rendered yet
    assert "no probe results in this process" in checks["mcp.probe-status"]["summary"]


def test_doctor_fails_an_agent_file_that_would_merge_the_kiro_global_twice(kirocrew):
    kirocrew("mcp", "rebuild")
    agent = rendered()
    agent["includeMcpJson"] = True
    home.rendered_agent_file().write_text(json.dumps(agent))

    checks = doctor_checks(kirocrew)

    assert checks["mcp.agent-file"]["status"] == "fail"
    assert "includeMcpJson" in checks["mcp.agent-file"]["detail"]


def test_doctor_api_apply_and_rebuild_agree_a_crew_store_with_a_list_of_servers_is_malformed(
    kirocrew, tmp_path
):
    store = write(home.crew_mcp_file(), [CAT])

    check = doctor_checks(kirocrew)["mcp.scope-files"]
    assert check["status"] == "fail"
    assert "mcpServers is not a JSON object" in check["detail"]

    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps({"changes": [{"name": "srv", "kirocrew": False}]}))
    applied = kirocrew("mcp", "apply", str(changes), env=without_companion())
    assert applied.returncode == 1
    assert json.loads(applied.stdout)["results"][0]["code"] == "scope_file_malformed"

    assert kirocrew("mcp", "rebuild").returncode == 2
    assert home.crew_mcp_file().read_bytes() == store


def test_doctor_fails_every_scope_file_it_cannot_read_without_blocking_on_a_fifo(kirocrew):
    home.kiro_global_mcp_file().parent.mkdir(parents=True)
    os.mkfifo(home.kiro_global_mcp_file())
    home.rendered_agent_file().parent.mkdir(parents=True)
    home.rendered_agent_file().write_text(json.dumps({"name": "kirocrew", "mcpServers": []}))

    result = kirocrew("doctor", "--json", env=without_companion(), timeout=30)
    check = {row["check"]: row for row in json.loads(result.stdout)}["mcp.scope-files"]

    assert result.returncode == 1 and check["status"] == "fail"
    assert "not a regular file" in check["detail"]
    assert "rendered agent" in check["detail"] and "mcpServers is not a JSON object" in check["detail"]


def test_doctor_fails_a_scope_file_it_has_no_permission_to_read(kirocrew):
    import subprocess
    import sys

    from kirocrew_testing.requirements import without_file_privileges

    store = write(home.crew_mcp_file(), {"mine": CAT})
    home.crew_mcp_file().chmod(0o000)
    exe = Path(sys.executable).with_name("kirocrew")
    result = subprocess.run(without_file_privileges([str(exe), "doctor", "--json"]), capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL, env=without_companion())
    home.crew_mcp_file().chmod(0o600)

    check = {row["check"]: row for row in json.loads(result.stdout)}["mcp.scope-files"]
    assert check["status"] == "fail" and "Permission denied" in check["detail"]
    assert home.crew_mcp_file().read_bytes() == store


def test_every_mcp_command_is_in_the_user_docs():
    from kirocrew_mcp.cli import mcp

    docs = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    assert "`kirocrew cli-setup" in docs
    assert [name for name in mcp.commands if f"`kirocrew mcp {name}" not in docs] == []
