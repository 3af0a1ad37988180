"""Every filesystem location kirocrew uses. Nothing else builds a path under ``~``.

Paths are computed from the environment on each call (never cached at import),
so a test or a gateway started with another ``KIROCREW_HOME`` sees its own tree.
"""

from __future__ import annotations

import os
from collections import namedtuple
from pathlib import Path

KIRO_HOME_ENV = "KIRO_HOME"
CREW_HOME_ENV = "KIROCREW_HOME"
#: The agent kirocrew renders (``<agents dir>/kirocrew.json``) and runs its kiro-cli sessions as.
RENDERED_AGENT = "kirocrew"

# Owner-only: the crew home holds the audit key, the gateway token and state.
CREW_HOME_MODE = 0o700


def user_home() -> Path:
    """The user's home directory (``HOME``), the root of every default below."""
    return Path(os.path.expanduser("~"))


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


def kiro_home() -> Path:
    """Kiro's own home: ``$KIRO_HOME``, default ``~/.kiro``."""
    return _env_path(KIRO_HOME_ENV) or user_home() / ".kiro"


def crew_home() -> Path:
    """kirocrew's data home: ``$KIROCREW_HOME``, default ``<kiro home>/crew``."""
    return _env_path(CREW_HOME_ENV) or kiro_home() / "crew"


def kiro_agents_dir() -> Path:
    """Where kiro-cli reads user agent specs (``<kiro home>/agents``)."""
    return kiro_home() / "agents"


def rendered_agent_file() -> Path:
    """The one file the rebuild writes: ``<kiro home>/agents/kirocrew.json`` (the :data:`RENDERED_AGENT`)."""
    return kiro_agents_dir() / f"{RENDERED_AGENT}.json"


def kiro_global_mcp_file() -> Path:
    """Kiro's global MCP file, user-owned: read, never written except by an explicit Apply."""
    return kiro_home() / "settings" / "mcp.json"


def crew_mcp_file() -> Path:
    """kirocrew's own MCP additions and per-server tool disables: ``<crew home>/mcp.json``."""
    return crew_home() / "mcp.json"


def kiro_sessions_dir() -> Path:
    """Where kiro-cli persists ACP sessions (``<kiro home>/sessions/cli``)."""
    return kiro_home() / "sessions" / "cli"


def oauth_cache_dir() -> Path:
    """kiro-cli's OAuth grant cache, ``~/.aws/sso/cache``. Stat only: never open a token file."""
    return user_home() / ".aws" / "sso" / "cache"


def config_file() -> Path:
    """``<crew home>/config.toml``."""
    return crew_home() / "config.toml"


def audit_log_file() -> Path:
    """The security event log (SEL): ``<crew home>/audit/sel.jsonl``."""
    return crew_home() / "audit" / "sel.jsonl"


def audit_key_file() -> Path:
    """The SEL's HMAC key, owner-only (0600)."""
    return crew_home() / "audit" / "sel.key"


def audit_anchor_file() -> Path:
    """The SEL's head anchor (the newest record's seq and MAC, itself MAC'd), owner-only (0600)."""
    return crew_home() / "audit" / "sel.head"


def gateway_token_file() -> Path:
    """The gateway owner token, owner-only (0600)."""
    return crew_home() / "gateway.token"


def locks_dir() -> Path:
    """Where named inter-process lock files live."""
    return crew_home() / "locks"


def state_dir(plugin: str) -> Path:
    """A plugin's private state folder inside the crew home (``<crew home>/state/<plugin>``)."""
    if not plugin or plugin in {".", ".."} or any(c in plugin for c in "/\\\0"):
        raise ValueError(f"not a plugin state name: {plugin!r}")
    return crew_home() / "state" / plugin


def apps_dir() -> Path:
    """Where installed apps keep their manifests (``<crew home>/apps/<app>/manifest.json``)."""
    return crew_home() / "apps"


def artifacts_dir() -> Path:
    """The artifact library: one folder per artifact, and the folder tree's file (``<crew home>/artifacts``)."""
    return crew_home() / "artifacts"


def artifact_uploads_dir() -> Path:
    """Where ``kirocrew artifact save`` leaves content too large for one host message, for the host to read
    (``<crew home>/state/artifact-uploads``; owner-only, each file removed once saved)."""
    return crew_home() / "state" / "artifact-uploads"


def pending_deploys_file() -> Path:
    """Deploys waiting for the owner's confirmation (``<crew home>/deploy/pending-deploys.json``)."""
    return crew_home() / "deploy" / "pending-deploys.json"


def cli_index_file() -> Path:
    """The ``kirocrew`` root command's cached index of plugin commands (``<crew home>/state/cli/commands.json``).

    Owner-only like the rest of the crew home: an index another user wrote is never read.
    """
    return crew_home() / "state" / "cli" / "commands.json"


def session_pid_dir() -> Path:
    """Where an earlier version published signed session pid sidecars (``<crew home>/state/session-pids``).

    Identity no longer reads them; a starting host removes any it finds there.
    """
    return crew_home() / "state" / "session-pids"


def ensure_crew_home() -> Path:
    """Create the crew home owner-only (0700) if missing, and tighten it if it exists."""
    home = crew_home()
    home.mkdir(parents=True, exist_ok=True, mode=CREW_HOME_MODE)
    if (home.stat().st_mode & 0o777) != CREW_HOME_MODE:
        os.chmod(home, CREW_HOME_MODE)
    return home


# A plain namedtuple, not a dataclass: dataclasses costs the relay ~5 ms of imports.
_HomesTuple = namedtuple(
    "_HomesTuple",
    ["user_home", "kiro_home", "crew_home", "agents_dir", "rendered_agent_file",
     "kiro_global_mcp_file", "crew_mcp_file", "oauth_cache_dir", "config_file"],
)


class Homes(_HomesTuple):
    """A snapshot of every location (all :class:`~pathlib.Path`), for display (``kirocrew doctor``, the dashboard)."""

    __slots__ = ()

    @classmethod
    def current(cls) -> Homes:
        return cls(
            user_home=user_home(),
            kiro_home=kiro_home(),
            crew_home=crew_home(),
            agents_dir=kiro_agents_dir(),
            rendered_agent_file=rendered_agent_file(),
            kiro_global_mcp_file=kiro_global_mcp_file(),
            crew_mcp_file=crew_mcp_file(),
            oauth_cache_dir=oauth_cache_dir(),
            config_file=config_file(),
        )
