"""The hooks kirocrew-mcp declares for other plugins (added through ``addhooks``).

kirocrew-mcp changes which MCP servers a kiro-cli session loads, but a
kiro-cli process reads its agent file only when it starts. Processes that are
already running (a warm pool of pre-spawned sessions) keep the old servers
until someone restarts them, and kirocrew-mcp does not own those processes:
the plugin that spawns them does. These hooks are how it asks.

Results are combined the way the core hooks are: every implementation is
called in core's call order (``tryfirst``, plain, ``trylast``, each tier by
plugin name), never in load order.
"""

from __future__ import annotations

from collections.abc import Awaitable

from kirocrew_core.markers import hookspec


@hookspec
def restart_sessions(reason: str) -> int | Awaitable[int] | None:
    """Drain pre-spawned kiro-cli processes so the next session loads the current MCP config.

    Called by the gateway route ``POST /api/sessions/restart`` that
    kirocrew-mcp adds (served by the host, ``kirocrew serve``), when the owner
    asks for a restart after ``POST /api/mcp/apply`` has rebuilt the agent file
    (the dashboard's "Apply & Restart" button on the MCP servers page sends
    it). The route re-renders the agent file first, so every process
    started after this call loads the current servers; a failed render is
    reported in the route's answer and the hook is still called. Not called by
    the apply itself: a restart ends work in progress, so only the owner asks
    for one. A process serving a conversation right now should be replaced when
    its turn ends, not killed mid-turn. kirocrew-conversations implements it
    for the workers its orchestrator keeps in the host.

    :param reason: why the restart was asked for (the request's ``reason``,
        e.g. ``"mcp_apply"``; ``"owner_request"`` when it gives none), for the
        implementation's log.
    :return: how many processes were drained or scheduled for replacement; an
        awaitable is awaited. Every implementation is called, in call order,
        and the counts are summed; ``None`` counts as 0. An implementation that
        raises, or returns something that is not a count, is reported by
        plugin name and never stops the others.
    """
