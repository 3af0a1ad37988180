"""kirocrew-mcp's public surface: the one module other distributions import from it.

Everything else in ``kirocrew_mcp`` is internal and may change shape; a name
here keeps its meaning. kirocrew-connections imports only this module (a test
scans its imports), so a refactor inside kirocrew-mcp stops at this file.

Scope files and the agent file (the one writer, one formatting policy):

- ``Scope``, ``all_scopes(pm=None)``: the MCP scope files, highest priority first.
- ``write_scope_document(scope, document) -> bool``: replace a scope file
  atomically in the formatting it was written with; apply, ``cli-setup``'s
  cleanup and disconnect all write through it.
- ``remove_then_rebuild(names, *, pm=None) -> AgentRefresh``: delete servers
  from the rendered agent file, then rebuild it once (uninstall, disconnect).

Server names and discovery rows:

- ``mcp_server_alias(name)``: the kiro-safe key kiro-cli sees for a server.
- ``discover(*, pm=None) -> Discovery`` and ``ServerRow``: every configured
  server, one row per alias, and the sources that could not be used.

Redaction and header expansion (what may leave the machine, and what an error may say):

- ``header_source_env()``, ``expand_headers(headers, source)``: header values
  with ``${VAR}`` expanded from the environment minus credential names.
- ``url_secrets(url)``, ``redact(text, secrets)``,
  ``finish_error(message, secrets, *, limit=...)``, ``has_placeholder(value)``.

The MCP servers page:

- ``ServerManager(label, page=None)``: what an ``mcp_server_managers()``
  implementation answers for a server it manages.

The HTTP MCP client:

- ``HttpMcpChannel``: JSON-RPC over POST to a streamable-HTTP MCP endpoint,
  ``bearer_challenge(headers)``, and ``ProbeFailure`` for a reply it cannot use.
"""

from __future__ import annotations

from kirocrew_mcp.aliases import mcp_server_alias
from kirocrew_mcp.discovery import Discovery, ServerRow, discover
from kirocrew_mcp.hookspecs import ServerManager
from kirocrew_mcp.handshake import ProbeFailure, finish_error, has_placeholder, redact
from kirocrew_mcp.probe_http import (
    HttpMcpChannel,
    bearer_challenge,
    expand_headers,
    header_source_env,
    url_secrets,
)
from kirocrew_mcp.render import AgentRefresh, remove_then_rebuild
from kirocrew_mcp.scopes import Scope, all_scopes, write_scope_document

__all__ = [
    "AgentRefresh",
    "Discovery",
    "HttpMcpChannel",
    "ProbeFailure",
    "Scope",
    "ServerManager",
    "ServerRow",
    "all_scopes",
    "bearer_challenge",
    "discover",
    "expand_headers",
    "finish_error",
    "has_placeholder",
    "header_source_env",
    "mcp_server_alias",
    "redact",
    "remove_then_rebuild",
    "url_secrets",
    "write_scope_document",
]
