"""The worked example of a companion edition: one hook, one extra MCP scope.

A companion edition is an ordinary plugin distribution. This one teaches
kirocrew that Claude Code keeps its global MCP servers in ``~/.claude.json``;
the rebuild, discovery and the dashboard's apply/uninstall paths then treat
that file as a scope, all three symmetrically.
"""

from __future__ import annotations

from kirocrew_core import hookimpl
from kirocrew_core.contributions import McpScope


def claude_code_scope() -> McpScope:
    from kirocrew_core import home

    return McpScope(id="cc", global_json=home.user_home() / ".claude.json", agent_mcp_file=None, label="Claude")


@hookimpl
def extra_mcp_scopes() -> list[McpScope]:
    return [claude_code_scope()]
