"""The snapshot index: which element an ``element_index`` means, per caller, for a short while.

Keyed by ``(session, window key)`` so one session's indices never resolve
against another's snapshot. Entries expire after :data:`TTL_SECONDS`
(monotonic clock) and at most :data:`MAX_APPS_PER_SESSION` windows are kept
per session; acting without a snapshot is refused, never re-snapshotted
lazily, because the model must have seen what it acts on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kirocrew_computer.backend import Node, WindowState
from kirocrew_computer.errors import Refusal
from kirocrew_computer.policy import app_matches

TTL_SECONDS = 90.0
MAX_APPS_PER_SESSION = 8


@dataclass(frozen=True)
class Budget:
    max_nodes: int
    max_depth: int
    text_limit: int


@dataclass(frozen=True)
class Entry:
    state: WindowState  # indices assigned (render.assign_indices)
    budget: Budget
    taken_at: float

    def node(self, index: int) -> Node:
        for node in self.state.nodes:
            if node.index == index:
                return node
        raise Refusal(f"no element {index} in the last state of '{self.state.app.name}'; "
                      "call computer_get_state again", "element_not_found")


def window_key(state: WindowState) -> str:
    return f"{state.app.app_id}|{state.app.pid}|{state.window_id}"


def fingerprint(node: Node) -> str:
    """What must not change under an index: role and name (values may)."""
    return f"{node.role}|{node.name}"


def describe(node: Node) -> str:
    return f'{node.role} "{node.name[:80]}"'


class SnapshotIndex:
    """Thread-safe; the chokepoint's driver calls run in worker threads."""

    def __init__(self, *, ttl: float = TTL_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl, self._clock = ttl, clock
        self._entries: dict[tuple[str, str], Entry] = {}
        self._lock = threading.Lock()

    def put(self, session: str, state: WindowState, budget: Budget) -> None:
        now = self._clock()
        with self._lock:
            self._entries[(session, window_key(state))] = Entry(state, budget, now)
            mine = sorted(((entry.taken_at, key) for key, entry in self._entries.items() if key[0] == session))
            for _, key in mine[:-MAX_APPS_PER_SESSION]:
                del self._entries[key]

    def get(self, session: str, app: str) -> Entry:
        """The caller's newest live snapshot of ``app``, or a refusal saying to call get_state."""
        now = self._clock()
        with self._lock:
            found = [(entry.taken_at, key, entry) for key, entry in self._entries.items()
                     if key[0] == session and app_matches(entry.state.app, app)]
            if not found:
                raise Refusal(f"no state for '{app}'. Call computer_get_state first", "no_state")
            _, key, entry = max(found)
            if now - entry.taken_at > self._ttl:
                del self._entries[key]
                raise Refusal(f"the state of '{app}' is older than {self._ttl:g} s. Call computer_get_state again",
                              "stale_index")
            return entry

    def end_turn(self, session: str) -> int:
        """Drop the caller's snapshots (only theirs); how many were dropped."""
        with self._lock:
            keys = [key for key in self._entries if key[0] == session]
            for key in keys:
                del self._entries[key]
            return len(keys)

    def sessions(self) -> set[str]:
        with self._lock:
            return {key[0] for key in self._entries}


def check_drift(old: Node, fresh: WindowState) -> Node:
    """The element now at ``old.index`` if it is still the same element; otherwise refuse naming both."""
    assert old.index is not None
    for node in fresh.nodes:
        if node.index == old.index:
            if fingerprint(node) != fingerprint(old):
                raise Refusal(f"element {old.index} changed since computer_get_state: was {describe(old)}, "
                              f"now {describe(node)}. Call computer_get_state again", "index_drift")
            return node
    raise Refusal(f"element {old.index} ({describe(old)}) is gone. Call computer_get_state again", "element_gone")
