"""Enable, disable and list installed apps, and bring enabled ones up to date when the host starts.

Enable checks the manifest whole first (and that every agent file it would write
can be read), so a refusal changes nothing; then it registers the app's servers
as ``{app}:{server}`` (the rebuild follows inside the registry's lock) and
installs its agents. A second enable is the same operation: it says the app was
already enabled and picks up a changed manifest or a backend that came up.

Disable records the app disabled (the rebuild drops its entries) and leaves its
agent files and its folder where they are: they are the app's. Both leave a
record in the security event log (``mcp_app_enabled``, ``mcp_app_disabled``):
they change which commands kiro-cli sessions start.

At every host start, :func:`refresh_enabled_apps` re-registers an enabled app
whose manifest or backend port changed, and re-installs its agents, so the
framework-owned keys (``managedToolPolicy``, ``neutralize``, ``includeMcpJson``)
follow the current templates while the user's other edits survive.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.jsonfile import ReadState, read_json

from kirocrew_mcp.app_manifest import AppManifest, check_app_name, installed_app_names, load_manifest
from kirocrew_mcp.app_port import live_port
from kirocrew_mcp.apply import audit_event
from kirocrew_mcp.apps import (
    PORT_PLACEHOLDER,
    app_key,
    install_app_agent,
    register_app_mcp_servers,
    registered_apps,
    unregister_app_mcp_servers,
)

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

log = logging.getLogger(__name__)

#: How long the host start waits for the apps' refresh (it finishes on its own if it overruns).
REFRESH_TIMEOUT_SECS = 30.0

# A server's state in the rendered agent, as `kirocrew apps list` shows it.
STATE_RENDERED = "rendered"  # enabled, and in the agent file
STATE_WAITING = "waiting_for_backend"  # enabled, needs the backend's port, which is not known
STATE_MISSING = "missing"  # enabled, yet not in the agent file (`kirocrew mcp rebuild` says why)
STATE_OFF = "off"  # not enabled, not in the agent file
STATE_STALE = "stale"  # not enabled, still in the agent file (the registry does not know the app)
STATE_UNKNOWN = "unknown"  # the agent file cannot be read


def _needs_port(spec: dict[str, Any]) -> bool:
    url = spec.get("url")
    return isinstance(url, str) and PORT_PLACEHOLDER in url


@dataclass
class EnableOutcome:
    """What enable did: the servers (key to state), the agents written, and the rebuild's warnings."""

    app: str
    already_enabled: bool
    servers: dict[str, str]
    agents: list[str]
    port: int | None
    port_note: str = ""
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"app": self.app, "enabled": True, "already_enabled": self.already_enabled,
                "servers": dict(self.servers), "agents": list(self.agents), "port": self.port,
                "port_note": self.port_note, "warnings": list(self.warnings)}


@dataclass
class DisableOutcome:
    """What disable did: the keys the rebuild dropped and the files it left for the app."""

    app: str
    already_disabled: bool
    removed: list[str]
    left: list[str]
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"app": self.app, "enabled": False, "already_disabled": self.already_disabled,
                "removed": list(self.removed), "left": list(self.left), "warnings": list(self.warnings)}


def _record(app: str) -> dict[str, Any]:
    record = registered_apps().get(app)
    return record if isinstance(record, dict) else {}


def _refuse_unusable_agent_files(manifest: AppManifest) -> None:
    """An agent file that exists but cannot be read would fail the install half-way: refuse before any write."""
    owners = {path: app for app, record in registered_apps().items() if app != manifest.name
              for path in (record.get("agents") or {} if isinstance(record, dict) else {})}
    for agent in manifest.agents:
        owner = owners.get(str(agent.path))
        if owner is not None:
            raise BadInputError(f"{manifest.path}: {agent.path} is app {owner!r}'s agent file",
                                code="app_agent_location")
        read = read_json(agent.path)
        if read.state is ReadState.UNREADABLE:
            raise KirocrewError(f"{agent.path}: cannot read the app agent ({read.error}); nothing changed",
                                code="agent_file_unreadable")


def _server_states(app: str, manifest: AppManifest, port: int | None) -> dict[str, str]:
    return {app_key(app, server): STATE_WAITING if _needs_port(spec) and port is None else STATE_RENDERED
            for server, spec in manifest.servers.items()}


def enable_app(name: str, *, pm: KirocrewPluginManager | None = None) -> EnableOutcome:
    """Enable the installed app ``name``: register its servers, install its agents (see the module docstring)."""
    manifest = load_manifest(check_app_name(name), pm=pm)
    _refuse_unusable_agent_files(manifest)
    already = _record(name).get("enabled") is True
    lookup = live_port(manifest)
    report = register_app_mcp_servers(name, manifest.servers, port=lookup.port,
                                      tool_policy=manifest.tool_policy(), pm=pm)
    agents = [str(install_app_agent(name, agent.path, agent.template, pm=pm)) for agent in manifest.agents]
    states = _server_states(name, manifest, lookup.port)
    for key in report.dropped:
        if key in states:
            states[key] = STATE_MISSING
    note = lookup.reason if any(state == STATE_WAITING for state in states.values()) else ""
    warnings = list(report.warnings)
    audit_event("mcp_app_enabled", "owner", warnings, app=name, servers=sorted(states), agents=agents)
    return EnableOutcome(name, already, states, agents, lookup.port, note, warnings)


def disable_app(name: str, *, pm: KirocrewPluginManager | None = None) -> DisableOutcome:
    """Disable ``name``: its ``{app}:{server}`` entries are dropped; its agent files and folder stay."""
    check_app_name(name)
    record = _record(name)
    installed = name in installed_app_names()
    if not record and not installed:
        raise BadInputError(f"no app named {name!r} (see `kirocrew apps list`)", code="app_not_found")
    raw_agents = record.get("agents")
    left = sorted(raw_agents) if isinstance(raw_agents, dict) else []
    if installed:
        left.append(str(home.apps_dir() / name))
    if record.get("enabled") is not True:
        return DisableOutcome(name, True, [], left)
    servers = record.get("servers")
    removed = [app_key(name, server) for server in servers] if isinstance(servers, dict) else []
    report = unregister_app_mcp_servers(name, pm=pm)
    warnings = list(report.warnings)
    audit_event("mcp_app_disabled", "owner", warnings, app=name, servers=removed)
    return DisableOutcome(name, False, removed, left, warnings)


def _rendered_servers() -> dict[str, Any] | None:
    read = read_json(home.rendered_agent_file())
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return {}
    document = read.document if read.state is ReadState.DOCUMENT else None
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    return servers if isinstance(servers, dict) else None


def _state(enabled: bool, key: str, spec: dict[str, Any], port: int | None,
           rendered: dict[str, Any] | None) -> str:
    if rendered is None:
        return STATE_UNKNOWN
    if not enabled:
        return STATE_STALE if key in rendered else STATE_OFF
    if key in rendered:
        return STATE_RENDERED
    return STATE_WAITING if _needs_port(spec) and port is None else STATE_MISSING


def list_apps() -> list[dict[str, Any]]:
    """Every app installed or in the registry: enabled or not, its servers and their state in the agent file."""
    registry = registered_apps()
    rendered = _rendered_servers()
    rows = []
    for name in sorted(set(installed_app_names()) | {n for n in registry if isinstance(n, str)}):
        raw_record = registry.get(name)
        record: dict[str, Any] = raw_record if isinstance(raw_record, dict) else {}
        enabled = record.get("enabled") is True
        manifest_state, problem, servers, agents = "ok", None, {}, []
        try:
            manifest = load_manifest(name)
            servers, agents = manifest.servers, [str(agent.path) for agent in manifest.agents]
        except KirocrewError as exc:
            manifest_state = "missing" if exc.code == "app_not_found" else "invalid"
            problem = {"code": exc.code, "error": exc.message}
            recorded = record.get("servers")
            servers = recorded if isinstance(recorded, dict) else {}
        port = record.get("port") if isinstance(record.get("port"), int) else None
        rows.append({
            "app": name,
            "enabled": enabled,
            "manifest": manifest_state,
            "problem": problem,
            "port": port,
            "servers": [{"key": app_key(name, server), "transport": "http" if "url" in spec else "stdio",
                         "state": _state(enabled, app_key(name, server), spec, port, rendered)}
                        for server, spec in sorted(servers.items()) if isinstance(spec, dict)],
            "agents": agents,
        })
    return rows


@dataclass
class AppRefresh:
    """What the host start did for one enabled app."""

    app: str
    registered: bool = False
    agents: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _refresh_one(name: str, record: dict[str, Any], pm: KirocrewPluginManager | None) -> AppRefresh:
    outcome = AppRefresh(name)
    try:
        manifest = load_manifest(name, pm=pm)
    except KirocrewError as exc:
        outcome.problems.append(f"{exc.code}: {exc.message}; left as registered")
        return outcome
    port = live_port(manifest).port
    policy = manifest.tool_policy()
    if (record.get("servers"), record.get("port"), record.get("tool_policy")) != (manifest.servers, port, policy):
        register_app_mcp_servers(name, manifest.servers, port=port, tool_policy=policy, pm=pm)
        outcome.registered = True
    for agent in manifest.agents:
        try:
            outcome.agents.append(str(install_app_agent(name, agent.path, agent.template, pm=pm)))
        except (KirocrewError, OSError) as exc:
            outcome.problems.append(f"{agent.path}: {getattr(exc, 'code', 'agent_file_write_failed')}: {exc}")
    return outcome


def refresh_enabled_apps(pm: KirocrewPluginManager | None = None) -> list[AppRefresh]:
    """Bring every enabled app up to date with its manifest and backend (one app's failure stops no other)."""
    outcomes = []
    for name, record in sorted(registered_apps().items()):
        if isinstance(record, dict) and record.get("enabled") is True:
            try:
                outcomes.append(_refresh_one(name, record, pm))
            except (KirocrewError, OSError) as exc:
                outcomes.append(AppRefresh(name, problems=[f"{getattr(exc, 'code', 'error')}: {exc}"]))
    return outcomes


async def refresh_enabled_apps_async(pm: KirocrewPluginManager | None = None) -> list[AppRefresh]:
    """:func:`refresh_enabled_apps` in a worker thread for the host start: bounded, logged, never raising."""
    try:
        outcomes = await asyncio.wait_for(asyncio.to_thread(refresh_enabled_apps, pm), REFRESH_TIMEOUT_SECS)
    except asyncio.TimeoutError:
        log.warning("refreshing the enabled apps took longer than %g s; it finishes on its own", REFRESH_TIMEOUT_SECS)
        return []
    except Exception:  # an app must never stop the host from starting
        log.exception("could not refresh the enabled apps at host start")
        return []
    for outcome in outcomes:
        for problem in outcome.problems:
            log.warning("app %s at host start: %s", outcome.app, problem)
        if outcome.agents or outcome.registered:
            log.info("app %s refreshed at host start: %s%d agent file(s)", outcome.app,
                     "servers re-registered, " if outcome.registered else "", len(outcome.agents))
    return outcomes
