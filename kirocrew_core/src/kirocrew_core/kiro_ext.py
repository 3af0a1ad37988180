"""kiro-cli's ACP dialect: its ``_kiro.dev/*`` extensions and the fields it adds to standard results.

Nothing here talks to a process. It names kiro's methods, parses what kiro
sends into small typed records, and keeps the per-session record of kiro's
notifications (:class:`KiroSessionState`) that :mod:`kirocrew_core.acp_runtime`
fills in. Method names are given as the ACP SDK delivers them: an incoming
``_kiro.dev/metadata`` arrives as ``kiro.dev/metadata`` (leading underscore
stripped), and ``ext_method("kiro.dev/...")`` sends it back with one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

KIRO_EXT_PREFIX = "kiro.dev/"

# client → agent requests
COMMANDS_EXECUTE = "kiro.dev/commands/execute"
COMMANDS_OPTIONS = "kiro.dev/commands/options"
SESSION_TERMINATE = "kiro.dev/session/terminate"
# The slash command (through COMMANDS_EXECUTE) that sets a session's reasoning effort: args {"value": E}.
EFFORT_COMMAND = "effort"
# Removed from the ACP spec but still served by kiro v2; sent raw (no leading underscore).
LEGACY_SET_MODEL = "session/set_model"
# Steering a running turn: kiro folds ``message`` in at the next generation boundary (answers ``{queued: true}``).
SESSION_STEER = "session/steer"

# agent → client notifications we record
METADATA = "kiro.dev/metadata"
COMMANDS_AVAILABLE = "kiro.dev/commands/available"
MCP_OAUTH_REQUEST = "kiro.dev/mcp/oauth_request"
MCP_SERVER_INITIALIZED = "kiro.dev/mcp/server_initialized"
MCP_SERVER_INIT_FAILURE = "kiro.dev/mcp/server_init_failure"

RECORDED_NOTIFICATIONS = frozenset({
    METADATA, COMMANDS_AVAILABLE, MCP_OAUTH_REQUEST, MCP_SERVER_INITIALIZED, MCP_SERVER_INIT_FAILURE,
})

# Known, harmless, and not needed by kirocrew: dropped without a warning.
QUIET_NOTIFICATIONS = frozenset({
    "kiro.dev/session/update",
    "kiro.dev/compaction/status",
    "kiro.dev/clear/status",
    "kiro.dev/agent/switched",
    "kiro.dev/subagent/list_update",
})

# The markers kiro-cli puts in a session/load refusal caused by a session lock.
LOCK_REFUSAL_MARKERS = ("Session is active in another process", "failed to re-read lock file")

# Status names for MCP servers reported by the init notifications.
MCP_INITIALIZED = "initialized"
MCP_FAILED = "failed"


@dataclass(frozen=True)
class OAuthRequest:
    """kiro-cli asks the user to open ``url`` to authorise MCP server ``server_name``."""

    server_name: str
    url: str


def parse_oauth_request(params: Mapping[str, Any]) -> OAuthRequest | None:
    """The request in ``_kiro.dev/mcp/oauth_request``, or None if malformed or not http(s).

    A non-http(s) URL is refused: it would be shown to the user as a link to click.
    """
    server = params.get("serverName")
    url = params.get("oauthUrl")
    if not isinstance(server, str) or not server or not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        log.warning("dropping an OAuth request for %r with a non-http(s) URL", server)
        return None
    return OAuthRequest(server, url)


@dataclass(frozen=True)
class McpServerStatus:
    """What kiro-cli last said about one MCP server of a session.

    ``state`` is ``initialized`` or ``failed`` from the init notifications, or
    the status word of a ``commands/available`` row (``running``, ``loading``, ...).
    """

    name: str
    state: str
    tool_count: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class CommandResult:
    """The answer to ``_kiro.dev/commands/execute``: ``{success, message, data?}``.

    ``success`` is None when kiro did not say. ``data`` is the structured part
    (for ``/mcp``: ``{"servers": [...]}``; for ``/tools``: ``{"tools": [...]}``).
    """

    success: bool | None
    message: str
    data: Any
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def parse_command_result(raw: Any) -> CommandResult:
    if not isinstance(raw, Mapping):
        return CommandResult(None, "", raw, {})
    success = raw.get("success")
    message = raw.get("message")
    return CommandResult(
        success if isinstance(success, bool) else None,
        message if isinstance(message, str) else "",
        raw.get("data"),
        dict(raw),
    )


def command_request(session_id: str, command: str, args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Params of ``commands/execute``; ``command`` may be written ``/mcp`` or ``mcp``."""
    name = command[1:] if command.startswith("/") else command
    if not name:
        raise ValueError("empty command name")
    return {"sessionId": session_id, "command": {"command": name, "args": dict(args or {})}}


@dataclass(frozen=True)
class ModelInfo:
    model_id: str
    name: str = ""
    description: str = ""


@dataclass(frozen=True)
class SessionModels:
    """kiro's ``models`` field of a ``session/new``/``session/load`` result (absent from ACP's types)."""

    current_model_id: str | None
    available: tuple[ModelInfo, ...]

    def ids(self) -> list[str]:
        return [m.model_id for m in self.available]


def parse_session_models(raw: Any) -> SessionModels | None:
    if not isinstance(raw, Mapping):
        return None
    available = []
    for entry in raw.get("availableModels") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("modelId"), str):
            available.append(ModelInfo(entry["modelId"], str(entry.get("name") or ""),
                                       str(entry.get("description") or "")))
    current = raw.get("currentModelId")
    return SessionModels(current if isinstance(current, str) else None, tuple(available))


@dataclass(frozen=True)
class ModeInfo:
    mode_id: str
    name: str = ""
    description: str = ""


@dataclass(frozen=True)
class SessionModes:
    """``modes`` of a session result; on kiro v2 the modes are the agents."""

    current_mode_id: str | None
    available: tuple[ModeInfo, ...]

    def ids(self) -> list[str]:
        return [m.mode_id for m in self.available]


def parse_session_modes(raw: Any) -> SessionModes | None:
    if not isinstance(raw, Mapping):
        return None
    available = []
    for entry in raw.get("availableModes") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("id"), str):
            available.append(ModeInfo(entry["id"], str(entry.get("name") or ""), str(entry.get("description") or "")))
    current = raw.get("currentModeId")
    return SessionModes(current if isinstance(current, str) else None, tuple(available))


@dataclass(frozen=True)
class Usage:
    """The numbers of one ``_kiro.dev/metadata``: context used (percent), credits spent, turn duration.

    Each is None when kiro did not send it as a number; nothing else of the
    notification (a refusal's explanation, say) is kept.
    """

    context_percent: float | None
    credits: float | None
    turn_duration_ms: int | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") and value >= 0 else None


def parse_usage(params: Mapping[str, Any] | None) -> Usage | None:
    """The usage numbers in a metadata notification's params, None when it carries none."""
    if not isinstance(params, Mapping):
        return None
    credits = None
    for row in params.get("meteringUsage") or ():
        if isinstance(row, Mapping) and row.get("unit") == "credit" and _number(row.get("value")) is not None:
            credits = (credits or 0.0) + float(row["value"])
    context = _number(params.get("contextUsagePercentage"))
    duration = _number(params.get("turnDurationMs"))
    usage = Usage(None if context is None else min(context, 100.0), credits,
                  None if duration is None else int(duration))
    return None if usage == Usage(None, None, None) else usage


def is_lock_refusal(text: str) -> bool:
    """Whether an error text is kiro-cli refusing ``session/load`` because of a session lock."""
    return any(marker in text for marker in LOCK_REFUSAL_MARKERS)


def _tool_count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class KiroSessionState:
    """Everything kiro-cli told us about one session through its own notifications.

    - ``oauth_requests``: a queue of :class:`OAuthRequest`, at most one per MCP
      server for the session's lifetime (kiro may repeat itself).
    - ``mcp_status``: server name → :class:`McpServerStatus`, last report wins.
    - ``metadata``: the last ``_kiro.dev/metadata`` params (usage, refusals);
      ``metadata_count`` how many arrived, so a caller can tell a turn's own from an older one.
    - ``available_commands``: the last ``_kiro.dev/commands/available`` params.

    :meth:`wait_until` lets a caller wait for a condition on these without polling.
    """

    def __init__(self) -> None:
        self.oauth_requests: asyncio.Queue[OAuthRequest] = asyncio.Queue()
        self.mcp_status: dict[str, McpServerStatus] = {}
        self.metadata: dict[str, Any] | None = None
        self.metadata_count = 0
        self.available_commands: dict[str, Any] | None = None
        self._oauth_servers: set[str] = set()
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def oauth_servers(self) -> frozenset[str]:
        """Servers an OAuth request was ever queued for (the queue may have been drained)."""
        return frozenset(self._oauth_servers)

    def record(self, method: str, params: Mapping[str, Any]) -> bool:
        """Apply one kiro notification; False when ``method`` is not one this state tracks."""
        if method == METADATA:
            self.metadata = dict(params)
            self.metadata_count += 1
        elif method == COMMANDS_AVAILABLE:
            self.available_commands = dict(params)
            for row in params.get("mcpServers") or ():
                if isinstance(row, Mapping) and isinstance(row.get("name"), str) and isinstance(row.get("status"), str):
                    self.mcp_status[row["name"]] = McpServerStatus(row["name"], row["status"],
                                                                   _tool_count(row.get("toolCount")))
        elif method in (MCP_SERVER_INITIALIZED, MCP_SERVER_INIT_FAILURE):
            name = params.get("serverName")
            if not isinstance(name, str) or not name:
                return True
            failed = method == MCP_SERVER_INIT_FAILURE
            detail = params.get("error") or params.get("message") or ""
            self.mcp_status[name] = McpServerStatus(name, MCP_FAILED if failed else MCP_INITIALIZED,
                                                    _tool_count(params.get("toolCount")),
                                                    detail if isinstance(detail, str) else str(detail))
        elif method == MCP_OAUTH_REQUEST:
            request = parse_oauth_request(params)
            if request is not None and request.server_name not in self._oauth_servers:
                self._oauth_servers.add(request.server_name)
                self.oauth_requests.put_nowait(request)
        else:
            return False
        self._notify()
        return True

    def drain_oauth_requests(self) -> list[OAuthRequest]:
        """Take every queued OAuth request without waiting."""
        taken = []
        while not self.oauth_requests.empty():
            taken.append(self.oauth_requests.get_nowait())
        return taken

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_until(self, predicate: Callable[[KiroSessionState], bool], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for ``predicate(self)``; returns its last value."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.add(waiter)
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                return bool(predicate(self))
            finally:
                self._waiters.discard(waiter)
        return True
