"""The computer-use backend protocol: what a platform driver implements.

Backends are pure drivers. Every policy decision (keystone, app policy, index
freshness, input-target rules, redaction) lives in the chokepoint, so a backend
never has to be trusted with one; it only reads widget trees and sends input.
Calls are synchronous; the chokepoint runs them in a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable


@dataclass(frozen=True)
class AppInfo:
    """One running application with at least one window."""

    name: str
    app_id: str  # WM_CLASS / process name
    pid: int
    windows: int


@dataclass(frozen=True)
class Node:
    """One accessibility element of a window, in pre-order."""

    index: int | None  # assigned by render (None for elided empty groups); backends leave None
    role: str
    name: str
    value: str | None  # None for password fields (never read)
    actions: tuple[str, ...]
    states: frozenset[str]  # include "focused", "password", "editable", "checked", "showing"
    bounds: tuple[int, int, int, int] | None  # window-local x, y, w, h
    depth: int
    ref: tuple[int, ...]  # child-index path from the window root (opaque to callers)


@dataclass(frozen=True)
class WindowState:
    """A snapshot of one application's key window."""

    app: AppInfo
    window_id: str
    title: str
    origin: tuple[int, int]
    size: tuple[int, int]
    nodes: tuple[Node, ...]
    truncated: bool


class BackendError(Exception):
    """A driver failure with a stable code the chokepoint audits and reports.

    Codes in use: app_not_found, element_gone, unsupported_action,
    driver_failed, unsupported_platform; the chokepoint adds driver_closed
    (a call after the host stopped computer use).
    """

    def __init__(self, message: str, code: str = "driver_failed") -> None:
        super().__init__(message)
        self.code = code


@runtime_checkable
class ComputerBackend(Protocol):
    """What a platform driver implements (see module docstring)."""

    name: str

    def available(self) -> tuple[bool, str]:
        """Display/bus reachable and deps present; the reason when not."""
        ...

    def list_apps(self) -> list[AppInfo]: ...

    def snapshot(self, app: str, *, max_nodes: int, max_depth: int, text_limit: int) -> WindowState: ...

    def screenshot(
        self, state: WindowState, dest: Path, *, max_width: int = 1280, quality: int = 55
    ) -> Path: ...

    def click(
        self,
        state: WindowState,
        node: Node | None,
        point: tuple[float, float] | None,
        *,
        count: int,
        button: str,
        method: str,
    ) -> str:
        """Click a node or a SCREEN point; exactly one of node/point is given."""
        ...

    def drag(
        self,
        state: WindowState,
        start: tuple[float, float],
        end: tuple[float, float],
        *,
        button: str,
        steps: int,
        path: str,
    ) -> str: ...

    def type_text(self, state: WindowState, node: Node, text: str) -> str: ...

    def press_key(self, state: WindowState, node: Node, key: str) -> str: ...

    def set_value(self, state: WindowState, node: Node, value: str) -> str: ...

    def scroll(self, state: WindowState, node: Node, direction: str, pages: float) -> str: ...

    def perform_action(self, state: WindowState, node: Node, action: str) -> str: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class BackendSpec:
    """A backend offered through the `computer_backends` hook."""

    name: str
    platforms: tuple[str, ...]
    factory: Callable[[], ComputerBackend]
