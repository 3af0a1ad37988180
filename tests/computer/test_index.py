"""The snapshot index: per-session, 90 s TTL on a monotonic clock, 8 apps per session, drift refusal."""

from __future__ import annotations

import dataclasses

import pytest

from kirocrew_computer.backend import AppInfo, Node, WindowState
from kirocrew_computer.errors import Refusal
from kirocrew_computer.index import MAX_APPS_PER_SESSION, TTL_SECONDS, Budget, SnapshotIndex, check_drift
from kirocrew_computer.render import assign_indices

BUDGET = Budget(100, 10, 50)


class Clock:
    """A clock the test advances by hand (the index takes any monotonic source)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def state(app: str = "gedit", pid: int = 1, names: tuple[str, ...] = ("Save", "Open")) -> WindowState:
    nodes = [Node(None, "frame", app, None, (), frozenset(), None, 0, ())]
    nodes += [Node(None, "push button", name, None, ("click",), frozenset(), (0, 0, 5, 5), 1, (i,))
              for i, name in enumerate(names)]
    return assign_indices(WindowState(AppInfo(app, app, pid, 1), f"w{pid}", app, (0, 0), (100, 100),
                                      tuple(nodes), False))


def code_of(call, *args) -> str:
    with pytest.raises(Refusal) as caught:
        call(*args)
    return caught.value.code


def test_acting_without_a_snapshot_is_refused_with_the_way_out() -> None:
    index = SnapshotIndex()
    with pytest.raises(Refusal, match="Call computer_get_state first") as caught:
        index.get("s1", "gedit")
    assert caught.value.code == "no_state"


def test_a_snapshot_expires_after_ninety_seconds_of_the_monotonic_clock() -> None:
    clock = Clock()
    index = SnapshotIndex(clock=clock)
    index.put("s1", state(), BUDGET)
    clock.now += TTL_SECONDS
    assert index.get("s1", "gedit").node(1).name == "Save"
    clock.now += 0.5
    assert code_of(index.get, "s1", "gedit") == "stale_index"
    assert code_of(index.get, "s1", "gedit") == "no_state"  # the stale entry is gone


def test_one_session_never_resolves_another_sessions_indices() -> None:
    index = SnapshotIndex()
    index.put("s1", state(), BUDGET)
    assert code_of(index.get, "s2", "gedit") == "no_state"


def test_end_turn_drops_only_the_callers_snapshots() -> None:
    index = SnapshotIndex()
    index.put("s1", state("gedit", 1), BUDGET)
    index.put("s1", state("calc", 2), BUDGET)
    index.put("s2", state("gedit", 1), BUDGET)
    assert index.end_turn("s1") == 2
    assert code_of(index.get, "s1", "gedit") == "no_state"
    assert index.get("s2", "gedit").state.app.name == "gedit"


def test_a_session_keeps_at_most_eight_apps_dropping_the_oldest() -> None:
    clock = Clock()
    index = SnapshotIndex(clock=clock)
    for number in range(MAX_APPS_PER_SESSION + 1):
        clock.now += 1
        index.put("s1", state(f"app{number}", number), BUDGET)
    assert code_of(index.get, "s1", "app0") == "no_state"
    for number in range(1, MAX_APPS_PER_SESSION + 1):
        assert index.get("s1", f"app{number}").state.app.pid == number


def test_an_index_whose_element_changed_is_refused_naming_old_and_new() -> None:
    old = state().nodes[1]
    with pytest.raises(Refusal) as caught:
        check_drift(old, state(names=("Delete everything", "Open")))
    assert caught.value.code == "index_drift"
    assert '"Save"' in caught.value.message and '"Delete everything"' in caught.value.message


def test_a_changed_value_is_not_drift_but_a_vanished_element_is_gone() -> None:
    old = state().nodes[1]
    fresh = state()
    valued = dataclasses.replace(fresh, nodes=(fresh.nodes[0], dataclasses.replace(fresh.nodes[1], value="new"),
                                               fresh.nodes[2]))
    assert check_drift(old, valued).value == "new"
    assert code_of(check_drift, state().nodes[2], state(names=("Save",))) == "element_gone"
