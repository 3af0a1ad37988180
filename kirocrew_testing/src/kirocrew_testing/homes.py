"""Isolated homes: every test gets its own HOME, KIRO_HOME and KIROCREW_HOME."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from kirocrew_core import home

# Variables that would point a test at the real user's files or binaries.
_SCRUBBED_ENV = ("KIRO_CLI_PATH", "KIROCREW_KIRO_BIN", "KIROCREW_LOAD_PLUGINS",
                 "KIROCREW_DISABLE_PLUGINS", "KIROCREW_STRICT_PLUGINS", "KIROCREW_TRACE_PLUGINS",
                 "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


@dataclass(frozen=True)
class IsolatedHomes:
    """The homes a test runs under; all exist and are empty at the start."""

    root: Path
    user_home: Path
    kiro_home: Path
    crew_home: Path


def isolate_homes(monkeypatch: pytest.MonkeyPatch, root: Path) -> IsolatedHomes:
    """Point HOME, KIRO_HOME and KIROCREW_HOME under ``root`` (undone by monkeypatch)."""
    user = root / "home"
    kiro = user / ".kiro"
    crew = kiro / "crew"
    user.mkdir(parents=True, exist_ok=True)
    for name in _SCRUBBED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.setenv(home.KIRO_HOME_ENV, str(kiro))
    monkeypatch.setenv(home.CREW_HOME_ENV, str(crew))
    return IsolatedHomes(root, user, kiro, crew)
