"""The computer_get_state text: header, indexed tree, elided groups, truncation, secrets, screenshots."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from kirocrew_computer import render
from kirocrew_computer.backend import AppInfo, Node, WindowState

APP = AppInfo("Notes", "org.example.Notes", 42, 1)


def node(role: str, name: str = "", depth: int = 0, ref: tuple[int, ...] = (), *, value: str | None = None,
         actions: tuple[str, ...] = (), states: frozenset[str] | set[str] = frozenset()) -> Node:
    return Node(None, role, name, value, actions, frozenset(states), (1, 2, 3, 4), depth, ref)


def window(*nodes: Node, title: str = "Notes", truncated: bool = False) -> WindowState:
    return render.assign_indices(WindowState(APP, "w", title, (100, 50), (400, 300), nodes, truncated))


def test_the_tree_is_indexed_indented_and_window_local() -> None:
    text = render.render_state(window(
        node("frame", "Notes"),
        node("push button", "Save", 1, (0,), actions=("click",), states={"focused"}),
        node("check box", "Remember", 1, (1,), actions=("click",), states={"checked"}),
    ), text_limit=50)
    assert "App=org.example.Notes (pid 42)" in text
    assert 'Window: "Notes", App: Notes' in text
    assert "Window origin: (100, 50)" in text
    assert '  1 push button "Save" [click] <focused> (1,2 3x4)' in text.splitlines()
    assert '  2 check box "Remember" [click] <checked> (1,2 3x4)' in text.splitlines()


def test_empty_groups_are_elided_take_no_index_and_do_not_indent() -> None:
    state = window(
        node("frame", "Notes"),
        node("panel", "", 1, (0,)),
        node("push button", "Save", 2, (0, 0), actions=("click",)),
    )
    assert [n.index for n in state.nodes] == [0, None, 1]
    tree = render.render_tree(state, text_limit=50).splitlines()
    assert tree == ['0 frame "Notes" (1,2 3x4)', '  1 push button "Save" [click] (1,2 3x4)']


def test_a_truncated_walk_ends_with_the_marker_and_gets_no_screenshot() -> None:
    state = window(node("frame", "Notes"), truncated=True)
    assert render.render_tree(state, text_limit=50).endswith("[tree truncated at 1 nodes]")
    assert render.screenshot_allowed(state)[0] is False


def test_a_password_value_is_never_rendered_even_if_a_driver_leaked_it() -> None:
    state = window(node("frame", "Login"),
                   node("password text", "Password", 1, (0,), value="hunter2-cleartext", states={"password"}))
    text = render.render_state(state, text_limit=50)
    assert "hunter2" not in text and "<secure>" in text
    allowed, note = render.screenshot_allowed(state)
    assert allowed is False and "password" in note


def test_credentials_are_redacted_in_the_tree_and_the_header() -> None:
    token = "ghp_" + "a" * 36
    state = window(node("frame", "Notes"), node("label", f"key {token}", 1, (0,), value="password=swordfish"),
                   title=f"Bearer {token}")
    text = render.render_state(state, text_limit=200)
    assert token not in text and "swordfish" not in text
    assert text.count("[redacted]") >= 3


def test_values_are_clipped_to_the_text_limit() -> None:
    text = render.render_tree(window(node("text", "Body", value="x" * 100)), text_limit=10)
    assert 'value="xxxxxxxxxx…"' in text


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_screenshots_go_to_a_private_directory_kept_as_a_ring_of_200(private_tmp: Path) -> None:
    paths = [render.new_shot_path() for _ in range(render.SHOTS_KEPT + 5)]
    directory = private_tmp / render.SHOTS_DIR_NAME
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    left = sorted(directory.iterdir())
    assert len(left) == render.SHOTS_KEPT
    assert paths[-1] in left
    assert stat.S_IMODE(os.stat(paths[-1]).st_mode) == 0o600


def test_a_loosened_screenshot_directory_is_tightened_again(private_tmp: Path) -> None:
    directory = private_tmp / render.SHOTS_DIR_NAME
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    render.new_shot_path()
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
