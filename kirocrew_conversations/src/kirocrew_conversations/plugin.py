"""kirocrew-conversations hook implementations (entry point ``conversations``).

``kirocrew --help`` imports this module, so it stays cheap: commands are
registered by import path and the authority backend's module is imported only
when the hook is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core import hookimpl
from kirocrew_core.contributions import AuthorityBackend, ManagedMcpServer

if TYPE_CHECKING:
    from kirocrew_core.cli import KirocrewCLI

SERVER_NAME = "kirocrew-conversations"


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("mcp-conversations", "kirocrew_conversations.server_command:mcp_conversations",
                         "Run the Kiro Conversations MCP server on stdio (for MCP clients).")
    cli.add_lazy_command("conversations", "kirocrew_conversations.cli:conversations",
                         "Spawn, wait on and manage durable Kiro conversations from the shell.")


@hookimpl
def managed_mcp_servers() -> list[ManagedMcpServer]:
    # Auto-approve may be granted (the governance ceiling still decides): every tool is bounded, deleting
    # needs an archived conversation and its exact name, and nothing commits, merges or pushes.
    return [ManagedMcpServer(SERVER_NAME, ("mcp-conversations",), may_auto_approve=True,
                             description="Durable, parallel Kiro conversations over ACP.")]


@hookimpl
def authority_backends() -> list[AuthorityBackend]:
    """``unrestricted`` everywhere; ``read_only``/``workspace_write`` by bubblewrap (Linux) or Seatbelt (macOS)."""
    from kirocrew_conversations.authority import UNRESTRICTED_BACKEND
    from kirocrew_conversations.sandbox import bwrap, seatbelt

    return [UNRESTRICTED_BACKEND, *bwrap.authority_backends(), *seatbelt.authority_backends()]
