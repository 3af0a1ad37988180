"""Which MCP servers exist, where each is declared, and what the last probe said: read-only.

Stable API:

- ``discover(*, pm=None, cache=None) -> Discovery``: ``rows`` (one
  :class:`ServerRow` per server, canonicalized by kiro-safe alias), ``scopes``
  (every scope id, in priority order) and ``problems`` (each source that could
  not be used: malformed, unreadable, or entries that are not objects).
- ``list_servers(*, pm=None, cache=None) -> list[ServerRow]``: the rows; the
  problems are logged as warnings.
- ``refresh_probes(rows=None, *, pm=None, cache=None, concurrency=…, timeout=None)``
  (and ``refresh_probes_async``): probe the rows (a disabled one is never
  spawned) and return them re-read with the new results.

Each row's ``presence`` has a key for EVERY scope, always: a missing key reads
as False in the dashboard, and an Apply would then delete the server from that
scope. ``presence["kirocrew"]`` is the effective state: the server is in the
agent the next rebuild would render from the files as they are now
(:func:`kirocrew_mcp.render.preview_render`, so an edit shows before any rebuild),
not muted there, and not muted in any scope (the rebuild's tightest-wins). When that
cannot be known (the agent file is unreadable) it is None. Every other key is raw
membership of that scope's file: True, False, or None when the file cannot be
read (unknowable is not "absent"). Seam scopes come from ``extra_mcp_scopes()``
through :func:`kirocrew_mcp.scopes.all_scopes`, so a file no plugin contributes
(``~/.claude.json`` without the companion) is never opened.

Nothing here writes: managed servers' stale commands are re-resolved in memory
on every call (a stored absolute path goes stale after an upgrade), and the
probe cache is only read.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.jsonfile import ReadState, read_json

from kirocrew_mcp.aliases import mcp_server_alias
from kirocrew_mcp.probe import (
    STATUS_DISABLED,
    STATUS_PROBING,
    STATUS_UNKNOWN,
    is_muted,
    is_remote,
)
from kirocrew_mcp.scopes import (
    CREW_SCOPE_ID,
    KIND_CREW,
    Scope,
    ScopeRead,
    all_scopes,
    mcp_document_problem,
    read_scope_servers,
)

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

    from kirocrew_mcp.probe_cache import CommandResolver, ProbeCache
    from kirocrew_mcp.render import Preview

log = logging.getLogger(__name__)

EFFECTIVE_KEY = "kirocrew"
SOURCE_AGENT = "agent"
REDACTED_HEADER = "[REDACTED: credential]"
DISABLED_INVALID = "invalid"


@dataclass(frozen=True)
class SourceProblem:
    """A source discovery could not use; its servers are missing from the view, and it says so."""

    source: str  # a scope id, or "agent" for the rendered agent file
    path: Path
    state: str
    error: str
    line: int | None = None

    def message(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.state}: {self.error}"

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "path": str(self.path), "state": self.state,
                "error": self.error, "line": self.line}


@dataclass
class ServerRow:
    """One MCP server as the dashboard shows it (reference §3.2's ``McpServerInfo``)."""

    name: str
    spec: dict[str, Any]
    source: str
    presence: dict[str, bool | None]
    keys: list[str] = field(default_factory=list)  # raw keys folded into this row
    in_crew_store: bool | None = False
    managed: bool = False
    disabled: bool = False
    disabled_reason: str | None = None
    disabled_in_shared: bool = False
    disabled_tools: list[str] = field(default_factory=list)
    status: str = STATUS_UNKNOWN
    tools: list[str] = field(default_factory=list)
    error: str = ""
    protocol_version: str = ""
    server_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    tool_annotations: dict[str, dict[str, Any]] = field(default_factory=dict)
    probe_mode: str = ""
    probed_at: float | None = None
    auth_challenge: bool = False
    auth_grant_present: bool | None = None

    # -- the spec, field by field --
    @property
    def command(self) -> str | None:
        value = self.spec.get("command")
        return value if isinstance(value, str) else None

    @property
    def args(self) -> list[str]:
        value = self.spec.get("args")
        return [a for a in value if isinstance(a, str)] if isinstance(value, list) else []

    @property
    def env(self) -> dict[str, str]:
        value = self.spec.get("env")
        return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}

    @property
    def url(self) -> str | None:
        value = self.spec.get("url")
        return value if isinstance(value, str) else None

    @property
    def headers(self) -> dict[str, str]:
        value = self.spec.get("headers")
        return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}

    @property
    def is_remote(self) -> bool:
        return is_remote(self.spec)

    @property
    def oauth_scopes(self) -> list[str]:
        """OAuth scope hints (``scopes`` in the scope files, ``oauthScopes`` on the wire); all or nothing."""
        value = self.spec.get("scopes", self.spec.get("oauthScopes"))
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            return list(value)
        return []  # a partly valid list is not trusted in part

    @property
    def client_id(self) -> str | None:
        value = self.spec.get("clientId")
        oauth = self.spec.get("oauth")
        if value is None and isinstance(oauth, dict):
            value = oauth.get("clientId")
        return value if isinstance(value, str) and value else None

    def probe_spec(self) -> dict[str, Any]:
        """What a probe gets: the launch spec, muted when the row is (so it is never spawned)."""
        spec = dict(self.spec)
        if self.disabled:
            spec["disabled"] = True
        return spec

    def as_dict(self) -> dict[str, Any]:
        """JSON for the dashboard: header values and env values never leave the process."""
        out: dict[str, Any] = {
            "name": self.name,
            "command": self.command,
            "args": self.args,
            "envKeys": sorted(self.env),
            "status": self.status,
            "tools": list(self.tools),
            "error": self.error,
            "source": self.source,
            "presence": dict(self.presence),
            "kirocrewManaged": self.in_crew_store,
            "managed": self.managed,
            "probeMode": self.probe_mode or None,
            "probedAt": self.probed_at,
            "disabled": self.disabled,
            "disabledTools": list(self.disabled_tools),
        }
        if self.disabled_reason:
            out["disabledReason"] = self.disabled_reason
        if self.disabled_in_shared:
            out["disabledInShared"] = True
        if self.protocol_version:
            out["protocolVersion"] = self.protocol_version
        if self.server_info:
            out["serverInfo"] = dict(self.server_info)
        if self.tool_annotations:
            out["toolAnnotations"] = {k: dict(v) for k, v in self.tool_annotations.items()}
        if self.url is not None:
            out["url"] = self.url
            out["headers"] = {name: REDACTED_HEADER for name in self.headers}
            out["scopes"] = self.oauth_scopes
            out["clientId"] = self.client_id
            out["authChallenge"] = self.auth_challenge
            out["authGrantPresent"] = self.auth_grant_present
        return out


@dataclass
class Discovery:
    rows: list[ServerRow]
    scopes: list[Scope]
    problems: list[SourceProblem]

    def row(self, name: str) -> ServerRow | None:
        return next((r for r in self.rows if r.name == name or name in r.keys), None)


# -- reading -------------------------------------------------------------------


def _read_agent_servers(problems: list[SourceProblem]) -> dict[str, dict[str, Any]] | None:
    """The rendered agent file's ``mcpServers``; None when it cannot be known."""
    path = home.rendered_agent_file()
    read = read_json(path)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return {}
    if not read.known:
        problems.append(SourceProblem(SOURCE_AGENT, path, read.state.value, read.error, read.line))
        return None
    what = mcp_document_problem(read.document)
    if what:
        problems.append(SourceProblem(SOURCE_AGENT, path, ReadState.MALFORMED.value, what))
        return None
    servers = read.document.get("mcpServers") or {}
    out: dict[str, dict[str, Any]] = {}
    skipped = []
    for name, entry in servers.items():
        if isinstance(entry, dict) and name:
            out[name] = entry
        else:
            skipped.append(name)
    if skipped:
        problems.append(SourceProblem(SOURCE_AGENT, path, "skipped",
                                      f"entries that are not objects: {', '.join(skipped)}"))
    return out


def _read_scopes(scopes: list[Scope], problems: list[SourceProblem]) -> list[ScopeRead]:
    reads = []
    for scope in scopes:
        read = read_scope_servers(scope)
        if not read.ok:
            problems.append(SourceProblem(scope.id, scope.path, read.state.value, read.error, read.line))
        elif read.skipped:
            problems.append(SourceProblem(scope.id, scope.path, "skipped",
                                          f"entries that are not objects: {', '.join(read.skipped)}"))
        reads.append(read)
    return reads


def _managed_invocations(pm: KirocrewPluginManager | None,
                         problems: list[SourceProblem]) -> dict[str, tuple[str, list[str]]]:
    """Live ``(command, args)`` of every managed server, resolved now (never cached: paths go stale)."""
    from kirocrew_core.errors import KirocrewError

    from kirocrew_mcp import managed

    try:
        servers = managed.managed_servers(pm)
    except KirocrewError as exc:
        problems.append(SourceProblem("managed", home.rendered_agent_file(), "conflict", exc.message))
        return {}
    executable = managed.kirocrew_executable() if servers else None
    return {name: managed.managed_invocation(server, executable) for name, server in servers.items()}


def _fix_stale_managed(name: str, spec: dict[str, Any], live: tuple[str, list[str]]) -> dict[str, Any]:
    command, args = live
    if spec.get("command") == command and spec.get("args") == args:
        return spec
    log.info("MCP server %s: showing the live launch command instead of the stored one", name)
    fixed = dict(spec)
    fixed["command"], fixed["args"] = command, list(args)
    fixed.pop("url", None)
    fixed.pop("headers", None)
    return fixed


def _has_launch(spec: Mapping[str, Any]) -> bool:
    return any(isinstance(spec.get(k), str) and spec[k].strip() for k in ("command", "url"))


# -- building rows ---------------------------------------------------------------


@dataclass
class _Found:
    """Everything known about one raw key before canonicalization."""

    agent: dict[str, Any] | None = None
    scoped: list[tuple[Scope, dict[str, Any]]] = field(default_factory=list)


def discover(*, pm: KirocrewPluginManager | None = None, cache: ProbeCache | None = None) -> Discovery:
    """Read every source (never writing one) and build the rows; see the module docstring."""
    from kirocrew_core.plugins import get_plugin_manager

    from kirocrew_mcp.probe_cache import CommandResolver, default_cache

    manager = pm if pm is not None else get_plugin_manager()
    store = default_cache() if cache is None else cache
    problems: list[SourceProblem] = []
    scopes = all_scopes(manager)
    agent = _read_agent_servers(problems)
    reads = _read_scopes(scopes, problems)
    live = _managed_invocations(manager, problems)
    preview = _preview(manager) if agent is not None else None

    found: dict[str, _Found] = {}
    for name, entry in (agent or {}).items():
        found.setdefault(name, _Found()).agent = entry
    for scope, read in zip(scopes, reads, strict=True):
        for name, entry in read.servers.items():
            found.setdefault(name, _Found()).scoped.append((scope, entry))

    readable = {scope.id: read.ok for scope, read in zip(scopes, reads, strict=True)}
    resolver = CommandResolver()
    rows: dict[str, ServerRow] = {}
    for raw, info in found.items():
        row = _row(raw, info, scopes, readable, preview, live)
        alias = mcp_server_alias(raw)
        rep = rows.get(alias)
        rows[alias] = row if rep is None else _fold(rep, row, alias)
    for alias, row in rows.items():
        row.name = alias
        _finish_disabled(row, found)
        _overlay_probe(row, store, resolver)
    return Discovery(list(rows.values()), scopes, problems)


def _preview(pm: KirocrewPluginManager) -> Preview | None:
    from kirocrew_mcp.render import preview_render

    try:
        return preview_render(pm=pm)
    except Exception:  # a view must not fail with the render: the badge then reads unknown
        log.warning("MCP discovery: could not preview the agent file's render", exc_info=True)
        return None


def _row(raw: str, info: _Found, scopes: list[Scope], readable: dict[str, bool],
         preview: Preview | None, live: dict[str, tuple[str, list[str]]]) -> ServerRow:
    candidates = ([info.agent] if info.agent is not None else []) + [entry for _, entry in info.scoped]
    # The launch spec comes from the first source that has one: a {"disabled": true} stub
    # in the crew store must not hide the real command the Kiro global declares.
    spec = copy.deepcopy(next((c for c in candidates if _has_launch(c)), candidates[0]))
    spec.pop("disabled", None)
    managed = raw in live
    if managed:
        spec = _fix_stale_managed(raw, spec, live[raw])
    in_scope = {scope.id for scope, _ in info.scoped}
    presence: dict[str, bool | None] = {}
    presence[EFFECTIVE_KEY] = preview.effective(raw) if preview is not None else None
    for scope in scopes:
        if scope.kind == KIND_CREW:
            continue
        presence[scope.id] = (scope.id in in_scope) if readable[scope.id] else None
    crew_known = readable.get(CREW_SCOPE_ID, True)
    # disabledTools: the first scope that has the key wins, so an explicit [] blocks lower ones.
    disabled_tools = next((e["disabledTools"] for _, e in info.scoped if "disabledTools" in e),
                          (info.agent or {}).get("disabledTools", []))
    return ServerRow(
        name=raw,
        spec=spec,
        source=SOURCE_AGENT if info.agent is not None else info.scoped[0][0].id,
        presence=presence,
        keys=[raw],
        in_crew_store=(CREW_SCOPE_ID in in_scope) if crew_known else None,
        managed=managed,
        disabled_tools=[t for t in disabled_tools if isinstance(t, str)] if isinstance(disabled_tools, list) else [],
    )


def _union(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _fold(rep: ServerRow, other: ServerRow, alias: str) -> ServerRow:
    """One row per alias: presence unioned, and the row whose key is the alias itself kept."""
    chosen, dropped = (other, rep) if other.keys[0] == alias else (rep, other)
    chosen.presence = {k: _union(v, dropped.presence.get(k)) for k, v in chosen.presence.items()}
    chosen.in_crew_store = _union(chosen.in_crew_store, dropped.in_crew_store)
    chosen.keys = [*chosen.keys, *dropped.keys]
    chosen.managed = chosen.managed or dropped.managed
    return chosen


def _finish_disabled(row: ServerRow, found: dict[str, _Found]) -> None:
    """Tightest wins, as in the rebuild: a mute in any source disables the row."""
    literal_true = False
    for raw in row.keys:
        info = found[raw]
        sources: list[tuple[str | None, dict[str, Any]]] = [(s.id, e) for s, e in info.scoped]
        if info.agent is not None:
            sources.append((None, info.agent))
        for scope_id, entry in sources:
            if not is_muted(entry):
                continue
            row.disabled = True
            literal_true = literal_true or entry.get("disabled") is True
            if scope_id is not None and scope_id != CREW_SCOPE_ID:
                row.disabled_in_shared = True
    if row.disabled:
        row.presence[EFFECTIVE_KEY] = False if row.presence[EFFECTIVE_KEY] is not None else None
        if not literal_true:
            row.disabled_reason = DISABLED_INVALID  # only non-boolean values: fix the value, not a switch


def _overlay_probe(row: ServerRow, store: ProbeCache, resolver: CommandResolver) -> None:
    if row.disabled:
        row.status = STATUS_DISABLED
        row.tools = list(store.last_tools(row.name))
        return
    cached = store.get(row.name, row.spec, resolver=resolver)
    if cached is None:
        row.status = STATUS_PROBING if store.is_probing(row.name) else STATUS_UNKNOWN
        return
    row.status = cached.status
    row.tools = list(cached.tools)
    row.error = cached.error
    row.protocol_version = cached.protocol_version
    row.server_info = dict(cached.server_info)
    row.capabilities = dict(cached.capabilities)
    row.tool_annotations = {k: dict(v) for k, v in cached.tool_annotations.items()}
    row.probe_mode = cached.probe_mode
    row.probed_at = cached.probed_at
    row.auth_challenge = cached.auth_challenge
    if row.is_remote and row.url:
        from kirocrew_core import grants

        try:
            row.auth_grant_present = grants.grant_presence(row.url)
        except ValueError:
            row.auth_grant_present = None


# -- entry points ----------------------------------------------------------------


def list_servers(*, pm: KirocrewPluginManager | None = None,
                 cache: ProbeCache | None = None) -> list[ServerRow]:
    """The rows of :func:`discover`; sources it could not use are logged, never silently dropped."""
    found = discover(pm=pm, cache=cache)
    for problem in found.problems:
        log.warning("MCP discovery: %s", problem.message())
    return found.rows


async def refresh_probes_async(rows: list[ServerRow] | None = None, *,
                               pm: KirocrewPluginManager | None = None,
                               cache: ProbeCache | None = None, concurrency: int | None = None,
                               timeout: float | None = None) -> list[ServerRow]:
    """Probe ``rows`` (default: every listed server) and return every row re-read with the results."""
    from kirocrew_mcp.probe_cache import PROBE_MAX_CONCURRENCY, default_cache, probe_all_async

    store = default_cache() if cache is None else cache
    targets = rows if rows is not None else (await asyncio.to_thread(discover, pm=pm, cache=store)).rows
    await probe_all_async([(row.name, row.probe_spec()) for row in targets],
                          concurrency=concurrency or PROBE_MAX_CONCURRENCY, cache=store, timeout=timeout)
    return (await asyncio.to_thread(discover, pm=pm, cache=store)).rows


def refresh_probes(rows: list[ServerRow] | None = None, *, pm: KirocrewPluginManager | None = None,
                   cache: ProbeCache | None = None, concurrency: int | None = None,
                   timeout: float | None = None) -> list[ServerRow]:
    """:func:`refresh_probes_async` from synchronous code (the CLI)."""
    return asyncio.run(refresh_probes_async(rows, pm=pm, cache=cache, concurrency=concurrency,
                                            timeout=timeout))
