"""The one chokepoint, end to end in-process, over the test-only fake-desktop plugin (registered by hook)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import FakeDesktop, FakeDesktopPlugin, audit_records, write_keystone

from kirocrew_computer.chokepoint import Chokepoint, Reply
from kirocrew_computer.index import SnapshotIndex

ON = {"enabled": True, "allowed_apps": [], "extra_denied_apps": []}


@pytest.fixture
def desktop(plugin_manager: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDesktop:
    import kirocrew_computer.plugin

    plugin_manager.register(kirocrew_computer.plugin, name="computer")  # adds the computer_backends hookspec
    plugin = FakeDesktopPlugin()
    plugin_manager.register(plugin, name="fake_desktop")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("KIROCREW_SESSION_KEY", raising=False)
    return plugin.desktop


def run(*calls: tuple[str, dict[str, Any]], chokepoint: Chokepoint | None = None,
        session: str | None = None) -> list[Reply]:
    chokepoint = chokepoint or Chokepoint(settle_seconds=0)
    return asyncio.run(chokepoint.run_calls(calls, session=session))


def state_of(app: str = "Notes") -> tuple[str, dict[str, Any]]:
    return ("computer_get_state", {"app": app})


def test_with_the_keystone_off_every_tool_is_refused_audited_and_no_driver_is_touched(desktop: FakeDesktop) -> None:
    replies = run(("computer_list_apps", {}), state_of(), ("computer_click", {"app": "Notes", "element_index": 3}))
    assert all(reply.text.startswith("Error: computer use is off") for reply in replies)
    assert {reply.code for reply in replies} == {"keystone_off"}
    assert desktop.log == [] and desktop.snapshots == []
    assert [r["outcome"] for r in audit_records()] == ["refused"] * 3


def test_a_malformed_keystone_refuses_like_an_absent_one(desktop: FakeDesktop) -> None:
    write_keystone('{"enabled": true')
    (reply,) = run(("computer_list_apps", {}))
    assert reply.code == "keystone_off" and "malformed" in reply.text


def test_get_state_then_click_acts_and_returns_the_refreshed_state(desktop: FakeDesktop) -> None:
    write_keystone(ON)
    state, click = run(state_of(), ("computer_click", {"app": "Notes", "element_index": 3}))
    assert '3 push button "Save" [click]' in state.text and 'value="saved 0 times"' in state.text
    assert click.ok and click.text.startswith('clicked push button "Save"\n\nRefreshed state:\n')
    assert 'value="saved 1 times"' in click.text
    assert ("click", "Save", "1", "left", "auto") in desktop.log
    assert [(r["fields"]["tool"], r["outcome"]) for r in audit_records()] == [
        ("computer_get_state", "ok"), ("computer_click", "ok")]


def test_an_element_that_changed_since_get_state_is_refused_and_never_clicked(desktop: FakeDesktop) -> None:
    write_keystone(ON)
    chokepoint = Chokepoint(settle_seconds=0)
    run(state_of(), chokepoint=chokepoint)
    desktop.apps[0].root.children[1].name = "Delete all notes"  # the app changed under the index
    (reply,) = run(("computer_click", {"app": "Notes", "element_index": 3}), chokepoint=chokepoint)
    assert reply.code == "index_drift"
    assert '"Save"' in reply.text and '"Delete all notes"' in reply.text
    assert not [entry for entry in desktop.log if entry[0] == "click"]


def test_a_snapshot_older_than_the_ttl_is_refused(desktop: FakeDesktop) -> None:
    write_keystone(ON)
    now = [0.0]
    chokepoint = Chokepoint(settle_seconds=0, index=SnapshotIndex(clock=lambda: now[0]))
    run(state_of(), chokepoint=chokepoint)
    now[0] = 91.0
    (reply,) = run(("computer_click", {"app": "Notes", "element_index": 3}), chokepoint=chokepoint)
    assert reply.code == "stale_index" and "computer_get_state" in reply.text


@pytest.mark.parametrize(("tool", "extra"), [
    ("computer_type_text", {"text": "hunter2"}),
    ("computer_set_value", {"value": "hunter2"}),
    ("computer_press_key", {"key": "tab"}),
])
def test_text_input_into_the_password_field_is_refused_before_the_driver(desktop: FakeDesktop, tool: str,
                                                                        extra: dict[str, Any]) -> None:
    write_keystone(ON)
    _, reply = run(state_of(), (tool, {"app": "Notes", "element_index": 2, **extra}))
    assert reply.code == "password_field"
    assert [entry[0] for entry in desktop.log] == []


def test_typing_into_a_text_field_reaches_the_app(desktop: FakeDesktop) -> None:
    write_keystone(ON)
    _, reply = run(state_of(), ("computer_type_text", {"app": "notes", "element_index": 1, "text": "draft 2"}))
    assert reply.ok and 'value="draft 2"' in reply.text


def test_the_click_one_of_rule_refuses_both_targets(desktop: FakeDesktop) -> None:
    write_keystone(ON)
    _, reply = run(state_of(), ("computer_click", {"app": "Notes", "element_index": 3, "x": 150, "y": 90}))
    assert reply.code == "ambiguous_target" and desktop.log == []


def test_a_coordinate_click_inside_the_window_moves_the_pointer_and_is_audited_as_such(desktop: FakeDesktop) -> None:
    write_keystone(ON)
    _, inside, outside = run(state_of(), ("computer_click", {"app": "Notes", "x": 150.5, "y": 90}),
                             ("computer_click", {"app": "Notes", "x": 5, "y": 5}))
    assert inside.ok and outside.code == "point_outside_window"
    pointer = audit_records("computer_use.pointer")
    assert len(pointer) == 1 and pointer[0]["fields"]["points"] == [[150.5, 90.0]]


def test_an_action_the_element_does_not_advertise_is_refused(desktop: FakeDesktop) -> None:
    write_keystone(ON)
    _, refused, done = run(state_of(), ("computer_perform_action", {"app": "Notes", "element_index": 3,
                                                                   "action": "delete"}),
                           ("computer_perform_action", {"app": "Notes", "element_index": 3, "action": "click"}))
    assert refused.code == "unsupported_action" and done.ok and 'saved 1 times' in done.text


@pytest.mark.parametrize(("tool", "args"), [
    ("computer_get_state", {}),
    ("computer_get_state", {"app": "Notes", "max_tree_nodes": 5001}),
    ("computer_click", {"app": "Notes", "x": 40000, "y": 1}),
    ("computer_click", {"app": "Notes", "element_index": 1, "click_method": "teleport"}),
    ("computer_type_text", {"app": "Notes", "element_index": 1, "text": "x" * 10001}),
    ("computer_scroll", {"app": "Notes", "element_index": 1, "direction": "up", "pages": 0}),
    ("computer_list_apps", {"surprise": True}),
])
def test_arguments_outside_the_schema_are_refused_as_invalid(desktop: FakeDesktop, tool: str,
                                                             args: dict[str, Any]) -> None:
    write_keystone(ON)
    (reply,) = run((tool, args))
    assert reply.code == "invalid_arguments" and reply.text.startswith("Error: ")
    assert audit_records()[-1]["fields"]["code"] == "invalid_arguments"


def test_kirocrews_own_window_and_denied_apps_are_refused_and_hidden(desktop: FakeDesktop) -> None:
    write_keystone({"enabled": True, "allowed_apps": [], "extra_denied_apps": ["org.example.Calc"]})
    listing, calc, browser = run(("computer_list_apps", {}), state_of("Calculator"), state_of("Browser"))
    assert "Notes" in listing.text and "Calculator" not in listing.text
    assert calc.code == "app_denied"
    assert browser.code == "own_window"  # its window title says kirocrew


def test_allowed_apps_narrows_the_listing_and_the_calls(desktop: FakeDesktop) -> None:
    write_keystone({"enabled": True, "allowed_apps": ["calculator"], "extra_denied_apps": []})
    listing, notes = run(("computer_list_apps", {}), state_of("Notes"))
    assert "Calculator" in listing.text and "Notes" not in listing.text
    assert notes.code == "app_not_allowed" and desktop.snapshots == []


def test_a_screenshot_path_is_given_only_for_a_window_without_password_fields(desktop: FakeDesktop,
                                                                              tmp_path: Path) -> None:
    write_keystone(ON)
    notes, calc = run(("computer_get_state", {"app": "Notes", "screenshot": True}),
                      ("computer_get_state", {"app": "Calculator", "screenshot": True}))
    assert "Screenshot:" not in notes.text and "password field" in notes.text
    shot = Path(calc.text.split("Screenshot: ", 1)[1].split(" ", 1)[0])
    assert shot.parent == tmp_path / "kirocrew-computer-shots" and shot.exists()
    assert [entry[0] for entry in desktop.log] == ["screenshot"]


def test_the_callers_session_key_is_the_audit_actor_else_an_unresolved_pid(desktop: FakeDesktop,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    write_keystone(ON)
    run(("computer_list_apps", {}))
    monkeypatch.setenv("KIROCREW_SESSION_KEY", "agent:alpha:42")
    run(("computer_list_apps", {}))
    assert [r["actor"] for r in audit_records()] == [f"unresolved:{os.getpid()}", "agent:alpha:42"]


def test_inside_the_host_the_relays_stamped_caller_is_the_actor_not_the_hosts_environment(
        desktop: FakeDesktop, monkeypatch: pytest.MonkeyPatch) -> None:
    from kirocrew_core.host.caller import parse_block, set_current_caller

    write_keystone(ON)
    monkeypatch.setenv("KIROCREW_SESSION_KEY", "the-host-itself")
    chokepoint = Chokepoint(settle_seconds=0)

    async def as_caller(key: str, relay_pid: int, *calls: tuple[str, dict[str, Any]]) -> list[Reply]:
        set_current_caller(parse_block({"schemaVersion": 1, "sessionKey": key, "sessionType": "relay",
                                        "relayPid": relay_pid, "hostPid": None}))
        return await chokepoint.run_calls(calls)

    asyncio.run(as_caller("agent:alpha:1", 4242, state_of()))
    (foreign,) = asyncio.run(as_caller("", 4343, ("computer_click", {"app": "Notes", "element_index": 3})))
    (own,) = asyncio.run(as_caller("agent:alpha:1", 4242, ("computer_click", {"app": "Notes", "element_index": 3})))
    assert foreign.code == "no_state" and own.ok  # snapshots are the caller's, not the host's
    assert [r["actor"] for r in audit_records()] == ["agent:alpha:1", "unresolved:4343", "agent:alpha:1"]


def test_end_turn_forgets_only_the_callers_snapshots(desktop: FakeDesktop) -> None:
    write_keystone(ON)
    chokepoint = Chokepoint(settle_seconds=0)
    run(state_of(), chokepoint=chokepoint, session="a")
    run(state_of(), chokepoint=chokepoint, session="b")
    (ended,) = run(("computer_end_turn", {}), chokepoint=chokepoint, session="a")
    (a_click,) = run(("computer_click", {"app": "Notes", "element_index": 3}), chokepoint=chokepoint, session="a")
    (b_click,) = run(("computer_click", {"app": "Notes", "element_index": 3}), chokepoint=chokepoint, session="b")
    assert ended.text == "Dropped 1 cached window snapshot."
    assert a_click.code == "no_state" and b_click.ok


def test_without_a_driver_for_this_platform_every_call_is_a_typed_refusal(plugin_manager: Any) -> None:
    import kirocrew_computer.plugin

    plugin_manager.register(kirocrew_computer.plugin, name="computer")
    write_keystone(ON)
    (reply,) = run(("computer_list_apps", {}))
    assert reply.code == "unsupported_platform" and reply.text.startswith("Error: computer use is unavailable")
    assert audit_records()[-1]["outcome"] == "failed"
