"""The 17 tools over the store and the orchestrator: what the MCP server and the CLI twins call.

``ConversationsService.call(tool, arguments)`` validates the arguments against
the tool's strict schema, does the work, and returns the structured output the
tool's output schema describes. Errors are :class:`KirocrewError` with a code
from :data:`~kirocrew_conversations.errors.CATALOGUE` and a redacted message.

Each call acts for a :class:`~kirocrew_conversations.scope.Viewer` (the person, or a crew
session: :mod:`kirocrew_conversations.scope` has the rule and its reasons). Every tool that
names a conversation reaches it through :meth:`ConversationsService.conversation_for`, the one
visibility check; ``kiro_status`` lists through the same tree in the store.

Waiting has two bounds: the spec's fixed 30-minute ceiling, and a per-call bound
(``wait_call_secs``, 50 s) used when the client sent no progress token — hosts
cut tool calls at about 60 s unless progress arrives, so such a call returns
``waitExpired: true`` in time and the caller simply waits again. With a token,
the wait may run to the ceiling, sending a coarse, redacted progress message
every ``progress_interval_secs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import stat
from collections.abc import Awaitable, Callable, Sequence, Set
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import kiro_sessions
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations import authority, limits, scope, slash, worktrees
from kirocrew_conversations.capabilities import CapabilityCache
from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.redact import redact_text, workspace_fingerprint
from kirocrew_conversations.scope import Viewer
from kirocrew_conversations.store import (
    Conversation,
    ImageInput,
    Run,
    Settings,
    State,
    SummaryQuery,
    Workspace,
    new_id,
    open_state,
)
from kirocrew_conversations.tool_schemas import validate_arguments
from kirocrew_conversations.vocabulary import (
    AUTHORITIES,
    DEFAULT_AGENT,
    EFFORTS,
    NONTERMINAL_STATUSES,
    UNRESTRICTED,
)

if TYPE_CHECKING:
    from kirocrew_conversations.workflows import WorkflowEngine
from kirocrew_conversations.views import (
    conversation_settings,
    decode_cursor,
    encode_cursor,
    event_view,
    run_settings,
    run_view,
    run_warnings,
    session_view,
)

log = logging.getLogger(__name__)

ProgressSink = Callable[[str], Awaitable[None]]

AUTO_ARCHIVE_SWEEP_SECS = 3600.0
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"RIFF", b"BM", b"II*\x00", b"MM\x00*")


@dataclass(frozen=True)
class ServiceConfig:
    """Server settings; the defaults are the spec's. Tests shorten the deadlines."""

    state_dir: Path | None = None
    max_workers: int = limits.WORKERS_DEFAULT
    idle_close_secs: float = limits.IDLE_WORKER_SECONDS
    run_deadline_secs: float = limits.RUN_DEADLINE_SECONDS
    attention_deadline_secs: float = limits.ATTENTION_DEADLINE_SECONDS
    wait_ceiling_secs: float = limits.WAIT_CEILING_SECONDS
    wait_call_secs: float = 50.0
    progress_interval_secs: float = 10.0
    # Sub-agents (kirocrew-core's spawn tools): the cap on a parent's concurrently active children, how long
    # spawn_sub_agents blocks at most, and the directories besides the parent's workspace a child may work in.
    max_subagents: int = limits.SUBAGENTS_DEFAULT
    subagents_max_wait_secs: float = limits.SUBAGENTS_MAX_WAIT_DEFAULT
    subagent_roots: tuple[str, ...] = ()

    ENV = {
        "max_workers": "KIRO_CONVERSATIONS_MAX_WORKERS",
        "run_deadline_secs": "KIRO_CONVERSATIONS_RUN_DEADLINE_SECS",
        "attention_deadline_secs": "KIRO_CONVERSATIONS_ATTENTION_DEADLINE_SECS",
        "idle_close_secs": "KIRO_CONVERSATIONS_IDLE_CLOSE_SECS",
        "wait_call_secs": "KIRO_CONVERSATIONS_WAIT_CALL_SECS",
        "max_subagents": "KIRO_CONVERSATIONS_MAX_SUBAGENTS",
        "subagents_max_wait_secs": "KIRO_CONVERSATIONS_SUBAGENTS_MAX_WAIT_SECS",
    }
    #: Directories (``os.pathsep``-separated absolute paths) a sub-agent's ``cwd`` may be under.
    ROOTS_ENV = "KIRO_CONVERSATIONS_SUBAGENT_ROOTS"

    @classmethod
    def from_env(cls, **overrides: Any) -> ServiceConfig:
        """Defaults, then ``KIRO_CONVERSATIONS_*`` variables, then non-None ``overrides``; checked."""
        values: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(cls)}
        for name, variable in cls.ENV.items():
            raw = os.environ.get(variable, "").strip()
            if raw:
                try:
                    values[name] = int(raw) if types[name] in ("int", int) else float(raw)
                except ValueError:
                    raise conversation_error("invalid_configuration", f"{variable} is not a number") from None
        roots = [r for r in os.environ.get(cls.ROOTS_ENV, "").split(os.pathsep) if r.strip()]
        if any(not os.path.isabs(r) for r in roots):
            raise conversation_error("invalid_configuration", f"{cls.ROOTS_ENV} must list absolute paths")
        values["subagent_roots"] = tuple(roots)
        values.update({k: v for k, v in overrides.items() if v is not None})
        config = cls(**values)
        config.check()
        return config

    def check(self) -> None:
        if not limits.WORKERS_MIN <= self.max_workers <= limits.WORKERS_MAX:
            raise conversation_error("invalid_configuration",
                                     f"max workers must be {limits.WORKERS_MIN}..{limits.WORKERS_MAX}")
        if not limits.SUBAGENTS_MIN <= self.max_subagents <= limits.SUBAGENTS_MAX:
            raise conversation_error("invalid_configuration",
                                     f"max sub-agents must be {limits.SUBAGENTS_MIN}..{limits.SUBAGENTS_MAX}")
        if not limits.SUBAGENTS_MAX_WAIT_MIN <= self.subagents_max_wait_secs <= limits.SUBAGENTS_MAX_WAIT_MAX:
            raise conversation_error("invalid_configuration", "the sub-agents' max wait must be "
                                     f"{limits.SUBAGENTS_MAX_WAIT_MIN}..{limits.SUBAGENTS_MAX_WAIT_MAX} seconds")
        for name in ("idle_close_secs", "run_deadline_secs", "attention_deadline_secs", "wait_ceiling_secs",
                     "wait_call_secs", "progress_interval_secs"):
            value = getattr(self, name)
            if not 0 < value <= 7 * 24 * 3600:
                raise conversation_error("invalid_configuration", f"{name} must be a positive number of seconds")


class ConversationsService:
    """One server's conversations: owns the state directory for its lifetime."""

    def __init__(self, state: State, config: ServiceConfig, pm: Any = None) -> None:
        from kirocrew_conversations.orchestrator import Orchestrator

        self.state = state
        self.store = state.store
        self.config = config
        self._pm = pm
        self.capabilities = CapabilityCache()
        self.orchestrator = Orchestrator(self.store, max_workers=config.max_workers,
                                         idle_close_secs=config.idle_close_secs,
                                         run_deadline_secs=config.run_deadline_secs,
                                         attention_deadline_secs=config.attention_deadline_secs,
                                         acp_options_factory=self._acp_options, pm=pm)
        from kirocrew_conversations.subagents import SubAgents

        self.subagents = SubAgents(self)
        self.workflows: WorkflowEngine | None = None  # the host's (hosted.py): workflow runs live in the host only
        self._sweeper: asyncio.Task[None] | None = None
        self._warmup: asyncio.Future[Any] | None = None
        self._handlers: dict[str, Callable[[dict[str, Any], ProgressSink | None, Viewer],
                                           Awaitable[dict[str, Any]]]] = {
            name.removeprefix("_tool_"): getattr(self, name) for name in dir(self) if name.startswith("_tool_")
        }

    @classmethod
    async def start(cls, config: ServiceConfig | None = None, pm: Any = None) -> ConversationsService:
        """Own the state directory (a second server fails with ``state_dir_in_use``), recover, start."""
        config = config or ServiceConfig.from_env()
        state = await asyncio.to_thread(open_state, config.state_dir)
        service = cls(state, config, pm)
        await service._db(service.store.auto_archive, _days_ago(limits.AUTO_ARCHIVE_DAYS))
        loop = asyncio.get_running_loop()
        service._sweeper = loop.create_task(service._sweep_forever(), name="auto-archive")
        # Sandbox preflights (a few sandboxed runs) happen once, off the event loop and off the startup path,
        # so the first restricted spawn finds the verdict cached instead of blocking every caller meanwhile.
        service._warmup = loop.run_in_executor(None, service._authority_report)
        return service

    async def aclose(self) -> None:
        """Stop every worker (an executing run ends ``interrupted``) and release the state directory."""
        if self.workflows is not None:
            await self.workflows.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.orchestrator.aclose()
        if self._warmup is not None:
            with contextlib.suppress(Exception):
                await self._warmup
        await asyncio.to_thread(self.state.close)

    async def __aenter__(self) -> ConversationsService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def call(self, tool: str, arguments: Any, *, progress: ProgressSink | None = None,
                   viewer: Viewer | None = None) -> dict[str, Any]:
        """Run one tool for ``viewer``; cancelling the awaiting task only detaches the caller, never cancels Kiro.

        ``viewer`` None: the caller of the request being handled (:func:`scope.current_viewer`), which
        is the person outside a host connection — an in-process caller such as the CLI's own service.
        The MCP server resolves it off the event loop and passes it; the dashboard passes the person.
        """
        args = validate_arguments(tool, arguments)
        try:
            if viewer is None:
                viewer = scope.current_viewer()
            return await self._handlers[tool](args, progress, viewer)
        except KirocrewError as exc:
            # One exit for every error a client sees: an external tool's text (git's stderr, an OS error)
            # must not carry absolute paths or secrets out, whichever layer raised it.
            exc.args = (redact_text(exc.message),)
            raise

    # -- capabilities, authority ---------------------------------------------------------------

    def _authorities(self) -> dict[str, Any]:
        return authority.installed(self._pm)

    def _authority_report(self) -> list[dict[str, Any]]:
        """Each authority, whether it can run here and why not (a backend's first call preflights it)."""
        installed = self._authorities()
        return [{"name": name, "available": ok, "reason": reason}
                for name in AUTHORITIES for ok, reason in [authority.availability(name, installed)]]

    def require_authority(self, name: str) -> Any:
        return authority.require(name, self._authorities())

    def _acp_options(self, conversation: Conversation, run: Run) -> Any:
        from kirocrew_core.acp_runtime import AcpOptions

        base = AcpOptions(agent=run.mode, model=run.model, effort=run.effort)
        backend = self.require_authority(run.authority)  # re-checked at start: never fall back
        return backend.factory(base, workspace=conversation.workspace.worktree_path or conversation.workspace.path)

    async def _tool_kiro_capabilities(self, args: dict[str, Any], progress: ProgressSink | None,
                                      viewer: Viewer) -> dict[str, Any]:
        caps, cached = await self.capabilities.get(refresh=bool(args.get("refresh")))
        authorities = await asyncio.to_thread(self._authority_report)  # a first preflight runs sandboxes
        observed = self.orchestrator.observed
        return {
            "kiroCli": {"version": caps.version},
            "models": [{"id": m.id[: limits.MODEL_MAX_CHARS], "name": m.name[:256],
                        "description": m.description[: limits.TEXT_MAX_CHARS]}
                       for m in caps.models[: limits.CATALOG_MAX_ITEMS]],
            "defaultModel": caps.default_model,
            # kiro's agents as its probe session announced them (a worker's session, if the probe could not).
            "modes": [m[: limits.AGENT_MODE_MAX_CHARS]
                      for m in (observed.modes if caps.modes is None else caps.modes)[: limits.CATALOG_MAX_ITEMS]],
            "defaultMode": caps.default_mode[: limits.AGENT_MODE_MAX_CHARS] if caps.default_mode else None,
            "efforts": list(EFFORTS),
            "acp": {"protocolVersion": caps.protocol_version, "loadSession": caps.load_session,
                    "sessionFork": caps.session_fork, "embeddedContext": caps.embedded_context},
            "prompt": {"images": caps.images},
            "slashCommands": list(self._slash_commands(caps)),
            "authorities": authorities,
            # The agent a run without a mode runs as (kirocrew's own), unlike defaultMode: kiro-cli's default.
            "defaults": {"authority": UNRESTRICTED, "workspaceMode": "shared", "mode": DEFAULT_AGENT,
                         "maxWorkers": self.config.max_workers},
            "limits": {
                "waitMaxTargets": limits.WAIT_MAX_TARGETS, "maxImages": limits.MAX_IMAGES,
                "imageMaxBytes": limits.IMAGE_MAX_BYTES, "finalReplyMaxBytes": limits.FINAL_REPLY_MAX_BYTES,
                "runDeadlineSeconds": int(self.config.run_deadline_secs),
                "attentionDeadlineSeconds": int(self.config.attention_deadline_secs),
                "waitCeilingSeconds": int(self.config.wait_ceiling_secs),
                "idleWorkerSeconds": int(self.config.idle_close_secs),
                "autoArchiveDays": limits.AUTO_ARCHIVE_DAYS, "messageMaxChars": limits.MESSAGE_MAX_CHARS,
                "pageSizeMax": limits.PAGE_SIZE_MAX,
            },
            "cached": cached,
            "fetchedAt": caps.fetched_at,
        }

    # -- starting runs -------------------------------------------------------------------------

    async def _tool_kiro_spawn(self, args: dict[str, Any], progress: ProgressSink | None,
                               viewer: Viewer) -> dict[str, Any]:
        await self.check_requested(args)  # before a new conversation is created
        conversation, run, created = await self._spawn(args, viewer)
        return await self._spawned(conversation, run, created)

    async def _tool_kiro_delegate(self, args: dict[str, Any], progress: ProgressSink | None,
                                  viewer: Viewer) -> dict[str, Any]:
        await self.check_requested(args)  # before a new conversation is created
        conversation, run, created = await self._spawn(args, viewer)
        result = await self._wait([run.id], "any", progress)
        return {"waitExpired": result.wait_expired, "createdConversation": created,
                "run": await self._run_view(result.runs[0], conversation)}

    async def _tool_kiro_send(self, args: dict[str, Any], progress: ProgressSink | None,
                              viewer: Viewer) -> dict[str, Any]:
        conversation = await self._runnable_conversation(viewer, args["conversationId"])
        slash.check_allowed(args["message"], conversation.allowed_commands)
        if args.get("authority"):
            args = {**args, "authority": await self.authority_for(viewer, args["authority"], conversation.authority)}
        settings = await self.resolve_settings(args, conversation)
        images = await self._images(args.get("images"))
        await self._check_image_room(conversation, len(images))
        interrupted, superseded = None, 0
        if args["delivery"] == "interrupt":
            outcome = await self.orchestrator.interrupt(conversation.id, args["message"], settings, images)
            run, interrupted, superseded = outcome.run, outcome.interrupted_run_id, len(outcome.superseded)
        else:
            run = await self.orchestrator.submit(conversation.id, args["message"], settings, images)
        out = await self._spawned(conversation, run, False)
        return {**out, "delivery": args["delivery"], "interruptedRunId": interrupted,
                "supersededRunCount": superseded}

    async def _spawn(self, args: dict[str, Any], viewer: Viewer) -> tuple[Conversation, Run, bool]:
        if args["conversation"] == "new":
            # A session's new conversation gets its authority (or a narrower one it names), never more.
            args = {**args, "authority": await self.authority_for(viewer, args.get("authority"), UNRESTRICTED)}
            allowed = await self._allowlist(args)  # checked before anything is created
            slash.check_allowed(args["message"], allowed or ())
            images = await self._images(args.get("images"))
            conversation = await self._create_conversation(args, allowed or (), created_by=viewer.session_conversation)
            created = True
        else:
            conversation = await self._runnable_conversation(viewer, args["conversation"])
            slash.check_allowed(args["message"], conversation.allowed_commands)
            if args.get("authority"):
                args = {**args, "authority": await self.authority_for(viewer, args["authority"],
                                                                      conversation.authority)}
            images = await self._images(args.get("images"))
            await self._check_image_room(conversation, len(images))
            created = False
        settings = await self.resolve_settings(args, conversation)
        run = await self.orchestrator.submit(conversation.id, args["message"], settings, images)
        return conversation, run, created

    async def check_requested(self, args: dict[str, Any]) -> None:
        """``unknown_model`` / ``unknown_mode`` for a model or mode the arguments name and kiro-cli does not offer."""
        _check_choices(await self._kiro_choices(), model=args.get("model"), mode=args.get("mode"))

    def session_placement(self, conversation_id: str) -> tuple[str, str]:
        """``(authority, cwd)`` the session of ``conversation_id`` works with now (blocking store reads).

        The authority is its run in progress's (a run may narrow the conversation's default), else the
        conversation's: the most a session may give work it hands on (a cron job, a conversation).
        """
        conversation = self.store.get_conversation(conversation_id)
        runs = [run for run in self.store.unfinished_runs(conversation_id) if run.status != "queued"]
        return (runs[0].authority if runs else conversation.authority), conversation.cwd

    async def authority_for(self, viewer: Viewer, requested: str | None, default: str) -> str:
        """The authority work started for ``viewer`` gets: ``requested``, else ``default``, never above a session's.

        The person may pick any installed authority. A crew session's own is its ceiling: a request above
        it (a ``read_only`` session asking for ``unrestricted``) is ``authority_escalation``, refused with
        nothing created; with none requested, work it starts gets its own authority, whatever ``default``
        says. An authority outside the built-in order counts only when it is the session's own.
        """
        if viewer.is_person:
            return requested or default
        own, _ = await self._db(self.session_placement, viewer.session_conversation)
        wanted = requested or own
        if authority.escalates(wanted, own):
            raise conversation_error("authority_escalation",
                                     f"a crew session running as {own} cannot give work the {wanted} authority; "
                                     "it may use its own or a narrower one, and the owner may choose any")
        return wanted

    async def resolve_settings(self, args: dict[str, Any], conversation: Conversation) -> Settings:
        """The run's overrides: authority checked, model and mode resolved to what kiro-cli offers.

        A run records the settings it really gets, so an unset model or mode resolves here, as the
        conversation's default, else the rendered kirocrew agent (:data:`DEFAULT_AGENT`) and kiro-cli's
        default model (``defaultModel``), and is then applied to the session like any other choice.
        Resolved values are checked against the live catalog and agents; when kiro-cli cannot be
        asked, the run's own check before its prompt (``settings_not_applied``) still stands, and a
        model it could not resolve is recorded as kiro reports it then.
        """
        self.require_authority(args.get("authority") or conversation.authority)
        caps = await self._kiro_choices()
        model = args.get("model") or conversation.model
        mode = args.get("mode") or conversation.mode or DEFAULT_AGENT
        _check_choices(caps, model=model, mode=mode,
                       inherited={name for name in ("model", "mode") if not args.get(name)})
        if caps is not None:
            model = model or caps.default_model
        return Settings(model=model, effort=args.get("effort"), mode=mode, authority=args.get("authority"))

    async def _kiro_choices(self) -> Any:
        """The capability probe (cached), or None when kiro-cli cannot answer now."""
        caps = self.capabilities.cached
        if caps is None:
            with contextlib.suppress(KirocrewError):
                caps, _ = await self.capabilities.get()
        return caps

    def _slash_commands(self, caps: Any) -> tuple[str, ...]:
        """The slash commands kiro announces: its probe session's, else what workers' sessions announced."""
        if caps is not None and caps.commands:
            return caps.commands
        return self.orchestrator.observed.commands

    async def _allowlist(self, args: dict[str, Any]) -> tuple[str, ...] | None:
        """``allowedSlashCommands`` as bare names, each one kiro announced; None when not given."""
        if "allowedSlashCommands" not in args:
            return None
        announced = self._slash_commands(await self._kiro_choices()) if args["allowedSlashCommands"] else ()
        return slash.normalize_allowlist(args["allowedSlashCommands"], announced)

    async def _create_conversation(self, args: dict[str, Any], allowed: Sequence[str] = (), *,
                                   created_by: str | None = None) -> Conversation:
        """A new conversation from kiro_spawn/kiro_delegate's arguments; ``created_by`` the creating session's."""
        name, path = args["name"], args["workspace"]
        self.require_authority(args.get("authority") or UNRESTRICTED)
        if await self._db(self.store.name_in_use, name):
            raise conversation_error("conversation_name_taken", f"a conversation named {name!r} already exists")
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError:
            is_dir = False
        if not is_dir:
            raise conversation_error("workspace_not_found", "the workspace is not an existing directory")
        real = os.path.realpath(path)
        cid = new_id("conv")
        workspace = Workspace(strategy="shared", path=real, fingerprint=workspace_fingerprint(real))
        info = None
        if args["workspaceMode"] == "worktree":
            info = await self._db(worktrees.create_worktree, Path(real), slug=worktrees.slugify(name),
                                  short_id=cid.rsplit("_", 1)[-1][:8], base_ref=args.get("baseRef") or "HEAD",
                                  state_dir=self.state.ownership.directory)
            workspace = replace(workspace, strategy="worktree", path=str(info.repo), worktree_path=str(info.path),
                                worktree_branch=info.branch, worktree_base_ref=info.base_ref,
                                worktree_base_commit=info.base_sha)
        try:
            # The settings a conversation is created with are its defaults: a follow-up must not quietly
            # run with another authority than the one the conversation was started under.
            return await self._db(self.store.create_conversation, name=name, workspace=workspace,
                                  conversation_id=cid, authority=args.get("authority") or UNRESTRICTED,
                                  model=args.get("model"), effort=args.get("effort"), mode=args.get("mode"),
                                  allowed_commands=allowed, created_by=created_by)
        except BaseException:
            if info is not None:  # the name was taken meanwhile: leave no orphan worktree behind
                with contextlib.suppress(KirocrewError):
                    await self._db(worktrees.cleanup_worktree, info, active_runs=0)
            raise

    async def conversation_for(self, viewer: Viewer, conversation_id: str) -> Conversation:
        """The conversation ``viewer`` names, if it may see it; else ``conversation_not_found``.

        The one visibility check of the tools (rule and reasons in :mod:`scope`): the person sees
        every conversation, a crew session those its conversation created and their descendants.
        The refusal is the store's own for an unknown id, word for word.
        """
        conversation: Conversation = await self._db(self.store.get_conversation, conversation_id)
        root = viewer.session_conversation
        if root is not None and not await self._db(self.store.descends_from, conversation.id, root):
            raise conversation_error("conversation_not_found", f"no conversation {conversation_id!r}")
        return conversation

    async def _runnable_conversation(self, viewer: Viewer, conversation_id: str) -> Conversation:
        conversation = await self.conversation_for(viewer, conversation_id)
        if conversation.retired:
            raise conversation_error("conversation_retired", "the conversation's worktree was cleaned up")
        if conversation.state == "archived":
            raise conversation_error("conversation_archived", f"conversation {conversation_id} is archived")
        return conversation

    async def deliver(self, conversation_id: str, text: str) -> Run:
        """Queue ``text`` as the conversation's next run, on its own settings (an inbound webhook's delivery).

        The conversation was the registering session's own, verified when the hook was registered, so
        no session scope applies here; an archived, retired or unknown conversation is refused with
        the tools' codes and nothing is queued.
        """
        conversation = await self._runnable_conversation(scope.PERSON, conversation_id)
        settings = await self.resolve_settings({}, conversation)
        return await self.orchestrator.submit(conversation.id, text, settings)

    async def _images(self, images: Sequence[dict[str, Any]] | None) -> list[ImageInput]:
        if not images:
            return []
        try:
            caps, _ = await self.capabilities.get()
        except KirocrewError:
            caps = None
        if caps is None or not caps.images:
            raise conversation_error("unsupported_capability",
                                     "the installed kiro-cli does not accept images (kiro_capabilities prompt.images)")
        return [await asyncio.to_thread(_read_image, i, image) for i, image in enumerate(images)]

    async def _check_image_room(self, conversation: Conversation, adding: int) -> None:
        """``session_image_limit`` when ``adding`` images would bring the conversation's Kiro session to kiro's cap."""
        if not adding:
            return
        from kirocrew_conversations.session_images import SESSION_IMAGE_LIMIT, count_images

        session_id = await self._db(self.store.session_id, conversation.id)
        located = await asyncio.to_thread(kiro_sessions.locate, session_id) if _safe_session(session_id) else None
        held = await asyncio.to_thread(count_images, located) if located is not None else 0
        if held + adding >= SESSION_IMAGE_LIMIT:
            raise conversation_error(
                "session_image_limit",
                f"the conversation's Kiro session holds {held} inline images; {adding} more would reach kiro's "
                f"limit of {SESSION_IMAGE_LIMIT}, past which every request of the session fails. Nothing was "
                f"queued. `kirocrew conversations repair {conversation.id}` keeps the newest images and frees room.")

    async def _spawned(self, conversation: Conversation, run: Run, created: bool) -> dict[str, Any]:
        return {"conversationId": conversation.id, "runId": run.id, "status": run.status,
                "createdConversation": created, "queuePosition": await self._db(self.store.runs_ahead, run),
                "settings": run_settings(run, conversation), "warnings": run_warnings(run)}

    # -- waiting and reading -------------------------------------------------------------------

    async def _tool_kiro_wait(self, args: dict[str, Any], progress: ProgressSink | None,
                              viewer: Viewer) -> dict[str, Any]:
        runs = [await self._run_of(viewer, t["conversationId"], t["runId"]) for t in args["targets"]]
        result = await self._wait([r.id for r in runs], args["mode"], progress)
        views = [await self._run_view(run) for run in result.runs]
        return {"waitExpired": result.wait_expired, "mode": args["mode"], "runs": views}

    async def _wait(self, run_ids: list[str], mode: str, progress: ProgressSink | None) -> Any:
        loop = asyncio.get_running_loop()
        bound = self.config.wait_ceiling_secs if progress else min(self.config.wait_ceiling_secs,
                                                                   self.config.wait_call_secs)
        deadline = loop.time() + bound
        while True:
            remaining = deadline - loop.time()
            step = min(remaining, self.config.progress_interval_secs) if progress else remaining
            result = await self.orchestrator.wait(run_ids, mode, timeout=max(step, 0.0))
            if not result.wait_expired or deadline - loop.time() <= 0 or progress is None:
                return result
            await progress(_progress_message(result.runs))

    async def _tool_kiro_result(self, args: dict[str, Any], progress: ProgressSink | None,
                                viewer: Viewer) -> dict[str, Any]:
        run = await self._run_of(viewer, args["conversationId"], args["runId"])
        conversation = await self._db(self.store.get_conversation, run.conversation_id)
        directives = self.store.directives
        session = session_view(conversation, await self._db(directives.followups, conversation.id),
                               await self._db(directives.monitor, conversation.id))
        return {**await self._run_view(run, conversation), "session": session}

    async def _tool_kiro_status(self, args: dict[str, Any], progress: ProgressSink | None,
                                viewer: Viewer) -> dict[str, Any]:
        await self._db(self.store.auto_archive, _days_ago(limits.AUTO_ARCHIVE_DAYS))
        query = SummaryQuery(
            states=tuple(args["state"]) if args.get("state") else None,
            run_statuses=tuple(args["runStatus"]) if args.get("runStatus") else None,
            fingerprint=args.get("workspaceFingerprint"), model=args.get("model"),
            authority=args.get("authority"), archive=args["archive"], limit=args["limit"],
            within=viewer.session_conversation,
        )
        cursor_scope = repr(replace(query, limit=0))
        after = decode_cursor(args["cursor"], "status", cursor_scope) if args.get("cursor") else None
        if after is not None and not isinstance(after, str):
            raise conversation_error("bad_cursor", "the cursor is malformed")
        page, counts = await self._db(self.store.summaries, replace(query, after_id=after, limit=query.limit + 1))
        more = len(page) > query.limit
        page = page[: query.limit]
        return {
            "conversations": [{
                "conversationId": s.conversation.id, "name": s.conversation.name, "state": s.state,
                "defaults": conversation_settings(s.conversation),
                "latestRun": {"runId": s.latest_run_id, "status": s.latest_status} if s.latest_run_id else None,
                "queuedRuns": s.queued_runs, "updatedAt": s.conversation.updated_at,
                "subagent": s.conversation.subagent, "parentConversationId": s.conversation.parent_id,
                **await self._directive_summary(s.conversation.id),
            } for s in page],
            "counts": counts,
            "nextCursor": encode_cursor("status", cursor_scope, page[-1].conversation.id) if more else None,
        }

    async def _tool_kiro_events(self, args: dict[str, Any], progress: ProgressSink | None,
                                viewer: Viewer) -> dict[str, Any]:
        run = await self._run_of(viewer, args["conversationId"], args["runId"])
        after = decode_cursor(args["cursor"], "events", run.id) if args.get("cursor") else 0
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise conversation_error("bad_cursor", "the cursor is malformed")
        shown: list[dict[str, Any]] = []
        position = after
        while len(shown) < args["limit"]:  # hidden kinds are skipped, so a page may take several reads
            page = await self._db(self.store.list_events, run.id, after=position, limit=args["limit"])
            for event in page.events:
                view = event_view(event)
                position = event.cursor
                if view is not None:
                    shown.append(view)
                    if len(shown) == args["limit"]:
                        break
            if len(page.events) < args["limit"]:
                break
        more = False
        if len(shown) == args["limit"]:
            more = bool((await self._db(self.store.list_events, run.id, after=position, limit=1)).events)
        return {"conversationId": run.conversation_id, "runId": run.id, "events": shown,
                "nextCursor": encode_cursor("events", run.id, position) if more else None}

    # -- decisions and changes -----------------------------------------------------------------

    async def _tool_kiro_permission_decide(self, args: dict[str, Any], progress: ProgressSink | None,
                                           viewer: Viewer) -> dict[str, Any]:
        scope.require_owner(viewer)  # before any lookup: the answer says nothing about the ids
        run = await self._run_of(viewer, args["conversationId"], args["runId"])
        run, added = await self.orchestrator.decide(run.id, args["permissionRequestId"], args["decision"],
                                                    scope=args.get("scope") or "workspace")
        return {"conversationId": run.conversation_id, "runId": run.id,
                "permissionRequestId": args["permissionRequestId"], "decision": args["decision"],
                "status": run.status, "rulesAdded": added}

    async def _tool_kiro_question_answer(self, args: dict[str, Any], progress: ProgressSink | None,
                                         viewer: Viewer) -> dict[str, Any]:
        conversation = await self.conversation_for(viewer, args["conversationId"])
        answers = None if args.get("dismissed") else args["answers"]
        ask_id = args.get("askId") or self._only_card(conversation.id)
        status = self.orchestrator.answer_question(conversation.id, ask_id, answers)
        return {"conversationId": conversation.id, "askId": ask_id, "status": status}

    def _only_card(self, conversation_id: str) -> str:
        cards = self.orchestrator.questions.of_conversation(conversation_id)
        if len(cards) != 1:
            raise conversation_error("question_not_found" if not cards else "question_ambiguous",
                                     "this conversation has no open question card" if not cards else
                                     f"this conversation has {len(cards)} open question cards; name one with askId")
        return cards[0].ask_id

    def pending_questions(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's open question cards, oldest first (the page rehydrates from these)."""
        return [{**card.view(), "runId": card.run_id}
                for card in self.orchestrator.questions.of_conversation(conversation_id)]

    async def _tool_kiro_configure(self, args: dict[str, Any], progress: ProgressSink | None,
                                   viewer: Viewer) -> dict[str, Any]:
        conversation = await self._runnable_conversation(viewer, args["conversationId"])
        if args.get("authority"):
            self.require_authority(await self.authority_for(viewer, args["authority"], conversation.authority))
        await self.check_requested(args)
        changed = await self._db(self.store.update_defaults, conversation.id,
                                 Settings(model=args.get("model"), effort=args.get("effort"),
                                          mode=args.get("mode"), authority=args.get("authority")),
                                 allowed_commands=await self._allowlist(args))
        return {"conversationId": changed.id, "defaults": conversation_settings(changed)}

    async def _tool_kiro_fork(self, args: dict[str, Any], progress: ProgressSink | None,
                              viewer: Viewer) -> dict[str, Any]:
        source = await self._runnable_conversation(viewer, args["conversationId"])
        try:
            caps, _ = await self.capabilities.get(refresh=True)
        except KirocrewError:
            caps = None
        if caps is None or not caps.session_fork:
            raise conversation_error("unsupported_capability",
                                     "the installed kiro-cli does not advertise session fork (kiro_capabilities "
                                     "acp.sessionFork is false); nothing was changed")
        if source.workspace.strategy == "worktree":
            raise conversation_error("unsupported_capability", "forking a worktree conversation is not supported: "
                                     "two conversations would share one branch")
        if source.state != "idle":
            raise conversation_error("conversation_busy", "fork needs the conversation idle")
        if await self._db(self.store.name_in_use, args["name"]):
            raise conversation_error("conversation_name_taken", f"a conversation named {args['name']!r} exists")
        session_id = await self._db(self.store.session_id, source.id)
        forked_session = None
        if session_id is not None:
            forked_session = await self.orchestrator.fork_session(source, session_id)
        fork = await self._db(self.store.create_conversation, name=args["name"], workspace=source.workspace,
                              authority=source.authority, model=source.model, effort=source.effort,
                              mode=source.mode, acp_session_id=forked_session,
                              allowed_commands=source.allowed_commands, created_by=viewer.session_conversation)
        return {"conversationId": fork.id, "forkedFrom": source.id, "name": fork.name,
                "defaults": conversation_settings(fork)}

    async def _tool_kiro_cancel(self, args: dict[str, Any], progress: ProgressSink | None,
                                viewer: Viewer) -> dict[str, Any]:
        run = await self._run_of(viewer, args["conversationId"], args["runId"])
        was_terminal = run.terminal
        # Shielded: a client that aborts the cancel request must not leave a half-torn-down worker.
        run = await asyncio.shield(self.orchestrator.cancel(run.id))
        return {"conversationId": run.conversation_id, "runId": run.id, "status": run.status,
                "changed": not was_terminal}

    async def _tool_kiro_archive(self, args: dict[str, Any], progress: ProgressSink | None,
                                 viewer: Viewer) -> dict[str, Any]:
        visible = await self.conversation_for(viewer, args["conversationId"])
        conversation = await self._db(self.store.archive_conversation, visible.id)
        return {"conversationId": conversation.id, "state": _shown_state(conversation)}

    async def _tool_kiro_delete(self, args: dict[str, Any], progress: ProgressSink | None,
                                viewer: Viewer) -> dict[str, Any]:
        conversation = await self.conversation_for(viewer, args["conversationId"])
        cid, ws = conversation.id, conversation.workspace
        if conversation.state == "archived" and args["confirmName"] == conversation.name:
            # It never touches a workspace or branch, so it must not orphan them (git runs outside the store lock;
            # an archived conversation gets no new worktree meanwhile).
            if ws.strategy == "worktree" and ws.worktree_path and ws.worktree_branch and await self._db(
                    worktrees.worktree_remains,
                    worktrees.stored_info(ws)):
                raise conversation_error("worktree_not_cleaned_up", "the conversation's worktree or branch still "
                                         "exists; clean it up (kiro_worktree_cleanup) before deleting")
            # An idle worker may still host the conversation's kiro session (and hold its lock): close it first.
            await self.orchestrator.release(cid)
        def precheck(conversation: Conversation, sessions: list[str]) -> None:
            for session_id in filter(_safe_session, sessions):
                if kiro_sessions.tree_in_use(session_id):
                    raise conversation_error("kiro_session_in_use", "a live kiro-cli process holds this "
                                             "conversation's session or one of its sub-agents'; stop it, then "
                                             "delete again")

        sessions = await self._db(self.store.delete_conversation, cid, confirm_name=args["confirmName"],
                                  precheck=precheck)
        # kiro's own transcripts hold the prompts: the conversation's sessions (flat or V3) and their sub-agents'.
        for session_id in filter(_safe_session, sessions):
            try:
                if await asyncio.to_thread(kiro_sessions.remove_session_tree, session_id):
                    log.warning("kept the files of a kiro session that became busy during kiro_delete")
            except OSError as exc:
                log.warning("could not remove a deleted conversation's kiro session files: %s", exc.strerror)
        return {"conversationId": cid, "deleted": True}

    # -- worktrees -----------------------------------------------------------------------------

    async def _tool_kiro_worktree_inspect(self, args: dict[str, Any], progress: ProgressSink | None,
                                          viewer: Viewer) -> dict[str, Any]:
        conversation, info = await self._worktree_of(viewer, args["conversationId"])
        report = await self._db(worktrees.inspect_worktree, info)
        active = len(await self._db(self.store.unfinished_runs, conversation.id))
        merge = report["mergeState"]
        state = ("conflicted" if merge["conflicted"] else "unknown" if merge["integrated"] is None
                 else "integrated" if merge["integrated"] else "unintegrated")
        return {
            "conversationId": conversation.id, "branch": report["branch"], "baseRef": report["base"]["ref"],
            "baseCommit": report["base"]["createdFrom"],
            "activeRuns": active, "clean": not report["dirty"], "ignoredFiles": report["ignoredFiles"],
            "mergeState": state,
            "changedFiles": [{"path": f["path"], "status": f["status"]} for f in report["changedFiles"]],
            "changedFilesTruncated": report["changedFilesTruncated"], "diffStats": report["diffStats"],
        }

    async def _tool_kiro_worktree_cleanup(self, args: dict[str, Any], progress: ProgressSink | None,
                                          viewer: Viewer) -> dict[str, Any]:
        conversation, info = await self._worktree_of(viewer, args["conversationId"])
        # "No active run" is checked and new runs are blocked in one store transaction, so a spawn or send
        # racing this cleanup either lands first (worktree_active) or is refused (conversation_retiring).
        await self._db(self.store.begin_retiring, conversation.id)
        try:
            await self._db(worktrees.cleanup_worktree, info, active_runs=0)
            retired = await self._db(self.store.archive_conversation, conversation.id, retired=True)
        finally:
            await self._db(self.store.end_retiring, conversation.id)
        return {"conversationId": retired.id, "removedBranch": info.branch, "state": _shown_state(retired)}

    async def _worktree_of(self, viewer: Viewer,
                           conversation_id: str) -> tuple[Conversation, worktrees.WorktreeInfo]:
        conversation = await self.conversation_for(viewer, conversation_id)
        ws = conversation.workspace
        if ws.strategy != "worktree" or not ws.worktree_path or not ws.worktree_branch:
            raise conversation_error("not_a_worktree_conversation", "this conversation uses a shared workspace")
        if conversation.retired:
            raise conversation_error("worktree_not_found", "the worktree was already cleaned up")
        return conversation, worktrees.stored_info(ws)

    # -- the person's hands on a conversation's Kiro session (no MCP tool: the CLI and the page) ---------

    async def hand_over(self, viewer: Viewer, conversation_id: str) -> dict[str, Any]:
        """Release the conversation's worker and say how to carry its Kiro session on by hand.

        The command is ``kiro-cli chat --resume-id <session>``, run in the conversation's working
        directory; ``command`` is it as one shell line (quoted with :func:`shlex.join`).
        """
        conversation, session_id = await self._session_of(viewer, conversation_id, purpose="handing it over")
        if conversation.retired:
            raise conversation_error("conversation_retired", "the conversation's worktree was cleaned up, so its "
                                     "working directory is gone")
        from kirocrew_core.kiro import resolve_kiro_cli

        binary = resolve_kiro_cli()
        argv = [str(binary.path) if binary.path else "kiro-cli", "chat", "--resume-id", session_id]
        cwd = conversation.cwd
        return {"conversationId": conversation.id, "sessionId": session_id, "cwd": cwd, "argv": argv,
                "command": f"cd {shlex.quote(cwd)} && {shlex.join(argv)}"}

    async def repair_session(self, viewer: Viewer, conversation_id: str) -> dict[str, Any]:
        """Mend a Kiro session its images broke: downscale, keep the newest, a ``.bak`` of each changed file.

        Its worker is released first; a session another process holds (a live lock) is refused.
        """
        from kirocrew_conversations import session_images

        conversation, session_id = await self._session_of(viewer, conversation_id, purpose="repair")
        located = await asyncio.to_thread(kiro_sessions.locate, session_id)
        if located is None:
            raise conversation_error("kiro_session_not_found", "kiro-cli's files of the conversation's session "
                                     "are gone (deleted by hand, or kept elsewhere)")
        if await asyncio.to_thread(kiro_sessions.lock_in_use, located.lock):
            raise conversation_error("kiro_session_in_use", "a live kiro-cli process holds this conversation's "
                                     "session (its lock); close it, then repair again")
        try:
            report = await asyncio.to_thread(session_images.repair, located)
        except OSError as exc:
            raise conversation_error("internal_error",
                                     redact_text(f"the session could not be repaired: {exc}")) from None
        left = await asyncio.to_thread(session_images.count_images, located)
        log.info("repaired a kiro session: %d image(s) downscaled, %d removed", report.downscaled, report.removed)
        return {"conversationId": conversation.id, **report.as_dict(), "imagesLeft": left}

    async def _session_of(self, viewer: Viewer, conversation_id: str, *, purpose: str) -> tuple[Conversation, str]:
        """The conversation (the person's to hand over) and its Kiro session, its worker released."""
        if not viewer.is_person:
            raise conversation_error("conversation_not_found", f"no conversation {conversation_id!r}")
        conversation = await self.conversation_for(viewer, conversation_id)
        session_id = await self._db(self.store.session_id, conversation.id)
        if not session_id or not _safe_session(session_id):
            raise conversation_error("no_kiro_session", "the conversation has no Kiro session yet (no run started "
                                     "one)")
        await self.orchestrator.release(conversation.id, purpose=purpose)
        return conversation, session_id

    # -- helpers -------------------------------------------------------------------------------

    async def _run_of(self, viewer: Viewer, conversation_id: str, run_id: str) -> Run:
        """The run, of the conversation named, which ``viewer`` may see (:meth:`conversation_for`)."""
        run: Run = await self._db(self.store.get_run, run_id)  # run_not_found first, as ever
        conversation = await self.conversation_for(viewer, conversation_id)
        if run.conversation_id != conversation.id:
            if not viewer.is_person:  # another tree's run is no business of the session's: an unknown id
                raise conversation_error("run_not_found", f"no run {run_id!r}")
            raise conversation_error("conversation_mismatch", "the run does not belong to this conversation")
        return run

    async def _directive_summary(self, conversation_id: str) -> dict[str, Any]:
        """kiro_status's line on what session directives left: follow-ups waiting, an active monitor loop."""
        card = await self._db(self.store.directives.followups, conversation_id)
        monitor = await self._db(self.store.directives.monitor, conversation_id)
        return {"followUps": len(card.items) if card else 0, "monitorActive": bool(monitor and monitor.active)}

    async def _run_view(self, run: Run, conversation: Conversation | None = None) -> dict[str, Any]:
        conversation = conversation or await self._db(self.store.get_conversation, run.conversation_id)
        permissions = (await self._db(self.store.permission_requests, run.id)
                       if run.status == "needs_attention" else [])
        return run_view(run, conversation, permissions, self.orchestrator.questions.of_run(run.id))

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(AUTO_ARCHIVE_SWEEP_SECS)
            try:
                await self._db(self.store.auto_archive, _days_ago(limits.AUTO_ARCHIVE_DAYS))
            except KirocrewError as exc:
                log.warning("auto-archive sweep failed: %s", exc.code)

    @staticmethod
    async def _db(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kirocrew_conversations.orchestrator import db_call

        return await db_call(fn, *args, **kwargs)


def _safe_session(session_id: str) -> bool:
    """A session id that names files in kiro's sessions directory and nothing else."""
    try:
        kiro_sessions.check_session_id(session_id)
    except KirocrewError:
        return False
    return True


def _days_ago(days: int) -> str:
    return (datetime.now(timezone.utc) - timedelta(days=days)).isoformat(timespec="milliseconds")


def _shown_state(conversation: Conversation) -> str:
    return "retired" if conversation.retired else conversation.state


def _progress_message(runs: Sequence[Run]) -> str:
    """Counts per status only: no ids, names, prompts or replies."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.status] = counts.get(run.status, 0) + 1
    unfinished = sum(n for status, n in counts.items() if status in NONTERMINAL_STATUSES)
    detail = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return f"waiting on {unfinished} of {len(runs)} run(s): {detail}"


def _read_image(index: int, image: dict[str, Any]) -> ImageInput:
    """Read one attached image, checking it is a regular image file of exactly its declared size."""
    where = f"images[{index}]"
    try:
        fd = os.open(image["path"], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        raise conversation_error("invalid_image", f"{where}: not a readable file") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise conversation_error("invalid_image", f"{where}: not a regular file")
        if info.st_size != image["sizeBytes"]:
            raise conversation_error("invalid_image", f"{where}: the file is {info.st_size} bytes, "
                                                      f"not the declared {image['sizeBytes']}")
        data = handle.read(limits.IMAGE_MAX_BYTES + 1)
    if len(data) != image["sizeBytes"]:
        raise conversation_error("invalid_image", f"{where}: the file changed while it was read")
    if not (data.startswith(_IMAGE_MAGIC) or data[4:12] in (b"ftypavif", b"ftypheic")):
        raise conversation_error("invalid_image", f"{where}: the content is not a known image format")
    from kirocrew_conversations.session_images import downscale

    # kiro's backend refuses an image over 2000 px on a side, and then every later request of the session.
    data, mime_type = downscale(data, image["mimeType"])
    return ImageInput(mime_type=mime_type, declared_size=len(data), data=data)


def _check_choices(caps: Any, *, model: str | None, mode: str | None, inherited: Set[str] = frozenset()) -> None:
    """``unknown_model`` / ``unknown_mode`` (listing what exists) unless kiro-cli offers the choice.

    ``inherited`` names the settings that came from the conversation's defaults, so the message
    says where to change them. Nothing is checked where kiro-cli could not be asked (``caps``
    None, or no agents announced).
    """
    if caps is None:
        return

    def whose(name: str) -> str:
        return " (the conversation's default; change it with kiro_configure)" if name in inherited else ""

    ids = [m.id for m in caps.models]
    if model is not None and ids and model not in ids:
        raise conversation_error("unknown_model", _clip_listing(
            f"kiro-cli's live catalog has no model {model!r}{whose('model')}; available: ", ids))
    # The rendered kirocrew agent is checked when its run starts (agent_file_unavailable): the probe may have run
    # before the host rendered it.
    if mode is not None and mode != DEFAULT_AGENT and caps.modes and mode not in caps.modes:
        raise conversation_error("unknown_mode", _clip_listing(
            f"kiro-cli announces no agent {mode!r}{whose('mode')}; available: ", list(caps.modes)))


def _clip_listing(head: str, names: Sequence[str]) -> str:
    """``head`` and as many of ``names`` as fit an error message, saying how many did not."""
    shown: list[str] = []
    budget = limits.TEXT_MAX_CHARS - len(head) - 64  # room for the "and N more" tail
    for name in names:
        if len(", ".join([*shown, name])) > budget:
            return head + ", ".join(shown) + f" (and {len(names) - len(shown)} more, see kiro_capabilities)"
        shown.append(name)
    return head + ", ".join(shown)


__all__ = ["ConversationsService", "ProgressSink", "ServiceConfig", "redact_text"]
