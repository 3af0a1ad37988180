"""The session tool policy (containment layer 3): which ``kirocrew-core`` tools a session's agent excludes.

(Another server built on kirocrew-core's tool server, ``kirocrew-cron``, asks the same question about
its own tools: ``server`` names whose entries count.)

One function answers for a session (:func:`policy_for_session`), with two callers: the route
``GET /api/session-tool-policy`` (``X-Session-Key``; :func:`policy_for_key`) and the server's
own filter of ``tools/list`` and ``tools/call`` (:class:`ExclusionCache`). The exclusions are
the ``managedToolPolicy.exclude`` of the agent file the session runs (the session
workspace's ``.kiro/agents/<agent>.json`` when it exists, as kiro-cli resolves it, else the
global agents directory's), or, when that file has none, the ``disabledTools`` of its
``kirocrew-core`` entry: kiro-cli 2.x refuses an agent file carrying a field it does not
know, so an agent kiro-cli runs holds the policy in the per-server form kirocrew-mcp renders
``managedToolPolicy`` into. The file is only read, never written.

The route is deny-by-default in one sense: a caller that cannot name a live session gets
400/404, never an empty policy. A session whose agent file is missing, unreadable or
malformed gets an empty exclude *with a warning* (not a refusal): kiro-cli's own
``disabledTools`` and the approval gate are the authority, this layer is defence in depth,
and kiro-cli calls ``tools/list`` once per session, so answering "no tools" on a transient
fault would leave that session without tools until it restarts. The filter fails open for
the same reason.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kirocrew_core.coretools.contract import CrewSession, ToolRefused
from kirocrew_core.coretools.directives import CORE_MCP_SERVER

log = logging.getLogger(__name__)

# Agent names as kirocrew-core accepts them (no path separators, no dots: never a path outside the dir).
AGENT_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9_-]{0,62}[a-zA-Z0-9])?$")
POLICY_KEY = "managedToolPolicy"
ALL_TOOLS = "*"
# How long the server keeps a session's answer (found, warned or failed): see docs/core-tools/index.md.
CACHE_WINDOW_SECS = 30.0
CACHE_WINDOW_ENV = "KIROCREW_TOOL_POLICY_CACHE_SECS"
CACHE_MAX_SESSIONS = 256


@dataclass(frozen=True)
class ToolPolicy:
    """A session's exclusions: tool names (``*`` for every tool), and why it is empty when it had to be."""

    agent: str | None
    exclude: frozenset[str]
    warning: str | None = None
    source: str | None = None  # the agent file read

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"agent": self.agent, "exclude": sorted(self.exclude)}
        if self.warning:
            out["warning"] = self.warning
        return out

    def excludes(self, tool: str) -> bool:
        return ALL_TOOLS in self.exclude or tool in self.exclude


def policy_for_key(key: str | None) -> tuple[CrewSession, ToolPolicy]:
    """The live session ``key`` names and its policy; ``session_key_required``/``session_not_found``/…"""
    from kirocrew_core.coretools.identity import registry

    if not key:
        raise ToolRefused("the X-Session-Key header is required: the policy is answered for one session only",
                          code="session_key_required")
    session = registry().get(key)
    if session is None:
        raise ToolRefused("no live kirocrew session has that key (it ended, or the host never issued it)",
                          code="session_not_found")
    return session, policy_for_session(session)


def policy_for_session(session: CrewSession, server: str = CORE_MCP_SERVER) -> ToolPolicy:
    """The session's exclusions of ``server``'s tools; ``invalid_agent_name`` for a name that could be a path.

    The agent file's ``managedToolPolicy.exclude`` when it has one, else the
    ``disabledTools`` of its ``server`` entry: kiro-cli 2.x refuses an agent file
    carrying a field it does not know, so an agent kiro-cli runs holds its policy in the
    form kirocrew-mcp renders ``managedToolPolicy`` into, per server.
    """
    from kirocrew_core.jsonfile import ReadState, read_json

    agent = session.agent
    if agent is None:
        return ToolPolicy(None, frozenset(), "the session runs kiro-cli's default agent: no agent file names "
                                             "exclusions")
    if not AGENT_NAME.match(agent):
        raise ToolRefused(f"the session's agent name is not a plain agent name ({len(agent)} characters)",
                          code="invalid_agent_name")
    path = agent_file(agent, session.workspace)
    read = read_json(path)
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        why = {ReadState.ABSENT: "there is no agent file", ReadState.EMPTY: "the agent file is empty",
               ReadState.MALFORMED: "the agent file is malformed", ReadState.DOCUMENT: "the agent file is not an "
                                                                                      "object"}
        return ToolPolicy(agent, frozenset(), f"{why.get(read.state, 'the agent file cannot be read')} for agent "
                                              f"{agent!r}; nothing is excluded here", str(path))
    document = read.document
    if POLICY_KEY in document:
        return _policy(agent, document[POLICY_KEY], path, server)
    servers = document.get("mcpServers")
    entry = servers.get(server) if isinstance(servers, dict) else None
    disabled = entry.get("disabledTools") if isinstance(entry, dict) else None
    if disabled is None:
        return ToolPolicy(agent, frozenset(), None, str(path))
    return _policy(agent, {"exclude": disabled}, path, server)


def _policy(agent: str, policy: object, source: Path, server: str) -> ToolPolicy:
    exclude = policy.get("exclude") if isinstance(policy, dict) else None
    if not isinstance(exclude, list):
        return ToolPolicy(agent, frozenset(), f"the tool policy of agent {agent!r} has no exclude list; nothing "
                                              "is excluded here", str(source))
    names = frozenset(name for name in (_tool_of(entry, server) for entry in exclude) if name)
    return ToolPolicy(agent, names, None, str(source))


def agent_file(agent: str, workspace: str | None) -> Path:
    """Where kiro-cli reads ``agent`` for a session in ``workspace``: the workspace's agent wins."""
    from kirocrew_core import home

    if workspace:
        local = Path(workspace) / ".kiro" / "agents" / f"{agent}.json"
        if os.path.lexists(local):
            return local
    return home.kiro_agents_dir() / f"{agent}.json"


def _tool_of(entry: object, server: str) -> str | None:
    """A ``server`` tool an exclude entry names: ``tool``, ``@kirocrew-core/tool``, ``@kirocrew-core`` (all)."""
    if not isinstance(entry, str) or not entry:
        return None
    server_ref = f"@{server}"
    if entry in (server_ref, f"{server_ref}/*"):
        return ALL_TOOLS
    if entry.startswith(server_ref + "/"):
        return entry[len(server_ref) + 1:] or None
    if entry.startswith("@"):
        return None  # another server's tool
    return entry


def cache_window() -> float:
    """``KIROCREW_TOOL_POLICY_CACHE_SECS`` if set to a number ≥ 0, else :data:`CACHE_WINDOW_SECS`."""
    raw = os.environ.get(CACHE_WINDOW_ENV, "").strip()
    try:
        value = float(raw) if raw else CACHE_WINDOW_SECS
    except ValueError:
        return CACHE_WINDOW_SECS
    return value if value >= 0 and value == value else CACHE_WINDOW_SECS


class ExclusionCache:
    """The server's filter: a session's policy, kept per session key for a short window, FIFO-bounded.

    No session (a caller without a verified key): nothing is filtered and nothing is cached,
    so a call a moment later that does resolve is filtered at once. A lookup that fails
    for a known session fails open (nothing excluded) and that failure is kept for the
    window too, so a persistent fault costs one lookup per window, not one per call.
    """

    def __init__(self, window_secs: float | None = None, *, max_sessions: int = CACHE_MAX_SESSIONS,
                 lookup: Callable[[CrewSession], ToolPolicy] | None = None,
                 clock: Callable[[], float] = time.monotonic, server: str = CORE_MCP_SERVER) -> None:
        self.window = cache_window() if window_secs is None else window_secs
        self.max_sessions = max_sessions
        self._lookup = lookup or (lambda session: policy_for_session(session, server))
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[str, tuple[float, ToolPolicy]] = collections.OrderedDict()

    def policy(self, session: CrewSession | None) -> ToolPolicy | None:
        if session is None:
            return None
        now = self._clock()
        with self._lock:
            kept = self._entries.get(session.key)
            if kept is not None and now - kept[0] < self.window:
                return kept[1]
        try:
            found = self._lookup(session)
        except Exception as exc:  # noqa: BLE001 - fail open: this layer must never hide every tool
            log.warning("the tool policy of session %s could not be read (%s: %s); nothing is excluded for %g s",
                        _fingerprint(session.key), type(exc).__name__, exc, self.window)
            found = ToolPolicy(session.agent, frozenset(), f"the policy lookup failed ({type(exc).__name__})")
        with self._lock:
            self._entries.pop(session.key, None)
            self._entries[session.key] = (now, found)
            while len(self._entries) > self.max_sessions:
                self._entries.popitem(last=False)
        return found


def _fingerprint(key: str) -> str:
    from kirocrew_core.coretools.identity import fingerprint

    return fingerprint(key)
