"""config.toml: typed keys, comment-preserving writes, and bad files left alone."""

from __future__ import annotations

import json
import os
import stat

import pytest

from kirocrew_core import config, home
from kirocrew_core.config import (
    ConfigKey,
    get_value,
    list_values,
    load_config,
    register_key,
    set_value,
    unset_value,
)
from kirocrew_core.errors import BadInputError, MalformedFileError

COMMENTED = """\
# kirocrew settings, edited by hand
[dashboard]
# slow servers on this machine
mcp_probe_timeout_secs = 40  # was 15

[gateway]
port = 7317   # the usual one
"""

MALFORMED = b"# my settings\n[gateway]\nport = 8000\nhost = \n"


@pytest.fixture
def config_path():
    return home.config_file()


@pytest.fixture
def private_registry(monkeypatch):
    """Let a test declare keys without leaking them into the next test."""
    monkeypatch.setattr(config, "_REGISTRY", dict(config._REGISTRY))


def _write(path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def test_an_absent_file_gives_every_default(config_path):
    loaded = load_config()
    assert loaded.get("dashboard.mcp_probe_timeout_secs") == 15
    assert loaded.get("gateway.port") == 7317
    assert loaded.get("gateway.host") == "127.0.0.1"
    assert loaded.get("governance.ceiling") == []
    assert not loaded.is_set("gateway.port")
    assert not config_path.exists()


def test_a_value_in_the_file_wins_over_the_default_and_a_dotted_top_level_key_counts(config_path):
    _write(config_path, 'gateway.port = 9000\n[governance]\nceiling = ["@github"]\n')
    loaded = load_config()
    assert loaded.get("gateway.port") == 9000
    assert loaded.is_set("gateway.port")
    assert loaded.get("governance.ceiling") == ["@github"]
    assert loaded.get("gateway.host") == "127.0.0.1"


def test_set_keeps_every_comment_and_changes_only_the_value(config_path):
    _write(config_path, COMMENTED)
    assert set_value("dashboard.mcp_probe_timeout_secs", "60") == 60
    text = config_path.read_text()
    assert text == COMMENTED.replace("= 40  # was 15", "= 60  # was 15")
    assert get_value("dashboard.mcp_probe_timeout_secs") == 60


def test_set_through_the_cli_keeps_comments_and_adds_a_new_table(kirocrew, config_path):
    _write(config_path, COMMENTED)
    result = kirocrew("config", "set", "governance.ceiling", '["@github/delete_repo", "@Slack"]')
    assert result.returncode == 0, result.stderr
    text = config_path.read_text()
    assert text.startswith(COMMENTED)
    assert "# slow servers on this machine" in text and "# the usual one" in text
    assert load_config().get("governance.ceiling") == ["@github/delete_repo", "@Slack"]
    shown = kirocrew("config", "get", "governance.ceiling")
    assert json.loads(shown.stdout) == ["@github/delete_repo", "@Slack"]


def test_a_list_can_be_set_comma_separated_or_emptied(config_path):
    assert set_value("governance.ceiling", " @a , @b/x ,") == ["@a", "@b/x"]
    assert load_config().get("governance.ceiling") == ["@a", "@b/x"]
    assert set_value("governance.ceiling", "") == []
    assert load_config().get("governance.ceiling") == []


def test_a_string_printed_by_get_can_be_set_back_without_gaining_quotes(kirocrew):
    printed = kirocrew("config", "get", "gateway.host").stdout.strip()
    assert printed == '"127.0.0.1"'
    assert kirocrew("config", "set", "gateway.host", printed).returncode == 0
    assert load_config().get("gateway.host") == "127.0.0.1"


def test_a_malformed_file_is_reported_with_file_and_line_and_left_byte_identical(kirocrew, config_path):
    _write(config_path, MALFORMED)
    for args in (("list",), ("get", "gateway.port"), ("set", "gateway.port", "9000"), ("unset", "gateway.port")):
        result = kirocrew("config", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert "error[config_malformed]" in result.stderr
        assert f"{config_path}:4:" in result.stderr
        assert config_path.read_bytes() == MALFORMED


def test_load_config_names_the_line_and_column_of_bad_toml(config_path):
    _write(config_path, MALFORMED)
    with pytest.raises(MalformedFileError) as excinfo:
        load_config()
    assert excinfo.value.code == "config_malformed"
    assert excinfo.value.line == 4
    assert excinfo.value.exit_code == 2
    assert str(config_path) in excinfo.value.message


def test_an_unknown_key_on_the_command_line_lists_the_valid_keys(kirocrew, config_path):
    result = kirocrew("config", "set", "gateway.prot", "9000")
    assert result.returncode == 2
    assert "error[unknown_config_key]" in result.stderr
    for name in ("gateway.port", "gateway.host", "governance.ceiling", "dashboard.mcp_probe_timeout_secs"):
        assert name in result.stderr
    assert not config_path.exists()


def test_an_unknown_key_in_the_file_is_an_error_naming_the_file_and_the_key(config_path):
    _write(config_path, "[gateway]\nport = 9000\nprot = 1\n")
    with pytest.raises(MalformedFileError) as excinfo:
        load_config()
    assert excinfo.value.code == "config_invalid"
    assert str(config_path) in excinfo.value.message
    assert "'gateway.prot'" in excinfo.value.message
    assert "gateway.port" in excinfo.value.message  # the valid keys are listed


def test_a_value_of_the_wrong_type_in_the_file_is_an_error_naming_the_key(config_path):
    for text in ('[gateway]\nport = "9000"\n', "[gateway]\nport = true\n", '[governance]\nceiling = "@a"\n'):
        _write(config_path, text)
        with pytest.raises(MalformedFileError) as excinfo:
            load_config()
        assert excinfo.value.code == "config_invalid"
        assert str(config_path) in excinfo.value.message
        assert ("gateway.port" in excinfo.value.message) or ("governance.ceiling" in excinfo.value.message)


def test_an_out_of_range_value_in_the_file_is_an_error(config_path):
    _write(config_path, "[dashboard]\nmcp_probe_timeout_secs = 0\n")
    with pytest.raises(MalformedFileError, match="between 1 and 600"):
        load_config()


@pytest.mark.parametrize(
    ("name", "raw", "problem"),
    [
        ("gateway.port", "eighty", "expected an integer"),
        ("gateway.port", "70000", "between 0 and 65535"),
        ("gateway.port", "-1", "between 0 and 65535"),
        ("dashboard.mcp_probe_timeout_secs", "601", "between 1 and 600"),
        ("dashboard.mcp_probe_timeout_secs", "1.5", "expected an integer"),
        ("governance.ceiling", "github", "@server or @server/tool"),
        ("governance.ceiling", "[1, 2]", "list of strings"),
        ("governance.ceiling", '["@a", ', "not a TOML value"),
        ("gateway.host", "two words", "host name or address"),
    ],
)
def test_a_bad_value_on_the_command_line_is_rejected_and_the_file_left_alone(config_path, name, raw, problem):
    _write(config_path, COMMENTED)
    with pytest.raises(BadInputError, match=problem) as excinfo:
        set_value(name, raw)
    assert excinfo.value.code == "invalid_config_value"
    assert config_path.read_text() == COMMENTED


def test_a_bad_value_through_the_cli_exits_2_and_creates_no_file(kirocrew, config_path):
    result = kirocrew("config", "set", "gateway.port", "70000")
    assert result.returncode == 2
    assert "error[invalid_config_value]" in result.stderr
    assert not config_path.exists()


def test_setting_the_broken_key_itself_repairs_the_file(config_path):
    _write(config_path, '# keep\n[gateway]\nport = "oops"  # typo\n')
    set_value("gateway.port", "9000")
    assert config_path.read_text() == "# keep\n[gateway]\nport = 9000  # typo\n"


def test_set_keeps_the_file_mode_and_a_new_file_lands_in_a_private_crew_home(config_path):
    set_value("gateway.port", "9000")
    assert stat.S_IMODE(os.stat(home.crew_home()).st_mode) == 0o700
    os.chmod(config_path, 0o640)
    set_value("gateway.port", "9001")
    assert stat.S_IMODE(os.stat(config_path).st_mode) == 0o640
    assert load_config().get("gateway.port") == 9001


def test_unset_restores_the_default_and_drops_a_table_left_empty(config_path):
    _write(config_path, "[gateway]\nport = 9000\n\n[dashboard]\n# tuned\nmcp_probe_timeout_secs = 30\n")
    assert unset_value("gateway.port") is True
    assert unset_value("dashboard.mcp_probe_timeout_secs") is True
    text = config_path.read_text()
    assert "[gateway]" not in text
    assert "[dashboard]\n# tuned\n" in text  # a table with a comment is the user's; it stays
    assert load_config().get("gateway.port") == 7317


def test_unset_of_a_key_that_is_not_set_does_not_rewrite_the_file(config_path):
    _write(config_path, COMMENTED)
    before = os.stat(config_path).st_ino
    assert unset_value("gateway.host") is False
    assert config_path.read_text() == COMMENTED
    assert os.stat(config_path).st_ino == before


def test_list_shows_each_key_with_value_default_marker_and_doc(kirocrew, config_path):
    _write(config_path, "[gateway]\nport = 9000\n")
    rows = {row["key"]: row for row in json.loads(kirocrew("config", "list", "--json").stdout)}
    assert rows["gateway.port"] == {
        "key": "gateway.port",
        "value": 9000,
        "default": 7317,
        "set": True,
        "type": "int",
        "doc": rows["gateway.port"]["doc"],
    }
    assert rows["gateway.port"]["doc"]
    assert rows["gateway.host"]["set"] is False
    text = kirocrew("config", "list").stdout
    assert "gateway.port = 9000\n" in text
    assert 'gateway.host = "127.0.0.1"  (default)' in text
    entries = {entry.key: entry for entry in list_values()}
    assert entries["gateway.port"] == ("gateway.port", 9000, 7317, True, entries["gateway.port"].doc)


def test_a_plugin_key_is_typed_validated_and_listed_once_registered(private_registry, config_path):
    register_key(ConfigKey("myplugin.verbose", bool, False, "Say more."))
    assert set_value("myplugin.verbose", "TRUE") is True
    assert load_config().get("myplugin.verbose") is True
    with pytest.raises(BadInputError, match="true or false"):
        set_value("myplugin.verbose", "yes")
    assert "myplugin.verbose" in {entry.key for entry in list_values()}


def test_a_conflicting_or_malformed_key_declaration_is_refused(private_registry):
    with pytest.raises(ValueError, match="already declared"):
        register_key(ConfigKey("gateway.port", int, 1, "Another port."))
    with pytest.raises(ValueError, match="table.key"):
        ConfigKey("toplevel", int, 1, "No table.")
    with pytest.raises(ValueError, match="default"):
        ConfigKey("myplugin.depth", int, "three", "Depth.")


def test_the_doctor_check_fails_on_a_malformed_config_and_names_the_file(config_path):
    from kirocrew_core.builtin.doctor import check_config

    assert check_config().status == "ok"
    _write(config_path, MALFORMED)
    result = check_config()
    assert result.status == "fail"
    assert f"{config_path}:4" in result.detail


def test_config_changes_are_recorded_in_the_security_event_log():
    from kirocrew_core import audit

    config.set_value("governance.ceiling", '["@notion"]')
    config.unset_value("governance.ceiling")
    records = audit.tail(5)
    assert [(r["event"], r["fields"]) for r in records] == [
        ("config.set", {"key": "governance.ceiling", "value": ["@notion"]}),
        ("config.unset", {"key": "governance.ceiling", "value": None}),
    ]
    assert audit.verify().ok


def test_config_validates_ceiling_patterns_without_importing_governance_which_reads_it() -> None:
    import ast
    import inspect

    from kirocrew_core import config as config_module

    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(config_module)))
                if isinstance(node, ast.ImportFrom)}
    assert "kirocrew_core.governance" not in imported, "config <-> governance would be an import cycle"
