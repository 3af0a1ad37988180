"""The hooks kirocrew-mcp declares for other plugins (added through ``addhooks``).

kirocrew-mcp changes which MCP servers a kiro-cli session loads, but a
kiro-cli process reads its agent file only when it starts. Processes that are
already running (a warm pool of pre-spawned sessions) keep the old servers
until someone restarts them, and kirocrew-mcp does not own those processes:
the plugin that spawns them does. ``restart_sessions`` is how it asks. Some
servers in the scope files are another plugin's to manage (the entry a
Connect installed); ``mcp_server_managers`` is how the MCP servers page learns
which, without kirocrew-mcp importing the plugins that build on it. Servers
another plugin knows may expose same-named tools; ``agent_tool_aliases`` is
how the agent file renames them apart. ``agent_resources`` and ``agent_spawn_hooks``
are how a plugin puts something it owns into every session's context.

Results are combined the way the core hooks are: every implementation is
called in core's call order (``tryfirst``, plain, ``trylast``, each tier by
plugin name), never in load order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kirocrew_core.markers import hookspec


@dataclass(frozen=True)
class ServerManager:
    """Who manages a listed MCP server: the page shows "Managed by <label>" and no controls for it.

    ``page`` is the dashboard path where it is managed instead (the badge links there), or
    ``None`` when there is no such page.
    """

    label: str
    page: str | None = None


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
    its turn ends, not killed mid-turn. For a plugin that keeps kiro-cli
    workers in the host.

    :param reason: why the restart was asked for (the request's ``reason``,
        e.g. ``"mcp_apply"``; ``"owner_request"`` when it gives none), for the
        implementation's log.
    :return: how many processes were drained or scheduled for replacement; an
        awaitable is awaited. Every implementation is called, in call order,
        and the counts are summed; ``None`` counts as 0. An implementation that
        raises, or returns something that is not a count, is reported by
        plugin name and never stops the others.
    """


@hookspec
def mcp_server_managers(servers: Sequence[Mapping[str, Any]]) -> Mapping[str, ServerManager] | None:
    """Name the listed MCP servers this plugin manages, so the MCP servers page marks and locks them.

    Called by the MCP servers page (``GET /mcp``, served by the host) each
    time it renders, with the rows ``GET /api/mcp`` answers. A server this
    plugin installed and keeps in step with something else (a connected
    account's entry, named by its provider's slug, whose URL is the provider's
    MCP URL) should be changed there, not by staging scope changes on the page.

    :param servers: the listing's rows (``name``, and ``url`` or ``command``,
        as ``GET /api/mcp`` answers them); read-only.
    :return: ``{server name: ServerManager}`` for the rows it manages, or
        ``None``. Every implementation is called, in call order; a server
        named by more than one keeps the first. Names that are not rows are
        ignored. An implementation that raises, or returns something that is
        not such a mapping, is logged by plugin name and skipped: the page
        still renders, with its rows unmarked.
    """


@hookspec
def agent_tool_aliases(servers: Mapping[str, Mapping[str, Any]]) -> Mapping[str, str] | None:
    """Rename tools of the servers the agent file mounts, so same-named tools of two servers do not collide.

    Called by the agent-file render (``render_agent_config``, every rebuild:
    ``kirocrew mcp rebuild``, an apply, a Connect's install, a Disconnect) with
    the servers the file is about to mount. kiro-cli exposes an MCP tool under
    its bare name, so GitHub's and Linear's ``list_issues`` would shadow each
    other; its agent field ``toolAliases`` (``{"@<server>/<tool>": "<new name>"}``)
    renames them. A plugin answers for the servers it knows.

    :param servers: ``{server key: entry}`` as the file will hold them (kiro-safe
        keys, ``disabled`` entries included); read-only.
    :return: ``{"@<server>/<tool>": alias}`` for servers among ``servers``, or
        ``None``. Every implementation is called, in call order, and the
        answers merged, the first to name a key winning; keys naming a server
        the file does not mount are ignored. The render keeps the user's own
        ``toolAliases`` entries: a key the user wrote (or changed after kirocrew
        wrote it) wins over every plugin's. An implementation that raises, or
        returns something that is not such a mapping, is logged by plugin name
        and skipped, with a warning in the rebuild's report: the file is still
        written, without its renames.
    """


@hookspec
def agent_resources() -> Sequence[str] | None:
    """Name files every session of the rendered agent loads into its context (its ``resources``).

    Called by the agent-file render (``render_agent_config``, every rebuild:
    ``kirocrew mcp rebuild``, an apply, a Connect's install, a Disconnect, the host's
    start). kiro-cli reads the agent file only when a session starts, but it reads a
    ``file://`` resource's *content* then too: a plugin that names a file it owns can
    change what later sessions are told by rewriting that file, with no rebuild (the
    global lessons file of ``kirocrew learn`` works this way).

    :return: ``file://`` URIs of absolute paths, or ``None``. Every implementation is
        called, in call order, and the URIs appended to the user's own ``resources``
        (which are never removed or reordered), each once. A URI a previous render added
        and no plugin names any more is removed (an equal entry counts as the render's). An
        implementation that raises, or returns something that is not a list of
        ``file://`` URIs, is logged by plugin name and skipped, with a warning in the
        rebuild's report.
    """


@hookspec
def agent_spawn_hooks() -> Sequence[Sequence[str]] | None:
    """Name commands the rendered agent runs when a session starts (its ``hooks.agentSpawn``).

    Called by the agent-file render, like :func:`agent_resources`. kiro-cli runs each
    ``agentSpawn`` command in the session's working directory (the hook event, with
    ``cwd``, on its stdin) and adds what it prints to the session's context: the way to
    tell a session something that depends on where it runs, which a static resource of
    a global agent cannot. Core implements it for workspace lessons
    (``kirocrew learn context``).

    :return: a list of argv lists, or ``None``. An argv whose first word is
        ``kirocrew`` runs the live ``kirocrew`` executable (as managed servers do);
        each is written shell-quoted as ``{"command": …}``. Every implementation is
        called, in call order; the user's own ``agentSpawn`` entries (and every other
        hook) are kept, and an entry a previous render added that no plugin names any
        more is removed. Failures are logged and skipped as for :func:`agent_resources`.
    """
