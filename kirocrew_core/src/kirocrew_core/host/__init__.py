"""The host: the one long-lived kirocrew process per crew home.

It owns every stateful service (conversations, computer use, and what later
plugins add), serves the gateway and dashboard over HTTP, and serves every
kirocrew MCP server on an owner-only local socket. The MCP server commands that
clients start (``kirocrew mcp-conversations`` …) are thin relays to it
(:mod:`kirocrew_core.relay`).

Modules here that the relay imports (:mod:`.paths`, :mod:`.protocol`,
:mod:`.fingerprint`, :mod:`.client`) use the standard library only: a relay must
start in a few tens of milliseconds.
"""
