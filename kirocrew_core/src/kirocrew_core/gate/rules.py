"""A policy rule: a decision for the tool calls it matches.

A rule names a **tool** and may narrow it by the call's input and by where the call runs::

    decision   "allow" | "ask" | "deny"
    tool       "shell", "write", "read", "web_fetch", ... (kiro's built-in names, globs allowed),
               "@server" (every tool of an MCP server), "@server/tool", "@builtin", or "*"
    command    shell command prefixes, word by word ("git status" covers "git status -s"; a word
               may be a glob: "npm run test:*")
    path       path globs for file tools ("src/**" relative to the workspace, "~/x", "/abs/**")
    domain     fetch domains ("example.com", "*.example.com" for its subdomains)
    authority, agent, workspace
               where the rule applies (an authority name; an agent name or glob; a directory
               and everything under it); absent means everywhere
    reason     what the model and the owner are told when the rule decides

A rule with ``command`` matches only shell commands, one with ``path`` only calls that carry a
path, one with ``domain`` only calls that carry a URL (a rule whose tool never carries its input
is refused: it would match nothing); within a rule the input fields are
alternatives (any command prefix, any path). Rules of four tiers meet in one decision:
``builtin`` (kirocrew protecting itself; ``deny``/``ask`` only, never weakened), ``owner``
(``policy.toml``), ``project`` (a workspace's ``.kiro/crew/policy.toml``; ``deny``/``ask``
only: a project may not loosen the owner's rules) and ``default`` (what applies when no
other rule matches).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kirocrew_core.errors import BadInputError

Decision = Literal["allow", "ask", "deny"]
DECISIONS: tuple[Decision, ...] = ("allow", "ask", "deny")
#: How strict a decision is: the strictest one of every matching rule wins.
SEVERITY: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}

Tier = Literal["builtin", "owner", "project", "default"]
TIERS: tuple[Tier, ...] = ("builtin", "owner", "project", "default")

#: The fields a rule in a policy file may have.
FIELDS = ("id", "decision", "tool", "command", "path", "domain", "authority", "agent", "workspace", "reason")
INPUT_FIELDS = ("command", "path", "domain")

MAX_ITEMS = 64
MAX_TEXT = 500
REASON_MAX = 500
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_TOOL = re.compile(r"^(\*|@builtin|@[^\s/@]+(/[^\s/@]+)?|[A-Za-z0-9_*?\[\]-]+)$")
_DOMAIN = re.compile(r"^(\*|(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*)$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

#: kiro-cli 1.x names of built-in tools, read as their 2.x names (a rule or a call may use either).
TOOL_ALIASES = {"execute_bash": "shell", "execute_cmd": "shell", "fs_write": "write", "fs_read": "read"}
_ALIASES_OF = {new: tuple(old for old, same in TOOL_ALIASES.items() if same == new) for new in TOOL_ALIASES.values()}


class PolicyError(BadInputError):
    """A rule or a policy file that cannot be used; ``field`` names what is wrong when one thing is."""

    code = "policy_invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.field = field


def canonical_tool(name: str) -> str:
    """A built-in tool's 2.x name (``fs_write`` → ``write``); anything else as given."""
    return TOOL_ALIASES.get(name, name)


def tool_names(name: str) -> tuple[str, ...]:
    """A built-in tool's names, its 2.x one first (``write`` → ``write``, ``fs_write``): what a glob may name."""
    return (name, *_ALIASES_OF.get(name, ()))


@dataclass(frozen=True)
class Rule:
    """One rule; ``tier`` and ``source`` say where it came from (``source`` is a file or ``built-in``)."""

    id: str
    decision: Decision
    tool: str
    commands: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    authority: str | None = None
    agent: str | None = None
    workspace: str | None = None
    reason: str = ""
    tier: Tier = "owner"
    source: str = ""
    #: For the built-in rules only: further tools the same rule covers (one protection, every file tool).
    also_tools: tuple[str, ...] = field(default=(), compare=False)

    @property
    def tools(self) -> tuple[str, ...]:
        return (self.tool, *self.also_tools)

    @property
    def has_input(self) -> bool:
        """True when the rule looks at the call's input (so it matches some calls of its tool and not others)."""
        return bool(self.commands or self.paths or self.domains)

    @property
    def scoped(self) -> bool:
        """True when the rule applies only to some authorities, agents or workspaces."""
        return self.authority is not None or self.agent is not None or self.workspace is not None

    def describe(self) -> str:
        """One line: ``deny shell rm`` / ``allow @github/list_issues (authority read_only)``."""
        parts = [self.decision, "|".join(self.tools)]
        for kind, inputs in (("command", self.commands), ("path", self.paths), ("domain", self.domains)):
            if inputs:
                shown = ", ".join(inputs[:3]) + (f" (+{len(inputs) - 3} more)" if len(inputs) > 3 else "")
                parts.append(f"{kind} {shown}")
        where = [f"{k} {v}" for k, v in (("authority", self.authority), ("agent", self.agent),
                                         ("workspace", self.workspace)) if v is not None]
        text = " ".join(parts)
        return f"{text} ({', '.join(where)})" if where else text

    def as_dict(self) -> dict[str, Any]:
        """The rule as JSON (CLI ``--json``, the API, the page)."""
        return {"id": self.id, "decision": self.decision, "tool": self.tool, "command": list(self.commands),
                "path": list(self.paths), "domain": list(self.domains), "authority": self.authority,
                "agent": self.agent, "workspace": self.workspace, "reason": self.reason, "tier": self.tier,
                "source": self.source, "description": self.describe()}

    def as_table(self) -> dict[str, Any]:
        """The rule as a ``[[rule]]`` table of ``policy.toml``: only the fields it sets."""
        table: dict[str, Any] = {"id": self.id, "decision": self.decision, "tool": self.tool}
        for key, values in (("command", self.commands), ("path", self.paths), ("domain", self.domains)):
            if values:
                table[key] = values[0] if len(values) == 1 else list(values)
        for key in ("authority", "agent", "workspace"):
            value = getattr(self, key)
            if value is not None:
                table[key] = value
        if self.reason:
            table["reason"] = self.reason
        return table


def _names_builtin(pattern: str, builtin: str) -> bool:
    """Whether the tool pattern ``pattern`` covers the built-in tool ``builtin`` (by any of its names)."""
    from fnmatch import fnmatchcase

    return pattern in ("*", "@builtin") or any(fnmatchcase(name, pattern) for name in tool_names(builtin))


def new_rule_id() -> str:
    """A fresh owner-rule id (``r-`` and 8 hex digits)."""
    return "r-" + secrets.token_hex(4)


def content_id(table: Mapping[str, Any]) -> str:
    """A stable id for a hand-written rule without one: ``h-`` and a hash of what it says."""
    body = json.dumps({k: table.get(k) for k in FIELDS if k != "id"}, sort_keys=True, default=str)
    return "h-" + hashlib.sha256(body.encode()).hexdigest()[:8]


def _text(value: Any, name: str, *, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PolicyError(f"{name} must be a non-empty string", field=name)
    if len(value) > limit or _CONTROL.search(value):
        raise PolicyError(f"{name} must be one line of at most {limit} characters", field=name)
    return value.strip()


def _items(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not values:
        raise PolicyError(f"{name} must be a string or a non-empty list of strings", field=name)
    if len(values) > MAX_ITEMS:
        raise PolicyError(f"{name} lists more than {MAX_ITEMS} items", field=name)
    return tuple(_text(v, name) for v in values)


def check_tool(pattern: str) -> str:
    """``pattern`` if it is a tool pattern (see the module docstring), canonical built-in names; else raises."""
    text = _text(pattern, "tool", limit=200)
    if not _TOOL.match(text):
        raise PolicyError(f"tool must be a built-in tool name, @server, @server/tool, @builtin or *, got {text!r}",
                          field="tool")
    return canonical_tool(text)


def check_command(prefix: str) -> str:
    words = prefix.split()
    if not words:
        raise PolicyError("command must name at least one word", field="command")
    return " ".join(words)


def check_path(pattern: str) -> str:
    if "\\" in pattern:
        raise PolicyError(f"path globs use /, got {pattern!r}", field="path")
    return pattern


def check_domain(pattern: str) -> str:
    text = pattern.lower().rstrip(".")
    if not _DOMAIN.match(text):
        raise PolicyError(f"domain must be a host name, *.name or *, got {pattern!r}", field="domain")
    return text


def build_rule(table: Mapping[str, Any], *, tier: Tier, source: str, known_authorities: Sequence[str] = (),
               rule_id: str | None = None) -> Rule:
    """A checked rule from a ``[[rule]]`` table (or the CLI's and the API's fields); raises :class:`PolicyError`.

    ``known_authorities`` (when given) refuses an authority name nobody provides, so a typo cannot
    make a rule that never applies. A relative ``workspace`` is refused: it would depend on the
    directory the policy happened to be read from.
    """
    if not isinstance(table, Mapping):
        raise PolicyError("a rule must be a table")
    unknown = sorted(str(k) for k in table if k not in FIELDS)
    if unknown:
        raise PolicyError(f"unknown rule field(s): {', '.join(unknown)}; a rule has {', '.join(FIELDS)}",
                          field=unknown[0])
    decision = table.get("decision")
    if decision not in DECISIONS:
        raise PolicyError(f"decision must be allow, ask or deny, got {decision!r}", field="decision")
    tool = check_tool(table.get("tool"))  # type: ignore[arg-type]
    commands = tuple(check_command(c) for c in _items(table.get("command"), "command"))
    paths = tuple(check_path(p) for p in _items(table.get("path"), "path"))
    domains = tuple(check_domain(d) for d in _items(table.get("domain"), "domain"))
    if sum(map(bool, (commands, paths, domains))) > 1:
        raise PolicyError("a rule narrows its tool by command, by path or by domain: one of them", field="command")
    # A rule whose tool never carries its input would match nothing: refused, so it cannot look like protection.
    if commands and not _names_builtin(tool, "shell"):
        raise PolicyError(f"command narrows shell calls only; tool {tool!r} never runs one", field="command")
    if domains and not _names_builtin(tool, "web_fetch"):
        raise PolicyError(f"domain narrows web_fetch calls only; tool {tool!r} never fetches", field="domain")
    if paths and tool == "shell":
        raise PolicyError("a shell line's files are decided as read and write: give those tools the path",
                          field="path")
    authority = _text(table["authority"], "authority", limit=64) if table.get("authority") is not None else None
    if authority is not None and known_authorities and authority not in known_authorities:
        raise PolicyError(f"unknown authority {authority!r}; known: {', '.join(known_authorities)}",
                          field="authority")
    agent = _text(table["agent"], "agent", limit=128) if table.get("agent") is not None else None
    workspace = None
    if table.get("workspace") is not None:
        workspace = _text(table["workspace"], "workspace", limit=4096)
        expanded = os.path.expanduser(workspace)
        if not os.path.isabs(expanded):
            raise PolicyError(f"workspace must be an absolute path, got {workspace!r}", field="workspace")
        workspace = os.path.normpath(expanded)
    reason = _text(table["reason"], "reason", limit=REASON_MAX) if table.get("reason") is not None else ""
    given_id = table.get("id")
    if given_id is not None and (not isinstance(given_id, str) or not _ID.match(given_id)):
        raise PolicyError(f"id must be letters, digits, '_', '.', ':' or '-' (at most 64), got {given_id!r}",
                          field="id")
    rid = rule_id or (given_id if isinstance(given_id, str) else content_id(table))
    return Rule(id=rid, decision=decision, tool=tool, commands=commands, paths=paths, domains=domains,
                authority=authority, agent=agent, workspace=workspace, reason=reason, tier=tier, source=source)
