"""A tool call as the subjects a decision is about.

kiro-cli names the tool of a call in ``_meta.kiro.toolName`` (and its MCP server in
``_meta.kiro.mcpServerName``) and sends the call's input as ``rawInput``; the gate decides
from those, never from the title (kiro writes arguments there). One call can be several
subjects, and every one must be allowed:

- a **shell** call: each simple command the line runs; each file a redirection writes or
  reads (as a ``write`` or ``read`` of that path); each part the parser could not reduce;
  and, for the rules that *restrict* file access only, each literal argument that names an
  existing path (``cat ~/.kiro/crew/gateway.token`` is a read of that file; ``rm x`` a write).
  A directory named to a command that changes files (``rm -rf ~/.kiro``, ``mv``, ``chmod -R``,
  ``cp … dir``) or that reads a tree (``grep -r``, ``rg``, ``find … -exec``) *reaches* what is
  below it, as a ``glob``/``grep`` rooted there does. After a ``cd`` in the line, a relative
  path counts from the workspace and from where the ``cd`` went;
- a **file tool** (``read``, ``write``, ``glob``, ``grep``): each path in its input
  (``path``, ``paths``, ``file_path``, ``operations[].path`` …), or an unknown path when it
  names none (``glob``/``grep`` default to the workspace);
- a **fetch** (``web_fetch``): the URL's host;
- anything else, an MCP tool included: the call itself, and each path its input names.
"""

from __future__ import annotations

import glob as globbing
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from kirocrew_core.gate.paths import PathValue, host_of
from kirocrew_core.gate.rules import canonical_tool

SHELL_TOOLS = frozenset({"shell"})
FILE_READ_TOOLS = frozenset({"read", "glob", "grep"})
FILE_WRITE_TOOLS = frozenset({"write"})
SEARCH_TOOLS = frozenset({"glob", "grep"})
FETCH_TOOLS = frozenset({"web_fetch"})

#: Commands that change the files they name: their path arguments are writes, not reads.
MUTATORS = frozenset({"rm", "rmdir", "unlink", "mv", "cp", "tee", "truncate", "dd", "chmod", "chown", "chgrp", "ln",
                      "install", "shred", "touch", "mkdir", "sed", "perl", "patch", "rsync", "scp", "tar", "unzip",
                      "zip", "gzip", "gunzip", "split", "csplit", "sort"})

#: Commands that read every file below a directory they are given, and those that do with -r/-R/--recursive.
TREE_READERS = frozenset({"rg", "ag", "ack", "ack-grep"})
RECURSIVE_READERS = frozenset({"grep", "egrep", "fgrep", "zgrep", "diff"})

_PATH_KEYS = ("path", "paths", "file_path", "filePath", "file", "files", "dir_path", "directory", "dir",
              "target", "target_file", "source", "destination")
MAX_PATHS = 64
MAX_ARGUMENT_PATHS = 256
MAX_GLOB_MATCHES = 64
MAX_CD_TARGETS = 16


@dataclass(frozen=True)
class ToolCall:
    """What kiro asked to run: its tool name, the MCP server (None for a built-in) and its input."""

    tool: str
    server: str | None = None
    input: Any = None

    @classmethod
    def from_ref(cls, ref: str, call_input: Any = None) -> ToolCall:
        """The call of ``ref`` (a built-in's name, or ``@server/tool``) with ``call_input``; else ``bad_tool``.

        How ``kirocrew policy check --tool`` and ``POST /api/policy/check`` name the tool.
        """
        from kirocrew_core.errors import BadInputError

        text = ref.strip() if isinstance(ref, str) else ""
        if text.startswith("@"):
            server, slash, name = text[1:].partition("/")
            if not server or not slash or not name:
                raise BadInputError(f"an MCP tool is @server/tool, got {ref!r}", code="bad_tool")
            return cls(name, server, call_input)
        if not text or "/" in text:
            raise BadInputError(f"not a tool name: {ref!r}", code="bad_tool")
        return cls(text, None, call_input)

    @property
    def name(self) -> str:
        """The tool's name as rules see it: a built-in's 2.x name, an MCP tool's own."""
        return canonical_tool(self.tool) if self.server is None else self.tool

    @property
    def ref(self) -> str:
        """``@server/tool`` for an MCP tool, the built-in's name otherwise."""
        return f"@{self.server}/{self.tool}" if self.server else self.name

    def fingerprint(self) -> str:
        """A short hash of the call (tool and input), for the audit log: never the input itself."""
        body = json.dumps({"tool": self.ref, "input": self.input}, sort_keys=True, default=str, ensure_ascii=False)
        return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class Context:
    """Where the call runs: the run's authority, its agent, its workspace (absolute) and the home directory."""

    authority: str = "unrestricted"
    agent: str | None = "kirocrew"
    workspace: str = ""
    home: str = ""


Kind = Literal["call", "command", "path", "domain"]


@dataclass(frozen=True)
class Subject:
    """One thing a decision is about. ``restrict_only``: only ``deny``/``ask`` rules count for it."""

    tool: str
    server: str | None
    kind: Kind
    label: str
    command: Any = None  # a shell.SimpleCommand for kind "command" (None: the part could not be reduced)
    path: PathValue | None = None
    host: str | None = None
    unknown: str | None = None  # why this part could not be reduced: never allowed without asking
    restrict_only: bool = False
    #: The call reads or changes everything below ``path`` (a search, ``rm -r dir``): a deny/ask rule about a
    #: path below it applies too.
    reaches: bool = False

    @property
    def ref(self) -> str:
        return f"@{self.server}/{self.tool}" if self.server else self.tool


def subjects(call: ToolCall, ctx: Context) -> list[Subject]:
    """Every subject of ``call`` (see the module docstring), in the order they appear."""
    name, server = call.name, call.server
    if server is None and name in SHELL_TOOLS:
        return list(_shell_subjects(call, ctx))
    if server is None and name in FETCH_TOOLS:
        url = _string(call.input, "url")
        host = host_of(url) if url else None
        label = f"{name} {host or url or '<no url>'}"
        return [Subject(name, None, "domain", label, host=host,
                        unknown=None if host else "the call names no URL kirocrew can read")]
    paths = _input_paths(call.input)
    if server is None and name in (FILE_READ_TOOLS | FILE_WRITE_TOOLS):
        if not paths and name in SEARCH_TOOLS:
            paths = [ctx.workspace or "."]
        if not paths:
            return [Subject(name, None, "path", f"{name} <unknown path>", path=PathValue.unknown(),
                            unknown="the call names no path kirocrew can read")]
        return [Subject(name, None, "path", f"{name} {p}", path=PathValue.of(p, ctx.workspace),
                        reaches=name in SEARCH_TOOLS) for p in paths]
    base = Subject(name, server, "call", call.ref)
    if not paths:
        return [base]
    return [base, *(Subject(name, server, "path", f"{call.ref} {p}", path=PathValue.of(p, ctx.workspace))
                    for p in paths)]


def _shell_subjects(call: ToolCall, ctx: Context) -> Iterator[Subject]:
    from kirocrew_core.gate import shell

    command = call.input if isinstance(call.input, str) else _string(call.input, "command")
    if command is None:
        yield Subject("shell", None, "command", "shell <no command>", unknown="the call carries no command")
        return
    reduction = shell.reduce(command, cwd=ctx.workspace, home=ctx.home)
    for simple in reduction.commands:
        yield Subject("shell", None, "command", simple.text, command=simple)
    for why in reduction.unknown:
        yield Subject("shell", None, "command", command.strip()[:200], unknown=why)
    elsewhere = _cd_targets(reduction, ctx)
    for redirect in reduction.redirects:
        tool = "write" if redirect.write else "read"
        value = redirect.target.value
        if value is None:
            yield Subject(tool, None, "path", f"{tool} <unknown path> (a redirection)", path=PathValue.unknown(),
                          unknown="a redirection to a file not known before it runs")
            continue
        yield Subject(tool, None, "path", f"{tool} {value} (a redirection)", path=PathValue.of(value, ctx.workspace))
        for where in elsewhere if not os.path.isabs(value) else ():
            yield Subject(tool, None, "path", f"{tool} {value} (a redirection after cd {where})",
                          path=PathValue.of(value, where), restrict_only=True)
    yield from _argument_subjects(reduction, ctx, elsewhere)


def _cd_targets(reduction: Any, ctx: Context) -> list[str]:
    """The directories a ``cd``/``pushd`` in the line may move to: relative paths are read from there too.

    Which commands run after the ``cd`` (and whether it succeeds) is not known, so a relative
    path counts from the workspace and from each of these, for the rules that restrict only.
    A ``cd`` to a place not known before the run adds nothing.
    """
    targets: list[str] = []
    for simple in reduction.commands:
        if simple.name not in ("cd", "pushd"):
            continue
        operands = [w.value for w in simple.argv[1:] if w.value is None or not w.value.startswith("-")]
        target = operands[0] if operands else (ctx.home if simple.name == "cd" else None)
        if not target:
            continue
        for base in [ctx.workspace, *targets]:
            place = os.path.normpath(os.path.join(base, target))
            if os.path.isabs(place) and place != ctx.workspace and place not in targets:
                targets.append(place)
        if len(targets) >= MAX_CD_TARGETS:
            break
    return targets[:MAX_CD_TARGETS]


def _argument_subjects(reduction: Any, ctx: Context, elsewhere: list[str]) -> Iterator[Subject]:
    """Literal arguments that name existing paths, as reads (writes for :data:`MUTATORS`): restrict-only."""
    seen = 0
    for simple in reduction.commands:
        tool = "write" if simple.name in MUTATORS else "read"
        walks = tool == "write" or _reads_a_tree(simple)
        for word in simple.argv[1:]:
            value = word.value
            if value is None or not value or (value.startswith("-") and "=" not in value):
                continue
            if value.startswith("-"):  # --output=/path
                value = value.partition("=")[2]
            for cwd in [ctx.workspace, *(elsewhere if not os.path.isabs(value) else ())]:
                for path in _existing(value, glob=word.glob, cwd=cwd, creating=tool == "write"):
                    seen += 1
                    if seen > MAX_ARGUMENT_PATHS:
                        return
                    target = PathValue.of(path, cwd)
                    where = "" if cwd == ctx.workspace else f" after cd {cwd}"
                    yield Subject(tool, None, "path", f"{tool} {path} (an argument of {simple.name}{where})",
                                  path=target, restrict_only=True,
                                  reaches=walks and os.path.isdir(target.literal or ""))


def _reads_a_tree(command: Any) -> bool:
    """Whether ``command`` reads the files below a directory it is given (``grep -r``, ``rg``, ``find -exec``)."""
    name = command.name
    words = [w.value or "" for w in command.argv[1:]]
    if name in TREE_READERS:
        return True
    if name == "find":
        return any(w in ("-exec", "-execdir", "-ok", "-okdir") for w in words)
    if name in RECURSIVE_READERS:
        return any(w in ("--recursive", "--dereference-recursive", "--directories=recurse")
                   or (w.startswith("-") and not w.startswith("--") and ("r" in w or "R" in w)) for w in words)
    return False


def _existing(value: str, *, glob: bool, cwd: str, creating: bool) -> list[str]:
    """The paths ``value`` names that exist (a glob expanded as the shell would, bounded); with ``creating``,
    also one that a command could create (its directory exists)."""
    target = value if os.path.isabs(value) or not cwd else os.path.join(cwd, value)
    if glob:
        try:
            return sorted(globbing.glob(target))[:MAX_GLOB_MATCHES]
        except (OSError, ValueError, RecursionError):
            return []
    if os.path.lexists(target) or (creating and os.path.isdir(os.path.dirname(target) or ".")):
        return [value]
    return []


def _string(value: Any, key: str) -> str | None:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, str) and found else None


def _input_paths(value: Any) -> list[str]:
    """Path-like strings under the usual keys of a tool's input, nested lists and objects included."""
    found: list[str] = []
    stack = [value]
    while stack and len(found) < MAX_PATHS:
        current = stack.pop()
        if isinstance(current, dict):
            for key, item in current.items():
                if key in _PATH_KEYS:
                    if isinstance(item, str) and item:
                        found.append(item)
                    elif isinstance(item, list):
                        found.extend(v for v in item if isinstance(v, str) and v)
                if isinstance(item, (dict, list)):
                    stack.append(item)
        elif isinstance(current, list):
            stack.extend(v for v in current if isinstance(v, (dict, list)))
    return list(dict.fromkeys(found))[:MAX_PATHS]
