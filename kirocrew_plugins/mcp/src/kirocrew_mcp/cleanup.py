"""Removing stale kirocrew-managed entries from provider globals (``kirocrew cli-setup``).

kirocrew's own servers (``kirocrew-core``, ``kirocrew-cron``,
``kirocrew-computer`` and whatever else a plugin manages) belong in the
rendered agent file only. An older install wrote some of them into
``~/.kiro/settings/mcp.json``, where every interactive kiro-cli and Kiro IDE
session then starts them with a stale command. This is the narrow repair:

- ``clean_stale_managed_mcp(*, pm=None, dry_run=False) -> CleanupReport``
  deletes exactly the names of :func:`reserved_managed_names` from the Kiro
  global and every seam scope, and nothing else. The crew store is kirocrew's
  own and is left alone (a managed name there holds the owner's preferences).
- A file with nothing to remove is not written at all. A file that is
  malformed or unreadable is skipped and reported, never rewritten.
- When something is removed, the file is written by
  :func:`kirocrew_mcp.scopes.write_scope_document`, in the indentation,
  escaping and final newline it was written with, so a file in the usual
  ``json.dumps(indent=N)`` shape changes only by the removed entries
  (``formatting_preserved`` says whether that held).

It runs only when the owner asks (``kirocrew cli-setup``), never on its own:
the provider globals are the user's files.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core.jsonfile import ReadState, read_json
from kirocrew_core.locks import named_lock

from kirocrew_mcp.scopes import KIND_CREW, Scope, all_scopes, mcp_document_problem, write_scope_document

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

LOCK_NAME = "crew-mcp"
AUDIT_EVENT = "mcp_stale_managed_purged"
#: The names kirocrew has always managed; stale in a provider global whether or not a plugin manages them now.
STALE_MANAGED_MCP_SERVERS = frozenset({"kirocrew-core", "kirocrew-cron", "kirocrew-computer"})


def reserved_managed_names(pm: KirocrewPluginManager | None = None) -> set[str]:
    """Every name that must never sit in a provider global.

    The historic managed names, every server a plugin manages now, and the
    names the last rebuild managed or retired (a gated-off server is still
    kirocrew's, and its stale copy must not launch in plain kiro-cli).
    """
    from kirocrew_core.errors import KirocrewError

    from kirocrew_mcp import managed
    from kirocrew_mcp.render import last_rebuild_state

    names = set(STALE_MANAGED_MCP_SERVERS)
    # A conflict between plugins: the names both claim are in the state or the constant.
    with contextlib.suppress(KirocrewError):
        names |= set(managed.managed_servers(pm))
    state = last_rebuild_state()
    for key in ("managed", "retired"):
        value = state.get(key)
        if isinstance(value, list):
            names |= {v for v in value if isinstance(v, str)}
    return names


@dataclass
class ScopeCleanup:
    """What happened to one provider global.

    ``state``: ``clean`` (nothing stale), ``cleaned`` (``removed`` deleted, or
    removable on a dry run), ``skipped`` (unreadable or malformed, untouched)
    or ``failed`` (the write failed; the atomic write left the old file).
    """

    scope: str
    label: str
    path: Path
    state: str
    removed: list[str] = field(default_factory=list)
    error: str = ""
    formatting_preserved: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "label": self.label,
            "path": str(self.path),
            "state": self.state,
            "removed": list(self.removed),
            "error": self.error,
            "formatting_preserved": self.formatting_preserved,
        }


@dataclass
class CleanupReport:
    scopes: list[ScopeCleanup]
    dry_run: bool = False

    @property
    def removed(self) -> dict[str, list[str]]:
        """Removed (or, on a dry run, removable) names by scope id."""
        return {s.scope: list(s.removed) for s in self.scopes if s.removed and s.state == "cleaned"}

    @property
    def ok(self) -> bool:
        """Every provider global could be checked and, where needed, written."""
        return all(s.state in ("clean", "cleaned") for s in self.scopes)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "dry_run": self.dry_run, "scopes": [s.as_dict() for s in self.scopes]}


def _clean_file(scope: Scope, names: set[str], dry_run: bool, result: ScopeCleanup) -> None:
    read = read_json(scope.path)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return
    if read.state is not ReadState.DOCUMENT:
        result.state = "skipped"
        where = f"line {read.line}: " if read.line else ""
        result.error = f"{read.state.value}: {where}{read.error}; left untouched"
        return
    problem = mcp_document_problem(read.document)
    if problem:
        result.state = "skipped"
        result.error = f"malformed: {problem}; left untouched"
        return
    document = read.document
    servers = document.get("mcpServers")
    if servers is None:
        return
    stale = [key for key in servers if key in names]
    if not stale:
        return
    result.removed = stale
    result.state = "cleaned"
    if dry_run:
        return
    for key in stale:
        del servers[key]
    try:
        result.formatting_preserved = write_scope_document(scope, document)
    except OSError as exc:
        result.state = "failed"
        result.error = f"could not write: {exc.strerror or exc}; left as it was"


def clean_stale_managed_mcp(*, pm: KirocrewPluginManager | None = None, dry_run: bool = False) -> CleanupReport:
    """Delete managed server names from every provider global; see the module docstring."""
    from kirocrew_core.plugins import get_plugin_manager

    manager = pm if pm is not None else get_plugin_manager()
    names = reserved_managed_names(manager)
    outcomes: list[ScopeCleanup] = []
    with named_lock(LOCK_NAME):
        for scope in all_scopes(manager):
            if scope.kind == KIND_CREW:
                continue
            result = ScopeCleanup(scope.id, scope.label, scope.path, "clean")
            _clean_file(scope, names, dry_run, result)
            outcomes.append(result)
        report = CleanupReport(outcomes, dry_run)
        if report.removed and not dry_run:
            from kirocrew_core import audit

            for outcome in outcomes:
                if outcome.removed and outcome.state == "cleaned":
                    audit.record(AUDIT_EVENT, actor="owner", outcome="ok", scope=outcome.scope,
                                 path=str(outcome.path), names=outcome.removed)
    return report
