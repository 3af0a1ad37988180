"""Apply: the one path that writes MCP scope files, and only what the owner explicitly asked for.

``apply_changes(payload, *, pm=None, actor="owner") -> ApplyOutcome`` takes the
change list that ``POST /api/mcp/apply`` (the planned dashboard's Apply button) and
``kirocrew mcp apply`` send::

    {"changes": [{"name": "slack", "kirocrew": true, "kiro": false, "cc": true,
                  "toolOverrides": {"post_message": false}},
                 {"name": "old-server", "uninstall": true}]}

A change names a server (the row name discovery shows, or a raw key) and any of:

- ``"kirocrew"``: whether kirocrew sessions see the server. ``false`` writes
  ``disabled: true`` into the crew store (the config is kept, so turning it
  back on needs nothing else); ``true`` clears that flag.
- a scope id (``"kiro"``, and each seam scope's id such as ``"cc"``): whether
  that file declares the server. ``true`` copies the spec in, ``false`` deletes
  the entry (a hard delete, as the user would in an editor).
- ``"toolOverrides"``: ``{tool: enabled}``, kept as the crew store's ``disabledTools``.
- ``"uninstall": true``: remove the server from every scope and directly from
  the rendered agent file; the change's other keys are ignored.

A key left out changes nothing: a scope file is written only when a change
names it (the Kiro global and provider globals are the user's). Changes run in
a fixed order over the whole batch: uninstalls, then scope adds, then scope
removes, then tool overrides, then one ``rebuild_agent_config()``.

The preservation rule: removing a server from the last scope file that
declares it, while kirocrew should keep it, first copies its spec into the crew
store, so the removal cannot lose the server from kirocrew sessions (the
rebuild's merge base would hide the loss until a ``--clean`` rebuild).

Where a new crew-store entry only records a preference (a disable, tool
overrides) and a shared scope still declares the server, the entry holds the
preference alone: copying the launch spec would freeze it, and a later edit of
the user's own file would silently stop reaching kirocrew.

Bad requests change nothing: a payload that is not a change list, more than
:data:`MAX_CHANGES` changes, an unknown scope (``cc`` without the companion
edition), a non-boolean switch or two changes for one server raise
:class:`~kirocrew_core.errors.BadInputError` before any file is read. A change
whose name is hostile, that would put a managed server into a shared file, or
that needs a scope file which is malformed or unreadable is refused on its
own, with a stable code in its result, and none of its writes happen. Every
write is atomic (:func:`kirocrew_mcp.scopes.write_scope_document`, which
keeps a file's own formatting) and made under the ``crew-mcp`` lock, which
also serializes applies from the gateway and the CLI.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.jsonfile import ReadState, read_json
from kirocrew_core.locks import named_lock

from kirocrew_mcp.aliases import mcp_server_alias
from kirocrew_mcp.probe import is_muted
from kirocrew_mcp.scopes import (
    CREW_SCOPE_ID,
    KIND_CREW,
    Scope,
    all_scopes,
    mcp_document_problem,
    write_scope_document,
)

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

    from kirocrew_mcp.render import AgentRefresh

log = logging.getLogger(__name__)

LOCK_NAME = "crew-mcp"
MAX_CHANGES = 200
MAX_NAME_CHARS = 128
MAX_TOOL_OVERRIDES = 1000
#: Server names: the characters npm, registry and app keys use, and nothing a shell or a path could abuse.
NAME_PATTERN = re.compile(r"^[@A-Za-z0-9][@A-Za-z0-9/_.:-]*$")
#: MCP tool names (the spec's charset); a ``/`` would split a kiro-cli ``@server/tool`` ref.
TOOL_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
EFFECTIVE_KEY = "kirocrew"
_FIXED_KEYS = ("name", "uninstall", "toolOverrides")
# Kept out of a spec copied into a shared file: kirocrew-only preferences, and grants that
# would auto-approve in plain kiro-cli sessions, which kirocrew's governance never sees.
NOT_SHARED = ("disabled", "disabledTools", "autoApprove")
_LAUNCH_KEYS = ("command", "url")

ADDED = "added"
ENABLED = "enabled"
DISABLED = "disabled"
REMOVED = "removed"
NOOP = "noop"
PRESERVED = "preserved"
MISSING_SPEC = "missing_spec"
DISABLED_IN_SHARED = "disabled_in_shared"
UNREADABLE = "unreadable"

AUDIT_UNINSTALL = "mcp_uninstall"
AUDIT_SCOPE_APPLY = "mcp_scope_apply"
AUDIT_REJECTED_NAME = "mcp_apply_rejected_name"
AUDIT_REJECTED_TOOL = "mcp_apply_rejected_tool_name"


# -- the request ------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One parsed change; ``scopes`` holds only the switches the request named."""

    index: int
    name: str
    scopes: dict[str, bool]
    uninstall: bool = False
    tool_overrides: dict[str, bool] = field(default_factory=dict)


def name_problem(name: str) -> str | None:
    """Why ``name`` may not be written into a scope file, or None when it is fine."""
    if not name:
        return "empty name"
    if len(name) > MAX_NAME_CHARS:
        return f"longer than {MAX_NAME_CHARS} characters"
    if ".." in name:
        return "contains '..'"
    if not NAME_PATTERN.fullmatch(name):
        return "may hold only letters, digits and @ / _ . : - and must start with a letter, digit or @"
    return None


def parse_changes(payload: Any, scope_ids: Sequence[str]) -> list[Change]:
    """Check the request's shape; raise :class:`BadInputError` (nothing touched) when it is wrong.

    ``scope_ids`` are the scope ids a change may name besides ``kirocrew``.
    Names are not judged here: a hostile name is refused per change, so one bad
    row cannot block the rest of a batch.
    """
    if not isinstance(payload, dict):
        raise BadInputError("the request must be a JSON object with a \"changes\" list", code="bad_changes")
    extra = sorted(set(payload) - {"changes"})
    if extra:
        raise BadInputError(f"unknown request keys: {', '.join(map(repr, extra))}", code="bad_changes")
    changes = payload.get("changes")
    if not isinstance(changes, list):
        raise BadInputError("changes must be a list", code="bad_changes")
    if len(changes) > MAX_CHANGES:
        raise BadInputError(f"too many changes (max {MAX_CHANGES})", code="too_many_changes")
    known = {EFFECTIVE_KEY, *scope_ids}
    out: list[Change] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(changes):
        where = f"changes[{index}]"
        if not isinstance(raw, dict):
            raise BadInputError(f"{where} is not an object", code="bad_changes")
        name = raw.get("name")
        if not isinstance(name, str):
            raise BadInputError(f"{where}.name must be a string", code="bad_changes")
        scopes: dict[str, bool] = {}
        for key, value in raw.items():
            if key in _FIXED_KEYS:
                continue
            if key not in known:
                raise BadInputError(
                    f"{where}: unknown scope {key!r} (known: {', '.join(sorted(known))})", code="unknown_scope"
                )
            if not isinstance(value, bool):
                raise BadInputError(f"{where}.{key} must be true or false", code="bad_changes")
            scopes[key] = value
        uninstall = raw.get("uninstall", False)
        if not isinstance(uninstall, bool):
            raise BadInputError(f"{where}.uninstall must be true or false", code="bad_changes")
        overrides = raw.get("toolOverrides", {})
        if overrides is None:
            overrides = {}
        if not isinstance(overrides, dict) or not all(isinstance(v, bool) for v in overrides.values()):
            raise BadInputError(f"{where}.toolOverrides must map tool names to true or false", code="bad_changes")
        if len(overrides) > MAX_TOOL_OVERRIDES:
            raise BadInputError(f"{where}.toolOverrides: more than {MAX_TOOL_OVERRIDES} tools", code="bad_changes")
        key = mcp_server_alias(name) if name else name
        if key in seen and name:
            raise BadInputError(
                f"{where} names the same server as changes[{seen[key]}]; send one change per server",
                code="duplicate_change",
            )
        seen[key] = index
        out.append(Change(index, name, scopes, uninstall, dict(overrides)))
    return out


# -- the files ----------------------------------------------------------------------


@dataclass
class _ScopeFile:
    """One scope's raw document, edited in memory and written once at the end."""

    scope: Scope
    state: ReadState
    document: dict[str, Any] | None
    error: str = ""
    changed: bool = False

    @property
    def usable(self) -> bool:
        return self.document is not None

    @property
    def code(self) -> str:
        return "scope_file_unreadable" if self.state is ReadState.UNREADABLE else "scope_file_malformed"

    def problem(self) -> str:
        return f"{self.scope.path}: {self.state.value}: {self.error} (left untouched)"

    def servers(self) -> dict[Any, Any]:
        """``mcpServers`` for reading (non-object entries included; never written over)."""
        if self.document is None:
            return {}
        value = self.document.get("mcpServers")
        return value if isinstance(value, dict) else {}

    def edit(self) -> dict[Any, Any]:
        """``mcpServers`` for writing; marks the file changed."""
        assert self.document is not None
        if not isinstance(self.document.get("mcpServers"), dict):
            self.document["mcpServers"] = {}
        self.changed = True
        return self.document["mcpServers"]

    def keys(self, name: str) -> list[str]:
        """Raw keys of ``name``'s row: the name itself and every key sharing its kiro-safe alias."""
        alias = mcp_server_alias(name)
        return [k for k in self.servers() if isinstance(k, str) and (k == name or mcp_server_alias(k) == alias)]

    def entries(self, name: str) -> list[tuple[str, dict[str, Any]]]:
        servers = self.servers()
        return [(k, servers[k]) for k in self.keys(name) if isinstance(servers[k], dict)]

    def declares(self, name: str) -> bool:
        """A launchable entry for ``name`` is here (a preference-only stub does not count)."""
        return any(_has_launch(entry) for _, entry in self.entries(name))


def _load(scope: Scope) -> _ScopeFile:
    read = read_json(scope.path)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return _ScopeFile(scope, read.state, {})
    if not read.known:
        where = f"line {read.line}: " if read.line else ""
        return _ScopeFile(scope, read.state, None, where + read.error)
    problem = mcp_document_problem(read.document)
    if problem:
        return _ScopeFile(scope, ReadState.MALFORMED, None, problem)
    return _ScopeFile(scope, read.state, read.document)


def _has_launch(entry: Any) -> bool:
    return isinstance(entry, dict) and any(isinstance(entry.get(k), str) and entry[k].strip() for k in _LAUNCH_KEYS)


def _read_agent_servers() -> tuple[dict[str, Any], bool]:
    """The rendered agent file's ``mcpServers`` and whether the file could be read."""
    read = read_json(home.rendered_agent_file())
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return {}, True
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        return {}, False
    servers = read.document.get("mcpServers")
    return (servers if isinstance(servers, dict) else {}), True


# -- results ------------------------------------------------------------------------


@dataclass
class ChangeResult:
    """What happened to one change. ``actions`` maps a scope id (or ``agent``) to what was done."""

    index: int
    name: str
    actions: dict[str, str] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)
    tools_rejected: list[str] = field(default_factory=list)
    error: str = ""
    code: str = ""

    @property
    def ok(self) -> bool:
        return not self.code

    def fail(self, code: str, error: str) -> None:
        if not self.code:
            self.code, self.error = code, error

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "ok": self.ok, "actions": dict(self.actions)}
        if self.tools:
            out["tools"] = dict(self.tools)
        if self.tools_rejected:
            out["tools_rejected"] = list(self.tools_rejected)
        if self.code:
            out["code"] = self.code
            out["error"] = self.error
        return out


@dataclass
class ApplyOutcome:
    """The answer to one apply: per-change results, the rebuild, and anything worth a warning."""

    results: list[ChangeResult]
    rebuild: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results) and bool(self.rebuild.get("ok", True))

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "applied": sum(1 for r in self.results if r.ok),
            "results": [r.as_dict() for r in self.results],
            "rebuild": dict(self.rebuild),
            "warnings": list(self.warnings),
        }


# -- the batch ------------------------------------------------------------------------


class Batch:
    """Every scope file and the agent file's servers, read once under the lock."""

    def __init__(self, scopes: list[Scope], managed_names: set[str], reserved_names: set[str]) -> None:
        self.files = {scope.id: _load(scope) for scope in scopes}
        self.store = self.files[CREW_SCOPE_ID]
        self.shared = [f for f in self.files.values() if f.scope.kind != KIND_CREW]
        self.agent, self.agent_known = _read_agent_servers()
        self.managed = managed_names  # managed by a plugin now: the rebuild re-adds them
        self.reserved = reserved_names | managed_names  # may never be written into a shared file

    # -- looking things up --
    def agent_entries(self, name: str) -> list[dict[str, Any]]:
        alias = mcp_server_alias(name)
        return [v for k, v in self.agent.items()
                if isinstance(k, str) and isinstance(v, dict) and (k == name or mcp_server_alias(k) == alias)]

    def find_spec(self, name: str) -> dict[str, Any] | None:
        """The server's launch spec from wherever it is declared, ``disabled`` dropped.

        The scope files come first (the crew store, the Kiro global, seam
        scopes): they hold what the user wrote, where the agent file may hold a
        fallback the rebuild adopted. The agent file is last, for servers that
        live only there (``kiro-cli mcp add --agent kirocrew``).
        """
        for file in [self.store, *self.shared]:
            for _, entry in file.entries(name):
                if _has_launch(entry):
                    return without(entry, ("disabled",))
        for entry in self.agent_entries(name):
            if _has_launch(entry):
                return without(entry, ("disabled",))
        return None

    def effective(self, name: str) -> bool:
        """kirocrew sessions see ``name`` now: rendered, and muted neither there nor in the store."""
        entries = self.agent_entries(name)
        if not entries or any(is_muted(e) for e in entries):
            return False
        return not any(is_muted(e) for _, e in self.store.entries(name))

    def store_key(self, name: str) -> str:
        """The key a new crew-store entry takes: the raw key a shared scope uses, else ``name``.

        Matching the shared key keeps the store's preference on the very entry
        the rebuild merges it onto.
        """
        for file in self.shared:
            for key, _ in file.entries(name):
                return key
        return name


def without(entry: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in entry.items() if k not in keys}


def _needed_files(change: Change, batch: Batch) -> list[_ScopeFile]:
    """The scope files this change may write; all must be usable or the change is refused."""
    if change.uninstall:
        return list(batch.files.values())
    needed = [batch.files[sid] for sid in change.scopes if sid != EFFECTIVE_KEY]
    removes = any(not wanted for sid, wanted in change.scopes.items() if sid != EFFECTIVE_KEY)
    if EFFECTIVE_KEY in change.scopes or change.tool_overrides or removes:
        needed.append(batch.store)  # a removal may have to preserve the spec there
    return needed


def _check(change: Change, batch: Batch, result: ChangeResult) -> bool:
    """Refuse the change (nothing of it is written) when its name or its files cannot be trusted."""
    problem = name_problem(change.name)
    if problem is not None:
        result.fail("invalid_name", f"invalid name: {problem}")
        return False
    for file in _needed_files(change, batch):
        if not file.usable:
            result.fail(file.code, f"the {file.scope.label} MCP scope cannot be used: {file.problem()}")
            return False
    names = {change.name, mcp_server_alias(change.name)}
    if names & batch.managed and change.uninstall:
        result.fail("managed_server", f"{change.name} is managed by a kirocrew plugin and cannot be "
                                      "uninstalled; set \"kirocrew\": false to switch it off")
        return False
    if names & batch.reserved and any(wanted for sid, wanted in change.scopes.items() if sid != EFFECTIVE_KEY):
        result.fail("managed_server", f"{change.name} is managed by a kirocrew plugin and must never be "
                                      "written into a shared MCP file")
        return False
    return True


# -- the four phases --------------------------------------------------------------------


def _uninstall(change: Change, batch: Batch, result: ChangeResult) -> None:
    for file in batch.files.values():
        keys = file.keys(change.name)
        if keys:
            servers = file.edit()
            for key in keys:
                del servers[key]
        result.actions[file.scope.id] = REMOVED if keys else NOOP


def _enable_entries(file: _ScopeFile, name: str) -> bool:
    """Clear a mute on every entry of ``name``; True if one was muted."""
    muted = [key for key, entry in file.entries(name) if is_muted(entry)]
    if muted:
        servers = file.edit()
        for key in muted:
            servers[key].pop("disabled", None)
    return bool(muted)


def _add(change: Change, batch: Batch, spec: dict[str, Any] | None, result: ChangeResult) -> None:
    for sid, wanted in change.scopes.items():
        if not wanted or sid == EFFECTIVE_KEY:
            continue
        file = batch.files[sid]
        if file.keys(change.name):
            result.actions[sid] = ENABLED if _enable_entries(file, change.name) else NOOP
        elif spec is None:
            result.actions[sid] = MISSING_SPEC
            result.fail(MISSING_SPEC, f"no scope declares {change.name}, so there is no spec to copy")
        else:
            file.edit()[change.name] = without(spec, NOT_SHARED)
            result.actions[sid] = ADDED
    if change.scopes.get(EFFECTIVE_KEY) is True:
        store = batch.store
        if store.keys(change.name):
            action = ENABLED if _enable_entries(store, change.name) else NOOP
        elif batch.effective(change.name) or any(f.declares(change.name) for f in batch.shared):
            action = NOOP
        elif spec is not None:
            store.edit()[change.name] = copy.deepcopy(spec)
            action = ADDED
        else:
            action = MISSING_SPEC
            result.fail(MISSING_SPEC, f"no scope declares {change.name}, so there is no spec to copy")
        if action != MISSING_SPEC and any(is_muted(e) for f in batch.shared for _, e in f.entries(change.name)):
            action = DISABLED_IN_SHARED  # tightest wins in the rebuild: that file's owner must switch it on
        result.actions[EFFECTIVE_KEY] = action


def _preserve(change: Change, batch: Batch, spec: dict[str, Any] | None, result: ChangeResult) -> None:
    """Before the last shared declaration goes, make sure the crew store can launch the server.

    It applies when kirocrew keeps the server, and also when the crew store
    holds preferences for it (a disable, tool overrides): those promise the
    server can be switched back on, which needs a launch spec to survive.
    A managed server is never copied: its launch comes from its plugin.
    """
    removing = {sid for sid, wanted in change.scopes.items() if sid != EFFECTIVE_KEY and not wanted}
    if not any(batch.files[sid].declares(change.name) for sid in removing):
        return
    if {change.name, mcp_server_alias(change.name)} & batch.reserved or spec is None:
        return
    if batch.store.declares(change.name):
        return
    if any(f.declares(change.name) for f in batch.shared if f.scope.id not in removing):
        return
    entries = batch.store.entries(change.name)
    if not entries and not change.scopes.get(EFFECTIVE_KEY, batch.effective(change.name)):
        return  # kirocrew neither shows it nor keeps anything for it: a removal is a removal
    servers = batch.store.edit()
    if entries:
        for key, entry in entries:  # keep the store's preferences, add the launch spec under them
            servers[key] = {**without(spec, ("disabledTools", "autoApprove")), **entry}
    else:
        servers[change.name] = copy.deepcopy(spec)
    result.actions[EFFECTIVE_KEY] = PRESERVED


def _remove(change: Change, batch: Batch, spec: dict[str, Any] | None, result: ChangeResult) -> None:
    _preserve(change, batch, spec, result)
    for sid, wanted in change.scopes.items():
        if wanted or sid == EFFECTIVE_KEY:
            continue
        file = batch.files[sid]
        keys = file.keys(change.name)
        if keys:
            servers = file.edit()
            for key in keys:
                del servers[key]
        result.actions[sid] = REMOVED if keys else NOOP
    if change.scopes.get(EFFECTIVE_KEY) is False:
        result.actions[EFFECTIVE_KEY] = _disable_in_store(change.name, batch, spec)


def _store_entries_for_prefs(name: str, batch: Batch, spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The crew-store entries a preference goes on, creating one when there is none.

    A new entry is a preference-only stub when a shared scope still declares
    the server (so the user's file keeps supplying the launch spec), else a
    copy of the spec. Nothing is created for a server declared nowhere.
    """
    entries = batch.store.entries(name)
    if entries:
        batch.store.edit()
        return [entry for _, entry in entries]
    if any(f.declares(name) for f in batch.shared):
        entry: dict[str, Any] = {}
    elif spec is not None:
        entry = copy.deepcopy(spec)
    else:
        return []
    batch.store.edit()[batch.store_key(name)] = entry
    return [entry]


def _disable_in_store(name: str, batch: Batch, spec: dict[str, Any] | None) -> str:
    existing = batch.store.entries(name)
    if existing and all(is_muted(e) for _, e in existing):
        return NOOP
    entries = _store_entries_for_prefs(name, batch, spec)
    if not entries:
        return NOOP
    for entry in entries:
        entry["disabled"] = True
    return DISABLED


def _effective_disabled_tools(name: str, batch: Batch) -> list[str]:
    """``disabledTools`` as discovery reads it: the first scope holding the key wins, then the agent file."""
    for file in [batch.store, *batch.shared]:
        for _, entry in file.entries(name):
            if "disabledTools" in entry:
                value = entry["disabledTools"]
                return [t for t in value if isinstance(t, str)] if isinstance(value, list) else []
    for entry in batch.agent_entries(name):
        value = entry.get("disabledTools")
        if isinstance(value, list):
            return [t for t in value if isinstance(t, str)]
    return []


def _override_tools(change: Change, batch: Batch, spec: dict[str, Any] | None, result: ChangeResult) -> None:
    wanted: dict[str, bool] = {}
    for tool, enabled in change.tool_overrides.items():
        if TOOL_PATTERN.fullmatch(tool):
            wanted[tool] = enabled
        else:
            result.tools_rejected.append(tool)
    if not wanted:
        return
    current = _effective_disabled_tools(change.name, batch)
    updated = list(current)
    for tool, enabled in wanted.items():
        if not enabled and tool not in updated:
            updated.append(tool)
            result.tools[tool] = DISABLED
        elif enabled and tool in updated:
            updated.remove(tool)
            result.tools[tool] = ENABLED
    if not result.tools:
        return
    entries = _store_entries_for_prefs(change.name, batch, spec)
    if not entries:
        result.tools.clear()
        result.fail(MISSING_SPEC, f"no scope declares {change.name}, so there is nothing to set tools on")
        return
    for entry in entries:
        entry["disabledTools"] = list(updated)


# -- the whole apply -------------------------------------------------------------------


def audit_event(event: str, actor: str, warnings: list[str], **fields: Any) -> None:
    from kirocrew_core import audit

    try:
        audit.record(event, actor=actor, outcome=fields.pop("outcome", "ok"), **fields)
    except Exception as exc:  # noqa: BLE001 - the SEL being unavailable is reported, never a half-applied batch
        warnings.append(f"could not record {event} in the security event log: {exc}")


def shown(name: str) -> str:
    """A name as the SEL may record it: a hostile one is cut short and kept printable."""
    return name[:MAX_NAME_CHARS].encode("unicode_escape").decode("ascii")


def apply_changes(
    payload: Any, *, pm: KirocrewPluginManager | None = None, actor: str = "owner"
) -> ApplyOutcome:
    """Apply a change list (see the module docstring) and rebuild the agent file once.

    Raises :class:`BadInputError` for a malformed request (nothing is read or
    written). Everything else is reported in the outcome: per-change results
    with stable codes, the rebuild's result, and warnings.
    """
    from kirocrew_core.plugins import get_plugin_manager

    from kirocrew_mcp import managed
    from kirocrew_mcp.cleanup import reserved_managed_names
    from kirocrew_mcp.render import remove_then_rebuild

    manager = pm if pm is not None else get_plugin_manager()
    scopes = all_scopes(manager)
    changes = parse_changes(payload, [s.id for s in scopes if s.kind != KIND_CREW])
    results = [ChangeResult(c.index, c.name) for c in changes]
    warnings: list[str] = []
    rebuild: dict[str, Any] = {"ok": True, "ran": False}
    if not changes:
        return ApplyOutcome(results, rebuild, warnings)
    try:
        managed_names = set(managed.managed_servers(manager))
    except KirocrewError as exc:
        managed_names = set()
        warnings.append(str(exc))

    with named_lock(LOCK_NAME):
        batch = Batch(scopes, managed_names, reserved_managed_names(manager))
        accepted: list[tuple[Change, ChangeResult]] = []
        for change, result in zip(changes, results, strict=True):
            if _check(change, batch, result):
                accepted.append((change, result))
            elif result.code == "invalid_name":
                audit_event(AUDIT_REJECTED_NAME, actor, warnings, outcome="denied", name=shown(change.name))
        # Resolved once, before any file changes, so every phase copies the same spec.
        specs = {c.index: batch.find_spec(c.name) for c, _ in accepted}
        uninstalls = [(c, r) for c, r in accepted if c.uninstall]
        edits = [(c, r) for c, r in accepted if not c.uninstall]
        for change, result in uninstalls:
            _uninstall(change, batch, result)
        for change, result in edits:
            _add(change, batch, specs[change.index], result)
        for change, result in edits:
            _remove(change, batch, specs[change.index], result)
        for change, result in edits:
            if change.tool_overrides:
                _override_tools(change, batch, specs[change.index], result)

        written = flush(batch, accepted, warnings)
        if accepted:
            dropped = [c.name for c, _ in uninstalls] if written and batch.agent_known else []
            refresh = remove_then_rebuild(dropped, pm=manager)
            rebuild = rebuild_result(refresh)
            if written:
                for change, result in uninstalls:
                    if not batch.agent_known:
                        result.actions["agent"] = UNREADABLE
                    else:
                        result.actions["agent"] = REMOVED if refresh.removed[change.name] else NOOP

        for change, result in accepted:
            if result.tools_rejected:
                audit_event(AUDIT_REJECTED_TOOL, actor, warnings, outcome="denied", server=change.name,
                       tools=[shown(t) for t in result.tools_rejected])
            event = AUDIT_UNINSTALL if change.uninstall else AUDIT_SCOPE_APPLY
            audit_event(event, actor, warnings, outcome="ok" if result.ok else "error", server=change.name,
                   actions=result.actions, tools=result.tools, code=result.code or None)
    return ApplyOutcome(results, rebuild, warnings)


def flush(batch: Batch, accepted: list[tuple[Change, ChangeResult]], warnings: list[str]) -> bool:
    """Write every changed file: the crew store first, so a preserved spec lands before its source goes.

    A failed store write stops the shared writes (nothing is lost); a failed
    shared write leaves the store's additions, which are harmless.
    """
    order = [batch.store, *batch.shared]
    for file in order:
        if not file.changed:
            continue
        try:
            assert file.document is not None
            write_scope_document(file.scope, file.document)
        except OSError as exc:
            message = f"could not write {file.scope.path}: {exc.strerror or exc}"
            warnings.append(message)
            for change, result in accepted:
                touched = change.uninstall or file.scope.id in result.actions or (
                    file is batch.store and (result.tools or EFFECTIVE_KEY in result.actions))
                if touched:
                    result.fail("scope_write_failed", message)
            if file is batch.store:
                return False
    return True


def rebuild_result(refresh: AgentRefresh) -> dict[str, Any]:
    if refresh.error is not None:
        return {"ok": False, "ran": True, "error": refresh.error.message, "code": refresh.error.code}
    assert refresh.report is not None
    report = refresh.report
    return {"ok": True, "ran": True, "error": None, "written": report.written, "warnings": list(report.warnings)}
