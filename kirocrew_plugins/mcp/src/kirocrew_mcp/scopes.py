"""The MCP scopes: which files declare the servers kiro-cli sessions may see.

Stable API (imported by the render, discovery, probing and apply):

- ``Scope(id, label, path, kind)``: one scope file. ``kind`` is
  :data:`KIND_CREW` (``<crew home>/mcp.json``, id ``"kirocrew"``),
  :data:`KIND_KIRO` (``~/.kiro/settings/mcp.json``, id ``"kiro"``) or
  :data:`KIND_SEAM` (a provider global a plugin contributes through
  ``extra_mcp_scopes()``; its id is the plugin's ``McpScope.id``, e.g. ``"cc"``).
- ``crew_scope()``, ``kiro_scope()``, ``seam_scopes(pm=None)`` and
  ``all_scopes(pm=None)``: read at call time (paths follow the environment,
  seam scopes follow the installed plugins). ``all_scopes`` is in priority
  order, highest first: crew store, Kiro global, then seam scopes sorted by
  plugin name; de-duplicated by id, the first keeps it.
- ``mcp_document_problem(document) -> str``: why a parsed MCP file (a scope
  or the rendered agent) cannot be used, ``""`` when it can. The one check
  behind every reader: the rebuild, discovery and the API, apply, and doctor.
- ``read_scope_servers(scope) -> ScopeRead``: the scope's ``mcpServers`` with
  an honest state. Absent or empty file, or a document without
  ``mcpServers``: ``servers == {}`` and ``ok``. Malformed JSON, a top level or
  ``mcpServers`` that is not an object, or an unreadable file: ``ok`` is False,
  ``servers == {}`` and ``error`` says why; a caller must then treat the scope
  as unknowable (skip it, never rewrite it), not as empty.
- ``write_scope_document(scope, document) -> bool``: the one writer of a
  scope file (apply, cleanup and disconnect all use it). One formatting
  policy: an existing file is re-serialized in the indentation, escaping and
  final newline it was written with (:func:`json_style`), so a file in the
  usual ``json.dumps(indent=N)`` shape changes only by the edit; a new or
  empty file gets :func:`kirocrew_core.jsonfile.dumps`. The crew store is
  written 0600 (it may hold credentials in ``env``); a new shared file gets
  0600 too, an existing one keeps its mode. Returns whether the old file
  round-tripped in its detected style (``formatting_preserved``).

Scopes are symmetric on purpose: the rebuild, discovery and apply/uninstall all
take the list from here, so a server the dashboard shows is always one it can
remove, and one the rebuild merges is always one discovery shows.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.errors import KirocrewError
from kirocrew_core.jsonfile import ReadState, dumps, read_json, write_bytes_atomic

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

KIND_CREW = "crew"
KIND_KIRO = "kiro"
KIND_SEAM = "seam"

CREW_SCOPE_ID = "kirocrew"
KIRO_SCOPE_ID = "kiro"


@dataclass(frozen=True)
class Scope:
    """One MCP scope file; see the module docstring for ids and kinds."""

    id: str
    label: str
    path: Path
    kind: str


@dataclass(frozen=True)
class ScopeRead:
    """The servers one scope declares, and whether the file could be read at all.

    ``servers`` holds only entries that are JSON objects under string keys; any
    other entry is named in ``skipped`` (kiro-cli would refuse it too).
    """

    state: ReadState
    servers: dict[str, dict[str, Any]]
    error: str = ""
    scope: Scope | None = None
    line: int | None = None
    skipped: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when the content is known (absent, empty or a usable document)."""
        return self.state in (ReadState.ABSENT, ReadState.EMPTY, ReadState.DOCUMENT)

    def problem(self) -> str:
        """One sentence for a warning or doctor line; empty when the read is ok."""
        if self.ok:
            return ""
        where = self.scope.path if self.scope is not None else "scope file"
        if self.line:
            where = f"{where}:{self.line}"
        return f"{where}: {self.state.value}: {self.error}"

    @property
    def code(self) -> str:
        """The stable code for a read that is not ok (apply and the rebuild refuse with it)."""
        return "scope_file_unreadable" if self.state is ReadState.UNREADABLE else "scope_file_malformed"


def unusable_scopes_error(reads: list[ScopeRead]) -> KirocrewError:
    """One error naming every scope file that could not be used; exit 2 when one is malformed.

    A malformed file is the user's to fix (bad input, exit 2); an unreadable
    one (permissions, a FIFO, a directory) is a failed operation (exit 1).
    """
    malformed = any(read.state is ReadState.MALFORMED for read in reads)
    problems = "; ".join(read.problem() for read in reads)
    return KirocrewError(
        f"{problems} (left untouched; fix or move the file, then rebuild)",
        code="scope_file_malformed" if malformed else "scope_file_unreadable",
        exit_code=2 if malformed else 1,
    )


def crew_scope() -> Scope:
    """kirocrew's own store, ``<crew home>/mcp.json``: the highest-priority scope."""
    return Scope(CREW_SCOPE_ID, "kirocrew", home.crew_mcp_file(), KIND_CREW)


def kiro_scope() -> Scope:
    """The user's Kiro global, ``~/.kiro/settings/mcp.json`` (read, never written by a rebuild)."""
    return Scope(KIRO_SCOPE_ID, "Kiro", home.kiro_global_mcp_file(), KIND_KIRO)


def seam_scopes(pm: KirocrewPluginManager | None = None) -> list[Scope]:
    """Provider-global scopes plugins contribute, in hook call order, ids de-duplicated.

    A contribution that is not an ``McpScope`` is skipped with a warning; an id
    already taken (by a core scope or an earlier plugin) keeps the first.
    """
    from kirocrew_core.contributions import McpScope, flatten
    from kirocrew_core.plugins import PluginWarning, collect, get_plugin_manager

    manager = pm if pm is not None else get_plugin_manager()
    taken = {CREW_SCOPE_ID, KIRO_SCOPE_ID}
    out: list[Scope] = []
    for contribution in flatten(collect(manager, "extra_mcp_scopes")):
        value = contribution.value
        if not isinstance(value, McpScope) or not isinstance(value.id, str) or not value.id:
            warnings.warn(
                f"plugin {contribution.plugin!r} returned {value!r} from extra_mcp_scopes(); "
                "expected an McpScope with an id",
                PluginWarning,
                stacklevel=2,
            )
            continue
        if value.id in taken:
            continue
        taken.add(value.id)
        out.append(Scope(value.id, value.label or value.id, Path(value.global_json), KIND_SEAM))
    return out


def all_scopes(pm: KirocrewPluginManager | None = None) -> list[Scope]:
    """Every scope, highest priority first: crew store, Kiro global, seam scopes."""
    return [crew_scope(), kiro_scope(), *seam_scopes(pm)]


def mcp_document_problem(document: Any) -> str:
    """Why a parsed MCP file cannot be used (``""`` when it can).

    It must be a JSON object whose ``mcpServers``, when present and not null,
    is an object too: kiro-cli reads nothing from a list of servers, and a
    writer that took it for "no servers" would overwrite the user's entries.
    """
    if not isinstance(document, dict):
        return "top level is not a JSON object"
    servers = document.get("mcpServers")
    if servers is not None and not isinstance(servers, dict):
        return "mcpServers is not a JSON object"
    return ""


def read_scope_servers(scope: Scope) -> ScopeRead:
    """Read ``scope``'s ``mcpServers`` without ever mistaking "unknowable" for "empty"."""
    read = read_json(scope.path)
    if not read.known:
        return ScopeRead(read.state, {}, read.error, scope, read.line)
    if read.state is not ReadState.DOCUMENT:
        return ScopeRead(read.state, {}, "", scope)
    document = read.document
    problem = mcp_document_problem(document)
    if problem:
        return ScopeRead(ReadState.MALFORMED, {}, problem, scope)
    raw = document.get("mcpServers") or {}
    servers: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for name, entry in raw.items():
        if isinstance(name, str) and name and isinstance(entry, dict):
            servers[name] = entry
        else:
            skipped.append(str(name))
    return ScopeRead(ReadState.DOCUMENT, servers, "", scope, None, tuple(skipped))


@dataclass(frozen=True)
class JsonStyle:
    """The ``json.dumps`` options a file was most likely written with."""

    indent: int | str | None
    ensure_ascii: bool
    newline: bool

    def dumps(self, document: Any) -> str:
        text = json.dumps(document, indent=self.indent, ensure_ascii=self.ensure_ascii)
        return text + "\n" if self.newline else text


def json_style(text: str) -> JsonStyle:
    """The style of ``text``: its first indented line's lead, ``\\u`` escapes, final newline.

    Escaping is assumed only where the text shows it (ASCII with a ``\\u``
    escape): for ASCII text without one both choices write the same bytes, and
    a value added later keeps its characters, as :func:`kirocrew_core.jsonfile.dumps` does.
    """
    indent: int | str | None = None
    for line in text.splitlines()[1:]:
        body = line.lstrip(" \t")
        if body and len(body) < len(line):
            lead = line[: len(line) - len(body)]
            indent = "\t" if lead.startswith("\t") else len(lead)
            break
    return JsonStyle(indent, ensure_ascii=text.isascii() and "\\u" in text, newline=text.endswith("\n"))


def _original_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return ""


def write_scope_document(scope: Scope, document: dict[str, Any]) -> bool:
    """Replace ``scope``'s file with ``document`` atomically (see the module docstring).

    Returns whether the file it replaces was exactly its own style's output, so
    the edit is the only change. Raises ``OSError`` when the write fails (the
    old file stays).
    """
    original = _original_text(scope.path)
    if original.strip():
        style = json_style(original)
        try:
            preserved = style.dumps(json.loads(original)) == original
        except json.JSONDecodeError:
            preserved = False
        data = style.dumps(document)
    else:
        preserved, data = False, dumps(document)
    if scope.kind == KIND_CREW:
        home.ensure_crew_home()
        write_bytes_atomic(scope.path, data.encode("utf-8"), secret=True)
    else:
        write_bytes_atomic(scope.path, data.encode("utf-8"), mode=0o600)
    return preserved
