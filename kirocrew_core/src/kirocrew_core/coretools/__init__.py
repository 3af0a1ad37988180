"""The ``kirocrew-core`` MCP server: the model-facing tools of a crew session.

The server runs inside the host and is reached through the relay ``kirocrew mcp-core``.
Its tools come from every plugin's ``core_mcp_tools()``; the caller of each call is the
verified caller block of its host connection, resolved to a crew session by
:mod:`kirocrew_core.coretools.identity`. Nothing here keeps state per caller.

Modules: :mod:`.contract` (what a tool handler receives), :mod:`.directives` (the
session-directive marker codec), :mod:`.identity` (session keys and the resolver that
decides who a caller is by its process ancestry), :mod:`.policy` (the session tool policy),
:mod:`.server` (the MCP server the host serves), :mod:`.command` (``kirocrew mcp-core``).
"""
