"""The fallback backend: every call is a typed refusal (``unsupported_platform``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

from kirocrew_computer.backend import AppInfo, BackendError, WindowState


class UnsupportedBackend:
    """Used when no ``computer_backends`` driver runs here; ``reason`` says why."""

    name = "unsupported"

    def __init__(self, reason: str = "no computer-use driver supports this platform") -> None:
        self.reason = reason

    def available(self) -> tuple[bool, str]:
        return False, self.reason

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise BackendError(f"computer use is unavailable here: {self.reason}", code="unsupported_platform")

    def list_apps(self) -> list[AppInfo]:
        self._refuse()

    def snapshot(self, app: str, *, max_nodes: int, max_depth: int, text_limit: int) -> WindowState:
        self._refuse()

    def screenshot(self, state: WindowState, dest: Path, *, max_width: int = 1280, quality: int = 55) -> Path:
        self._refuse()

    click = drag = type_text = press_key = set_value = scroll = perform_action = _refuse

    def close(self) -> None:
        return None
