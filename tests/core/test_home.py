"""home.py: every location follows HOME, KIRO_HOME and KIROCREW_HOME, read on each call."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kirocrew_core import home
from kirocrew_testing.homes import IsolatedHomes


@pytest.fixture
def bare_home(isolated_homes: IsolatedHomes, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Only HOME is set, as on a fresh machine."""
    monkeypatch.delenv(home.KIRO_HOME_ENV, raising=False)
    monkeypatch.delenv(home.CREW_HOME_ENV, raising=False)
    return isolated_homes.user_home


def test_without_overrides_everything_lives_under_home(bare_home: Path) -> None:
    assert home.user_home() == bare_home
    assert home.kiro_home() == bare_home / ".kiro"
    assert home.crew_home() == bare_home / ".kiro" / "crew"
    assert home.config_file() == bare_home / ".kiro" / "crew" / "config.toml"


def test_kiro_home_moves_the_crew_home_with_it(bare_home: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KIRO_HOME", str(tmp_path / "elsewhere"))
    assert home.kiro_home() == tmp_path / "elsewhere"
    assert home.crew_home() == tmp_path / "elsewhere" / "crew"
    assert home.kiro_agents_dir() == tmp_path / "elsewhere" / "agents"


def test_kirocrew_home_moves_only_the_crew_home(bare_home: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KIROCREW_HOME", str(tmp_path / "crew-data"))
    assert home.crew_home() == tmp_path / "crew-data"
    assert home.kiro_home() == bare_home / ".kiro"
    assert home.audit_log_file() == tmp_path / "crew-data" / "audit" / "sel.jsonl"
    assert home.gateway_token_file() == tmp_path / "crew-data" / "gateway.token"


def test_a_blank_override_counts_as_unset(bare_home: Path, monkeypatch) -> None:
    monkeypatch.setenv("KIRO_HOME", "  ")
    monkeypatch.setenv("KIROCREW_HOME", "")
    assert home.kiro_home() == bare_home / ".kiro"
    assert home.crew_home() == bare_home / ".kiro" / "crew"


def test_a_tilde_in_an_override_means_home(bare_home: Path, monkeypatch) -> None:
    monkeypatch.setenv("KIROCREW_HOME", "~/crew")
    assert home.crew_home() == bare_home / "crew"


def test_paths_follow_the_environment_after_import(bare_home: Path, tmp_path: Path, monkeypatch) -> None:
    before = home.crew_home()
    monkeypatch.setenv("KIROCREW_HOME", str(tmp_path / "later"))
    assert home.crew_home() == tmp_path / "later" != before


def test_the_three_mcp_files_sit_where_kiro_and_kirocrew_expect_them(bare_home: Path, tmp_path: Path,
                                                                      monkeypatch) -> None:
    monkeypatch.setenv("KIRO_HOME", str(tmp_path / "kiro"))
    monkeypatch.setenv("KIROCREW_HOME", str(tmp_path / "crew"))
    assert home.kiro_global_mcp_file() == tmp_path / "kiro" / "settings" / "mcp.json"
    assert home.crew_mcp_file() == tmp_path / "crew" / "mcp.json"
    assert home.rendered_agent_file() == tmp_path / "kiro" / "agents" / "kirocrew.json"


def test_the_oauth_cache_follows_home_not_kiro_home(bare_home: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KIRO_HOME", str(tmp_path / "kiro"))
    assert home.oauth_cache_dir() == bare_home / ".aws" / "sso" / "cache"


def test_the_snapshot_lists_the_current_locations(isolated_homes: IsolatedHomes) -> None:
    homes = home.Homes.current()
    assert homes.user_home == isolated_homes.user_home
    assert homes.kiro_home == isolated_homes.kiro_home
    assert homes.crew_home == isolated_homes.crew_home
    assert homes.crew_mcp_file == isolated_homes.crew_home / "mcp.json"


def test_ensure_crew_home_creates_it_owner_only(isolated_homes: IsolatedHomes) -> None:
    crew = isolated_homes.crew_home
    assert not crew.exists()
    assert home.ensure_crew_home() == crew
    assert crew.is_dir()
    assert stat.S_IMODE(crew.stat().st_mode) == 0o700


def test_ensure_crew_home_creates_it_owner_only_even_with_a_lax_umask(isolated_homes: IsolatedHomes) -> None:
    old = os.umask(0)
    try:
        home.ensure_crew_home()
    finally:
        os.umask(old)
    assert stat.S_IMODE(isolated_homes.crew_home.stat().st_mode) == 0o700


def test_ensure_crew_home_tightens_an_existing_open_folder(isolated_homes: IsolatedHomes) -> None:
    crew = isolated_homes.crew_home
    crew.mkdir(parents=True)
    crew.chmod(0o755)
    (crew / "config.toml").write_text("kept = true\n")
    home.ensure_crew_home()
    assert stat.S_IMODE(crew.stat().st_mode) == 0o700
    assert (crew / "config.toml").read_text() == "kept = true\n"


def test_a_plugin_state_dir_is_a_named_folder_in_the_crew_home(isolated_homes: IsolatedHomes) -> None:
    assert home.state_dir("connections") == isolated_homes.crew_home / "state" / "connections"


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "/etc", "a\\b", "a\0b"])
def test_a_hostile_plugin_state_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a plugin state name"):
        home.state_dir(name)
