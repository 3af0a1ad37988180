"""The app registry's read side: what the rebuild takes from ``<crew home>/state/mcp/apps.json``.

:mod:`kirocrew_mcp.render` reads the registry through this module and
:mod:`kirocrew_mcp.apps` (which registers apps, then rebuilds) writes it, so the
render never imports the module that calls it. :mod:`kirocrew_mcp.apps`
re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.jsonfile import ReadState, read_json

REGISTRY_VERSION = 1
PORT_PLACEHOLDER = "{port}"


def registry_file() -> Path:
    """``<crew home>/state/mcp/apps.json``: which apps declare which MCP servers."""
    return home.state_dir("mcp") / "apps.json"


def app_key(app: str, server: str) -> str:
    """The namespaced ``mcpServers`` key of an app's server."""
    return f"{app}:{server}"


@dataclass
class AppRenderState:
    """What the rebuild takes from the registry: entries to assign and which apps it knows."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    known_apps: set[str] = field(default_factory=set)

    def owns(self, key: str) -> bool:
        """True when ``key`` is an ``{app}:{server}`` key of an app the registry knows."""
        app, sep, server = key.partition(":")
        return bool(sep and server) and app in self.known_apps


def _derive_entry(spec: dict[str, Any], port: int | None) -> dict[str, Any] | None:
    """The rendered entry, or None for a backend-bound URL whose live port is unknown."""
    entry = dict(spec)  # one level: nested values are replaced downstream, never mutated
    url = entry.get("url")
    if isinstance(url, str) and PORT_PLACEHOLDER in url:
        if port is None:
            return None
        entry["url"] = url.replace(PORT_PLACEHOLDER, str(port))
    return entry


def app_entries_for_render(warnings: list[str]) -> AppRenderState:
    """Read the registry for the rebuild (caller holds the ``agent-file`` lock).

    A registry that cannot be read yields an empty state, so the rebuild keeps
    every ``{app}:{server}`` entry of its base as it is: unknowable means keep.
    """
    read = read_json(registry_file())
    if not read.known:
        warnings.append(f"app registry {read.path}: {read.state.value}: {read.error}; app servers left as they were")
        return AppRenderState()
    document = read.document if read.state is ReadState.DOCUMENT else {}
    apps = document.get("apps") if isinstance(document, dict) else None
    if read.state is ReadState.DOCUMENT and not isinstance(apps, dict):
        warnings.append(f"app registry {read.path}: not a registry; app servers left as they were")
        return AppRenderState()
    state = AppRenderState()
    for app, record in (apps or {}).items():
        if not isinstance(app, str) or not isinstance(record, dict):
            continue
        enabled = record.get("enabled")
        if enabled is False:
            state.known_apps.add(app)  # confirmed disabled: its keys are dropped
        if enabled is not True:
            continue  # anything but an explicit true/false: unknowable, so its keys are kept
        state.known_apps.add(app)
        port = record.get("port") if isinstance(record.get("port"), int) else None
        raw_servers = record.get("servers")
        servers = raw_servers if isinstance(raw_servers, dict) else {}
        for server, spec in servers.items():
            if not isinstance(spec, dict):
                continue
            entry = _derive_entry(spec, port)
            if entry is None:
                warnings.append(
                    f"app server {app_key(app, server)!r} not written: its backend's port is not known "
                    "(it is added once the app is enabled with its backend running)"
                )
                continue
            state.entries[app_key(app, server)] = entry
    return state
