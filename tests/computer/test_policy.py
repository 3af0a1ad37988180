"""App policy (narrow-only lists, kirocrew's own windows), the click one-of and the password floor."""

from __future__ import annotations

import pytest

from kirocrew_computer import policy
from kirocrew_computer.backend import AppInfo, Node, WindowState
from kirocrew_computer.errors import Refusal
from kirocrew_computer.keystone import Keystone

GEDIT = AppInfo("Text Editor", "gedit", 100, 1)
XTERM = AppInfo("xterm", "XTerm", 101, 1)


def refusal_code(call, *args) -> str:
    with pytest.raises(Refusal) as caught:
        call(*args)
    return caught.value.code


def node(role: str, states: frozenset[str] | set[str] = frozenset(), index: int = 3) -> Node:
    return Node(index, role, "field", None, (), frozenset(states), (0, 0, 5, 5), 1, (0,))


def test_an_empty_allowed_list_allows_every_app_that_is_not_denied() -> None:
    keystone = Keystone(True, (), ("xterm",))
    policy.check_app(keystone, GEDIT)
    assert refusal_code(policy.check_app, keystone, XTERM) == "app_denied"


def test_allowed_apps_only_narrows_matching_name_or_app_id_case_insensitively() -> None:
    keystone = Keystone(True, ("GEDIT",), ())
    policy.check_app(keystone, GEDIT)
    assert refusal_code(policy.check_app, keystone, XTERM) == "app_not_allowed"


def test_extra_denied_wins_over_allowed() -> None:
    keystone = Keystone(True, ("gedit",), ("Text Editor",))
    assert refusal_code(policy.check_app, keystone, GEDIT) == "app_denied"


@pytest.mark.parametrize(("app", "title"), [
    (AppInfo("KiroCrew", "org.example.Other", 1, 1), ""),           # by name
    (AppInfo("Dashboard", "kirocrew-desktop", 1, 1), ""),          # by app id / process name
    (AppInfo("Firefox", "firefox", 1, 1), "Kiro Crew — dashboard"),  # by window title
])
def test_kirocrew_own_windows_are_refused_even_when_explicitly_allowed(app: AppInfo, title: str) -> None:
    keystone = Keystone(True, (app.name, app.app_id), ())
    assert refusal_code(policy.check_app, keystone, app, title) == "own_window"


@pytest.mark.parametrize(("args", "code"), [
    ({"element_index": 1, "x": 1, "y": 2}, "ambiguous_target"),
    ({}, "invalid_arguments"),
    ({"x": 1}, "invalid_arguments"),
])
def test_a_click_needs_exactly_one_target_never_chosen_by_precedence(args: dict, code: str) -> None:
    assert refusal_code(policy.check_click_target, args) == code


@pytest.mark.parametrize("tool", ["computer_type_text", "computer_set_value", "computer_press_key"])
def test_text_input_into_a_password_field_is_refused(tool: str) -> None:
    assert refusal_code(policy.check_input_target, tool, node("password text", {"password"})) == "password_field"
    policy.check_input_target(tool, node("text", {"editable"}))


def test_clicking_a_password_field_is_not_text_input() -> None:
    policy.check_input_target("computer_click", node("password text", {"password"}))


def test_a_point_outside_the_snapshotted_window_is_refused() -> None:
    state = WindowState(GEDIT, "w1", "t", (100, 50), (400, 300), (), False)
    policy.check_point_in_window(state, (100, 50))
    policy.check_point_in_window(state, (499.5, 349))
    assert refusal_code(policy.check_point_in_window, state, (500, 100)) == "point_outside_window"
    assert refusal_code(policy.check_point_in_window, state, (99, 100)) == "point_outside_window"
