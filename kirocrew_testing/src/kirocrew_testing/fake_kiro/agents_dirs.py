"""Agent specs the way kiro-cli 2.x finds and parses them: strictly.

kiro-cli deserialises an agent file with unknown fields denied, so a spec
carrying a field from a newer format (2.3.0 refused ``permissions``) is not a
degraded agent but no agent at all: it is left out of the modes and its MCP
servers are never started. The fake does the same, because the consumers we
test must write only fields the target version knows.

Discovery happens once, at process start, as in kiro-cli: the built-in
``kiro_default``, then ``<kiro home>/agents/*.json`` (global), then
``<process cwd>/.kiro/agents/*.json`` (local), a local agent replacing a
global one of the same name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.jsonfile import ReadState, read_json

DEFAULT_AGENT = "kiro_default"

# The top-level fields kiro-cli 2.x accepts (§1.8 of the reference); anything else rejects the file.
KNOWN_FIELDS = (
    "$schema", "name", "description", "prompt", "mcpServers", "tools", "toolAliases", "allowedTools",
    "toolsSettings", "resources", "hooks", "includeMcpJson", "useLegacyMcpJson", "model",
    "keyboardShortcut", "welcomeMessage",
)

_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "$schema": (str,), "name": (str,), "description": (str, type(None)), "prompt": (str, type(None)),
    "mcpServers": (dict,), "tools": (list,), "toolAliases": (dict,), "allowedTools": (list,),
    "toolsSettings": (dict,), "resources": (list,), "hooks": (dict,), "includeMcpJson": (bool,),
    "useLegacyMcpJson": (bool,), "model": (str, type(None)), "keyboardShortcut": (str, type(None)),
    "welcomeMessage": (str, type(None)),
}

_ENV_REF = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")


class SpecError(ValueError):
    """An agent or MCP file kiro-cli would refuse; the message reads like kiro's."""


def expand_env(value: str, environ: Mapping[str, str] | None = None) -> str:
    """Expand ``${VAR}`` and ``${env:VAR}``; an unset variable is left as written."""
    env = os.environ if environ is None else environ
    return _ENV_REF.sub(lambda m: env.get(m.group(1), m.group(0)), value)


@dataclass(frozen=True)
class McpServerSpec:
    """One MCP server entry, from an agent spec, an ``mcp.json`` or ``session/new``."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    transport: str = "stdio"  # "stdio" | "http" | "sse"
    disabled: bool = False
    disabled_tools: frozenset[str] = frozenset()
    auto_approve: tuple[str, ...] = ()
    timeout_ms: int | None = None
    origin: str = "agent"  # "agent" | "mcp.json" | "session"
    # A remote entry's pre-registered OAuth client (``oauth.clientId``/``clientSecret``/``redirectUri``)
    # and ``oauthScopes``; the secret is kept out of every repr.
    oauth_client_id: str | None = None
    oauth_client_secret: str | None = field(default=None, repr=False)
    oauth_redirect: str | None = None
    oauth_scopes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShellSettings:
    """``toolsSettings.shell`` (or the 1.x key ``execute_bash``); ``key`` is the key it was read from."""

    key: str = "shell"
    allowed_commands: tuple[str, ...] = ()
    denied_commands: tuple[str, ...] = ()
    auto_allow_readonly: bool = False
    deny_by_default: bool = False


@dataclass(frozen=True)
class PathSettings:
    """``toolsSettings.write``/``read`` (or ``fs_write``/``fs_read``): gitignore-style globs."""

    key: str
    allowed_paths: tuple[str, ...] = ()
    denied_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolsSettings:
    """The ``toolsSettings`` the fake acts on; entries for other tools are kept by kiro but not used here."""

    shell: ShellSettings = ShellSettings()
    write: PathSettings = PathSettings("write")
    read: PathSettings = PathSettings("read")


@dataclass(frozen=True)
class AgentSpec:
    name: str
    description: str = ""
    source: str = "built-in"  # "built-in" | "global" | "local"
    path: Path | None = None
    mcp_servers: Mapping[str, McpServerSpec] = field(default_factory=dict)
    tools: tuple[str, ...] = ()
    allowed_tools: tuple[str, ...] = ()
    include_mcp_json: bool = False
    model: str | None = None
    #: ``toolAliases``: ``{"@server/tool": new name}``, the name ``/tools`` shows for that tool.
    tool_aliases: Mapping[str, str] = field(default_factory=dict)
    #: ``resources``: ``file://`` URIs (absolute, or globs relative to the session's cwd) loaded into context.
    resources: tuple[str, ...] = ()
    #: ``hooks.agentSpawn``: shell commands run at session start; what they print is added to context.
    spawn_hooks: tuple[str, ...] = ()
    #: ``toolsSettings`` for shell, write and read: the allow and deny lists of :mod:`.permissions`.
    tools_settings: ToolsSettings = ToolsSettings()


BUILT_IN_DEFAULT = AgentSpec(
    name=DEFAULT_AGENT,
    description="The default agent",
    tools=("*",),
    allowed_tools=("read", "glob", "grep", "introspect", "todo_list"),
    include_mcp_json=True,
)


def _type_name(value: Any) -> str:
    return {dict: "map", list: "sequence", str: "string", bool: "boolean", type(None): "null",
            int: "integer", float: "floating point"}.get(type(value), type(value).__name__)


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{where}: invalid type: {_type_name(value)}, expected a sequence of strings")
    return tuple(value)


def _string_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise SpecError(f"{where}: invalid type: {_type_name(value)}, expected a map of strings")
    return dict(value)


def parse_mcp_server(name: str, entry: Any, *, where: str, origin: str) -> McpServerSpec:
    """One ``mcpServers`` entry; entry keys are read leniently (kiro is strict only at the top)."""
    if not isinstance(entry, dict):
        raise SpecError(f"{where}: mcpServers.{name}: invalid type: {_type_name(entry)}, expected a map")
    command = entry.get("command")
    url = entry.get("url")
    if command is not None and not isinstance(command, str):
        raise SpecError(f"{where}: mcpServers.{name}.command: expected a string")
    if url is not None and not isinstance(url, str):
        raise SpecError(f"{where}: mcpServers.{name}.url: expected a string")
    if not command and not url:
        raise SpecError(f"{where}: mcpServers.{name}: missing field `command` or `url`")
    declared = entry.get("type")
    transport = declared if declared in ("stdio", "http", "sse") else ("http" if url else "stdio")
    if transport == "stdio" and not command:
        transport = "http"
    timeout = entry.get("timeout")
    oauth = entry.get("oauth", {})
    if not isinstance(oauth, dict):
        raise SpecError(f"{where}: mcpServers.{name}.oauth: invalid type: {_type_name(oauth)}, expected a map")
    for key in ("clientId", "clientSecret", "redirectUri"):
        if key in oauth and not isinstance(oauth[key], str):
            raise SpecError(f"{where}: mcpServers.{name}.oauth.{key}: expected a string")
    return McpServerSpec(
        name=name,
        command=command or None,
        args=_strings(entry.get("args", []), f"{where}: mcpServers.{name}.args"),
        env=_string_map(entry.get("env", {}), f"{where}: mcpServers.{name}.env"),
        url=url or None,
        headers=_string_map(entry.get("headers", {}), f"{where}: mcpServers.{name}.headers"),
        transport=transport,
        disabled=entry.get("disabled") is True,
        disabled_tools=frozenset(_strings(entry.get("disabledTools", []), f"{where}: mcpServers.{name}.disabledTools")),
        auto_approve=_strings(entry.get("autoApprove", []), f"{where}: mcpServers.{name}.autoApprove"),
        timeout_ms=timeout if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout > 0 else None,
        origin=origin,
        oauth_client_id=oauth.get("clientId") or None,
        oauth_client_secret=oauth.get("clientSecret") or None,
        oauth_redirect=oauth.get("redirectUri") or None,
        oauth_scopes=_strings(entry.get("oauthScopes", []), f"{where}: mcpServers.{name}.oauthScopes"),
    )


def parse_mcp_servers(value: Any, *, where: str, origin: str) -> dict[str, McpServerSpec]:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: mcpServers: invalid type: {_type_name(value)}, expected a map")
    return {name: parse_mcp_server(name, entry, where=where, origin=origin) for name, entry in value.items()}


def parse_spec(document: Any, *, path: Path, source: str) -> AgentSpec:
    """Parse one agent file as kiro-cli 2.x would, raising :class:`SpecError` where it refuses."""
    where = str(path)
    if not isinstance(document, dict):
        raise SpecError(f"{where}: invalid type: {_type_name(document)}, expected struct Agent")
    for key in document:
        if key not in KNOWN_FIELDS:
            expected = ", ".join(f"`{k}`" for k in KNOWN_FIELDS)
            raise SpecError(f"{where}: unknown field `{key}`, expected one of {expected}")
    for key, value in document.items():
        if not isinstance(value, _FIELD_TYPES[key]):
            raise SpecError(f"{where}: {key}: invalid type: {_type_name(value)}")
    name = document.get("name") or path.stem
    include = bool(document.get("includeMcpJson", document.get("useLegacyMcpJson", False)))  # bools, checked above
    return AgentSpec(
        name=name,
        description=document.get("description") or "",
        source=source,
        path=path,
        mcp_servers=parse_mcp_servers(document.get("mcpServers", {}), where=where, origin="agent"),
        tools=_strings(document.get("tools", []), f"{where}: tools"),
        allowed_tools=_strings(document.get("allowedTools", []), f"{where}: allowedTools"),
        include_mcp_json=include,
        model=document.get("model"),
        tool_aliases=_string_map(document.get("toolAliases", {}), f"{where}: toolAliases"),
        resources=_strings(document.get("resources", []), f"{where}: resources"),
        spawn_hooks=_spawn_hooks(document.get("hooks", {}), where),
        tools_settings=_tools_settings(document.get("toolsSettings", {}), where),
    )


# The key each setting is read from: kiro-cli 2.x's tool name first, then its 1.x name.
_SETTING_KEYS = {"shell": ("shell", "execute_bash"), "write": ("write", "fs_write"), "read": ("read", "fs_read")}


def _tools_settings(settings: dict[str, Any], where: str) -> ToolsSettings:
    """Shell, write and read settings, typed strictly; other tools' entries are not looked at.

    When a file carries both names of a tool (``shell`` and ``execute_bash``) both are checked and the
    2.x one is used. Unknown keys inside an entry are ignored, as kiro reads entries leniently.
    """
    parsed: dict[str, Any] = {}
    for tool, keys in _SETTING_KEYS.items():
        for key in reversed(keys):  # the 2.x name last, so it wins
            if key in settings:
                entry = settings[key]
                if not isinstance(entry, dict):
                    raise SpecError(f"{where}: toolsSettings.{key}: invalid type: {_type_name(entry)}, expected a map")
                parsed[tool] = _shell_settings(key, entry, where) if tool == "shell" else PathSettings(
                    key=key,
                    allowed_paths=_strings(entry.get("allowedPaths", []), f"{where}: toolsSettings.{key}.allowedPaths"),
                    denied_paths=_strings(entry.get("deniedPaths", []), f"{where}: toolsSettings.{key}.deniedPaths"))
    return ToolsSettings(**parsed)


def _shell_settings(key: str, entry: dict[str, Any], where: str) -> ShellSettings:
    def flag(name: str) -> bool:
        value = entry.get(name, False)
        if not isinstance(value, bool):
            raise SpecError(
                f"{where}: toolsSettings.{key}.{name}: invalid type: {_type_name(value)}, expected a boolean")
        return value

    return ShellSettings(
        key=key,
        allowed_commands=_strings(entry.get("allowedCommands", []), f"{where}: toolsSettings.{key}.allowedCommands"),
        denied_commands=_strings(entry.get("deniedCommands", []), f"{where}: toolsSettings.{key}.deniedCommands"),
        auto_allow_readonly=flag("autoAllowReadonly"),
        deny_by_default=flag("denyByDefault"),
    )


def _spawn_hooks(hooks: dict[str, Any], where: str) -> tuple[str, ...]:
    """The ``command`` of every ``hooks.agentSpawn`` entry (kiro's hook entries are ``{"command": …}``)."""
    entries = hooks.get("agentSpawn", [])
    if not isinstance(entries, list):
        raise SpecError(f"{where}: hooks.agentSpawn: invalid type: {_type_name(entries)}, expected a sequence")
    commands = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
            raise SpecError(f"{where}: hooks.agentSpawn: missing field `command`")
        commands.append(entry["command"])
    return tuple(commands)


def load_spec_file(path: Path, source: str) -> AgentSpec:
    read = read_json(path)
    if read.state is ReadState.DOCUMENT:
        return parse_spec(read.document, path=path, source=source)
    if read.state is ReadState.MALFORMED:
        where = f" at line {read.line}" if read.line else ""
        raise SpecError(f"{path}: invalid JSON{where}: {read.error}")
    if read.state is ReadState.EMPTY:
        raise SpecError(f"{path}: EOF while parsing a value")
    raise SpecError(f"{path}: cannot read: {read.error or read.state.value}")


@dataclass
class Discovery:
    """The agents a process serves as modes, plus the files it refused (printed to stderr)."""

    agents: dict[str, AgentSpec]
    errors: list[str]

    def get(self, name: str) -> AgentSpec | None:
        return self.agents.get(name)


def _spec_files(directory: Path) -> Iterable[Path]:
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return ()
    return [p for p in entries if p.suffix == ".json" and p.is_file()]


def local_agents_dir(cwd: Path) -> Path:
    return cwd / ".kiro" / "agents"


def discover(cwd: Path | None = None) -> Discovery:
    """Built-in, then global, then local agents; a local agent wins over a global one."""
    agents: dict[str, AgentSpec] = {DEFAULT_AGENT: BUILT_IN_DEFAULT}
    errors: list[str] = []
    base = Path.cwd() if cwd is None else cwd
    for source, directory in (("global", home.kiro_agents_dir()), ("local", local_agents_dir(base))):
        for path in _spec_files(directory):
            try:
                spec = load_spec_file(path, source)
            except SpecError as exc:
                errors.append(str(exc))
                continue
            agents[spec.name] = spec
    return Discovery(agents, errors)


def mcp_json_servers(cwd: Path) -> tuple[dict[str, McpServerSpec], list[str]]:
    """Servers from the global then workspace ``mcp.json`` (workspace wins), for ``includeMcpJson``."""
    servers: dict[str, McpServerSpec] = {}
    errors: list[str] = []
    for path in (home.kiro_global_mcp_file(), cwd / ".kiro" / "settings" / "mcp.json"):
        read = read_json(path)
        if read.state in (ReadState.ABSENT, ReadState.EMPTY):
            continue
        try:
            if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
                raise SpecError(f"{path}: not a JSON object ({read.error or read.state.value})")
            servers.update(parse_mcp_servers(read.document.get("mcpServers", {}), where=str(path),
                                             origin="mcp.json"))
        except SpecError as exc:
            errors.append(str(exc))
    return servers, errors
