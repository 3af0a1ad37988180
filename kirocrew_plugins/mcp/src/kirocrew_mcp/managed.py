"""Managed MCP servers: the ones a plugin owns end to end (``kirocrew-core``, ``kirocrew-computer``…).

Their launch spec is never taken from a scope file: the agent-file rebuild (and
an app agent that references one) rewrites ``command``/``args`` from the live
``kirocrew`` executable every time, because a stored absolute path goes stale
after an upgrade, and a stale copy in some global must not shadow the fresh one.

A managed entry keeps only :data:`MANAGED_ENTRY_KEYS`. ``url`` and ``headers``
from older builds are dropped, ``env.KIROCREW_HOME`` is pinned to the crew home
this process runs under, and env keys that would change how the launcher
itself starts (``PATH``, ``PYTHONPATH``, ``LD_PRELOAD``…) are dropped; the
user's other env keys, ``timeout``, ``disabled`` and ``disabledTools`` survive.
``autoApprove`` survives only for a server whose ``may_auto_approve`` is True.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from kirocrew_core.contributions import ManagedMcpServer
    from kirocrew_core.plugins import KirocrewPluginManager

EXECUTABLE_NAME = "kirocrew"
MANAGED_ENTRY_KEYS = frozenset(
    {"command", "args", "type", "autoApprove", "timeout", "env", "disabled", "disabledTools"}
)
# Env keys that change how the launcher starts rather than what the server does.
_LAUNCHER_ENV = frozenset(
    {
        "HOME", "USERPROFILE", "PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "NODE_OPTIONS",
        "NODE_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "PYTHONUSERBASE",
        "LD_PRELOAD", "LD_LIBRARY_PATH",
    }
)
_LAUNCHER_ENV_PREFIXES = ("DYLD_",)


class ManagedServerConflictError(KirocrewError):
    """Two plugins claim the same managed server name; neither can be trusted to own it."""

    code = "managed_mcp_conflict"
    exit_code = 1


def managed_servers(pm: KirocrewPluginManager | None = None) -> dict[str, ManagedMcpServer]:
    """Every ``managed_mcp_servers()`` contribution by name (plugins in hook call order).

    Raises :class:`ManagedServerConflictError` when two plugins return the same name.
    """
    from kirocrew_core.contributions import ManagedMcpServer, flatten
    from kirocrew_core.plugins import collect, get_plugin_manager

    manager = pm if pm is not None else get_plugin_manager()
    out: dict[str, ManagedMcpServer] = {}
    owners: dict[str, str] = {}
    for contribution in flatten(collect(manager, "managed_mcp_servers")):
        server = contribution.value
        if not isinstance(server, ManagedMcpServer):
            raise KirocrewError(
                f"plugin {contribution.plugin!r} returned {server!r} from managed_mcp_servers(); "
                "expected a ManagedMcpServer",
                code="managed_mcp_invalid",
            )
        if server.name in out:
            raise ManagedServerConflictError(
                f"managed MCP server {server.name!r} is claimed by both {owners[server.name]!r} "
                f"and {contribution.plugin!r}"
            )
        out[server.name] = server
        owners[server.name] = contribution.plugin
    return out


def kirocrew_executable() -> str | None:
    """The ``kirocrew`` console script this interpreter installed, else the one on the augmented PATH."""
    beside = Path(sys.executable).with_name(EXECUTABLE_NAME)
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    from kirocrew_mcp.resolve import augmented_path

    found = shutil.which(EXECUTABLE_NAME, path=augmented_path())
    return os.path.abspath(found) if found else None


def managed_invocation(server: ManagedMcpServer, executable: str | None = None) -> tuple[str, list[str]]:
    """``(command, args)`` that start ``server`` with the code running now.

    ``server.command`` wins when a plugin set one; otherwise the live
    ``kirocrew`` executable, or this interpreter running ``-m kirocrew_core`` (the same
    launcher: a bare ``mcp-<server>`` is the relay) when no console script exists (a
    source checkout).
    """
    args = [str(arg) for arg in server.args]
    if server.command:
        return server.command, args
    exe = executable if executable is not None else kirocrew_executable()
    if exe:
        return exe, args
    return sys.executable, ["-m", "kirocrew_core", *args]


def _launcher_env_key(key: str) -> bool:
    upper = key.upper()
    return upper in _LAUNCHER_ENV or upper.startswith(_LAUNCHER_ENV_PREFIXES)


def _string_list(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def managed_entry(
    server: ManagedMcpServer,
    existing: Any = None,
    *,
    invocation: tuple[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The rendered entry for ``server``, keeping only the safe user keys of ``existing``."""
    command, args = invocation if invocation is not None else managed_invocation(server)
    entry: dict[str, Any] = {"command": command, "args": list(args)}
    old = existing if isinstance(existing, dict) else {}
    if old.get("type") == "stdio":
        entry["type"] = "stdio"
    if _finite_number(old.get("timeout")):
        entry["timeout"] = old["timeout"]
    elif server.timeout_ms is not None:
        entry["timeout"] = server.timeout_ms
    if isinstance(old.get("disabled"), bool):
        entry["disabled"] = old["disabled"]
    disabled_tools = _string_list(old.get("disabledTools"))
    if disabled_tools is not None:
        entry["disabledTools"] = disabled_tools
    auto_approve = _string_list(old.get("autoApprove"))
    if auto_approve is not None and server.may_auto_approve:
        entry["autoApprove"] = auto_approve
    env: dict[str, str] = {}
    old_env = old.get("env")
    if isinstance(old_env, dict):
        env.update(
            (k, v) for k, v in old_env.items()
            if isinstance(k, str) and isinstance(v, str) and not _launcher_env_key(k) and k != home.CREW_HOME_ENV
        )
    env.update((str(k), str(v)) for k, v in server.env.items())
    env[home.CREW_HOME_ENV] = str(home.crew_home())
    entry["env"] = env
    return entry
