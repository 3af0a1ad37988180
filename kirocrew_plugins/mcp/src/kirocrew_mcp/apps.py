"""App MCP servers and app agents.

An app declares MCP servers; they reach kiro-cli as ``{app}:{server}`` entries
of kirocrew's own agent file, never of the Kiro global, which Kiro IDE and every
other kiro-cli agent read (an app's private tools would leak into surfaces that
never installed it).

The **app registry** (``<crew home>/state/mcp/apps.json``, owner-only) is the
authority: :func:`register_app_mcp_servers` records an app's servers and its
backend's live port, :func:`unregister_app_mcp_servers` records it disabled.
Both run under the ``agent-file`` lock and finish with a full rebuild inside it,
and the rebuild re-reads the registry under the same lock, so a registration can
never be erased by a concurrent rebuild. An app's entries are dropped only when
the registry says the app is disabled; a key whose app the registry does not
know is left alone, because absence is not proof.

An HTTP server whose URL names the app backend's port (``{port}`` in the URL)
is written only while that port is known; otherwise it is left out and any
stale entry scrubbed, because kiro-cli connects to every server of the agent on
each request and one dead URL fails them all.

**App agents** (:func:`render_app_agent`, :func:`install_app_agent`) are kiro
agent files an app ships for its own sessions, written where the app keeps them
(never in ``~/.kiro/agents``: kirocrew renders exactly one file there). From the
app's template: ``@kirocrew-core``-style refs get the managed launch spec copied
in (kiro-cli resolves ``@server`` only against the agent's own servers and the
global file); ``managedToolPolicy: {"exclude": ["@srv/tool", ...]}`` renders as
``disabledTools``; ``neutralize: {"srv": ["tool", ...]}`` re-declares ``srv``
with exactly those tools disabled and keeps it out of ``tools``. Those two keys,
and ``includeMcpJson: false``, are framework-owned: re-derived from the template
on every install, never preserved from the file, while the user's other edits
to the agent file survive.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, MalformedFileError, UnreadableFileError
from kirocrew_core.jsonfile import ReadState, dumps, read_json, write_bytes_atomic, write_json_atomic
from kirocrew_core.locks import named_lock

from kirocrew_mcp import managed as managed_mod
from kirocrew_mcp.app_registry import (
    PORT_PLACEHOLDER,
    REGISTRY_VERSION,
    AppRenderState,
    app_entries_for_render,
    app_key,
    registry_file,
)
from kirocrew_mcp.render import (
    AGENT_FIELDS,
    LOCK_NAME,
    RebuildReport,
    Withheld,
    apply_auto_approve_pass,
    audit_withheld,
    backups_dir,
    rebuild_agent_config,
)
from kirocrew_mcp.scopes import all_scopes, read_scope_servers

if TYPE_CHECKING:
    from kirocrew_core.contributions import ManagedMcpServer
    from kirocrew_core.plugins import KirocrewPluginManager

#: An app's or an app server's name: safe as a folder name and as half of an ``{app}:{server}`` key.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
_FRAMEWORK_KEYS = ("managedToolPolicy", "neutralize")


# -- validation ---------------------------------------------------------------


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadInputError(
            f"{kind} name {name!r} must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            code="app_mcp_invalid",
        )
    return name


def _check_spec(app: str, server: str, spec: object) -> dict[str, Any]:
    where = f"app {app!r} server {server!r}"
    if not isinstance(spec, Mapping):
        raise BadInputError(f"{where}: the spec must be an object", code="app_mcp_invalid")
    spec = copy.deepcopy(dict(spec))
    command, url = spec.get("command"), spec.get("url")
    if not (isinstance(command, str) and command.strip()) and not (isinstance(url, str) and url.strip()):
        raise BadInputError(f"{where}: needs a command or a url", code="app_mcp_invalid")
    for key in ("args", "autoApprove", "disabledTools"):
        value = spec.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise BadInputError(f"{where}: {key} must be a list of strings", code="app_mcp_invalid")
    for key in ("env", "headers"):
        value = spec.get(key)
        if value is not None and not (
            isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        ):
            raise BadInputError(f"{where}: {key} must be a map of strings", code="app_mcp_invalid")
    if "disabled" in spec and not isinstance(spec["disabled"], bool):
        raise BadInputError(f"{where}: disabled must be true or false", code="app_mcp_invalid")
    return spec


def _check_port(port: object) -> int | None:
    if port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise BadInputError(f"port must be 1-65535 or None, not {port!r}", code="app_mcp_invalid")
    return port


# -- the registry -------------------------------------------------------------


def _load_registry() -> dict[str, Any]:
    """The registry document for a read-modify-write; raises rather than guess about a bad file."""
    read = read_json(registry_file())
    if read.state is ReadState.UNREADABLE:
        raise UnreadableFileError(f"{read.path}: {read.error}")
    if read.state is ReadState.MALFORMED:
        raise MalformedFileError(read.path, read.error, line=read.line, code="app_registry_malformed")
    document = read.document if read.state is ReadState.DOCUMENT else {}
    if not isinstance(document, dict) or not isinstance(document.get("apps", {}), dict):
        raise MalformedFileError(read.path, "expected {\"apps\": {...}}", code="app_registry_malformed")
    document.setdefault("version", REGISTRY_VERSION)
    document.setdefault("apps", {})
    return document


def _save_registry(document: dict[str, Any]) -> None:
    home.ensure_crew_home()
    # Owner-only: app server specs may carry credentials in env or headers.
    write_json_atomic(registry_file(), document, secret=True)


def register_app_mcp_servers(
    app: str,
    servers: Mapping[str, Mapping[str, Any]],
    *,
    port: int | None = None,
    tool_policy: list[str] | None = None,
    pm: KirocrewPluginManager | None = None,
) -> RebuildReport:
    """Record ``app`` as enabled with exactly ``servers`` and re-render the agent file.

    ``servers`` maps a server name to its ``mcpServers`` spec; a URL containing
    ``{port}`` is bound to the app backend's ``port`` (None: backend not
    running, the server is left out). ``tool_policy`` is the app's
    ``managedToolPolicy.exclude`` for the gateway's per-session policy.
    Bad input raises ``app_mcp_invalid`` and changes nothing; a malformed
    registry raises ``app_registry_malformed`` and is left as it is.
    """
    _check_name("app", app)
    if not isinstance(servers, Mapping):
        raise BadInputError("servers must be a mapping of server name to spec", code="app_mcp_invalid")
    checked = {_check_name("server", name): _check_spec(app, name, spec) for name, spec in servers.items()}
    port = _check_port(port)
    policy = _check_policy_refs(tool_policy or [])
    with named_lock(LOCK_NAME):
        registry = _load_registry()
        record = registry["apps"].get(app) if isinstance(registry["apps"].get(app), dict) else {}
        record.update({"enabled": True, "port": port, "servers": checked, "tool_policy": policy})
        registry["apps"][app] = record
        _save_registry(registry)
        return rebuild_agent_config(pm=pm)


def unregister_app_mcp_servers(app: str, *, pm: KirocrewPluginManager | None = None) -> RebuildReport:
    """Record ``app`` as disabled (its ``{app}:*`` entries are then dropped) and re-render.

    The record is kept as a tombstone: it is what lets the rebuild drop the
    app's keys with confidence, including leftovers from an older install.
    """
    _check_name("app", app)
    with named_lock(LOCK_NAME):
        registry = _load_registry()
        record = registry["apps"].get(app) if isinstance(registry["apps"].get(app), dict) else {}
        record.update({"enabled": False, "port": None, "servers": {}, "tool_policy": []})
        registry["apps"][app] = record
        _save_registry(registry)
        return rebuild_agent_config(pm=pm)


def registered_apps() -> dict[str, dict[str, Any]]:
    """The registry's app records (raises for a malformed or unreadable registry)."""
    return copy.deepcopy(_load_registry()["apps"])


def app_tool_policy(app: str) -> list[str]:
    """The ``managedToolPolicy.exclude`` refs of ``app`` (for the gateway's per-session policy)."""
    record = _load_registry()["apps"].get(app)
    policy = record.get("tool_policy") if isinstance(record, dict) else None
    return [ref for ref in policy if isinstance(ref, str)] if isinstance(policy, list) else []


# -- app agents ---------------------------------------------------------------


def _check_policy_refs(refs: object) -> list[str]:
    if not isinstance(refs, list):
        raise BadInputError("managedToolPolicy.exclude must be a list of @server/tool refs", code="app_agent_invalid")
    out = []
    for ref in refs:
        if not isinstance(ref, str) or not ref.startswith("@") or ref.count("/") != 1 or ref.endswith("/"):
            raise BadInputError(
                f"managedToolPolicy.exclude entry {ref!r} must name one tool as @server/tool "
                "(to hide a whole server, neutralize it with its tool names)",
                code="app_agent_invalid",
            )
        out.append(ref)
    return out


def _policy_by_server(template_policy: object) -> dict[str, list[str]]:
    if template_policy is None:
        return {}
    if not isinstance(template_policy, dict) or set(template_policy) - {"exclude"}:
        raise BadInputError('managedToolPolicy must be {"exclude": [...]}', code="app_agent_invalid")
    by_server: dict[str, list[str]] = {}
    for ref in _check_policy_refs(template_policy.get("exclude", [])):
        server, _, tool = ref[1:].partition("/")
        by_server.setdefault(server, [])
        if tool not in by_server[server]:
            by_server[server].append(tool)
    return by_server


def _neutralize_map(value: object) -> dict[str, list[str]]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, list) and v and all(isinstance(t, str) and t for t in v)
        for k, v in value.items()
    ):
        raise BadInputError(
            "neutralize must map a server name to the explicit, non-empty list of its tool names",
            code="app_agent_invalid",
        )
    return {k: list(dict.fromkeys(v)) for k, v in value.items()}


def _refs_server(ref: object) -> str | None:
    if not isinstance(ref, str) or not ref.startswith("@"):
        return None
    return ref[1:].partition("/")[0] or None


def _app_entry(spec: Mapping[str, Any], existing: object) -> dict[str, Any]:
    """The registry's spec for an ``{app}:{server}`` entry, keeping the user's own switches from the file.

    The launch fields are the registry's; ``disabled`` and any tool the user
    disabled are the user's, and every re-install (each host start) must keep them.
    """
    entry = copy.deepcopy(dict(spec))
    old = existing if isinstance(existing, Mapping) else {}
    if isinstance(old.get("disabled"), bool):
        entry["disabled"] = old["disabled"]
    mine = old.get("disabledTools")
    if isinstance(mine, list):
        declared = [t for t in entry.get("disabledTools", []) if isinstance(t, str)]
        entry["disabledTools"] = declared + [t for t in mine if isinstance(t, str) and t not in declared]
    return entry


@dataclass
class AppAgentRender:
    """A rendered app agent and the bookkeeping :func:`install_app_agent` keeps for the next render."""

    spec: dict[str, Any]
    policy_disabled: dict[str, list[str]]
    withheld: list[Withheld]


def render_app_agent(
    template: Mapping[str, Any],
    *,
    app: str,
    existing: Mapping[str, Any] | None = None,
    previous_policy: Mapping[str, list[str]] | None = None,
    app_entries: Mapping[str, dict[str, Any]] | None = None,
    managed_servers: Mapping[str, ManagedMcpServer] | None = None,
    shadow_specs: Mapping[str, dict[str, Any]] | None = None,
    pm: KirocrewPluginManager | None = None,
) -> AppAgentRender:
    """Render one app agent (pure: no writes). See the module docstring for the rules.

    ``existing`` is the agent file as it is now (its user edits survive);
    ``previous_policy`` the ``disabledTools`` the last render added per server
    (so a loosened policy un-disables them); ``app_entries`` the app's rendered
    ``{app}:{server}`` entries; ``shadow_specs`` the launch specs a neutralized
    server is re-declared from when the agent does not declare it itself.
    """

    _check_name("app", app)
    tpl = copy.deepcopy(dict(template))
    policy = _policy_by_server(tpl.pop("managedToolPolicy", None))
    neutralize = _neutralize_map(tpl.pop("neutralize", None))
    unknown = sorted(set(tpl) - set(AGENT_FIELDS))
    if unknown:
        raise BadInputError(
            f"app agent template field(s) {', '.join(unknown)} are unknown to kiro-cli 2.x", code="app_agent_invalid"
        )
    if existing is not None:
        config = {k: copy.deepcopy(v) for k, v in existing.items() if k in AGENT_FIELDS}
        for key, value in tpl.items():
            config.setdefault(key, copy.deepcopy(value))
    else:
        config = tpl
    config["includeMcpJson"] = False
    raw_servers = config.get("mcpServers")
    servers = raw_servers if isinstance(raw_servers, dict) else {}
    config["mcpServers"] = servers
    tools = [t for t in config.get("tools", []) if isinstance(t, str)] if isinstance(config.get("tools"), list) else []
    managed_servers = managed_servers or {}
    app_entries = app_entries or {}

    referenced = {s for s in map(_refs_server, tools) if s}
    for name in sorted(referenced):
        if name in managed_servers:
            servers[name] = managed_mod.managed_entry(managed_servers[name], servers.get(name))
        elif name.startswith(f"{app}:"):
            if name in app_entries:
                servers[name] = _app_entry(app_entries[name], servers.get(name))
            else:
                servers.pop(name, None)  # e.g. its backend port is unknown: no dead URL

    for name, tool_names in neutralize.items():
        launch = servers.get(name) or (shadow_specs or {}).get(name)
        if not isinstance(launch, dict):
            continue  # nothing declares it anywhere, so there is nothing to shadow
        entry = {k: copy.deepcopy(v) for k, v in launch.items() if k not in ("autoApprove", "disabled")}
        entry["disabledTools"] = list(tool_names)
        servers[name] = entry
        tools = [t for t in tools if _refs_server(t) != name]
        if isinstance(config.get("allowedTools"), list):
            config["allowedTools"] = [t for t in config["allowedTools"] if _refs_server(t) != name]
    config["tools"] = tools

    previous = previous_policy or {}
    for name, entry in servers.items():
        if not isinstance(entry, dict) or name in neutralize:
            continue
        raw_current = entry.get("disabledTools")
        current = raw_current if isinstance(raw_current, list) else []
        stale = set(previous.get(name, [])) - set(policy.get(name, []))
        merged = [t for t in current if t not in stale]
        for tool in policy.get(name, []):
            if tool not in merged:
                merged.append(tool)
        if merged:
            entry["disabledTools"] = merged
        else:
            entry.pop("disabledTools", None)

    never = {name for name, server in managed_servers.items() if not server.may_auto_approve}
    withheld = apply_auto_approve_pass(config, never, pm)
    spec = {k: config[k] for k in AGENT_FIELDS if k in config}
    return AppAgentRender(spec, policy, withheld)


def _existing_app_agent(target: Path, warnings: list[str]) -> dict[str, Any] | None:
    """The app agent as it is now (its user edits are kept); a corrupt one is backed up first."""
    from kirocrew_core.errors import KirocrewError


    current = read_json(target)
    if current.state is ReadState.UNREADABLE:
        raise KirocrewError(f"{target}: cannot read the app agent ({current.error}); left untouched",
                            code="agent_file_unreadable")
    if current.state is ReadState.DOCUMENT and isinstance(current.document, dict):
        return current.document
    if current.state is ReadState.MALFORMED or current.state is ReadState.DOCUMENT:
        from datetime import datetime, timezone

        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        backup = backups_dir() / f"{target.name}.{stamp}.corrupt"
        home.ensure_crew_home()
        write_bytes_atomic(backup, target.read_bytes(), secret=True)
        warnings.append(f"{target} was corrupt; kept a copy at {backup}")
    return None


def app_agent_target(path: str | Path) -> Path:
    """Where an app agent at ``path`` is written; refuses (``app_agent_location``) what is not an app's to write.

    kirocrew renders exactly one file in ``~/.kiro/agents``, so an app agent
    lives in the app's own ``.kiro/agents`` folder, and it is a ``.json`` file.
    """
    target = Path(path).expanduser().absolute()
    if target.suffix != ".json":
        raise BadInputError(f"{target}: an agent file must end in .json", code="app_agent_location")
    agents_dir = home.kiro_agents_dir().absolute()
    if target.parent == agents_dir or agents_dir in target.parents:
        raise BadInputError(
            f"{target}: app agents live in the app's own .kiro/agents folder, not {agents_dir}",
            code="app_agent_location",
        )
    return target


def install_app_agent(
    app: str,
    path: str | Path,
    template: Mapping[str, Any],
    *,
    pm: KirocrewPluginManager | None = None,
) -> Path:
    """Render ``template`` for ``app`` and write it atomically to ``path`` (an app's own agents folder).

    Refuses a path in ``~/.kiro/agents`` (``app_agent_location``): kirocrew
    writes exactly one file there. A corrupt file at ``path`` is backed up and
    replaced; one that cannot be read at all is refused (``agent_file_unreadable``).
    Withheld auto-approve grants are recorded in the SEL.
    """

    _check_name("app", app)
    target = app_agent_target(path)
    from kirocrew_core.plugins import get_plugin_manager

    manager = pm if pm is not None else get_plugin_manager()
    managed_servers = managed_mod.managed_servers(manager)
    warnings: list[str] = []
    with named_lock(LOCK_NAME):
        registry = _load_registry()
        record = registry["apps"].get(app) if isinstance(registry["apps"].get(app), dict) else {}
        state = app_entries_for_render(warnings)
        entries = {k: v for k, v in state.entries.items() if k.startswith(f"{app}:")}
        shadow: dict[str, dict[str, Any]] = {}
        rendered = read_json(home.rendered_agent_file())
        document = rendered.document if rendered.state is ReadState.DOCUMENT else None
        if isinstance(document, dict) and isinstance(document.get("mcpServers"), dict):
            shadow.update(document["mcpServers"])
        for scope in all_scopes(manager):
            for name, spec in read_scope_servers(scope).servers.items():
                shadow.setdefault(name, spec)
        existing = _existing_app_agent(target, warnings)
        raw_agents = record.get("agents")
        agents = raw_agents if isinstance(raw_agents, dict) else {}
        remembered = agents.get(str(target))
        previous = remembered.get("policy_disabled") if isinstance(remembered, dict) else None
        result = render_app_agent(
            template,
            app=app,
            existing=existing,
            previous_policy=previous if isinstance(previous, dict) else None,
            app_entries=entries,
            managed_servers=managed_servers,
            shadow_specs=shadow,
            pm=manager,
        )
        write_bytes_atomic(target, dumps(result.spec).encode("utf-8"))
        agents[str(target)] = {"policy_disabled": result.policy_disabled}
        record["agents"] = agents
        registry["apps"][app] = record
        _save_registry(registry)
    audit_withheld(result.withheld, "app_agent", warnings)
    return target


__all__ = [
    "NAME_PATTERN",
    "PORT_PLACEHOLDER",
    "REGISTRY_VERSION",
    "AppRenderState",
    "app_agent_target",
    "app_entries_for_render",
    "app_key",
    "app_tool_policy",
    "install_app_agent",
    "register_app_mcp_servers",
    "registered_apps",
    "registry_file",
    "render_app_agent",
    "unregister_app_mcp_servers",
]
