"""The plugin manager: loading policy, switches, validation, deterministic merging."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kirocrew_core import hookimpl
from kirocrew_core.contributions import McpScope
from kirocrew_core.plugins import (
    OPEN_EDITION,
    PluginLoadError,
    PluginWarning,
    collect,
    make_plugin_manager,
)
from kirocrew_testing.distributions import make_plugin_distribution
from kirocrew_testing.plugins import register_plugin

BROKEN_SOURCE = """
raise RuntimeError("this plugin is broken on purpose")
"""

TYPO_SOURCE = """
from kirocrew_core import hookimpl

@hookimpl
def extra_mcp_scope():  # misspelled: the hook is extra_mcp_scopes
    return []
"""

GOOD_SOURCE = """
from kirocrew_core import hookimpl

@hookimpl
def governance_ceiling():
    return ["@third-party"]
"""


@pytest.fixture
def broken_plugin_path(tmp_path, monkeypatch):
    path = make_plugin_distribution(
        tmp_path / "site", distribution="kirocrew-broken", module="kirocrew_broken_plugin", source=BROKEN_SOURCE
    )
    monkeypatch.syspath_prepend(str(path))
    return path


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def test_the_open_edition_members_and_the_companion_are_loaded_from_entry_points():
    pm = make_plugin_manager(env={})
    loaded = {r.distribution for r in pm.loaded_records() if r.status == "loaded" and not r.builtin}
    assert OPEN_EDITION - {"kirocrew-core"} <= loaded
    assert "kirocrew-companion" in loaded


def test_a_plugin_whose_import_raises_is_skipped_with_a_warning_naming_its_distribution(broken_plugin_path):
    with pytest.warns(PluginWarning, match="kirocrew-broken") as caught:
        pm = make_plugin_manager(env={})
    assert "broken on purpose" in str(caught[0].message)
    record = pm.records["broken"]
    assert record.status == "skipped"
    assert "RuntimeError" in record.error
    assert pm.get_plugin("broken") is None
    assert pm.get_plugin("mcp") is not None  # the rest still loads


def test_strict_mode_makes_a_broken_third_party_plugin_fatal(broken_plugin_path):
    with pytest.raises(PluginLoadError, match="kirocrew-broken") as excinfo:
        make_plugin_manager(env={"KIROCREW_STRICT_PLUGINS": "1"})
    assert excinfo.value.code == "plugin_load_failed"


def test_an_open_edition_member_that_fails_to_import_is_always_fatal(tmp_path, monkeypatch):
    # A distribution named like an open-edition member is ours: it must fail loudly.
    path = make_plugin_distribution(
        tmp_path / "site", distribution="kirocrew-mcp", module="kirocrew_fake_member",
        source=BROKEN_SOURCE, entry_point="aaa-member",
    )
    monkeypatch.syspath_prepend(str(path))
    with pytest.raises(PluginLoadError, match="aaa-member"):
        make_plugin_manager(env={})


def test_an_empty_load_allowlist_loads_no_entry_point_plugin(broken_plugin_path):
    pm = make_plugin_manager(env={"KIROCREW_LOAD_PLUGINS": ""})
    statuses = {r.name: r.status for r in pm.loaded_records() if not r.builtin}
    assert statuses and set(statuses.values()) == {"not-allowed"}
    assert all(pm.get_plugin(name) is None for name in statuses)
    assert pm.get_plugin("kirocrew_core.builtin.doctor") is not None  # core is always there


def test_the_load_allowlist_accepts_distribution_or_entry_point_names():
    pm = make_plugin_manager(env={"KIROCREW_LOAD_PLUGINS": "kirocrew_companion, mcp"})
    loaded = {r.name for r in pm.loaded_records() if r.status == "loaded" and not r.builtin}
    assert loaded == {"companion", "mcp"}


def test_a_disabled_plugin_is_blocked_and_not_imported(broken_plugin_path):
    pm = make_plugin_manager(env={"KIROCREW_DISABLE_PLUGINS": "kirocrew-broken"})
    assert pm.records["broken"].status == "blocked"
    assert pm.is_blocked("broken")
    assert "kirocrew_broken_plugin" not in sys.modules


def test_an_implementation_of_an_undeclared_hook_is_rejected(tmp_path, monkeypatch):
    path = make_plugin_distribution(
        tmp_path / "site", distribution="kirocrew-typo", module="kirocrew_typo_plugin", source=TYPO_SOURCE
    )
    monkeypatch.syspath_prepend(str(path))
    with pytest.warns(PluginWarning, match="extra_mcp_scope"):
        pm = make_plugin_manager(env={})
    assert pm.records["typo"].status == "skipped"
    assert pm.get_plugin("typo") is None


def test_plugins_may_declare_their_own_hookspecs_through_addhooks(plugin_manager):
    from kirocrew_core.markers import hookspec

    class Specs:
        @staticmethod
        @hookspec
        def connections_providers() -> list:  # type: ignore[empty-body]  # a specification: pluggy never runs it
            """A sub-seam."""

    class Owner:
        @hookimpl
        def addhooks(self, pluginmanager):
            pluginmanager.add_hookspecs(Specs)

    class Provider:
        @hookimpl
        def connections_providers(self):
            return ["notion"]

    plugin_manager.register(Owner(), name="owner")
    plugin_manager.register(Provider(), name="provider")
    plugin_manager.check_pending()
    assert [c.value for c in collect(plugin_manager, "connections_providers")] == [["notion"]]


def test_results_are_merged_sorted_by_plugin_name_not_registration_order(plugin_manager):
    def scope_plugin(scope_id: str):
        class P:
            @hookimpl
            def extra_mcp_scopes(self):
                return [McpScope(scope_id, Path("/x"), None, scope_id)]

        return P()

    for name in ("zeta", "alpha", "mid"):
        plugin_manager.register(scope_plugin(name), name=name)
    assert [c.plugin for c in collect(plugin_manager, "extra_mcp_scopes")] == ["alpha", "mid", "zeta"]


def _tiered(name: str, *, tryfirst: bool = False, trylast: bool = False) -> object:
    """A plugin whose ``governance_ceiling`` implementation is marked ``tryfirst`` or ``trylast``."""
    impl = hookimpl(tryfirst=tryfirst, trylast=trylast)(lambda: [f"@{name}"])
    return type(name, (), {"governance_ceiling": staticmethod(impl)})


TIERED = [("a-fallback", {"trylast": True}), ("b-plain", {}), ("y-plain", {}), ("z-first", {"tryfirst": True})]


@pytest.mark.parametrize("registration", [TIERED, TIERED[::-1]], ids=["names-ascending", "names-descending"])
def test_tryfirst_runs_first_and_trylast_last_each_tier_in_plugin_name_order_whatever_the_registration_order(
    plugin_manager, registration
):
    for name, opts in registration:
        plugin_manager.register(_tiered(name, **opts), name=name)
    assert [c.plugin for c in collect(plugin_manager, "governance_ceiling")] == [
        "z-first", "b-plain", "y-plain", "a-fallback"
    ]


OVERRIDING_AUTHORITY_SOURCE = """
from kirocrew_core import hookimpl
from kirocrew_core.contributions import AuthorityBackend


@hookimpl({options})
def authority_backends():
    return [AuthorityBackend("unrestricted", "acme's own unrestricted launcher",
                             available=lambda: (True, ""), factory=lambda options, *, workspace: options)]
"""


@pytest.mark.parametrize(("options", "winner"), [("tryfirst=True", "acme"), ("", "built-in")],
                         ids=["tryfirst", "plain"])
def test_an_installed_third_party_plugin_overrides_a_built_in_contribution_with_tryfirst(
    tmp_path, monkeypatch, options, winner
):
    from kirocrew_conversations.authority import UNRESTRICTED_BACKEND, backends

    # Its entry point "zz-acme" sorts after the built-in "conversations": by name alone it would lose.
    module = f"kirocrew_zz_acme_{winner.replace('-', '_')}"  # one module per case: imports are cached
    site = make_plugin_distribution(tmp_path / "site", distribution="kirocrew-zz-acme", module=module,
                                    source=OVERRIDING_AUTHORITY_SOURCE.format(options=options))
    monkeypatch.syspath_prepend(str(site))
    pm = make_plugin_manager(env={})
    assert pm.records["zz-acme"].status == "loaded"
    chosen = backends(pm)["unrestricted"]
    if winner == "acme":
        assert chosen.description == "acme's own unrestricted launcher"
    else:
        assert chosen is UNRESTRICTED_BACKEND


def test_a_raising_third_party_hook_is_skipped_with_a_warning_but_an_open_edition_one_raises(plugin_manager):
    from kirocrew_core.plugins import PluginRecord

    class Raising:
        @hookimpl
        def governance_ceiling(self):
            raise ValueError("boom")

    plugin_manager.records["third"] = PluginRecord("third", "someone-else", "1", "x", "loaded")
    plugin_manager.register(Raising(), name="third")
    with pytest.warns(PluginWarning, match="someone-else"):
        assert collect(plugin_manager, "governance_ceiling") == []
    plugin_manager.unregister(name="third")

    plugin_manager.records["ours"] = PluginRecord("ours", "kirocrew-mcp", "1", "x", "loaded")
    plugin_manager.register(Raising(), name="ours")
    with pytest.raises(PluginLoadError, match="boom"):
        collect(plugin_manager, "governance_ceiling")


def _ceiling_plugins(pm, events: list[str]) -> None:
    """Three plugins in call order: a third party that raises, one of ours that raises, a working one."""
    from kirocrew_core.plugins import PluginRecord

    def raising(name: str):
        def governance_ceiling():
            events.append(name)
            raise ValueError(f"{name} is down")
        return governance_ceiling

    pm.records["a-third"] = PluginRecord("a-third", "someone-else", "1", "x", "loaded")
    pm.records["b-ours"] = PluginRecord("b-ours", "kirocrew-mcp", "1", "x", "loaded")
    register_plugin(pm, "a-third", governance_ceiling=raising("a-third"))
    register_plugin(pm, "b-ours", governance_ceiling=raising("b-ours"))
    def fine() -> list[str]:
        events.append("c-fine")
        return ["@c"]

    register_plugin(pm, "c-fine", governance_ceiling=fine)


def test_the_skip_policy_reports_every_failure_by_plugin_and_still_calls_the_others(plugin_manager, caplog):
    from kirocrew_core.plugins import call_hook

    events: list[str] = []
    _ceiling_plugins(plugin_manager, events)
    call = call_hook(plugin_manager, "governance_ceiling", on_error="skip")
    assert events == ["a-third", "b-ours", "c-fine"]
    assert [(c.plugin, c.value) for c in call.contributions] == [("c-fine", ["@c"])]
    assert [(f.plugin, f.distribution, f.error) for f in call.failures] == [
        ("a-third", "someone-else", "ValueError: a-third is down"),
        ("b-ours", "kirocrew-mcp", "ValueError: b-ours is down"),
    ]
    assert "'b-ours' from distribution 'kirocrew-mcp' failed in governance_ceiling()" in caplog.text


def test_the_fail_closed_policy_stops_at_the_first_failure_even_from_a_third_party_plugin(plugin_manager):
    from kirocrew_core.plugins import HookFailedError, call_hook

    events: list[str] = []
    _ceiling_plugins(plugin_manager, events)
    with pytest.raises(HookFailedError, match="'a-third' from distribution 'someone-else'.*a-third is down") as excinfo:
        call_hook(plugin_manager, "governance_ceiling", on_error="fail_closed")
    assert events == ["a-third"]
    assert excinfo.value.code == "plugin_hook_failed" and excinfo.value.failure.plugin == "a-third"


def test_a_result_the_check_refuses_is_a_failure_of_the_plugin_that_returned_it(plugin_manager):
    from kirocrew_core.plugins import PluginRecord, call_hook

    plugin_manager.records["sloppy"] = PluginRecord("sloppy", "someone-else", "1", "x", "loaded")
    register_plugin(plugin_manager, "sloppy", governance_ceiling=lambda: "@not-a-list")
    register_plugin(plugin_manager, "tidy", governance_ceiling=lambda: ["@tidy"])

    def problem(result):
        return None if isinstance(result, list) else f"expected a list, got {type(result).__name__}"

    with pytest.warns(PluginWarning, match="sloppy.*returned a bad result.*expected a list, got str"):
        call = call_hook(plugin_manager, "governance_ceiling", check=problem)
    assert [c.plugin for c in call.contributions] == ["tidy"]
    assert [(f.plugin, f.error) for f in call.failures] == [("sloppy", "expected a list, got str")]


def test_the_call_credits_side_effects_to_the_plugin_being_called(plugin_manager):
    from kirocrew_core.plugins import call_hook

    seen: list[tuple[str, str]] = []
    current: list[str] = []
    for name in ("b-second", "a-first"):
        register_plugin(plugin_manager, name, governance_ceiling=lambda name=name: seen.append((current[-1], name)))
    call_hook(plugin_manager, "governance_ceiling", before_each=current.append)
    assert seen == [("a-first", "a-first"), ("b-second", "b-second")]


def test_a_hook_wrapper_is_refused_as_a_failure_of_its_plugin(plugin_manager):
    from kirocrew_core.plugins import PluginLoadError, call_hook

    class Wrapper:
        @hookimpl(wrapper=True)
        def governance_ceiling(self):
            return (yield)

    plugin_manager.register(Wrapper(), name="wrapper")
    with pytest.raises(PluginLoadError, match="hook wrappers are not supported"):
        call_hook(plugin_manager, "governance_ceiling")


def test_a_missing_hook_argument_is_the_callers_bug_and_never_blamed_on_a_plugin(plugin_manager):
    from kirocrew_core.plugins import call_hook

    register_plugin(plugin_manager, "starter", gateway_startup=lambda app: None)
    with pytest.raises(KeyError, match="app"):
        call_hook(plugin_manager, "gateway_startup", on_error="skip")


def test_trace_switch_writes_hook_calls_to_stderr(kirocrew):
    done = kirocrew("doctor", env=_env(KIROCREW_TRACE_PLUGINS="1"))
    assert "kirocrew trace: doctor_checks -> mcp" in done.stderr
    assert "kirocrew trace: register_commands -> " not in kirocrew("doctor").stderr


def test_the_companion_hook_yields_nothing_with_only_the_open_edition(tmp_path):
    pm = make_plugin_manager(env={"KIROCREW_DISABLE_PLUGINS": "kirocrew-companion"})
    assert collect(pm, "extra_mcp_scopes") == []


def test_plugins_command_prints_json_rows_for_each_installed_plugin(kirocrew):
    done = kirocrew("plugins")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["companion"]["distribution"] == "kirocrew-companion"
    assert rows["companion"]["hooks"] == ["extra_mcp_scopes"]
    assert rows["mcp"]["entry_point"] == "kirocrew_mcp.plugin"
    assert all(row["version"] == "0.1.0" for row in rows.values())
    assert not any(row["builtin"] for row in rows.values())
