"""Apply and uninstall on real files: the batched order, the preservation rule, refusals that change nothing."""

from __future__ import annotations

import hashlib
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, hookimpl, home
from kirocrew_core.contributions import ManagedMcpServer
from kirocrew_core.errors import BadInputError
from kirocrew_mcp.apply import MAX_CHANGES, apply_changes
from kirocrew_mcp.render import rebuild_agent_config
from kirocrew_testing.plugins import ManagedServers
from kirocrew_testing.scope_files import write_kiro_global, write_mcp_file

CAT = {"command": "/bin/cat", "args": ["-u"]}
SH = {"command": "/bin/sh", "args": ["-c", "exit 0"]}


# -- helpers ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _mcp(plugin_manager: Any) -> Any:
    """Core built-ins plus this plugin (so its hookspecs are there); no companion unless a test adds it."""
    import kirocrew_mcp.plugin

    plugin_manager.register(kirocrew_mcp.plugin, name="mcp")
    return plugin_manager


def register_companion(pm: Any) -> None:
    import kirocrew_companion.plugin

    pm.register(kirocrew_companion.plugin, name="companion")


Managed = ManagedServers


class RebuildCounter:
    """A plugin the rebuild consults exactly once per run (``extra_mcp_servers``)."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def extra_mcp_servers(self) -> dict[str, dict[str, Any]]:
        self.calls += 1
        return {}


write = write_mcp_file
kiro_global = write_kiro_global


def crew_store(servers: dict[str, Any]) -> bytes:
    return write(home.crew_mcp_file(), servers)


def claude_json(servers: dict[str, Any], **top: Any) -> bytes:
    return write(home.user_home() / ".claude.json", servers, **top)


def servers_in(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())["mcpServers"]


def store() -> dict[str, Any]:
    return servers_in(home.crew_mcp_file())


def rendered() -> dict[str, Any]:
    return servers_in(home.rendered_agent_file())


def apply(*changes: dict[str, Any]) -> dict[str, Any]:
    return apply_changes({"changes": list(changes)}).as_dict()


def result(outcome: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return outcome["results"][index]


def fingerprint(path: Path) -> tuple[str, int] | None:
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def sel_events(event: str) -> list[dict[str, Any]]:
    return [r for r in audit.tail(1000) if r.get("event") == event]


_opened: list[str] | None = None
_hooked = False


def record_opens() -> list[str]:
    """Start recording every path this process opens (a real audit hook; it stays installed, idle)."""
    global _opened, _hooked
    if not _hooked:
        sys.addaudithook(lambda event, args: _opened.append(str(args[0])) if (
            _opened is not None and event == "open" and args) else None)
        _hooked = True
    _opened = []
    return _opened


@pytest.fixture
def record_opened() -> Any:
    """``record_opened()`` starts recording the paths this process opens and returns the live list."""
    global _opened
    yield record_opens
    _opened = None


# -- uninstall ----------------------------------------------------------------------


def test_uninstall_removes_the_server_from_every_scope_and_the_agent_file():
    kiro_global({"gone": CAT, "stays": SH})
    crew_store({"gone": {"disabledTools": ["x"]}})
    rebuild_agent_config()
    assert "gone" in rendered()

    outcome = apply({"name": "gone", "uninstall": True})

    assert result(outcome)["actions"] == {"kirocrew": "removed", "kiro": "removed", "agent": "removed"}
    assert "gone" not in servers_in(home.kiro_global_mcp_file())
    assert "gone" not in store()
    assert sorted(rendered()) == ["stays"]
    rebuild_agent_config()
    assert "gone" not in rendered(), "the rebuild's merge base must not resurrect it"


def test_uninstall_deletes_a_server_that_lives_only_in_the_agent_file():
    home.rendered_agent_file().parent.mkdir(parents=True)
    home.rendered_agent_file().write_text(json.dumps({"name": "kirocrew", "mcpServers": {"hand-added": CAT},
                                                      "tools": ["@hand-added"]}))

    outcome = apply({"name": "hand-added", "uninstall": True})

    assert result(outcome)["actions"]["agent"] == "removed"
    assert "hand-added" not in rendered()
    assert "@hand-added" not in json.loads(home.rendered_agent_file().read_text())["tools"]


def test_uninstalling_again_changes_nothing():
    kiro_global({"gone": CAT, "stays": SH})
    rebuild_agent_config()
    apply({"name": "gone", "uninstall": True})
    before = {p: fingerprint(p) for p in (home.kiro_global_mcp_file(), home.rendered_agent_file())}

    outcome = apply({"name": "gone", "uninstall": True})

    assert result(outcome)["actions"] == {"kirocrew": "noop", "kiro": "noop", "agent": "noop"}
    assert {p: fingerprint(p) for p in before} == before


def test_uninstall_by_row_name_removes_the_slash_key_the_row_was_folded_from():
    kiro_global({"@acme/tools": CAT})
    rebuild_agent_config()
    assert "acme-tools" in rendered()

    apply({"name": "acme-tools", "uninstall": True})

    assert servers_in(home.kiro_global_mcp_file()) == {}
    assert "acme-tools" not in rendered()


def test_uninstall_is_recorded_in_the_sel():
    kiro_global({"gone": CAT})
    apply({"name": "gone", "uninstall": True})
    [record] = sel_events("mcp_uninstall")
    assert record["fields"]["server"] == "gone"
    assert record["fields"]["actions"]["kiro"] == "removed"


# -- the kirocrew switch --------------------------------------------------------------


def test_switching_kirocrew_off_leaves_the_kiro_global_byte_identical_and_renders_disabled():
    kiro_global({"srv": CAT})
    rebuild_agent_config()
    before = fingerprint(home.kiro_global_mcp_file())

    outcome = apply({"name": "srv", "kirocrew": False})

    assert result(outcome)["actions"] == {"kirocrew": "disabled"}
    assert fingerprint(home.kiro_global_mcp_file()) == before
    assert store() == {"srv": {"disabled": True}}, "a preference-only stub: the user's file keeps the launch"
    assert rendered()["srv"]["disabled"] is True


def test_switching_kirocrew_back_on_clears_the_flag_only():
    kiro_global({"srv": CAT})
    crew_store({"srv": {"disabled": True, "disabledTools": ["x"]}})
    rebuild_agent_config()

    outcome = apply({"name": "srv", "kirocrew": True})

    assert result(outcome)["actions"] == {"kirocrew": "enabled"}
    assert store() == {"srv": {"disabledTools": ["x"]}}
    assert "disabled" not in rendered()["srv"]


def test_switching_off_a_server_only_the_agent_file_has_seeds_the_store_with_its_spec():
    home.rendered_agent_file().parent.mkdir(parents=True)
    home.rendered_agent_file().write_text(json.dumps({"name": "kirocrew", "mcpServers": {"hand": CAT}}))

    apply({"name": "hand", "kirocrew": False})

    assert store() == {"hand": {**CAT, "disabled": True}}
    assert rendered()["hand"]["disabled"] is True


def test_enabling_kirocrew_on_a_server_muted_in_the_kiro_global_says_so():
    kiro_global({"srv": {**CAT, "disabled": True}})
    before = fingerprint(home.kiro_global_mcp_file())

    outcome = apply({"name": "srv", "kirocrew": True})

    assert result(outcome)["actions"] == {"kirocrew": "disabled_in_shared"}
    assert fingerprint(home.kiro_global_mcp_file()) == before


# -- scope adds and removes ---------------------------------------------------------------


def test_adding_to_the_kiro_scope_copies_the_launch_spec_without_kirocrew_only_fields():
    crew_store({"srv": {**CAT, "env": {"A": "1"}, "disabledTools": ["t"], "autoApprove": ["t"], "timeout": 5}})

    outcome = apply({"name": "srv", "kiro": True})

    assert result(outcome)["actions"] == {"kiro": "added"}
    assert servers_in(home.kiro_global_mcp_file()) == {"srv": {**CAT, "env": {"A": "1"}, "timeout": 5}}


def test_a_new_kiro_global_is_created_owner_only_and_an_existing_one_keeps_its_mode():
    crew_store({"srv": CAT, "other": SH})
    apply({"name": "srv", "kiro": True})
    assert stat.S_IMODE(home.kiro_global_mcp_file().stat().st_mode) == 0o600

    home.kiro_global_mcp_file().chmod(0o640)
    apply({"name": "other", "kiro": True})
    assert stat.S_IMODE(home.kiro_global_mcp_file().stat().st_mode) == 0o640


def test_removing_from_the_kiro_scope_keeps_the_files_other_content():
    kiro_global({"srv": CAT, "keep": SH, "odd": "not an object"}, theme="dark")

    apply({"name": "srv", "kiro": False, "kirocrew": False})

    document = json.loads(home.kiro_global_mcp_file().read_text())
    assert document == {"theme": "dark", "mcpServers": {"keep": SH, "odd": "not an object"}}


def test_enabling_in_a_scope_that_has_the_server_muted_clears_the_mute():
    kiro_global({"srv": {**CAT, "disabled": True}})
    outcome = apply({"name": "srv", "kiro": True})
    assert result(outcome)["actions"] == {"kiro": "enabled"}
    assert servers_in(home.kiro_global_mcp_file()) == {"srv": CAT}


def test_adding_a_server_declared_nowhere_reports_missing_spec_and_writes_nothing():
    outcome = apply({"name": "ghost", "kiro": True})
    assert result(outcome)["code"] == "missing_spec"
    assert not home.kiro_global_mcp_file().exists()


# -- the preservation rule -------------------------------------------------------------------


def test_removing_the_last_shared_copy_while_kirocrew_keeps_the_server_copies_it_into_the_store_first():
    kiro_global({"srv": CAT})
    rebuild_agent_config()

    outcome = apply({"name": "srv", "kirocrew": True, "kiro": False})

    assert result(outcome)["actions"] == {"kirocrew": "preserved", "kiro": "removed"}
    assert store() == {"srv": CAT}
    assert servers_in(home.kiro_global_mcp_file()) == {}
    rebuild_agent_config(clean=True)
    assert rendered()["srv"] == CAT, "even a clean rebuild still has it"


def test_the_rule_applies_when_the_change_leaves_kirocrew_unsaid_and_sessions_see_the_server():
    kiro_global({"srv": CAT})
    rebuild_agent_config()
    apply({"name": "srv", "kiro": False})
    assert store() == {"srv": CAT}


def test_a_preference_stub_in_the_store_gets_the_launch_spec_under_its_preferences():
    kiro_global({"srv": CAT})
    crew_store({"srv": {"disabledTools": ["x"]}})
    rebuild_agent_config()

    apply({"name": "srv", "kirocrew": True, "kiro": False})

    assert store() == {"srv": {**CAT, "disabledTools": ["x"]}}


def test_no_copy_is_made_while_another_scope_still_declares_the_server(plugin_manager):
    register_companion(plugin_manager)
    kiro_global({"srv": CAT})
    claude_json({"srv": CAT})
    rebuild_agent_config()

    outcome = apply({"name": "srv", "kirocrew": True, "kiro": False})

    assert result(outcome)["actions"] == {"kirocrew": "noop", "kiro": "removed"}
    assert not home.crew_mcp_file().exists()


def test_a_server_switched_off_for_kirocrew_keeps_its_spec_when_its_last_shared_copy_goes():
    kiro_global({"srv": CAT})
    crew_store({"srv": {"disabled": True}})
    rebuild_agent_config()

    outcome = apply({"name": "srv", "kiro": False})

    assert result(outcome)["actions"] == {"kirocrew": "preserved", "kiro": "removed"}
    assert store() == {"srv": {**CAT, "disabled": True}}
    back_on = apply({"name": "srv", "kirocrew": True})
    assert result(back_on)["actions"] == {"kirocrew": "enabled"}
    rebuild_agent_config(clean=True)
    assert rendered()["srv"] == CAT


def test_removing_a_server_kirocrew_does_not_show_copies_nothing():
    kiro_global({"srv": CAT})  # never rendered: kirocrew sessions do not see it
    outcome = apply({"name": "srv", "kiro": False})
    assert result(outcome)["actions"] == {"kiro": "removed"}
    assert not home.crew_mcp_file().exists()


def test_switching_kirocrew_off_and_removing_the_last_copy_keeps_the_config_disabled():
    kiro_global({"srv": CAT})
    rebuild_agent_config()

    apply({"name": "srv", "kirocrew": False, "kiro": False})

    assert store() == {"srv": {**CAT, "disabled": True}}
    assert rendered()["srv"]["disabled"] is True


# -- tool overrides ------------------------------------------------------------------------------


def test_tool_overrides_land_in_the_store_seeded_from_the_effective_list():
    kiro_global({"srv": {**CAT, "disabledTools": ["a"]}})
    before = fingerprint(home.kiro_global_mcp_file())

    outcome = apply({"name": "srv", "toolOverrides": {"b": False, "a": False, "c": True}})

    assert result(outcome)["tools"] == {"b": "disabled"}
    assert store() == {"srv": {"disabledTools": ["a", "b"]}}
    assert fingerprint(home.kiro_global_mcp_file()) == before
    assert rendered()["srv"]["disabledTools"] == ["a", "b"]


def test_re_enabling_a_tool_removes_it_from_the_list():
    crew_store({"srv": {**CAT, "disabledTools": ["a", "b"]}})
    outcome = apply({"name": "srv", "toolOverrides": {"a": True}})
    assert result(outcome)["tools"] == {"a": "enabled"}
    assert store()["srv"]["disabledTools"] == ["b"]


def test_a_hostile_tool_name_is_rejected_and_the_rest_applied():
    crew_store({"srv": CAT})

    outcome = apply({"name": "srv", "toolOverrides": {"ok_tool": False, "../x": False, "a/b": False}})

    assert result(outcome)["tools"] == {"ok_tool": "disabled"}
    assert sorted(result(outcome)["tools_rejected"]) == ["../x", "a/b"]
    assert store()["srv"]["disabledTools"] == ["ok_tool"]
    assert sel_events("mcp_apply_rejected_tool_name")[0]["fields"]["server"] == "srv"


# -- refusals --------------------------------------------------------------------------------------


HOSTILE = ["../etc", "a/../b", ".hidden", "/abs", "-flag", "has space", "tab\tname", "nul\x00byte",
           "semi;colon", "pi|pe", "dol$lar", "back`tick", "x" * 129, ""]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_name_is_refused_and_no_file_is_touched(name):
    kiro_global({"srv": CAT})
    crew_store({"srv": CAT})
    paths = [home.kiro_global_mcp_file(), home.crew_mcp_file(), home.rendered_agent_file()]
    before = {p: fingerprint(p) for p in paths}

    outcome = apply({"name": name, "kiro": True, "kirocrew": False, "toolOverrides": {"t": False}})

    assert (result(outcome)["ok"], result(outcome)["code"]) == (False, "invalid_name")
    assert {p: fingerprint(p) for p in paths} == before
    assert outcome["rebuild"]["ran"] is False
    assert len(sel_events("mcp_apply_rejected_name")) == 1


def test_one_hostile_name_does_not_block_the_rest_of_the_batch():
    kiro_global({"srv": CAT})
    outcome = apply({"name": "bad name", "uninstall": True}, {"name": "srv", "kirocrew": False})
    assert [r["ok"] for r in outcome["results"]] == [False, True]
    assert store() == {"srv": {"disabled": True}}


@pytest.mark.parametrize("payload, code", [
    ([], "bad_changes"),
    ({"changes": {}}, "bad_changes"),
    ({"changes": [], "extra": 1}, "bad_changes"),
    ({"changes": ["srv"]}, "bad_changes"),
    ({"changes": [{"name": 7}]}, "bad_changes"),
    ({"changes": [{"name": "srv", "kiro": "yes"}]}, "bad_changes"),
    ({"changes": [{"name": "srv", "uninstall": 1}]}, "bad_changes"),
    ({"changes": [{"name": "srv", "toolOverrides": {"t": "off"}}]}, "bad_changes"),
    ({"changes": [{"name": "srv", "kiroGlobal": True}]}, "unknown_scope"),
    ({"changes": [{"name": "srv", "cc": True}]}, "unknown_scope"),
    ({"changes": [{"name": "srv", "kiro": True}, {"name": "srv", "kiro": False}]}, "duplicate_change"),
    ({"changes": [{"name": f"s{i}"} for i in range(MAX_CHANGES + 1)]}, "too_many_changes"),
])
def test_a_malformed_request_is_refused_before_any_file_is_read(payload, code, record_opened):
    kiro_global({"srv": CAT})
    before = fingerprint(home.kiro_global_mcp_file())
    opened = record_opened()

    with pytest.raises(BadInputError) as err:
        apply_changes(payload)
    seen = list(opened)

    assert err.value.code == code
    assert not any(p.endswith("mcp.json") for p in seen)
    assert fingerprint(home.kiro_global_mcp_file()) == before


def test_exactly_the_maximum_number_of_changes_is_accepted():
    outcome = apply_changes({"changes": [{"name": f"s{i}", "kirocrew": False} for i in range(MAX_CHANGES)]})
    assert len(outcome.results) == MAX_CHANGES


def test_a_malformed_kiro_global_is_refused_with_a_code_and_left_byte_identical():
    path = home.kiro_global_mcp_file()
    path.parent.mkdir(parents=True)
    path.write_text('{"mcpServers": {"srv": ')
    crew_store({"other": CAT})
    before = fingerprint(path)

    outcome = apply({"name": "srv", "kiro": False}, {"name": "gone", "uninstall": True},
                    {"name": "other", "kirocrew": False})

    assert [r.get("code") for r in outcome["results"]] == ["scope_file_malformed", "scope_file_malformed", None]
    assert fingerprint(path) == before
    assert store() == {"other": {**CAT, "disabled": True}}, "a change that does not need the file still applies"


def test_an_unreadable_scope_file_is_refused_with_its_own_code():
    path = home.kiro_global_mcp_file()
    path.mkdir(parents=True)  # a directory where the file should be: unknowable, not empty
    outcome = apply({"name": "srv", "kiro": True})
    assert result(outcome)["code"] == "scope_file_unreadable"
    assert path.is_dir()


def test_a_managed_server_is_never_written_into_a_shared_file(plugin_manager):
    plugin_manager.register(Managed(ManagedMcpServer("kirocrew-core", ("mcp-core",), True)), name="managed")
    rebuild_agent_config()

    outcome = apply({"name": "kirocrew-core", "kiro": True})

    assert result(outcome)["code"] == "managed_server"
    assert not home.kiro_global_mcp_file().exists()


def test_a_historic_managed_name_is_never_written_into_a_shared_file_either():
    crew_store({"kirocrew-cron": CAT})
    outcome = apply({"name": "kirocrew-cron", "kiro": True})
    assert result(outcome)["code"] == "managed_server"
    assert not home.kiro_global_mcp_file().exists()


def test_a_managed_server_cannot_be_uninstalled_but_can_be_switched_off(plugin_manager):
    plugin_manager.register(Managed(ManagedMcpServer("kirocrew-core", ("mcp-core",), True)), name="managed")
    rebuild_agent_config()

    refused = apply({"name": "kirocrew-core", "uninstall": True})
    switched = apply({"name": "kirocrew-core", "kirocrew": False})

    assert result(refused)["code"] == "managed_server"
    assert result(switched)["actions"] == {"kirocrew": "disabled"}
    assert rendered()["kirocrew-core"]["disabled"] is True


def test_a_stale_managed_copy_can_be_removed_from_the_kiro_global(plugin_manager):
    plugin_manager.register(Managed(ManagedMcpServer("kirocrew-core", ("mcp-core",), True)), name="managed")
    kiro_global({"kirocrew-core": {"command": "/old/kirocrew", "args": ["mcp-core"]}, "keep": CAT})
    rebuild_agent_config()

    outcome = apply({"name": "kirocrew-core", "kiro": False})

    assert result(outcome)["actions"]["kiro"] == "removed"
    assert servers_in(home.kiro_global_mcp_file()) == {"keep": CAT}
    assert not home.crew_mcp_file().exists(), "a managed launch spec is never preserved into the store"


# -- the batch -----------------------------------------------------------------------------------------


def test_a_batch_runs_uninstalls_adds_removes_and_overrides_then_rebuilds_once(plugin_manager):
    counter = RebuildCounter()
    plugin_manager.register(counter, name="counter")
    kiro_global({"old": CAT, "move": SH, "tune": CAT})
    rebuild_agent_config()
    counter.calls = 0

    outcome = apply(
        {"name": "tune", "toolOverrides": {"t": False}},
        {"name": "move", "kiro": False, "kirocrew": True},
        {"name": "old", "uninstall": True},
    )

    assert outcome["ok"] is True
    assert outcome["applied"] == 3
    assert counter.calls == 1
    assert sorted(rendered()) == ["move", "tune"]
    assert store() == {"tune": {"disabledTools": ["t"]}, "move": SH}
    assert servers_in(home.kiro_global_mcp_file()) == {"tune": CAT}


def test_an_empty_change_list_does_nothing(plugin_manager):
    counter = RebuildCounter()
    plugin_manager.register(counter, name="counter")
    outcome = apply_changes({"changes": []}).as_dict()
    assert outcome["results"] == [] and counter.calls == 0
    assert not home.rendered_agent_file().exists()


def test_a_rebuild_refusal_is_reported_after_the_scope_writes():
    kiro_global({"srv": CAT})
    home.rendered_agent_file().mkdir(parents=True)  # unreadable: the rebuild refuses

    outcome = apply({"name": "srv", "kirocrew": False})

    assert result(outcome)["ok"] is True
    assert outcome["rebuild"] == {"ok": False, "ran": True, "error": outcome["rebuild"]["error"],
                                  "code": "agent_file_unreadable"}
    assert outcome["ok"] is False
    assert store() == {"srv": {"disabled": True}}


# -- companion symmetry ----------------------------------------------------------------------------------


def test_without_the_companion_claude_json_is_never_opened_by_an_apply(record_opened):
    claude = home.user_home() / ".claude.json"
    claude.write_text("{ not json")
    kiro_global({"srv": CAT})
    opened = record_opened()

    outcome = apply({"name": "srv", "uninstall": True})
    opened = list(opened)

    assert result(outcome)["actions"] == {"kirocrew": "noop", "kiro": "removed", "agent": "noop"}
    assert str(home.kiro_global_mcp_file()) in opened, "the recorder sees the files apply does read"
    assert str(claude) not in opened
    assert claude.read_text() == "{ not json"


def test_with_the_companion_cc_is_a_target_for_add_remove_and_uninstall(plugin_manager):
    register_companion(plugin_manager)
    claude = home.user_home() / ".claude.json"
    claude_json({"theirs": SH}, numStartups=3)
    kiro_global({"srv": CAT})

    added = apply({"name": "srv", "cc": True})
    assert result(added)["actions"] == {"cc": "added"}
    assert json.loads(claude.read_text()) == {"numStartups": 3, "mcpServers": {"theirs": SH, "srv": CAT}}

    removed = apply({"name": "srv", "cc": False})
    assert result(removed)["actions"] == {"cc": "removed"}

    apply({"name": "srv", "cc": True})
    gone = apply({"name": "srv", "uninstall": True})
    assert result(gone)["actions"] == {"kirocrew": "noop", "kiro": "removed", "cc": "removed", "agent": "removed"}
    assert json.loads(claude.read_text()) == {"numStartups": 3, "mcpServers": {"theirs": SH}}


def test_with_the_companion_a_malformed_claude_json_blocks_uninstall_rather_than_risk_a_resurrection(plugin_manager):
    register_companion(plugin_manager)
    claude = home.user_home() / ".claude.json"
    claude.write_text("{ not json")
    kiro_global({"srv": CAT})

    outcome = apply({"name": "srv", "uninstall": True})

    assert result(outcome)["code"] == "scope_file_malformed"
    assert servers_in(home.kiro_global_mcp_file()) == {"srv": CAT}
    assert claude.read_text() == "{ not json"


@pytest.mark.parametrize("dumps", [{"indent": 4}, {"indent": "\t"}, {}], ids=["four-spaces", "tabs", "one-line"])
def test_a_shared_file_is_rewritten_in_its_own_formatting(dumps):
    home.kiro_global_mcp_file().parent.mkdir(parents=True, exist_ok=True)
    home.kiro_global_mcp_file().write_text(json.dumps({"theme": "dark", "mcpServers": {"srv": CAT, "keep": SH}},
                                                      **dumps))

    apply({"name": "srv", "kiro": False})

    assert home.kiro_global_mcp_file().read_text() == json.dumps({"theme": "dark", "mcpServers": {"keep": SH}},
                                                                  **dumps)
