"""The rendered agent file, ``~/.kiro/agents/kirocrew.json``: the one file kirocrew writes for kiro-cli.

:func:`rebuild_agent_config` merges, in this order (spec "Merge order"):

1. the **base**: the existing agent file (unless ``clean``), so hand edits,
   ``autoApprove`` choices and ``kiro-cli mcp add --agent kirocrew`` servers
   survive; a missing file (or ``clean``) starts from :data:`AGENT_TEMPLATE`.
   The entries the last render took from the scopes are first taken back out
   of it (:mod:`kirocrew_mcp.scope_owned`), so a removal or a launch change in a
   scope reaches the file; the user's own fields on them are laid back after;
2. **app servers**, ``{app}:{server}``, by assignment: the app registry is
   authoritative and re-derived every time, so last pass's entry cannot keep a
   grant this pass strips;
3. the **Kiro global** by ``setdefault`` (fills gaps, never overrides the base);
4. **seam scopes** (``extra_mcp_scopes()``) by ``setdefault``, below the Kiro
   global because kirocrew is kiro-cli only;
5. the **crew store** by ``update``: its ``command``/``args``/``env`` win while
   user-set fields such as ``autoApprove`` survive;
6. ``extra_mcp_servers()`` contributions, ADD-only.

Then ``toolAliases``: the user's own entries in the base stay, and every
``agent_tool_aliases()`` rename for a mounted server is added where the user
has none for that key. The renames a render wrote are recorded in the state
file, so the next render can tell them from the user's: one still holding the
value kirocrew wrote is kirocrew's (re-derived, or dropped once no plugin asks
for it); one the user changed is the user's and wins.

Managed servers are skipped by every loop and rewritten by
:mod:`kirocrew_mcp.managed`. A stdio winner whose command does not resolve
falls back through the crew store, the Kiro global and the seam scopes, adopting
``command``, ``args`` and ``env`` as a unit. ``disabled`` is tightest-wins: a
server muted in any scope is rendered ``disabled: true``. Slash keys get their
kiro-safe alias, and every Playwright MCP entry is folded onto one key
(:mod:`kirocrew_mcp.playwright`). Last, ``allowedTools`` and every ``autoApprove`` pass through
the governance ceiling; ``tools`` is left alone, because mounting a tool is not
auto-approving it.

The whole read-merge-write runs under the ``agent-file`` lock, which app
registration takes too, and the file is replaced atomically. Scope files are
only read, never rewritten. When one is malformed or unreadable, ``strict``
(``kirocrew mcp rebuild``, where the user asked for the agent to match their
files) refuses and writes nothing; otherwise (the rebuild an apply, an app
registration or a disconnect runs after its own change) the scope is skipped
with a warning and its servers already in the base stay as they were.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.errors import KirocrewError
from kirocrew_core.jsonfile import ReadState, read_json, write_bytes_atomic, write_json_atomic
from kirocrew_core.locks import named_lock

from kirocrew_mcp import aliases, app_registry, managed, playwright, scope_owned
from kirocrew_mcp.resolve import resolve_command_in, search_dirs
from kirocrew_mcp.scopes import KIND_CREW, ScopeRead, all_scopes, read_scope_servers, unusable_scopes_error

if TYPE_CHECKING:
    from kirocrew_core.contributions import ManagedMcpServer
    from kirocrew_core.plugins import KirocrewPluginManager

AGENT_NAME = "kirocrew"
LOCK_NAME = "agent-file"
AUDIT_EVENT_WITHHELD = "mcp_auto_approve_withheld"
# Refs per SEL record: a long list is split so every record stays under the SEL's size cap.
_AUDIT_CHUNK = 40

#: The top-level fields kiro-cli 2.x accepts that kirocrew writes. kiro-cli parses
#: agent files with unknown fields denied, so one stray key loses the whole agent.
AGENT_FIELDS: tuple[str, ...] = (
    "name", "description", "prompt", "mcpServers", "tools", "toolAliases", "allowedTools",
    "toolsSettings", "resources", "hooks", "includeMcpJson", "model",
)
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "description": (str,), "prompt": (str,), "mcpServers": (dict,), "tools": (list,),
    "toolAliases": (dict,), "allowedTools": (list,), "toolsSettings": (dict,), "resources": (list,),
    "hooks": (dict,), "includeMcpJson": (bool,), "model": (str,),
}

#: The agent a fresh render starts from. ``tools: ["*"]`` mounts every builtin and
#: every server the render declares (it is a mount, not a grant); ``allowedTools``
#: pre-approves only kiro-cli 2.x's read-only builtins, as its own default agent
#: does; ``model`` is left out so kiro-cli's default (or the session's pick)
#: applies; ``resources`` loads the workspace's steering files.
AGENT_TEMPLATE: dict[str, Any] = {
    "name": AGENT_NAME,
    "description": "kiro-cli sessions run by kirocrew; MCP servers are merged by `kirocrew mcp rebuild`",
    "tools": ["*"],
    "allowedTools": ["read", "glob", "grep", "introspect", "todo_list"],
    "resources": ["file://.kiro/steering/**/*.md"],
    "includeMcpJson": False,
    "mcpServers": {},
}

_ENTRY_STRING_MAPS = ("env", "headers")
_ENTRY_STRING_LISTS = ("args",)


@dataclass
class RebuildReport:
    """What one rebuild did. ``warnings`` are for people (CLI, doctor, the dashboard)."""

    path: Path
    written: bool = False
    servers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped_sources: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    withheld: list[str] = field(default_factory=list)
    tool_aliases: dict[str, str] = field(default_factory=dict)
    resources: list[str] = field(default_factory=list)
    spawn_hooks: list[str] = field(default_factory=list)
    retracted: list[str] = field(default_factory=list)
    scope_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    backup: Path | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "written": self.written,
            "servers": list(self.servers),
            "warnings": list(self.warnings),
            "skipped_sources": list(self.skipped_sources),
            "dropped": list(self.dropped),
            "renamed": dict(self.renamed),
            "withheld": list(self.withheld),
            "tool_aliases": dict(self.tool_aliases),
            "resources": list(self.resources),
            "spawn_hooks": list(self.spawn_hooks),
            "retracted": list(self.retracted),
            "backup": str(self.backup) if self.backup else None,
        }


def state_file() -> Path:
    """The rebuild's own bookkeeping (managed names last rendered, last warnings), never read by kiro."""
    return home.state_dir("mcp") / "render.json"


def backups_dir() -> Path:
    """Where a corrupt agent file is kept before a fresh render replaces it."""
    return home.state_dir("mcp") / "agent-backups"


# -- small helpers ------------------------------------------------------------


def _muted(entry: Any) -> bool:
    """Fail closed: any ``disabled`` value other than absent/False mutes the server."""
    return isinstance(entry, dict) and entry.get("disabled", False) is not False


def _string_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _launch_problem(entry: dict[str, Any]) -> str | None:
    """Why kiro-cli would refuse this entry's launch fields (and so the whole agent), or None."""
    command, url = entry.get("command"), entry.get("url")
    if command is not None and not isinstance(command, str):
        return "command is not a string"
    if url is not None and not isinstance(url, str):
        return "url is not a string"
    if not (isinstance(command, str) and command.strip()) and not (isinstance(url, str) and url.strip()):
        return "no command or url"
    for key in _ENTRY_STRING_LISTS:
        if key in entry and not _string_list(entry[key]):
            return f"{key} is not a list of strings"
    for key in _ENTRY_STRING_MAPS:
        if key in entry and not _string_map(entry[key]):
            return f"{key} is not a map of strings"
    return None


def _tidy_entry(entry: dict[str, Any]) -> None:
    """Coerce the non-launch fields kiro-cli type-checks; fail closed where a guess would widen access."""
    if "autoApprove" in entry and not _string_list(entry["autoApprove"]):
        value = entry.pop("autoApprove")
        if isinstance(value, list):
            entry["autoApprove"] = [v for v in value if isinstance(v, str)]
    if "disabledTools" in entry and not _string_list(entry["disabledTools"]):
        value = entry["disabledTools"]
        if isinstance(value, list):
            entry["disabledTools"] = [v for v in value if isinstance(v, str)]
        else:
            entry.pop("disabledTools")
            entry["disabled"] = True  # a tool list we cannot read must not enable those tools
    if "disabled" in entry and not isinstance(entry["disabled"], bool):
        entry["disabled"] = True
    timeout = entry.get("timeout")
    if "timeout" in entry and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0):
        entry.pop("timeout")


def _is_stdio(entry: dict[str, Any]) -> bool:
    return not (isinstance(entry.get("url"), str) and entry["url"].strip()) or (
        isinstance(entry.get("command"), str) and bool(entry["command"].strip())
    )


class _Resolver:
    """:func:`resolve_command` memoized for one rebuild (500 servers share a handful of commands)."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str | None], str | None] = {}
        self._dirs: dict[str | None, list[str]] = {}

    def __call__(self, entry: dict[str, Any]) -> str | None:
        command = entry.get("command")
        if not isinstance(command, str):
            return None
        env = entry.get("env")
        env_path = env.get("PATH") if isinstance(env, dict) and isinstance(env.get("PATH"), str) else None
        key = (command, env_path)
        if key not in self._memo:
            if env_path not in self._dirs:
                self._dirs[env_path] = search_dirs(env_path)
            self._memo[key] = resolve_command_in(command, self._dirs[env_path])
        return self._memo[key]


# -- reading the base ---------------------------------------------------------


def _now_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def _backup_corrupt(path: Path, report: RebuildReport) -> None:
    """Copy a corrupt agent file aside (bytes as they were) before a fresh render replaces it."""
    target = backups_dir() / f"{path.name}.{_now_stamp()}.corrupt"
    try:
        data = path.read_bytes()
        home.ensure_crew_home()
        write_bytes_atomic(target, data, secret=True)
    except OSError as exc:
        raise KirocrewError(
            f"{path} is corrupt and could not be backed up to {target} ({exc.strerror or exc}); "
            "left untouched",
            code="agent_file_backup_failed",
        ) from None
    report.backup = target
    report.warnings.append(f"{path} was corrupt; kept a copy at {target} and rendered a fresh agent")


def _read_base(path: Path, clean: bool, report: RebuildReport) -> tuple[dict[str, Any], bool, bytes | None]:
    """``(base config, fresh, current bytes)``; a corrupt file is backed up, an unreadable one refused."""
    read = read_json(path)
    current: bytes | None = None
    if read.state is ReadState.UNREADABLE:
        if not clean:
            raise KirocrewError(
                f"{path}: cannot read the agent file ({read.error}); left untouched. "
                "Fix its permissions, or run `kirocrew mcp rebuild --clean` to replace it",
                code="agent_file_unreadable",
            )
    elif read.state is ReadState.MALFORMED or (
        read.state is ReadState.DOCUMENT and not isinstance(read.document, dict)
    ):
        _backup_corrupt(path, report)
    elif read.state in (ReadState.DOCUMENT, ReadState.EMPTY):
        try:
            current = path.read_bytes()
        except OSError:
            current = None
    if clean or read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        return copy.deepcopy(AGENT_TEMPLATE), True, current
    return _usable_base(read.document, path, report), False, current


def _usable_base(base: dict[str, Any], path: Path, report: RebuildReport) -> dict[str, Any]:
    """``base`` without the fields kiro-cli 2.x would refuse, with the ones a render needs (in place)."""
    for key in list(base):
        if key not in AGENT_FIELDS:
            base.pop(key)
            report.warnings.append(f"{path}: dropped field {key!r}, which kiro-cli 2.x would refuse")
        elif not isinstance(base[key], _FIELD_TYPES[key]):
            base.pop(key)
            report.warnings.append(f"{path}: dropped field {key!r} of the wrong type")
    for key in ("description", "tools", "mcpServers"):
        base.setdefault(key, copy.deepcopy(AGENT_TEMPLATE[key]))
    return base


# -- the merge ----------------------------------------------------------------


@dataclass
class _Sources:
    reads: list[ScopeRead]
    all_known: bool

    def entries(self, name: str) -> list[dict[str, Any]]:
        """``name``'s entry in each readable scope, highest priority first."""
        return [read.servers[name] for read in self.reads if name in read.servers]


def _read_sources(pm: KirocrewPluginManager, report: RebuildReport) -> _Sources:
    reads: list[ScopeRead] = []
    all_known = True
    for scope in all_scopes(pm):
        read = read_scope_servers(scope)
        if not read.ok:
            all_known = False
            report.skipped_sources.append(scope.id)
            report.warnings.append(f"skipped the {scope.label} MCP scope: {read.problem()} (left untouched)")
            continue
        if read.skipped:
            report.warnings.append(
                f"{scope.path}: ignored mcpServers entries that are not objects: {', '.join(read.skipped)}"
            )
        reads.append(read)
    return _Sources(reads, all_known)


def _extra_servers(pm: KirocrewPluginManager, report: RebuildReport) -> dict[str, dict[str, Any]]:
    from kirocrew_core.plugins import collect

    out: dict[str, dict[str, Any]] = {}
    for contribution in collect(pm, "extra_mcp_servers"):
        if not isinstance(contribution.value, dict):
            report.warnings.append(f"plugin {contribution.plugin!r}: extra_mcp_servers() did not return a mapping")
            continue
        for name, spec in contribution.value.items():
            if isinstance(name, str) and isinstance(spec, dict):
                out.setdefault(name, spec)
    return out


def _merge(
    base_servers: dict[str, Any],
    app_entries: dict[str, dict[str, Any]],
    app_names: set[str],
    sources: _Sources,
    extra: dict[str, dict[str, Any]],
    managed_names: set[str],
) -> dict[str, dict[str, Any]]:
    """Base, then apps (assigned), shared scopes (setdefault), crew store (update), extras (setdefault).

    Entries are copied one level deep: they are fresh from disk, and every later
    step replaces a nested value rather than mutating it.
    """
    servers: dict[str, dict[str, Any]] = {}
    for name, entry in base_servers.items():
        if isinstance(name, str) and isinstance(entry, dict):
            servers[name] = dict(entry)
    for name, entry in app_entries.items():
        servers[name] = dict(entry)
    skip = managed_names | app_names
    crew_reads = [r for r in sources.reads if r.scope is not None and r.scope.kind == KIND_CREW]
    shared_reads = [r for r in sources.reads if r not in crew_reads]
    # Kiro global before the seam scopes: all_scopes() lists them in that order.
    for read in shared_reads:
        for name, spec in read.servers.items():
            if name not in skip and name not in servers:
                servers[name] = dict(spec)
    for read in crew_reads:
        for name, spec in read.servers.items():
            if name in skip:
                continue
            if name in servers:
                servers[name].update(dict(spec))
            else:
                servers[name] = dict(spec)
    for name, spec in extra.items():
        if name not in skip and name not in servers:
            servers[name] = dict(spec)
    return servers


def _adopt_launch(entry: dict[str, Any], candidate: dict[str, Any]) -> None:
    """Take ``candidate``'s command, args and env as one unit, never mixing them with ``entry``'s."""
    for key in ("command", "args", "env"):
        if key in candidate:
            entry[key] = candidate[key]
        else:
            entry.pop(key, None)
    entry.pop("url", None)
    entry.pop("headers", None)


def _validate(
    servers: dict[str, dict[str, Any]],
    sources: _Sources,
    extra: dict[str, dict[str, Any]],
    skip: set[str],
    report: RebuildReport,
    resolver: _Resolver,
) -> dict[str, dict[str, Any]]:
    """Drop what kiro-cli would refuse; apply the resolution-aware fallback and tightest-wins ``disabled``."""
    valid: dict[str, dict[str, Any]] = {}
    for name, entry in servers.items():
        if name in skip:  # app entries: checked at registration, authoritative, never re-sourced
            _tidy_entry(entry)
            valid[name] = entry
            continue
        scoped = sources.entries(name)
        candidates = [*scoped, *([extra[name]] if name in extra else [])]
        shared = bool(candidates)
        _tidy_entry(entry)
        problem = _launch_problem(entry)
        if problem is None and _is_stdio(entry) and not _muted(entry) and resolver(entry) is None:
            problem = f"command not found: {entry.get('command')}"
        if problem is not None and (entry.get("command") is not None or problem == "no command or url"):
            fallback = next(
                (c for c in candidates if _launch_problem(c) is None and _is_stdio(c) and resolver(c) is not None),
                None,
            )
            if fallback is not None:
                _adopt_launch(entry, fallback)
                problem = None
        if problem is not None:
            if problem.startswith("command not found") and not shared:
                # The agent file is this server's only copy: keep it rather than destroy the record.
                report.warnings.append(f"MCP server {name!r}: {problem}; kept (it is defined only here)")
            else:
                report.dropped.append(name)
                report.warnings.append(f"MCP server {name!r} left out of the agent: {problem}")
                continue
        if any(_muted(c) for c in scoped):
            entry["disabled"] = True
        elif shared and sources.all_known and entry.get("disabled") is True:
            # A disable mirrored from a scope that has since re-enabled it; the scopes are the truth.
            entry.pop("disabled")
        valid[name] = entry
    return valid


def _mount_refs(config: dict[str, Any], names: list[str]) -> None:
    """Add ``@name`` to ``tools`` for servers a narrowed ``tools`` list does not yet mount."""
    tools = config.get("tools")
    if not isinstance(tools, list) or "*" in tools:
        return
    present = {t for t in tools if isinstance(t, str)}
    for name in names:
        ref = f"@{name}"
        if ref not in present and not any(t.startswith(ref + "/") for t in present):
            tools.append(ref)
            present.add(ref)


# -- the auto-approve pass ----------------------------------------------------


def _server_part(ref: str) -> str | None:
    """The server a grant names (``@srv`` / ``@srv/tool``), ``"*"`` for a bare wildcard, None for builtins."""
    if ref == "*":
        return "*"
    if not ref.startswith("@"):
        return None
    return ref[1:].partition("/")[0]


def _covers_server(ref: str, server: str) -> bool:
    from fnmatch import fnmatchcase

    part = _server_part(ref)
    return part is not None and fnmatchcase(server.casefold(), part.casefold())


@dataclass
class Withheld:
    """A blanket grant the render did not write, and why."""

    ref: str
    reason: str  # "governance_ceiling" | "permission_policy" | "never_auto_approvable"
    where: str  # "allowedTools" | "mcpServers.<name>.autoApprove" | "toolsSettings.<tool>.<key>"


def apply_auto_approve_pass(
    config: dict[str, Any],
    never: set[str],
    pm: KirocrewPluginManager | None = None,
) -> list[Withheld]:
    """Filter ``allowedTools``, every ``autoApprove`` and the ``toolsSettings`` grants of ``config`` in place.

    ``never`` names servers that may never be auto-approved (any grant that
    could cover them is removed, wildcards included). Everything else goes
    through :func:`kirocrew_core.governance.auto_approve_verdicts`: a grant stays only when
    the ceiling is silent and the permission policy allows the tool whatever its input, and
    everything is withheld when either cannot be read. ``toolsSettings`` allow-lists
    (``allowedCommands``, ``allowedPaths``, ``autoAllowReadonly`` …) are kiro-cli's own
    per-input grants, which would answer a call before it reaches the gate: they are removed,
    their deny-lists kept. ``tools`` is untouched: mounting is not approving.
    """
    from kirocrew_core.governance import auto_approve_verdicts

    withheld: list[Withheld] = []
    raw_servers = config.get("mcpServers")
    servers = raw_servers if isinstance(raw_servers, dict) else {}

    allowed = config.get("allowedTools")
    allowed_refs = [r for r in allowed if isinstance(r, str)] if isinstance(allowed, list) else []
    survivors: list[str] = []
    for ref in allowed_refs:
        if any(_covers_server(ref, name) for name in never):
            withheld.append(Withheld(ref, "never_auto_approvable", "allowedTools"))
        else:
            survivors.append(ref)

    approve_refs: list[tuple[str, str, str]] = []  # (server, tool, ref)
    for name, entry in servers.items():
        if not isinstance(entry, dict) or "autoApprove" not in entry:
            continue
        tools = entry["autoApprove"] if isinstance(entry["autoApprove"], list) else []
        if name in never:
            for tool in tools:
                withheld.append(Withheld(f"@{name}/{tool}", "never_auto_approvable", f"mcpServers.{name}.autoApprove"))
            entry.pop("autoApprove")
            continue
        for tool in tools:
            if isinstance(tool, str):
                approve_refs.append((name, tool, f"@{name}" if tool == "*" else f"@{name}/{tool}"))

    why = dict(auto_approve_verdicts([*survivors, *(r for _, _, r in approve_refs)], pm))
    if isinstance(allowed, list):
        config["allowedTools"] = [r for r in survivors if why.get(r) is None]
        withheld.extend(Withheld(r, why[r] or "", "allowedTools") for r in survivors if why.get(r) is not None)
    by_server: dict[str, list[str]] = {}
    for name, tool, ref in approve_refs:
        if why.get(ref) is not None:
            withheld.append(Withheld(ref, why[ref] or "", f"mcpServers.{name}.autoApprove"))
        else:
            by_server.setdefault(name, []).append(tool)
    for name, entry in servers.items():
        if isinstance(entry, dict) and "autoApprove" in entry:
            entry["autoApprove"] = by_server.get(name, [])
    withheld.extend(_strip_settings_grants(config))
    return withheld


#: ``toolsSettings`` keys that pre-approve calls by their input (kiro-cli 2.x; deny-lists are kept).
SETTINGS_GRANTS = ("allowedCommands", "allowedPaths", "allowedServices", "autoAllowReadonly", "trustedAgents",
                   "allowedDomains")


def _strip_settings_grants(config: dict[str, Any]) -> list[Withheld]:
    settings = config.get("toolsSettings")
    if not isinstance(settings, dict):
        return []
    withheld: list[Withheld] = []
    for tool, entry in settings.items():
        if not isinstance(entry, dict):
            continue
        for key in SETTINGS_GRANTS:
            if key in entry and entry[key] not in (False, [], None):
                withheld.append(Withheld(f"{tool}.{key}", "permission_policy", f"toolsSettings.{tool}.{key}"))
            entry.pop(key, None)
    return withheld


def audit_withheld(withheld: list[Withheld], source: str, warnings: list[str]) -> None:
    """Record withheld grants in the SEL; a failing audit is a warning, never a failed rebuild."""
    if not withheld:
        return
    from kirocrew_core import audit

    by_reason: dict[str, list[str]] = {}
    for item in withheld:
        by_reason.setdefault(item.reason, []).append(item.ref)
    try:
        for reason, refs in sorted(by_reason.items()):
            for start in range(0, len(refs), _AUDIT_CHUNK):
                audit.record(
                    AUDIT_EVENT_WITHHELD,
                    actor="system",
                    outcome="ok",
                    source=source,
                    reason=reason,
                    refs=refs[start:start + _AUDIT_CHUNK],
                    detail="mounted without auto-approve; calls go through the approval gate",
                )
    except Exception as exc:  # noqa: BLE001 - the SEL being unavailable must not stop kiro-cli getting its agent
        warnings.append(f"could not record withheld auto-approve grants in the SEL: {exc}")


# -- serialization ------------------------------------------------------------


def dumps_agent(config: dict[str, Any]) -> bytes:
    """The agent file's bytes: one top-level field, and one server, per line.

    Readable and diffable for people who hand-edit the file, and it keeps to
    json's C encoder (``indent=`` falls back to the pure-Python one, which was
    most of a 500-server rebuild).
    """

    def enc(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    lines = ["{"]
    fields = list(config.items())
    for index, (key, value) in enumerate(fields):
        comma = "," if index < len(fields) - 1 else ""
        if isinstance(value, dict) and value:
            lines.append(f"  {enc(key)}: {{")
            members = list(value.items())
            for at, (name, item) in enumerate(members):
                lines.append(f"    {enc(name)}: {enc(item)}{',' if at < len(members) - 1 else ''}")
            lines.append(f"  }}{comma}")
        else:
            lines.append(f"  {enc(key)}: {enc(value)}{comma}")
    lines.append("}")
    return ("\n".join(lines) + "\n").encode("utf-8")


# -- state --------------------------------------------------------------------


def _read_state() -> dict[str, Any]:
    read = read_json(state_file())
    if read.state is ReadState.DOCUMENT and isinstance(read.document, dict):
        return read.document
    return {}


def last_rebuild_state() -> dict[str, Any]:
    """What the last rebuild recorded: ``managed`` and ``retired`` names, and its ``warnings`` (for doctor)."""
    return _read_state()


def _write_state(state: dict[str, Any], previous: dict[str, Any]) -> None:
    if state == {k: previous.get(k) for k in state}:
        return
    home.ensure_crew_home()
    write_json_atomic(state_file(), state, secret=True)


# -- the rebuild --------------------------------------------------------------


def render_agent_config(
    base: dict[str, Any],
    *,
    fresh: bool,
    pm: KirocrewPluginManager,
    report: RebuildReport,
    managed_servers: dict[str, ManagedMcpServer],
    retired_managed: set[str],
    rendered_aliases: Mapping[str, str] | None = None,
    rendered_context: Mapping[str, Any] | None = None,
    rendered_scope_entries: Mapping[str, Any] | None = None,
    servers_only: bool = False,
) -> tuple[dict[str, Any], list[Withheld]]:
    """Merge everything onto ``base`` and return the finished config (reads only, no writes).

    ``rendered_aliases`` are the ``toolAliases`` the previous render wrote (the
    state file's record); the ones written now are in ``report.tool_aliases``.
    ``rendered_context`` is the record of the ``resources`` and ``agentSpawn`` commands it
    added (``{"resources": [...], "spawn_hooks": [...]}``); the ones added now are in
    ``report.resources`` and ``report.spawn_hooks``. ``rendered_scope_entries`` is the
    record of the entries it took from the scopes (:mod:`kirocrew_mcp.scope_owned`); this
    render's is in ``report.scope_entries``, and the servers it took back because no scope
    declares them any more are in ``report.retracted``.

    ``retired_managed`` are names a plugin used to manage and no longer does
    (a gated-off ``kirocrew-computer``): they are retracted from the base and
    kept out of every merge loop, so a stale copy in some scope cannot bring
    back a launch spec its owner withdrew.

    ``servers_only`` (a view's preview) stops once ``mcpServers`` is merged: no
    ``toolAliases``, ``resources`` or spawn hooks (their hooks may create files) and no
    auto-approve pass (it reads the permission policy); grants are not what it is for.
    """
    managed_names = set(managed_servers)
    reserved = managed_names | retired_managed
    sources = _read_sources(pm, report)
    app_state = app_registry.app_entries_for_render(report.warnings)
    raw_base_servers = base.get("mcpServers")
    base_servers = raw_base_servers if isinstance(raw_base_servers, dict) else {}
    base_managed = {n: base_servers.get(n) for n in managed_names}
    # Keys of apps the registry knows are re-derived from it (a disabled app's keys vanish);
    # keys of apps it does not know stay as the base has them: absence is not proof.
    app_entries = {k: v for k, v in app_state.entries.items() if k not in reserved}
    app_names = {k for k in base_servers if isinstance(k, str) and app_state.owns(k)} | set(app_entries)
    app_names -= reserved
    extra = _extra_servers(pm, report)
    own_base = {k: v for k, v in base_servers.items() if k not in reserved and k not in app_names}
    crew_reads = [r for r in sources.reads if r.scope is not None and r.scope.kind == KIND_CREW]
    crew_maps = [r.servers for r in crew_reads]
    reclaimed = scope_owned.Reclaimed()
    if sources.all_known:  # a scope we cannot read may be the one declaring what looks removed
        shared_maps = [r.servers for r in sources.reads if r not in crew_reads]
        view = scope_owned.scope_view([*shared_maps, extra], crew_maps)
        reclaimed = scope_owned.reclaim(own_base, rendered_scope_entries or {}, view, reserved)
    servers = _merge(
        own_base,
        app_entries,
        app_names,
        sources,
        extra,
        reserved,
    )
    resolver = _Resolver()  # one per render: the fallback and the Playwright fold resolve the same commands
    servers = _validate(servers, sources, extra, set(app_entries), report, resolver)

    config = base
    config["mcpServers"] = servers
    report.renamed.update(aliases.normalize_server_keys(config, reserved=reserved))
    folded = playwright.converge_playwright_servers(config, reserved=reserved | app_names, resolve=resolver)
    if folded:
        report.renamed.update({old: folded.get(new, new) for old, new in report.renamed.items()})
        report.renamed.update(folded)
        report.warnings.append(f"Playwright MCP entries {', '.join(sorted(folded))} start the same browser "
                               f"backend as {playwright.CANONICAL_KEY!r}: rendered once, under that key")
    servers = config["mcpServers"]
    user_owned = {report.renamed.get(k, k) for k in own_base}
    report.retracted = scope_owned.lay_back(servers, reclaimed, scope_owned.crew_fields(crew_maps))
    _drop_refs(config, set(report.retracted))  # a grant must not wait for a server of that name to come back
    for key in reclaimed.overlays:
        if isinstance(servers.get(key), dict):
            _tidy_entry(servers[key])

    executable = managed.kirocrew_executable() if managed_servers else None
    for name, server in managed_servers.items():
        entry = managed.managed_entry(
            server, base_managed.get(name), invocation=managed.managed_invocation(server, executable)
        )
        # Preferences the dashboard keeps in the crew store (a disable, per-tool disables);
        # never a launch spec, and never from a shared global, where a managed name is a leftover.
        for prefs in crew_maps:
            pref = prefs.get(name)
            if not isinstance(pref, dict):
                continue
            for key in ("disabled", "disabledTools", "timeout"):
                if key in pref:
                    entry[key] = pref[key]
            if server.may_auto_approve and isinstance(pref.get("autoApprove"), list):
                entry["autoApprove"] = list(pref["autoApprove"])
        _tidy_entry(entry)
        servers[name] = entry
    if servers_only:
        return config, []
    if fresh:
        _mount_refs(config, list(managed_servers))
    _mount_refs(config, [n for n in servers if n not in base_servers])
    _merge_tool_aliases(config, _plugin_tool_aliases(pm, servers, report), rendered_aliases or {}, report)
    _merge_agent_context(config, *_plugin_agent_context(pm, report), rendered_context or {}, report)

    config["name"] = AGENT_NAME
    config["includeMcpJson"] = False
    for key in ("tools", "allowedTools"):
        if isinstance(config.get(key), list):
            config[key] = _dedup_strings(config[key])
    never = {name for name, server in managed_servers.items() if not server.may_auto_approve}
    withheld = apply_auto_approve_pass(config, never, pm)
    report.scope_entries = scope_owned.records_for(
        config["mcpServers"], user_owned=user_owned, not_scoped=reserved | app_names, reclaimed=reclaimed,
        previous=rendered_scope_entries or {}, keep_previous=not sources.all_known)
    return {k: config[k] for k in AGENT_FIELDS if k in config}, withheld


def _plugin_tool_aliases(pm: KirocrewPluginManager, servers: dict[str, Any],
                         report: RebuildReport) -> dict[str, str]:
    """Every ``agent_tool_aliases()`` rename of a mounted server, the first to name a key winning."""
    from types import MappingProxyType

    from kirocrew_core.plugins import call_hook

    def problem(value: Any) -> str | None:
        if value is None or (isinstance(value, Mapping) and all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in value.items())):
            return None
        return f"returned {type(value).__name__}, not a mapping of tool references to names"

    if not hasattr(pm.hook, "agent_tool_aliases"):  # a manager without kirocrew-mcp's own hookspecs
        return {}
    view = MappingProxyType({name: MappingProxyType(copy.deepcopy(entry)) for name, entry in servers.items()
                             if isinstance(entry, dict)})
    call = call_hook(pm, "agent_tool_aliases", on_error="skip", check=problem, servers=view)
    for failure in call.failures:
        report.warnings.append(f"plugin {failure.plugin!r}: agent_tool_aliases() failed ({failure.error}); "
                               "its tool renames are left out")
    out: dict[str, str] = {}
    for contribution in call.contributions:
        for key, alias in contribution.value.items():
            server, slash, tool = key[1:].rpartition("/")
            if key.startswith("@") and slash and tool and server in servers:
                out.setdefault(key, alias)
    return out


def _merge_tool_aliases(config: dict[str, Any], wanted: dict[str, str], previous: Mapping[str, str],
                        report: RebuildReport) -> None:
    """The user's ``toolAliases`` plus ``wanted`` where the user has no entry; see the module docstring."""
    raw = config.get("toolAliases")
    current = raw if isinstance(raw, dict) else {}
    users = {k: v for k, v in current.items() if not (k in previous and previous[k] == v)}
    ours = {k: v for k, v in sorted(wanted.items()) if k not in users}
    merged = {**users, **ours}
    if merged or (isinstance(raw, dict) and not raw):
        config["toolAliases"] = merged
    else:
        config.pop("toolAliases", None)
    report.tool_aliases = ours


def _plugin_agent_context(pm: KirocrewPluginManager, report: RebuildReport) -> tuple[list[str], list[str]]:
    """Every ``agent_resources()`` URI and ``agent_spawn_hooks()`` command (shell-quoted), each once, in call order."""
    import shlex
    import sys

    from kirocrew_core.plugins import call_hook

    def resources_problem(value: Any) -> str | None:
        if value is None or (isinstance(value, (list, tuple)) and all(
                isinstance(v, str) and v.startswith("file:///") for v in value)):
            return None
        return "did not return a list of file:// URIs of absolute paths"

    def hooks_problem(value: Any) -> str | None:
        if value is None or (isinstance(value, (list, tuple)) and all(
                isinstance(argv, (list, tuple)) and argv and all(isinstance(w, str) and w for w in argv)
                for argv in value)):
            return None
        return "did not return a list of argv lists"

    def contributions(call: Any, hook: str) -> list[Any]:
        for failure in call.failures:
            report.warnings.append(f"plugin {failure.plugin!r}: {hook}() failed ({failure.error}); "
                                   "what it adds to the agent is left out")
        return [item for contribution in call.contributions for item in contribution.value or ()]

    resources: list[str] = []
    commands: list[str] = []
    if hasattr(pm.hook, "agent_resources"):  # a manager without kirocrew-mcp's own hookspecs has neither
        call = call_hook(pm, "agent_resources", on_error="skip", check=resources_problem)
        resources = _dedup_strings(contributions(call, "agent_resources"))
        call = call_hook(pm, "agent_spawn_hooks", on_error="skip", check=hooks_problem)
        for argv in map(list, contributions(call, "agent_spawn_hooks")):
            if argv[0] == managed.EXECUTABLE_NAME:
                exe = managed.kirocrew_executable()
                argv[:1] = [exe] if exe else [sys.executable, "-m", "kirocrew_core"]
            commands.append(shlex.join(argv))
    return resources, _dedup_strings(commands)


def _merge_agent_context(config: dict[str, Any], resources: list[str], commands: list[str],
                         previous: Mapping[str, Any], report: RebuildReport) -> None:
    """Add the plugins' ``resources`` and ``agentSpawn`` commands; the user's own entries stay as written."""
    old_resources = {r for r in previous.get("resources") or () if isinstance(r, str)}
    raw = config.get("resources")
    current = raw if isinstance(raw, list) else []
    kept = [r for r in current if r not in old_resources or r in resources]
    merged = kept + [r for r in resources if r not in kept]
    if merged or isinstance(raw, list):
        config["resources"] = merged
    report.resources = list(resources)

    old_commands = {c for c in previous.get("spawn_hooks") or () if isinstance(c, str)}
    raw_hooks = config.get("hooks")
    hooks = raw_hooks if isinstance(raw_hooks, dict) else {}
    raw_spawn = hooks.get("agentSpawn")
    spawn = raw_spawn if isinstance(raw_spawn, list) else []
    entries = [e for e in spawn if not (isinstance(e, dict) and e.get("command") in old_commands
                                        and e.get("command") not in commands)]
    present = {e.get("command") for e in entries if isinstance(e, dict)}
    entries += [{"command": c} for c in commands if c not in present]
    if entries:
        hooks["agentSpawn"] = entries
    else:
        hooks.pop("agentSpawn", None)
    if hooks or isinstance(raw_hooks, dict):
        config["hooks"] = hooks
    report.spawn_hooks = list(commands)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _string_dict(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _dedup_strings(items: list[Any]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        if isinstance(item, str) and item not in seen:
            seen.add(item)
            out.append(item)
    return out


def rebuild_agent_config(
    *, clean: bool = False, pm: KirocrewPluginManager | None = None, strict: bool = False
) -> RebuildReport:
    """Re-render ``~/.kiro/agents/kirocrew.json`` from every source; see the module docstring.

    ``clean`` ignores the existing file as a merge base (app servers are kept:
    they are re-derived from the app registry). Raises ``agent_file_unreadable``
    when the existing file cannot be read (and ``clean`` is not set),
    ``managed_mcp_conflict`` when two plugins claim one managed server, and,
    when ``strict``, ``scope_file_malformed`` (exit 2) or ``scope_file_unreadable``
    when a scope file cannot be used: a rebuild that went on would drop that
    scope's servers under ``clean`` and report success for a render that does
    not match the user's files. In every case nothing is written.
    """
    from kirocrew_core.plugins import get_plugin_manager

    manager = pm if pm is not None else get_plugin_manager()
    path = home.rendered_agent_file()
    report = RebuildReport(path)
    managed_servers = managed.managed_servers(manager)
    withheld: list[Withheld] = []
    with named_lock(LOCK_NAME):
        state = _read_state()
        previous = _names(state.get("managed")) | _names(state.get("retired"))
        retired = previous - set(managed_servers)
        if strict:
            unusable = [read for read in map(read_scope_servers, all_scopes(manager)) if not read.ok]
            if unusable:
                raise unusable_scopes_error(unusable)
        base, fresh, current = _read_base(path, clean, report)
        # Read before the policy is: a policy changed during the render leaves an older signature, so the next
        # session start renders again rather than trusting grants computed from a policy that is gone.
        policy = _policy_signature()
        config, withheld = render_agent_config(
            base,
            fresh=fresh,
            pm=manager,
            report=report,
            managed_servers=managed_servers,
            retired_managed=retired,
            rendered_aliases=_string_dict(state.get("tool_aliases")),
            rendered_context={"resources": state.get("resources"), "spawn_hooks": state.get("spawn_hooks")},
            rendered_scope_entries=_dict(state.get("scope_entries")),
        )
        data = dumps_agent(config)
        if data != current:
            write_bytes_atomic(path, data)
            report.written = True
        report.servers = list(config.get("mcpServers", {}))
        report.withheld = [w.ref for w in withheld]
        # The SEL lock comes after ours in the lock order, so this may nest.
        audit_withheld(withheld, "rebuild_agent_config", report.warnings)
        _write_state(
            {"managed": sorted(managed_servers), "retired": sorted(retired), "warnings": list(report.warnings),
             "tool_aliases": dict(report.tool_aliases), "resources": list(report.resources),
             "spawn_hooks": list(report.spawn_hooks), "policy": policy,
             "scope_entries": report.scope_entries},
            state,
        )
    return report


@dataclass
class Preview:
    """What the next rebuild would render: its ``servers`` and ``renamed`` (raw key -> rendered key)."""

    servers: dict[str, Any]
    renamed: dict[str, str]

    def effective(self, raw: str) -> bool:
        """Whether sessions would load the server the scopes call ``raw``: rendered and not muted."""
        entry = self.servers.get(self.renamed.get(raw, raw))
        return isinstance(entry, dict) and entry.get("disabled", False) is False


def preview_render(*, pm: KirocrewPluginManager | None = None) -> Preview | None:
    """The next rebuild's servers, rendered in memory from the files as they are now; None when unknowable.

    For views (the ``kirocrew`` badge): what sessions would load without waiting for
    a rebuild. Takes no lock and writes nothing (a corrupt agent file is not backed up
    here, and no audit record is made); ``None`` when the agent file cannot be read or
    two plugins claim one managed server.
    """
    from kirocrew_core.plugins import get_plugin_manager

    manager = pm if pm is not None else get_plugin_manager()
    path = home.rendered_agent_file()
    report = RebuildReport(path)
    try:
        managed_servers = managed.managed_servers(manager)
    except KirocrewError:
        return None
    read = read_json(path)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        base, fresh = copy.deepcopy(AGENT_TEMPLATE), True
    elif read.state is ReadState.DOCUMENT and isinstance(read.document, dict):
        base, fresh = _usable_base(read.document, path, report), False
    else:
        return None
    state = _read_state()
    retired = (_names(state.get("managed")) | _names(state.get("retired"))) - set(managed_servers)
    config, _ = render_agent_config(
        base, fresh=fresh, pm=manager, report=report, managed_servers=managed_servers, retired_managed=retired,
        rendered_aliases=_string_dict(state.get("tool_aliases")),
        rendered_context={"resources": state.get("resources"), "spawn_hooks": state.get("spawn_hooks")},
        rendered_scope_entries=_dict(state.get("scope_entries")), servers_only=True)
    return Preview(dict(config.get("mcpServers") or {}), dict(report.renamed))


def _policy_signature() -> str:
    from kirocrew_core.gate.policy_file import policy_signature

    return policy_signature()


def policy_changed_since_render() -> bool:
    """Whether the last render's blanket grants were computed from a permission policy (or ceiling) that has
    changed since; False when no render recorded one (a file this kirocrew did not render is left alone)."""
    recorded = _read_state().get("policy")
    return isinstance(recorded, str) and recorded != _policy_signature()


def _names(value: Any) -> set[str]:
    return {v for v in value if isinstance(v, str)} if isinstance(value, list) else set()


def remove_server_from_agent_file(name: str) -> bool:
    """Delete ``name`` (and its ``@name`` refs) from the rendered file, for uninstall; True if it was there.

    The rebuild uses the existing file as its merge base, so an uninstall must
    delete the entry here too or the next rebuild would resurrect it. A file
    that is absent, malformed or unreadable is left alone (returns False).
    """
    path = home.rendered_agent_file()
    with named_lock(LOCK_NAME):
        read = read_json(path)
        if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
            return False
        config = read.document
        servers = config.get("mcpServers")
        keys = {name, aliases.mcp_server_alias(name)}
        if not isinstance(servers, dict) or not keys & set(servers):
            return False
        for key in keys:
            servers.pop(key, None)
        _drop_refs(config, keys)
        write_json_atomic(path, config)
        return True


def _drop_refs(config: dict[str, Any], keys: set[str]) -> None:
    """Remove ``@key`` and ``@key/tool`` from ``tools`` and ``allowedTools`` (in place)."""
    for list_key in ("tools", "allowedTools"):
        refs = config.get(list_key)
        if isinstance(refs, list):
            config[list_key] = [
                r for r in refs
                if not (isinstance(r, str) and any(r == f"@{k}" or r.startswith(f"@{k}/") for k in keys))
            ]


@dataclass
class AgentRefresh:
    """What :func:`remove_then_rebuild` did: which names the agent file held, and the rebuild."""

    removed: dict[str, bool]
    report: RebuildReport | None = None
    error: KirocrewError | None = None


def remove_then_rebuild(names: Sequence[str], *, pm: KirocrewPluginManager | None = None) -> AgentRefresh:
    """Delete ``names`` from the rendered agent file, then rebuild it once (uninstall and disconnect).

    The rebuild merges onto the rendered file, so a server removed from every
    scope must leave that file first or the rebuild would bring it back. A
    rebuild refused with a :class:`KirocrewError` is reported in ``error``;
    anything else (an ``OSError`` from a write) raises.
    """
    removed = {name: remove_server_from_agent_file(name) for name in names}
    try:
        report = rebuild_agent_config(pm=pm)
    except KirocrewError as exc:
        return AgentRefresh(removed, error=exc)
    return AgentRefresh(removed, report)


__all__ = [
    "AGENT_FIELDS",
    "AGENT_TEMPLATE",
    "AgentRefresh",
    "Preview",
    "RebuildReport",
    "Withheld",
    "apply_auto_approve_pass",
    "audit_withheld",
    "last_rebuild_state",
    "preview_render",
    "rebuild_agent_config",
    "remove_server_from_agent_file",
    "remove_then_rebuild",
]
