"""Every environment switch the fake reads, in one place (the docs page lists the same).

Switches are read when asked for, never cached at import, so one test can
start fakes with different behaviours from the same process.
"""

from __future__ import annotations

import os

IMITATED_VERSION = "2.15.0"

VERSION = "KIRO_FAKE_VERSION"
LAUNCHER = "KIRO_FAKE_LAUNCHER"
LOGGED_OUT = "KIRO_FAKE_LOGGED_OUT"
MODELS = "KIRO_FAKE_MODELS"
MODELS_FORMAT = "KIRO_FAKE_MODELS_FORMAT"
ADVERTISE_FORK = "KIRO_FAKE_ADVERTISE_FORK"
UNKNOWN_LOAD = "KIRO_FAKE_UNKNOWN_LOAD"
INIT_DELAY = "KIRO_FAKE_INIT_DELAY"
CRASH_ON_LOAD = "KIRO_FAKE_CRASH_ON_LOAD"
SILENT = "KIRO_FAKE_SILENT"
MCP_INIT_TIMEOUT = "KIRO_FAKE_MCP_INIT_TIMEOUT"
EAGER_MCP = "KIRO_FAKE_EAGER_MCP"
NO_IMAGES = "KIRO_FAKE_NO_IMAGES"
COMMANDS_DELAY = "KIRO_FAKE_COMMANDS_DELAY"
# New sessions in kiro's V3 layout (as --agent-engine v3).
V3 = "KIRO_FAKE_V3"
# Holds commands/available until a file exists (COMMANDS_DELAY, when set, bounds the wait).
COMMANDS_UNTIL = "KIRO_FAKE_COMMANDS_UNTIL"
# A stored grant the server refuses (after one refresh) fails the server instead of a new consent.
OAUTH_NO_REAUTH = "KIRO_FAKE_OAUTH_NO_REAUTH"
# Check every ACP frame against the acp SDK's models (strict.py); off by default: importing them costs CPU.
STRICT = "KIRO_FAKE_STRICT"
# Set by the launcher on the child it forks; not a user switch.
ROLE = "KIRO_FAKE_ROLE"
CHAT_ROLE = "kiro-cli-chat"

ALL = (VERSION, LAUNCHER, LOGGED_OUT, MODELS, MODELS_FORMAT, ADVERTISE_FORK, UNKNOWN_LOAD,
       INIT_DELAY, CRASH_ON_LOAD, SILENT, MCP_INIT_TIMEOUT, EAGER_MCP, NO_IMAGES, COMMANDS_DELAY,
       COMMANDS_UNTIL, OAUTH_NO_REAUTH, V3, STRICT)

UNKNOWN_LOAD_CHOICES = ("exit", "error", "hang")
DEFAULT_MCP_INIT_TIMEOUT = 10.0


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def flag(name: str) -> bool:
    """A boolean switch: set to anything but ``""``, ``0``, ``false`` or ``no``."""
    return _raw(name).lower() not in ("", "0", "false", "no")


def number(name: str, default: float) -> float:
    """A non-negative number of seconds; a malformed value falls back to ``default``."""
    try:
        value = float(_raw(name))
    except ValueError:
        return default
    return value if value >= 0 else default


def path(name: str) -> str | None:
    """A file path switch, or None when unset."""
    return _raw(name) or None


def version() -> str:
    return _raw(VERSION) or IMITATED_VERSION


def unknown_load() -> str:
    value = _raw(UNKNOWN_LOAD).lower()
    return value if value in UNKNOWN_LOAD_CHOICES else "exit"


def crash_on_load() -> int | None:
    """The exit code to crash with on ``session/load``, or None when not asked to."""
    value = _raw(CRASH_ON_LOAD)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        return 101  # a Rust panic's exit code


def model_ids() -> list[str] | None:
    value = _raw(MODELS)
    if not value:
        return None
    ids = [part.strip() for part in value.split(",") if part.strip()]
    return ids or None


def is_chat_child() -> bool:
    return _raw(ROLE) == CHAT_ROLE
