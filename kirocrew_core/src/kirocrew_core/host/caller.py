"""Who is calling: the caller block a relay stamped, readable by any tool the host serves.

The host verifies the hello's block against the connection's kernel credentials (the
relay's pid must be the socket peer's pid), pins that process with its start time, and
then replaces the block on every request of that connection with the verified one, so a
block an MCP client (or a model) forged never reaches a tool. Who the caller *is* is
decided per call from the pinned process's ancestry (:mod:`kirocrew_core.coretools.identity`);
the block's key and pids are claims. :func:`current_caller` reads a context variable the host sets for
the connection's task; every request handler runs in a task spawned from it. Nothing is
kept per caller in module state.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kirocrew_core.host.protocol import CALLER_SCHEMA_VERSION


@dataclass(frozen=True)
class CallerContext:
    """The verified caller of one host connection.

    ``session_key`` is the session key the relay found in its environment
    (``KIROCREW_SESSION_KEY``; empty when it had none): a claim, never proof. ``relay_pid`` is
    the relay's pid as the block names it, and ``peer_verified`` says the host checked it
    against the socket's kernel credentials (only then may identity be derived from it);
    ``relay_started`` is that process's start time as the host read it when it accepted the
    connection (the pin that tells it from a later process given the same pid); ``host_pid``
    the MCP host process that started the relay (kiro-cli, Claude Code, …) as the relay
    reports it; ``host_pid_env`` the ``KIROCREW_HOST_PID`` the relay inherited (a claim).
    """

    session_key: str
    session_type: str
    relay_pid: int
    host_pid: int | None
    raw: Mapping[str, Any]
    host_pid_env: int | None = None
    peer_verified: bool = False
    relay_started: float | None = None

    def block(self) -> dict[str, Any]:
        """The block stamped into each request's ``params._meta``."""
        return dict(self.raw)


class CallerBlockError(ValueError):
    """A hello's caller block is malformed."""


def parse_block(block: Any) -> CallerContext:
    """The caller a hello announces; :class:`CallerBlockError` when it is not a valid block."""
    if not isinstance(block, dict):
        raise CallerBlockError("the caller block is not an object")
    version = block.get("schemaVersion")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CallerBlockError("the caller block has no valid schemaVersion")
    if version > CALLER_SCHEMA_VERSION:
        raise CallerBlockError(f"caller block version {version} is newer than this host's {CALLER_SCHEMA_VERSION}")
    key, kind = block.get("sessionKey", ""), block.get("sessionType", "unknown")
    relay, host = block.get("relayPid"), block.get("hostPid")
    if not isinstance(key, str) or len(key) > 512 or any(ord(c) < 0x20 for c in key):
        raise CallerBlockError("the caller block's sessionKey is not a printable string of at most 512 characters")
    if not isinstance(kind, str) or not kind.isidentifier() or len(kind) > 64:
        raise CallerBlockError("the caller block's sessionType is not a short identifier")
    if not isinstance(relay, int) or not _pid(relay):
        raise CallerBlockError("the caller block's relayPid is not a pid")
    if host is not None and not _pid(host):
        raise CallerBlockError("the caller block's hostPid is not a pid")
    host_env = block.get("hostPidEnv")
    if host_env is not None and not _pid(host_env):
        raise CallerBlockError("the caller block's hostPidEnv is not a pid")
    raw = {"schemaVersion": CALLER_SCHEMA_VERSION, "sessionKey": key, "sessionType": kind,
           "relayPid": relay, "hostPid": host}
    if host_env is not None:  # additive: a block without it reads exactly as before
        raw["hostPidEnv"] = host_env
    return CallerContext(session_key=key, session_type=kind, relay_pid=relay, host_pid=host, raw=raw,
                         host_pid_env=host_env)


def _pid(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


_CURRENT: contextvars.ContextVar[CallerContext | None] = contextvars.ContextVar("kirocrew_caller", default=None)


def current_caller() -> CallerContext | None:
    """The verified caller of the request being handled, or ``None`` outside a host connection."""
    return _CURRENT.get()


def set_current_caller(caller: CallerContext | None) -> contextvars.Token[CallerContext | None]:
    """Bind ``caller`` for the current task and the tasks it spawns (the host does this per connection)."""
    return _CURRENT.set(caller)


def reset_current_caller(token: contextvars.Token[CallerContext | None]) -> None:
    """Undo :func:`set_current_caller` (the connection ended)."""
    _CURRENT.reset(token)
