"""Every cross-cutting extension point of kirocrew.

Each docstring says who calls the hook, at which moment, what the arguments
mean and how results from several plugins combine; never which plugins
implement it, which changes as plugins do. The hook reference in
``docs/plugins/hooks.md`` is generated from these docstrings, with each hook's
implementers in the open edition read from the plugin manager at that moment.

Every hook is called through :func:`kirocrew_core.plugins.call_hook` (or its
shorthand :func:`kirocrew_core.plugins.collect`), never in load order. **Call
order:** implementations marked ``tryfirst``, then plain ones, then ``trylast``
ones; within each tier, sorted by plugin name (an installed plugin's
entry-point name, a built-in's module name). Registration and entry-point load
order never matter. Below, "concatenated" means in call order, the order of
items within one plugin's list kept, and "the first wins" means the first in
call order, so a plugin overrides another's contribution with
``@hookimpl(tryfirst=True)``, and a fallback marked ``trylast`` loses to any
plain one. Each result and each failure is credited to the plugin it came from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kirocrew_core.markers import hookspec

if TYPE_CHECKING:
    from pathlib import Path

    from starlette.applications import Starlette
    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import (
        AuthorityBackend,
        CoreMcpTool,
        CronJobRef,
        DashboardPage,
        DeployDestination,
        HostedMcpServer,
        HostService,
        DoctorCheck,
        HistorySource,
        HistorySummarizer,
        ManagedMcpServer,
        McpScope,
        MessageChannel,
        ProtectedPath,
        RegistryLoader,
        SecretFile,
        WorkerLoad,
    )
    from kirocrew_core.plugins import KirocrewPluginManager


# --- Registration ---------------------------------------------------------


@hookspec(historic=True)
def addhooks(pluginmanager: KirocrewPluginManager) -> None:
    """Add a plugin's own hookspecs (its sub-seams) to the manager.

    Called by :func:`kirocrew_core.plugins.make_plugin_manager` once for every
    plugin, right when it is registered (historic: plugins registered later are
    replayed). Call ``pluginmanager.add_hookspecs(module)`` with the module that
    declares your specs (a sub-seam such as a roster of providers).

    :param pluginmanager: the manager being built.

    Historic: it returns nothing to the caller.
    """


# --- CLI ------------------------------------------------------------------


@hookspec
def register_commands(cli: KirocrewCLI) -> None:
    """Add a plugin's subcommand group to the ``kirocrew`` CLI.

    Called by the root command when it resolves a plugin's subcommand, and
    when it lists commands without a current index: ``kirocrew --help`` lists
    each command's name and one-line help from a cached index, rebuilt by
    calling this hook whenever a distribution is added, removed or at another
    version, or a plugin module changed (see ``kirocrew_core.command_index``).
    The index names the implementation that added each command: when it is a
    module-level function, running that command imports only its module and
    calls only it (every plugin is loaded when in doubt), so it must add its
    commands on its own, without another plugin's help. Keep it cheap and
    deterministic (the same install must list the same commands): prefer
    ``cli.add_lazy_command("mcp", "kirocrew_mcp.cli:mcp", "Manage MCP servers")``,
    which imports your command module only when the command runs;
    ``cli.add_command(group)`` works too but imports it up front.

    :param cli: the root group; a name already taken is refused with a warning
        (core commands win, then plugins in call order).

    Every implementation is called; return values are ignored.
    """


# --- Gateway --------------------------------------------------------------


@hookspec
def gateway_routes() -> list[BaseRoute]:
    """Return the HTTP API routes a plugin contributes to the gateway.

    Called once by :func:`kirocrew_core.gateway.app.create_app` while building
    the Starlette app. Routes under ``/api/`` require the owner token; routes
    with a mutating method also reject a foreign ``Origin``. Use paths under
    ``/api/<plugin>/``. A route that takes a JSON body reads it with
    :func:`kirocrew_core.gateway.body.read_json_object` (bounded while
    streaming), so every route answers 400 ``bad_json`` to a body that is not
    a JSON object and 400 ``body_too_large`` to one over its limit; tests
    send every body-taking route such bodies, chunked ones included. A route
    refuses by raising a :class:`~kirocrew_core.errors.KirocrewError`: the
    gateway answers ``{"error", "code"}`` through
    :func:`kirocrew_core.gateway.errors.error_response`, 400 for bad input,
    409 for a :class:`~kirocrew_core.errors.ConflictError`, 500 otherwise.

    :return: a list of Starlette routes; lists from all plugins are
        concatenated, core built-ins first whatever their tier, then the
        others in call order. A path already taken is refused.
    """


@hookspec
def dashboard_pages() -> list[DashboardPage]:
    """Return the dashboard pages a plugin contributes.

    Called once by :func:`kirocrew_core.gateway.app.create_app` while building
    the app. Each page is mounted at its ``path`` (not under ``/api/``) behind
    owner authentication, listed in the shell's navigation and linked from the
    Overview (unless its path has parameters, ``/things/{id}``: other pages link
    to those). A page names the package that ships its ``templates/`` and
    ``static/`` folders (``DashboardPage.package``) and renders with
    :func:`kirocrew_core.gateway.shell.render_page`, extending
    ``core/base.html``; its scripts and styles are files under
    ``/static/<package>/``, since the Content-Security-Policy refuses inline
    ones.

    :return: a list of :class:`~kirocrew_core.contributions.DashboardPage`;
        concatenated, core built-ins first, then the others in call order. A
        path already taken, or a ``package`` that is not an importable
        package, is refused (the page is skipped).
    """


@hookspec
def gateway_startup(app: Starlette) -> Any:
    """Run when the gateway starts, before it serves a request (warm tables, start reapers).

    Called by the gateway app's lifespan, for every plugin in call order. The
    implementation may return an awaitable, which is awaited. An exception
    aborts startup for an open-edition plugin and is a warning, that plugin
    skipped, for a third-party one. When the app runs in the host
    (``kirocrew serve``), the host's services (``host_services()``) have
    already started. Long-lived services belong in ``host_services()``; keep
    this quick, and schedule anything slow rather than await it, since
    serving waits for every implementation.

    :param app: the Starlette app; ``app.state.kirocrew`` holds the plugin
        manager and the homes.
    """


@hookspec
def gateway_stopping(app: Starlette) -> Any:
    """Run as soon as ``kirocrew serve`` is asked to stop, before it waits for open requests.

    Called by ``kirocrew serve`` (``run_gateway``) when a stop begins (Ctrl-C,
    SIGTERM, or the host's decision), for every plugin in call order; an
    awaitable result is awaited and exceptions are logged and never stop the
    others. The server then gives open requests a few seconds before
    ``gateway_shutdown``, and whoever sent SIGTERM may not wait that long: end
    here the work that holds a request open or owns child processes (an MCP
    server probe), so none outlives the gateway. Not called for an app
    served any other way (a test client), so ``gateway_shutdown`` must also do it.

    :param app: the Starlette app that is stopping.
    """


@hookspec
def gateway_shutdown(app: Starlette) -> Any:
    """Run when the gateway stops (stop reapers, close child processes).

    Called by the gateway app's lifespan for every plugin in call order; an
    awaitable result is awaited. Exceptions are logged and never stop the others.
    It also runs after a failed startup, so it must cope with never having
    started.

    :param app: the Starlette app being shut down.
    """


# --- the host -------------------------------------------------------------


@hookspec
def host_services() -> list[HostService]:
    """Return the long-lived services a plugin runs inside the host.

    Called once by the host (:mod:`kirocrew_core.host.server`) when ``kirocrew serve``
    starts, before its socket accepts connections; each service's ``start`` is awaited
    in call order and its ``stop`` in reverse order when the host stops. A service
    whose ``start`` raises is logged with its plugin's name and skipped; the host runs
    on without it. A service's ``busy()`` keeps an auto-started host from idling out
    and a retiring host (other code) from exiting.

    :return: a list of :class:`~kirocrew_core.contributions.HostService`; concatenated.
    """


@hookspec
def host_mcp_servers() -> list[HostedMcpServer]:
    """Return the MCP servers a plugin serves through the host's socket.

    Called once by the host when it starts. Each connection that names a server (its
    ``name`` or its relay ``command``) gets its own MCP session on the server the
    contribution returns, with the caller the relay stamped readable through
    :func:`kirocrew_core.host.caller.current_caller`. A name or command another
    plugin already holds is refused with a warning.

    :return: a list of :class:`~kirocrew_core.contributions.HostedMcpServer`; concatenated.
    """


# --- MCP configuration ----------------------------------------------------


@hookspec
def extra_mcp_scopes() -> list[McpScope]:
    """Return provider-global MCP scopes to read besides Kiro's own (e.g. Claude Code).

    Called at call time by the agent-file rebuild, by discovery and by the
    dashboard's apply/uninstall paths, which must stay symmetric: a scope
    discovery shows is one apply and uninstall can manage. For an edition that
    adds a provider's global scopes.

    :return: a list of :class:`~kirocrew_core.contributions.McpScope`;
        concatenated; for a duplicate ``id`` the first wins.
    """


@hookspec
def extra_mcp_servers() -> dict[str, dict[str, Any]]:
    """Return tooling-provider MCP servers that fill gaps in the rendered agent file.

    Called by the agent-file rebuild (``kirocrew_mcp.render``). Entries are
    merged ADD-only: a name the user's scopes or a managed server already
    define is never overridden. For an edition that ships tooling servers.

    :return: a mapping of server name to an ``mcpServers`` entry; plugins are
        merged in call order, the first to name a server wins.
    """


@hookspec
def managed_mcp_servers() -> list[ManagedMcpServer]:
    """Return the MCP servers a plugin owns end to end (``kirocrew-core``, ``kirocrew-computer``…).

    Called by the agent-file rebuild, which rewrites their ``command``/``args``
    from the live ``kirocrew`` executable on every rebuild, and by the
    auto-approve pass, which never grants ``autoApprove`` to a server whose
    ``may_auto_approve`` is False.

    :return: a list of :class:`~kirocrew_core.contributions.ManagedMcpServer`;
        concatenated; a duplicate name is an error.
    """


@hookspec
def core_mcp_tools() -> list[CoreMcpTool]:
    """Return tools a plugin adds to the ``kirocrew-core`` MCP server.

    Called by the ``kirocrew-core`` server inside the host
    (:mod:`kirocrew_core.coretools.server`) on every ``tools/list`` and
    ``tools/call`` (descriptors are rebuilt each time, so a description may
    quote live values). The server validates arguments against each tool's
    schema, resolves the caller's session per the tool's ``identity`` and
    applies the session's tool policy before the handler runs. Tools must be
    stateless: the caller is resolved per call from the host connection's
    verified caller block.

    Name a third-party tool ``<plugin>_<what>`` (plugin ``acme``: ``acme_lookup``).
    A name kirocrew-core or an open-edition member contributes is theirs: another
    plugin's tool of that name is refused (:mod:`kirocrew_core.coretools.tool_names`).

    :return: a list of :class:`~kirocrew_core.contributions.CoreMcpTool`;
        concatenated in call order. For a duplicate tool name, core's or an
        open-edition member's tool is kept, else the first in call order; each
        other one is refused and recorded on its plugin as ``tool_name_taken``
        (``kirocrew plugins``, ``kirocrew doctor``, the host's log). Two
        open-edition tools of one name are a bug: ``tool_name_clash``.
    """


@hookspec
def worker_load() -> list[WorkerLoad]:
    """Return the kiro-cli workers a plugin runs in this host now, and its sub-agent cap.

    Called by the ``resource_status`` tool of ``kirocrew-core`` (:mod:`kirocrew_core.resources`)
    inside the host, on every call, to report running workers beside the machine's CPU, memory
    and load; the host measures the processes the ``pids`` name. A plugin that runs kiro-cli workers
    answers with them and its configured cap. Keep it cheap and non-blocking: no
    database, no network. An implementation that raises is left out of the report, which says so.

    :return: a list of :class:`~kirocrew_core.contributions.WorkerLoad`; concatenated.
    """


@hookspec
def registry_loaders() -> list[RegistryLoader]:
    """Return extra registry sources by name (e.g. ``connections.providers``).

    Called by the plugin that owns the registry named, which validates what
    each loader returns and reports invalid entries with their source. Today
    that is kirocrew-connections loading its provider roster
    (``connections.providers``); loaders with another name are ignored.

    :return: a list of :class:`~kirocrew_core.contributions.RegistryLoader`;
        concatenated, after the shipped registry's entries.
    """


@hookspec
def known_workspaces() -> list[Path]:
    """Return the project directories this plugin has run kiro-cli sessions in.

    Called by kirocrew-connections' Disconnect, in its worker thread before the
    transaction (``disconnect.workspace_agent_dirs``), which reads every
    ``<workspace>/.kiro/agents`` for a project agent that shares the grant
    being removed: kiro-cli loads those agents in that project, so a grant one
    of them uses must be kept. A plugin that runs sessions answers with their
    workspaces (and worktrees). It may read files, never
    the network; keep it quick.

    :return: a list of absolute :class:`~pathlib.Path` s; concatenated with the
        ``connections.project_roots`` config key, duplicates dropped. A
        directory that does not exist is skipped. An implementation that
        raises, or returns something that is not a list of absolute paths,
        makes the census incomplete, so Disconnect keeps the grant and says a
        source could not be read.
    """


@hookspec
def history_sources() -> list[HistorySource]:
    """Return stores of past sessions that the history (search, the History page) reads.

    Why a hook: core owns the history index and reads kiro-cli's own session stores
    itself, but it imports no plugin, so a plugin that keeps sessions of its own (a
    conversation's title and run replies, say) hands them over
    here. Called by :meth:`kirocrew_core.history.index.HistoryIndex.refresh` before a
    ``list_sessions`` / ``search_chat_history`` / ``get_chat_session`` call, a
    ``kirocrew history`` command or the History page answers; each source's
    ``sessions()`` is called then, and a session's ``messages()`` only when its
    ``version`` differs from what the index holds. Read only, never the network; keep
    ``sessions()`` quick (it runs on every refresh).

    :return: a list of :class:`~kirocrew_core.contributions.HistorySource`;
        concatenated. A source that raises, or a duplicate ``name`` (the first wins), is
        logged and skipped: its sessions already indexed are kept.
    """


@hookspec
def history_summarizers() -> list[HistorySummarizer]:
    """Return what writes a short summary of a past session with a model.

    Why a hook: ``list_sessions`` with ``summarize`` (and ``kirocrew history list
    --summarize``) adds a summary written by a model to each session, but core runs no
    model and imports no plugin; a plugin that runs kiro-cli answers here (one prompt
    per session on a short-lived kiro-cli session whose agent has no tools and no MCP
    servers, say). Called once per such call, and only for sessions whose summary
    is not cached in the history index already (an unchanged session is never summarized
    twice). Core hands over redacted, bounded transcripts, at most a few per call, and
    stops reading the summarizer when its time budget is spent; what arrived by then is
    kept. Keep the call itself quick: the work happens in ``summarize``.

    :return: a list of :class:`~kirocrew_core.contributions.HistorySummarizer`;
        concatenated; the first in call order is used, the others are not called. An
        implementation that raises is logged and skipped.
    """


@hookspec
def conversation_ancestry(conversation_id: str) -> list[str]:
    """Return the conversations above ``conversation_id``, nearest first: who spawned or created it, and so on.

    Why a hook: core decides which artifacts a crew session may see by its conversation tree (the
    topmost conversation above it), but it imports no plugin; the plugin that keeps conversations
    knows their parents. Called by :func:`kirocrew_core.artifacts.access.session_actor` inside the
    host, on every ``artifact_*`` and ``deploy_artifact`` call from a session, in a worker thread.
    The plugin that keeps conversations answers from its store; one that does not know the id returns
    ``[]`` or None. One indexed read, never the network.

    :param conversation_id: the calling session's conversation (its verified identity).
    :return: conversation ids, nearest first; every plugin is called and the first non-empty answer
        in call order is used (only one plugin keeps conversations); none at all means the
        conversation is its own tree. An
        implementation that raises fails the call (``internal_error``): no artifact is shown on a guess.
    """


@hookspec
def conversation_origin(conversation_id: str) -> str | None:
    """Return what started ``conversation_id`` when neither the person nor a session did: ``"cron"``.

    Why a hook: an artifact records where it came from (its ``source``), decided from the verified
    caller, never from the arguments; a cron job's agent run is a conversation like any other, and
    only the plugin that runs the jobs knows which conversations are its. Called by
    :func:`kirocrew_core.artifacts.access.session_actor` inside the host, in a worker thread, on
    every ``artifact_*`` and ``deploy_artifact`` call from a conversation's session.
    The plugin that runs the jobs answers from its runs in progress and its store (one read, never
    the network).

    :param conversation_id: the calling session's conversation (its verified identity).
    :return: ``"cron"`` or None; every plugin is called and the first answer that is not None in
        call order is used. An implementation that raises fails the call (``internal_error``).
    """


@hookspec
def conversation_deliver(conversation_id: str, text: str) -> Any:
    """Queue ``text`` as a new run at the tail of ``conversation_id``'s queue; return the run's id.

    Why a hook: an inbound webhook (``register_hook``) feeds the conversation of the session that
    registered it, and ``send_message(session="origin")`` the conversation that made the calling cron
    job, but core imports no plugin; the plugin that keeps conversations queues the run. Called through
    :func:`kirocrew_core.conversation_runs.queue_run` inside the host, on the event loop: once per
    accepted webhook delivery (after its token, size, duplicate and rate checks passed) and once per
    ``send_message(session="origin")``. It may be a coroutine function; keep it to queueing (the run
    itself happens later, in the background), as the conversation's next run with its own settings.

    :param conversation_id: the conversation to run in (the caller's verified identity decided it).
    :param text: the whole prompt (an external message already marked as untrusted, a message with its
        attribution line).
    :return: the queued run's id, or None when this plugin does not keep that conversation; every plugin
        is called (until one raises) and the first id in call order is used (only one plugin keeps
        conversations; a coroutine result is awaited). Raise a
        :class:`~kirocrew_core.errors.KirocrewError` with a stable code when the conversation cannot take
        a run (archived, its worktree cleaned up, gone): the delivery then goes to the owner's
        notification feed instead, as it does when no plugin answers.
    """


@hookspec
def conversation_cron_job(conversation_id: str) -> CronJobRef | None:
    """Return the cron job whose agent run ``conversation_id`` is (or was), or None.

    Why a hook: a message a cron job's run sends names the job it came from (source
    attribution), the owner may mute a job's messages, and ``send_message(session="origin")``
    injects into the conversation that made the job; core imports no plugin, and only the plugin
    that runs the jobs knows them. Called by :mod:`kirocrew_core.messages.senders` inside the host,
    in a worker thread, on every ``send_message`` and ``file_send`` from a conversation's session.
    The plugin that runs the jobs answers from its runs in progress and its store (one read, never
    the network).

    :param conversation_id: the calling session's conversation (its verified identity).
    :return: a :class:`~kirocrew_core.contributions.CronJobRef` or None; every plugin is called and
        the first answer that is not None in call order is used. An implementation that raises fails
        the call (``internal_error``): a message is never attributed on a guess.
    """


@hookspec
def message_channels() -> list[MessageChannel]:
    """Return the places ``send_message`` and ``file_send`` may deliver to besides the owner's feed.

    Called by :mod:`kirocrew_core.messages.channels` inside the host on every ``send_message``,
    ``delete_message`` and ``file_send``, and by ``kirocrew messages channels``. The
    ``[channels.NAME]`` tables of ``config.toml`` (e-mail over SMTP, or webhook) come through it
    too. Keep it cheap: build the channel objects, connect to nothing.

    :return: a list of :class:`~kirocrew_core.contributions.MessageChannel`; concatenated; for a
        duplicate ``name`` the first in call order wins (a plugin overrides a configured channel
        with ``tryfirst``). An implementation that raises is logged and skipped: the feed and the
        other plugins' channels still work.
    """


@hookspec
def deploy_destinations() -> list[DeployDestination]:
    """Return the places ``deploy_artifact`` may publish an artifact to, once the owner confirms.

    Called by :mod:`kirocrew_core.artifacts.deploy` inside the host when ``deploy_artifact`` names a
    ``profile`` (to refuse one that does not exist or is not ready before anything is queued), and
    in the owner's ``kirocrew deploy confirm`` when it publishes. A destination that reaches the
    network should say so in its description (``local`` copies into a directory).

    :return: a list of :class:`~kirocrew_core.contributions.DeployDestination`; concatenated; for a
        duplicate ``name`` the first in call order wins (a plugin overrides a built-in with
        ``tryfirst``).
    """


@hookspec
def knowledge_vector_search(query: str, limit: int) -> list[int]:
    """Return the knowledge library's chunk ids nearest in meaning to ``query``, best first.

    Why a hook: ``local_knowledge_search`` ranks chunks by keywords (FTS5, BM25); a vector leg
    needs an embedding model, which core does not ship (none can be fetched at run time), so a
    plugin that has one answers here. Each answer is fused with the keyword ranking by reciprocal
    rank (k = 60). Called by :func:`kirocrew_core.knowledge.tools.vector_rankings` inside the host,
    in a worker thread, on every ``local_knowledge_search`` call and ``kirocrew knowledge search``.
    Ids come from the library's ``chunks`` table (``<crew home>/state/knowledge/library.sqlite3``,
    read it read-only); ids are never reused, so an id a plugin stored for a chunk that was since
    re-chunked or removed names no chunk, and is passed over.

    :param query: the search words as the caller gave them (at most 500 characters).
    :param limit: how many ids are used at most (more are ignored).
    :return: a list of chunk ids, best first; every plugin's list is fused. An implementation that
        raises is logged and skipped: the search answers by keywords alone.
    """


# --- Sessions -------------------------------------------------------------


@hookspec
def agent_file_ready() -> Any:
    """Say whether the rendered agent's file (``kirocrew.json``) is ready for a kiro-cli to start on.

    Called by :func:`kirocrew_core.agent_file.require_ready` right before kirocrew
    starts a kiro-cli process as the rendered ``kirocrew`` agent: by
    kirocrew-conversations for the worker of every run on that agent (cron agent
    jobs and sub-agents are such runs). kiro-cli reads the file once, when it
    starts, and on a missing or unparseable one runs its default agent instead,
    none of kirocrew's MCP servers mounted, so the process is not started until
    every implementation agrees. The plugin that renders the file answers once
    the host's startup render has finished; a fallback (``trylast``) checks that
    the file exists and holds a JSON object. The implementation may return an awaitable,
    which is awaited: keep it bounded, and do file work off the event loop.

    :return: None when the file is ready as far as the plugin knows, else one
        sentence saying why not (name the file, never its absolute path).
        Every implementation is called; the session starts only when all
        returned None, and otherwise the run fails with ``agent_file_unavailable``
        and the first reason in call order. An implementation that raises or
        returns anything else stops the check and counts as a reason.
    """


# --- Execution ------------------------------------------------------------


@hookspec
def authority_backends() -> list[AuthorityBackend]:
    """Return execution authorities (unrestricted; a Linux or macOS sandbox; third parties).

    Called by conversations when a run asks for an authority mode, and by
    ``kiro_capabilities``. A mode whose backend is unavailable fails closed; it
    never runs unrestricted instead. ``available()`` should preflight for real
    (the tool runs, a write outside the allowed roots fails) and say why not.
    ``factory(options, *, workspace)`` gets the run's
    :class:`~kirocrew_core.acp_runtime.AcpOptions` and returns them wrapped
    (``launcher``, trust flags, environment); raising there fails the run.

    :return: a list of :class:`~kirocrew_core.contributions.AuthorityBackend`;
        concatenated; for one ``name`` the first whose ``platforms`` include
        this platform wins (mark an implementation ``tryfirst`` to replace a
        built-in authority).
    """


# --- Governance and health ------------------------------------------------


@hookspec
def governance_ceiling() -> list[str]:
    """Return tool-reference patterns the governance ceiling has an opinion about.

    Called by :func:`kirocrew_core.governance.may_auto_approve` on every
    decision. Patterns are ``@server`` or ``@server/tool`` (case-insensitive,
    ``*`` globs in the server part); naming a server at any granularity
    withholds every auto-approve grant for that server, so its calls go
    through the approval gate where per-argument rules apply.

    :return: a list of patterns; concatenated with ``governance.ceiling`` from
        the config. An exception from any plugin, or a result that is not
        a list of valid patterns, makes the predicate fail closed (nothing is
        auto-approved).
    """


@hookspec
def protected_paths() -> list[ProtectedPath]:
    """Return files and folders crew sessions must not touch on their own: a plugin's secrets and state.

    Called by the permission gate (:mod:`kirocrew_core.gate`) whenever it builds the policy a
    decision uses. Each :class:`~kirocrew_core.contributions.ProtectedPath` becomes part of the
    built-in rules: writing it is denied; reading it asks the owner when ``secret`` is set. No
    owner or project rule can weaken them.

    :return: a list of protected paths; concatenated. An exception from any plugin, or a result
        that is not a list of :class:`~kirocrew_core.contributions.ProtectedPath`, fails closed:
        every file access and shell command asks the owner until it is fixed.
    """


@hookspec
def secret_files() -> list[SecretFile]:
    """Return the files holding secret values this plugin keeps, which no stored or shown result may carry.

    Called by :func:`kirocrew_core.redaction.redact_secrets` (the one redactor of cron history,
    run replies and events, notifications and the pages that show them) when it first redacts in a
    process and again when the crew home moves; each file is read then, and again whenever its
    size, time or inode changes. Every occurrence of a value (at least 8 characters), of its hex,
    base64 or base32 forms, and of any run of 16 characters of them, is replaced by the caller's
    marker. Keep it cheap: return paths, read nothing; a file that is absent is skipped. Never
    log a value.

    :return: a list of :class:`~kirocrew_core.contributions.SecretFile`; concatenated. An exception
        from a plugin, or a result that is not such a list, is logged (the plugin named) and
        skipped: the other plugins' values and the environment's are still redacted.
    """


@hookspec
def doctor_checks() -> list[DoctorCheck]:
    """Return health checks for ``kirocrew doctor`` and the dashboard home page.

    Called by ``kirocrew doctor`` and the gateway home page; each check runs
    independently and a check that raises is reported as ``fail``.

    :return: a list of :class:`~kirocrew_core.contributions.DoctorCheck`;
        concatenated.
    """
