"""Tool patterns, and the data behind ``/mcp``, ``/tools`` and ``_kiro.dev/commands/available``.

Pattern rules follow the 2.x agent format: in ``tools``, ``*`` is everything,
``@builtin`` every built-in, ``@server`` every tool of a server and
``@server/tool`` one (wildcards allowed); a bare name is a built-in. The same
patterns in ``allowedTools`` skip the permission prompt, except a bare ``*``,
which kiro does not honour there.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kirocrew_testing.fake_kiro import catalog
from kirocrew_testing.fake_kiro.mcp_hub import McpHub


def matches(patterns: Iterable[str], server: str | None, name: str, *, star_means_all: bool) -> bool:
    """Does any pattern cover tool ``name`` (of MCP ``server``, None for a built-in)?"""
    for pattern in patterns:
        if pattern == "*":
            if star_means_all:
                return True
            continue
        if pattern == "@builtin":
            if server is None:
                return True
            continue
        if pattern.startswith("@"):
            srv, _, tool = pattern[1:].partition("/")
            if server is not None and fnmatch.fnmatchcase(server, srv) and (
                    not tool or fnmatch.fnmatchcase(name, tool)):
                return True
            continue
        if server is None and fnmatch.fnmatchcase(name, pattern):
            return True
    return False


@dataclass(frozen=True)
class CommandResult:
    success: bool
    message: str
    data: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"success": self.success, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


def mcp_data(hub: McpHub | None) -> dict[str, Any]:
    return {"servers": hub.server_rows() if hub is not None else []}


def tool_rows(tool_patterns: Iterable[str], hub: McpHub | None,
              aliases: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The ``/tools`` rows: ``{name, description, source: "built-in" | "mcp:<server>"}``.

    An MCP tool the agent's ``toolAliases`` names (``@server/tool``) is listed under its alias.
    """
    patterns = tuple(tool_patterns)
    renames = aliases or {}
    rows = [{"name": name, "description": text, "source": "built-in"}
            for name, text in catalog.BUILT_IN_TOOLS.items()
            if matches(patterns, None, name, star_means_all=True)]
    for server, tool in hub.running_tools() if hub is not None else []:
        if matches(patterns, server, tool.name, star_means_all=True):
            rows.append({"name": renames.get(f"@{server}/{tool.name}", tool.name),
                         "description": tool.description or "", "source": f"mcp:{server}"})
    return rows


def mcp_message(data: dict[str, Any]) -> str:
    servers = data["servers"]
    if not servers:
        return "No MCP servers configured."
    return "\n".join(f"{s['name']}: {s['status']} ({s['toolCount']} tools)" for s in servers)


def tools_message(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No tools available."
    return "\n".join(f"{r['name']} [{r['source']}]" for r in rows)


def available_commands() -> list[dict[str, Any]]:
    return [{"name": f"/{name}", "description": text} for name, text in catalog.COMMANDS.items()]


def command_name_and_args(command: Any) -> tuple[str, str]:
    """Accept ``{command, args}`` (kiro's shape), or a ``"/name args"`` string."""
    if isinstance(command, str):
        name, _, args = command.strip().lstrip("/").partition(" ")
        return name, args.strip()
    if isinstance(command, dict):
        name = str(command.get("command") or command.get("name") or "").lstrip("/")
        given = command.get("args")
        if isinstance(given, dict):
            value = given.get("value", given.get("name", ""))
            return name, str(value) if value is not None else ""
        return name, given.strip() if isinstance(given, str) else ""
    return "", ""
