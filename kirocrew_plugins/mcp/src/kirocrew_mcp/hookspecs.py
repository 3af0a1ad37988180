"""The hooks kirocrew-mcp declares for other plugins (added through ``addhooks``).

kirocrew-mcp changes which MCP servers a kiro-cli session loads, but a
kiro-cli process reads its agent file only when it starts. Processes that are
already running (a warm pool of pre-spawned sessions) keep the old servers
until someone restarts them, and kirocrew-mcp does not own those processes:
the plugin that spawns them does. These hooks are how it asks.

Results are combined the way the core hooks are: every implementation is
called, sorted by plugin name, never in load order.
"""

from __future__ import annotations

from collections.abc import Awaitable

from kirocrew_core.markers import hookspec


@hookspec
def restart_sessions(reason: str) -> int | Awaitable[int] | None:
    """Drain pre-spawned kiro-cli processes so the next session loads the current MCP config.

    Called by the gateway's ``POST /api/sessions/restart`` (the dashboard's
    "Apply & Restart", after ``POST /api/mcp/apply`` has rebuilt the agent
    file). Not called by the apply itself: a restart ends work in progress, so
    only the owner asks for one. A process serving a conversation right now
    should be replaced when its turn ends, not killed mid-turn.

    :param reason: why the restart was asked for (``"mcp_apply"`` from the
        dashboard), for the implementation's log.
    :return: how many processes were drained or scheduled for replacement; an
        awaitable is awaited. Every implementation is called, sorted by plugin
        name, and the counts are summed; ``None`` counts as 0. An
        implementation that raises is reported by plugin name and never stops
        the others.
    """
