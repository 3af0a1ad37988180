"""The X11 backend against a real headless desktop: Xvfb, AT-SPI, openbox and a GTK3 app.

Every action is checked by what the fixture app itself recorded (its result file)
or by re-reading its accessibility tree, never by the backend's own reply.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_testing.requirements import unavailable

from kirocrew_computer.backend import BackendError, Node, WindowState
from kirocrew_computer.x11.backend import BACKEND_SPEC, SYSTEM_PYTHON, X11Backend


APP = "fixture-app"
CAPS = {"max_nodes": 1200, "max_depth": 64, "text_limit": 500}
WAIT_SECS = 15.0


def _eventually(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_SECS
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def fixture_app(desktop: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The running GTK3 fixture; returns the file its handlers append to."""
    result = tmp_path_factory.mktemp("fixture") / "result.txt"
    desktop.launch_fixture_app(result, rows=200)
    return result


@pytest.fixture
def backend(desktop: Any, fixture_app: Path) -> Iterator[X11Backend]:
    x11 = X11Backend(env=desktop.env)
    _eventually(lambda: any(a.app_id == APP for a in x11.list_apps()), "the fixture app on the AT-SPI bus")
    yield x11
    x11.close()


def _lines(result: Path) -> list[str]:
    return result.read_text().splitlines()


def _await_line(result: Path, wanted: Callable[[str], bool], after: int) -> str:
    return _eventually(lambda: next((ln for ln in _lines(result)[after:] if wanted(ln)), None),
                       "the fixture app to record the input")


def _node(state: WindowState, role: str, name: str) -> Node:
    found = [n for n in state.nodes if n.role == role and n.name == name]
    assert found, f"no {role} {name!r} in {[(n.role, n.name) for n in state.nodes][:40]}"
    return found[0]


def _screen_centre(state: WindowState, node: Node) -> tuple[float, float]:
    assert node.bounds is not None
    x, y, w, h = node.bounds
    return state.origin[0] + x + w / 2, state.origin[1] + y + h / 2


def test_the_backend_spec_offers_x11_on_linux() -> None:
    assert (BACKEND_SPEC.name, BACKEND_SPEC.platforms, BACKEND_SPEC.factory) == ("x11", ("linux",), X11Backend)


def test_without_a_display_the_backend_says_it_is_unavailable() -> None:
    ok, reason = X11Backend(env={"PATH": "/usr/bin:/bin"}).available()
    assert not ok
    assert "DISPLAY" in reason


def test_on_the_headless_desktop_the_backend_is_available(backend: X11Backend) -> None:
    ok, reason = backend.available()
    assert ok, reason
    assert "AT-SPI" in reason


def test_list_apps_shows_the_fixture_with_its_window(backend: X11Backend) -> None:
    apps = {a.app_id: a for a in backend.list_apps()}
    assert apps[APP].windows == 1
    assert apps[APP].pid > 0


def test_a_snapshot_shows_the_widgets_and_never_the_password(backend: X11Backend) -> None:
    state = backend.snapshot(APP, **CAPS)
    assert state.title == "Fixture App"
    assert state.window_id.startswith("0x")
    assert state.size[0] > 0 and state.size[1] > 0
    assert _node(state, "text", "Name").value is not None
    password = _node(state, "password text", "Password")
    assert password.value is None
    assert "password" in password.states
    assert "hunter2" not in repr(state)
    assert "click" in _node(state, "push button", "Submit").actions
    _node(state, "check box", "Enable feature")
    assert _node(state, "label", "Row 199").depth > _node(state, "list box", "Rows").depth
    assert not state.truncated


def test_a_snapshot_stops_at_the_node_cap_and_says_so(backend: X11Backend) -> None:
    state = backend.snapshot(APP, max_nodes=20, max_depth=64, text_limit=500)
    assert len(state.nodes) == 20
    assert state.truncated


def test_an_app_that_is_not_running_is_not_found(backend: X11Backend) -> None:
    with pytest.raises(BackendError) as refused:
        backend.snapshot("no-such-app", **CAPS)
    assert refused.value.code == "app_not_found"


def test_clicking_the_button_by_node_fires_its_handler(backend: X11Backend, fixture_app: Path) -> None:
    state = backend.snapshot(APP, **CAPS)
    before = len(_lines(fixture_app))
    backend.click(state, _node(state, "push button", "Submit"), None, count=1, button="left", method="auto")
    _await_line(fixture_app, lambda ln: ln == "clicked Submit", before)


def test_clicking_a_point_moves_the_real_pointer_onto_the_checkbox(backend: X11Backend, fixture_app: Path) -> None:
    state = backend.snapshot(APP, **CAPS)
    checked = "checked" in _node(state, "check box", "Enable feature").states
    before = len(_lines(fixture_app))
    point = _screen_centre(state, _node(state, "check box", "Enable feature"))
    backend.click(state, None, point, count=1, button="left", method="auto")
    _await_line(fixture_app, lambda ln: ln == f"toggled {not checked}", before)


def test_an_app_post_click_is_refused_and_nothing_happens(backend: X11Backend, fixture_app: Path) -> None:
    state = backend.snapshot(APP, **CAPS)
    before = _lines(fixture_app)
    with pytest.raises(BackendError) as refused:
        backend.click(state, _node(state, "push button", "Submit"), None, count=1, button="left", method="app_post")
    assert refused.value.code == "unsupported_action"
    time.sleep(0.3)  # a stray click would have been recorded by now
    assert _lines(fixture_app) == before


def test_typed_text_lands_in_the_entry(backend: X11Backend) -> None:
    state = backend.snapshot(APP, **CAPS)
    backend.type_text(state, _node(state, "text", "Name"), "typed words")
    _eventually(lambda: "typed words" in (_node(backend.snapshot(APP, **CAPS), "text", "Name").value or ""),
                "the typed text in the entry")


def test_set_value_replaces_the_entry_text(backend: X11Backend) -> None:
    state = backend.snapshot(APP, **CAPS)
    backend.set_value(state, _node(state, "text", "Name"), "set by value")
    assert _node(backend.snapshot(APP, **CAPS), "text", "Name").value == "set by value"


def test_pressing_enter_in_the_entry_activates_it(backend: X11Backend, fixture_app: Path) -> None:
    state = backend.snapshot(APP, **CAPS)
    entry = _node(state, "text", "Name")
    backend.set_value(state, entry, "pressed")
    before = len(_lines(fixture_app))
    backend.press_key(state, entry, "enter")
    _await_line(fixture_app, lambda ln: ln == "activate pressed", before)


def test_a_modifier_combination_reaches_the_entry(backend: X11Backend, fixture_app: Path) -> None:
    state = backend.snapshot(APP, **CAPS)
    before = len(_lines(fixture_app))
    backend.press_key(state, _node(state, "text", "Name"), "ctrl+a")
    _await_line(fixture_app, lambda ln: ln in ("key <Primary>a", "key <Control>a"), before)


@pytest.mark.parametrize("act", ["type_text", "press_key", "set_value"])
def test_input_into_the_password_field_is_refused(backend: X11Backend, act: str) -> None:
    state = backend.snapshot(APP, **CAPS)
    with pytest.raises(BackendError) as refused:
        getattr(backend, act)(state, _node(state, "password text", "Password"), "x")
    assert refused.value.code == "unsupported_action"


def _first_visible_row(state: WindowState) -> str:
    pane = next(n for n in state.nodes if n.role == "scroll pane")
    assert pane.bounds is not None
    return next(n.name for n in state.nodes
                if n.role == "label" and n.name.startswith("Row ") and n.bounds and n.bounds[1] >= pane.bounds[1])


def test_scrolling_the_list_changes_its_first_visible_row(backend: X11Backend) -> None:
    state = backend.snapshot(APP, **CAPS)
    first = _first_visible_row(state)
    backend.scroll(state, _node(state, "list box", "Rows"), "down", 2.0)
    _eventually(lambda: _first_visible_row(backend.snapshot(APP, **CAPS)) != first, "the list to scroll")
    backend.scroll(state, _node(state, "list box", "Rows"), "up", 20.0)
    _eventually(lambda: _first_visible_row(backend.snapshot(APP, **CAPS)) == "Row 0", "the list to scroll back")


def test_a_drag_by_coordinates_presses_moves_and_releases(backend: X11Backend, fixture_app: Path) -> None:
    state = backend.snapshot(APP, **CAPS)
    pad = _node(state, "panel", "Drag pad")
    assert pad.bounds is not None
    left, top = state.origin[0] + pad.bounds[0], state.origin[1] + pad.bounds[1]
    before = len(_lines(fixture_app))
    backend.drag(state, (left + 20, top + 40), (left + 220, top + 50), button="left", steps=8, path="curved")
    line = _await_line(fixture_app, lambda ln: ln.startswith("drag "), before)
    assert line == "drag 20,40 -> 220,50"


def test_perform_action_by_name_toggles_the_checkbox(backend: X11Backend, fixture_app: Path) -> None:
    state = backend.snapshot(APP, **CAPS)
    before = len(_lines(fixture_app))
    backend.perform_action(state, _node(state, "check box", "Enable feature"), "click")
    _await_line(fixture_app, lambda ln: ln.startswith("toggled "), before)
    with pytest.raises(BackendError) as refused:
        backend.perform_action(state, _node(state, "check box", "Enable feature"), "AXShowMenu")
    assert refused.value.code == "unsupported_action"


def test_an_element_whose_role_changed_is_reported_gone(backend: X11Backend) -> None:
    state = backend.snapshot(APP, **CAPS)
    label = _node(state, "label", "Status: ready")
    impostor = Node(index=None, role="push button", name="Submit", value=None, actions=("click",),
                    states=frozenset(), bounds=label.bounds, depth=label.depth, ref=label.ref)
    with pytest.raises(BackendError) as refused:
        backend.click(state, impostor, None, count=1, button="left", method="accessibility")
    assert refused.value.code == "element_gone"


def test_a_screenshot_is_a_jpeg_of_the_window_downscaled(backend: X11Backend, tmp_path: Path) -> None:
    if subprocess.run([SYSTEM_PYTHON, "-c", "import PIL"], capture_output=True).returncode:
        unavailable("screenshots need python3-pil for /usr/bin/python3")
    state = backend.snapshot(APP, **CAPS)
    shot = backend.screenshot(state, tmp_path / "shot.jpg", max_width=300)
    data = shot.read_bytes()
    assert data[:3] == b"\xff\xd8\xff"
    # The JPEG's SOF0 frame header carries height and width.
    sof = data.index(b"\xff\xc0")
    width = int.from_bytes(data[sof + 7:sof + 9], "big")
    assert width == 300
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".shot-")]


def test_a_helper_that_died_is_replaced_on_the_next_call(backend: X11Backend) -> None:
    from kirocrew_core import proc

    backend.list_apps()
    first = backend._helper
    assert first is not None
    proc.terminate(first, reason="test kills the helper")
    assert any(a.app_id == APP for a in backend.list_apps())
    assert backend._helper is not None and backend._helper.pid != first.pid
