"""``clean_stale_managed_mcp``: only kirocrew's own names leave provider globals, and nothing else moves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, home
from kirocrew_core.contributions import ManagedMcpServer
from kirocrew_mcp.cleanup import clean_stale_managed_mcp
from kirocrew_mcp.health import check_provider_globals
from kirocrew_mcp.render import rebuild_agent_config
from kirocrew_testing.plugins import ManagedServers

STALE = {"command": "/opt/old/kirocrew", "args": ["mcp-core"]}
USER = {"command": "/bin/cat", "args": ["-u"], "env": {"TOKEN": "x"}}


Managed = ManagedServers


@pytest.fixture(autouse=True)
def _manager(plugin_manager: Any) -> Any:
    return plugin_manager


def register_companion(pm: Any) -> None:
    import kirocrew_companion.plugin

    pm.register(kirocrew_companion.plugin, name="companion")


def write_text(path: Path, text: str) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path.read_bytes()


def kiro_global_text(document: Any, **dumps: Any) -> bytes:
    return write_text(home.kiro_global_mcp_file(), json.dumps(document, **dumps))


def test_only_managed_names_are_removed_and_the_rest_is_byte_for_byte_what_it_was():
    document = {"theme": "dark", "mcpServers": {"kirocrew-core": STALE, "mine": USER, "kirocrew-cron": STALE,
                                                "kirocrew-core-fork": USER}}
    kiro_global_text(document, indent=2)

    report = clean_stale_managed_mcp()

    expected = {"theme": "dark", "mcpServers": {"mine": USER, "kirocrew-core-fork": USER}}
    assert home.kiro_global_mcp_file().read_bytes() == json.dumps(expected, indent=2).encode()
    assert report.removed == {"kiro": ["kirocrew-core", "kirocrew-cron"]}
    assert report.scopes[0].formatting_preserved is True
    assert report.ok


@pytest.mark.parametrize("dumps", [{"indent": 4}, {"indent": "\t"}, {}, {"indent": 2, "ensure_ascii": False}],
                         ids=["four-spaces", "tabs", "one-line", "unicode"])
def test_the_files_own_formatting_is_kept(dumps):
    servers = {"kirocrew-computer": STALE, "mine": USER}
    document = {"note": "café", "mcpServers": servers}
    kiro_global_text(document, **dumps)

    report = clean_stale_managed_mcp()

    servers.pop("kirocrew-computer")
    assert home.kiro_global_mcp_file().read_text() == json.dumps(document, **dumps)
    assert report.scopes[0].formatting_preserved is True


def test_a_hand_formatted_file_is_still_cleaned_and_says_its_layout_changed():
    write_text(home.kiro_global_mcp_file(), '{"mcpServers": {\n  "kirocrew-core": {"command": "x"},\n'
                                            '  "mine": {"command": "y"}}}\n')
    report = clean_stale_managed_mcp()
    assert json.loads(home.kiro_global_mcp_file().read_text()) == {"mcpServers": {"mine": {"command": "y"}}}
    assert report.scopes[0].formatting_preserved is False


def test_a_file_with_nothing_stale_is_not_written_at_all():
    before = kiro_global_text({"mcpServers": {"mine": USER}}, indent=3)
    mtime = home.kiro_global_mcp_file().stat().st_mtime_ns

    report = clean_stale_managed_mcp()

    assert home.kiro_global_mcp_file().read_bytes() == before
    assert home.kiro_global_mcp_file().stat().st_mtime_ns == mtime
    assert report.scopes[0].state == "clean" and report.removed == {}


def test_absent_globals_are_clean_and_stay_absent():
    report = clean_stale_managed_mcp()
    assert [s.state for s in report.scopes] == ["clean"]
    assert not home.kiro_global_mcp_file().exists()


def test_a_malformed_global_is_skipped_and_left_byte_identical():
    before = write_text(home.kiro_global_mcp_file(), '{"mcpServers": {"kirocrew-core": ')
    report = clean_stale_managed_mcp()
    assert home.kiro_global_mcp_file().read_bytes() == before
    assert report.scopes[0].state == "skipped" and "malformed" in report.scopes[0].error
    assert report.ok is False


def test_a_dry_run_reports_and_writes_nothing():
    before = kiro_global_text({"mcpServers": {"kirocrew-core": STALE}}, indent=2)
    report = clean_stale_managed_mcp(dry_run=True)
    assert report.removed == {"kiro": ["kirocrew-core"]}
    assert home.kiro_global_mcp_file().read_bytes() == before
    assert [r for r in audit.tail(100) if r["event"] == "mcp_stale_managed_purged"] == []


def test_a_symlinked_global_stays_a_link_and_its_target_is_cleaned(tmp_path):
    target = tmp_path / "dotfiles" / "mcp.json"
    write_text(target, json.dumps({"mcpServers": {"kirocrew-core": STALE, "mine": USER}}, indent=2))
    home.kiro_global_mcp_file().parent.mkdir(parents=True)
    home.kiro_global_mcp_file().symlink_to(target)

    clean_stale_managed_mcp()

    assert home.kiro_global_mcp_file().is_symlink()
    assert json.loads(target.read_text()) == {"mcpServers": {"mine": USER}}


def test_names_a_plugin_manages_now_and_names_the_last_rebuild_retired_are_removed(plugin_manager):
    managed = Managed(ManagedMcpServer("acme-agent", ("mcp-acme",), True),
                      ManagedMcpServer("acme-gone", ("mcp-gone",), True))
    plugin_manager.register(managed, name="acme")
    rebuild_agent_config()
    managed.servers.pop()  # the plugin stops managing acme-gone: the rebuild records it as retired
    rebuild_agent_config()
    kiro_global_text({"mcpServers": {"acme-agent": STALE, "acme-gone": STALE, "acme-user": USER}}, indent=2)

    report = clean_stale_managed_mcp()

    assert report.removed == {"kiro": ["acme-agent", "acme-gone"]}
    assert json.loads(home.kiro_global_mcp_file().read_text()) == {"mcpServers": {"acme-user": USER}}


def test_the_crew_store_is_never_touched():
    before = write_text(home.crew_mcp_file(), json.dumps({"mcpServers": {"kirocrew-core": {"disabled": True}}}))
    clean_stale_managed_mcp()
    assert home.crew_mcp_file().read_bytes() == before


def test_with_the_companion_claude_json_is_cleaned_too(plugin_manager):
    register_companion(plugin_manager)
    claude = home.user_home() / ".claude.json"
    write_text(claude, json.dumps({"numStartups": 4, "mcpServers": {"kirocrew-cron": STALE, "theirs": USER}},
                                  indent=2))

    report = clean_stale_managed_mcp()

    assert report.removed == {"cc": ["kirocrew-cron"]}
    assert json.loads(claude.read_text()) == {"numStartups": 4, "mcpServers": {"theirs": USER}}


def test_without_the_companion_claude_json_is_left_alone():
    claude = home.user_home() / ".claude.json"
    before = write_text(claude, json.dumps({"mcpServers": {"kirocrew-cron": STALE}}))
    report = clean_stale_managed_mcp()
    assert claude.read_bytes() == before
    assert [s.scope for s in report.scopes] == ["kiro"]


def test_the_cleanup_is_recorded_and_doctor_is_satisfied_afterwards(plugin_manager):
    plugin_manager.register(Managed(ManagedMcpServer("kirocrew-core", ("mcp-core",), True)), name="core")
    kiro_global_text({"mcpServers": {"kirocrew-core": STALE}}, indent=2)
    assert check_provider_globals().status == "warn"

    clean_stale_managed_mcp()

    [record] = [r for r in audit.tail(100) if r["event"] == "mcp_stale_managed_purged"]
    assert record["fields"]["names"] == ["kirocrew-core"]
    assert record["fields"]["scope"] == "kiro"
    assert check_provider_globals().status == "ok"


def test_doctor_and_cli_setup_agree_on_a_historic_managed_name_in_the_kiro_global(isolated_homes):
    from kirocrew_core.jsonfile import write_json_atomic
    from kirocrew_core.home import kiro_global_mcp_file
    from kirocrew_mcp.health import check_provider_globals

    write_json_atomic(kiro_global_mcp_file(), {"mcpServers": {"kirocrew-cron": {"command": "old-kirocrew"}}})
    result = check_provider_globals()
    assert result.status == "warn"
    assert "kirocrew-cron" in result.detail
