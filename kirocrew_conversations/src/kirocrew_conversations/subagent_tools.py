"""The sub-agent tools, ``wait`` and ``task_run``: what kirocrew-conversations adds to ``kirocrew-core``.

Contributed through ``core_mcp_tools()`` (:mod:`kirocrew_conversations.plugin`), which calls
:func:`tools` on every ``tools/list``, so the descriptions quote the live sub-agent cap.
Each handler is thin: resolve who is asking, call :class:`~kirocrew_conversations.subagents.SubAgents`
on the host's service, format the text. Nothing is kept between calls.

Who is asking: a verified crew session (its conversation), or — only for the CLI twins'
tools (``spawn_run``, ``spawn_list``, ``task_run``) — the person: a ``kirocrew`` command on
the host's socket with no session key. Anything else is ``caller_unverified``. The other
tools declare ``strict`` identity, so the server refuses an unverified caller before they run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.coretools.contract import ToolCall, ToolRefused

from kirocrew_conversations import limits as L
from kirocrew_conversations.vocabulary import DEFAULT_AGENT

if TYPE_CHECKING:
    from kirocrew_core.crews.bindings import Crew

    from kirocrew_conversations.service import ConversationsService
    from kirocrew_conversations.store import Conversation

ServiceProvider = Callable[[], Awaitable["ConversationsService"]]

_ID = {"type": "string", "pattern": r"^[A-Za-z0-9_]{1,64}$", "description": "A sub-agent's id (spawn_list)."}
_AGENT = {"type": "string", "minLength": 1, "maxLength": L.AGENT_MODE_MAX_CHARS,
          "description": "The Kiro agent to run it (kiro_capabilities modes); default: this session's agent "
                         "(kirocrew's own, whose MCP servers it needs to report back)."}
_MODEL = {"type": "string", "pattern": r"^[a-zA-Z0-9][a-zA-Z0-9._-]*$", "maxLength": L.MODEL_MAX_CHARS,
          "description": "The model id; default: this session's model."}
_CWD = {"type": "string", "minLength": 1, "maxLength": L.PATH_MAX_CHARS,
        "description": "Working directory: under this session's workspace (relative paths are taken from it) "
                       "or a configured sub-agent root. Default: this session's workspace."}
_TASK = {"type": "string", "minLength": 1, "maxLength": L.SUBAGENT_TASK_MAX_CHARS}
_CREW = {"type": "string", "minLength": 1, "maxLength": 64,
         "description": "A crew the owner configured (select_crew lists them): the tasks run on its Kiro agent, "
                        "model, workspace and authority (cwd and model, when given, win). Not with agent/agents."}
WAIT_MIN_SECS, WAIT_MAX_SECS = 60, 1800


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


async def _hosted_service() -> ConversationsService:
    from kirocrew_conversations.hosted import hosted

    return await hosted().ready()


def tools(service: ServiceProvider = _hosted_service, *, cap: int | None = None) -> list[CoreMcpTool]:
    """The tools, over ``service`` (the host's by default); ``cap`` is quoted (default: the configured one)."""
    if cap is None:
        cap = _configured_cap()

    async def spawn_run(args: dict[str, Any], call: ToolCall) -> str:
        hub = (await service()).subagents
        parent = await _spawner(call, hub)
        if ("task" in args) == ("tasks" in args):
            raise ToolRefused("pass exactly one of task or tasks", code="invalid_arguments")
        prompts = [args["task"]] if "task" in args else list(args["tasks"])
        if "agents" in args and "agent" in args:
            raise ToolRefused("pass agent or agents, not both", code="invalid_arguments")
        crew = await _crew(args)
        agents = list(args["agents"]) if "agents" in args else [args.get("agent", crew.kiro_agent)] * len(prompts)
        if len(agents) != len(prompts):
            raise ToolRefused("agents must name one agent per task", code="invalid_arguments")
        from kirocrew_conversations.subagents import Task

        spawned = await hub.spawn(parent, [Task(p, a) for p, a in zip(prompts, agents, strict=True)],
                                  cwd=args.get("cwd", crew.workspace_path), model=args.get("model", crew.model),
                                  authority=crew.authority)
        on_crew = f", crew {crew.name}" if crew.name else ""
        lines = [f"Spawned {len(spawned)} sub-agent(s). Results will arrive as completion messages:"]
        lines += [f"  {s.conversation.id} ({s.run.mode or DEFAULT_AGENT}{on_crew}): {s.task.prompt[:80]}"
                  for s in spawned]
        if parent is None:
            lines.append("They have no parent session: follow them with kirocrew spawn list and kiro_result.")
        else:
            lines.append("END YOUR TURN NOW unless you have other work: each completion arrives as a new message "
                         "in this conversation after your current turn.")
        return "\n".join(lines)

    async def spawn_list(args: dict[str, Any], call: ToolCall) -> str:
        hub = (await service()).subagents
        viewer = await _spawner(call, hub)
        rows = await hub.listing(viewer)
        if not rows:
            return "No sub-agents."
        from kirocrew_conversations.subagents import elapsed, status_label

        lines = []
        for child, run in rows:
            took = elapsed(run)
            line = (f"{child.id}  [{status_label(child, run)}]{f' ({took})' if took else ''}  {child.name}"
                    f"  agent={child.mode or 'default'}")
            if viewer is None:
                line += f"  parent={child.parent_id or '-'}"
            lines.append(line)
        return "\n".join(lines)

    async def spawn_status(args: dict[str, Any], call: ToolCall) -> str:
        hub = (await service()).subagents
        viewer = await _spawner(call, hub)
        child = await hub.visible(viewer, args["agent_id"])
        run = await hub.latest_run(child)
        from kirocrew_conversations.subagents import page_lines, status_label

        head = f"{child.id} ({child.name}) [{status_label(child, run)}]"
        if run is None or not run.reply_text:
            return f"{head}\n_No result._"
        return f"{head}\n" + page_lines(run.reply_text, offset=args.get("offset", 0),
                                        limit=args.get("limit", 200), grep=args.get("grep"))

    async def spawn_continue(args: dict[str, Any], call: ToolCall) -> str:
        hub = (await service()).subagents
        viewer = await _parent(call, hub)
        run = await hub.proceed(viewer, args["conversation"], args["task"], agent=args.get("agent"),
                                model=args.get("model"))
        return (f"Continued sub-agent {run.conversation_id} as run {run.id}. Its result will arrive as a "
                "completion message.")

    async def spawn_steer(args: dict[str, Any], call: ToolCall) -> str:
        hub = (await service()).subagents
        viewer = await _parent(call, hub)
        run, interrupted = await hub.steer(viewer, args["agent_id"], args["message"])
        if interrupted:
            return (f"Steered sub-agent {run.conversation_id}: its current turn was stopped and your message is its "
                    f"next turn (run {run.id}).")
        return f"Sub-agent {run.conversation_id} was idle: your message runs as its next turn (run {run.id})."

    async def spawn_release(args: dict[str, Any], call: ToolCall) -> str:
        hub = (await service()).subagents
        viewer = await _parent(call, hub)
        if not await hub.release(viewer, args["conversation"]):
            return f"Sub-agent {args['conversation']} was already released."
        return f"Released sub-agent {args['conversation']} — it can no longer be continued."

    async def spawn_sub_agents(args: dict[str, Any], call: ToolCall) -> str:
        svc = await service()
        hub = svc.subagents
        parent = await _parent(call, hub)
        from kirocrew_conversations.subagents import Task, format_results

        tasks = [Task(a["prompt"], a.get("agent_or_mode")) for a in args["agents"]]
        spawned = await hub.spawn(parent, tasks, cwd=args.get("cwd"), claim=True)
        settled: set[str] = set()
        try:
            settled = await hub.collect(spawned, svc.config.subagents_max_wait_secs)
        finally:  # an ended child's claim is given up by its run-end listener, whenever that runs
            hub.unclaim([s.conversation for s in spawned if s.conversation.id not in settled])
        return format_results(await hub.results(spawned))

    async def wait(args: dict[str, Any], call: ToolCall) -> str:
        # A cancelled call (notifications/cancelled) cancels this task: the sleep ends at once.
        await asyncio.sleep(args["seconds"])
        return f"Waited {args['seconds']}s. Resuming: {args['reason']}"

    async def task_run(args: dict[str, Any], call: ToolCall) -> str:
        svc = await service()
        caller = await _spawner(call, svc.subagents)
        from kirocrew_conversations.tasks import start_task

        conversation, run = await start_task(svc, caller, args["spec"], name=args.get("name"), cwd=args.get("cwd"))
        return (f"Task runner started: conversation {conversation.id} ({conversation.name}), run {run.id}. "
                "Follow it with kiro_result or on its page in the dashboard.")

    return [
        CoreMcpTool(
            "spawn_run",
            "Spawn sub-agents: each task runs as a child conversation with its own kiro-cli, in parallel with you. "
            f"At most {cap} of your sub-agents may be active at once (a batch over the cap spawns none). Each "
            "result arrives later as a new message in this conversation, after your current turn ends; "
            "spawn_sub_agents instead blocks until all finish. crew=<name> runs them on a crew the owner "
            "configured (select_crew, route_crew).",
            _object({"task": {**_TASK, "description": "One task."},
                     "tasks": {"type": "array", "items": _TASK, "minItems": 1, "maxItems": L.SUBAGENT_BATCH_MAX,
                               "description": "Several tasks, one sub-agent each (one batch)."},
                     "agent": _AGENT,
                     "agents": {"type": "array", "items": _AGENT, "minItems": 1, "maxItems": L.SUBAGENT_BATCH_MAX,
                                "description": "One agent per task, in order."},
                     "crew": _CREW, "cwd": _CWD, "model": _MODEL}),
            spawn_run, identity="lenient"),
        CoreMcpTool("spawn_list", "List the sub-agents this session spawned: id, status, elapsed time, agent.",
                    _object({}), spawn_list, read_only=True, identity="lenient"),
        CoreMcpTool(
            "spawn_status",
            "One sub-agent's status and result text (its latest turn's reply), paged by lines; grep filters lines "
            "by a regular expression.",
            _object({"agent_id": _ID,
                     "offset": {"type": "integer", "minimum": 0, "maximum": L.COUNT_MAX, "default": 0},
                     "limit": {"type": "integer", "minimum": 1, "maximum": 2000, "default": 200},
                     "grep": {"type": "string", "minLength": 1, "maxLength": 500}}, ("agent_id",)),
            spawn_status, read_only=True, identity="strict"),
        CoreMcpTool(
            "spawn_continue",
            "Give a finished (idle) sub-agent of yours a new task in the same conversation; it keeps its context. "
            "Counts against the cap while it works; the result arrives as a completion message.",
            _object({"conversation": _ID, "task": _TASK, "agent": _AGENT, "model": _MODEL},
                    ("conversation", "task")),
            spawn_continue, identity="strict"),
        CoreMcpTool(
            "spawn_steer",
            "Redirect a sub-agent of yours: a working one has its current turn stopped and takes your message as "
            "its next turn; an idle one simply runs it.",
            _object({"agent_id": _ID, "message": _TASK}, ("agent_id", "message")),
            spawn_steer, identity="strict"),
        CoreMcpTool(
            "spawn_release",
            "End a sub-agent of yours for good: its work is cancelled and it can no longer be continued.",
            _object({"conversation": _ID}, ("conversation",)), spawn_release, identity="strict"),
        CoreMcpTool(
            "spawn_sub_agents",
            f"Run up to {L.SUBAGENT_BATCH_MAX} sub-agents and block until every one finishes (bounded by the "
            f"configured max wait); returns one JSON line per sub-agent: completed with its text, error, or "
            f"timed_out. Counts against the cap of {cap} active sub-agents.",
            _object({"agents": {"type": "array", "minItems": 1, "maxItems": L.SUBAGENT_BATCH_MAX,
                                "items": _object({"prompt": _TASK, "agent_or_mode": _AGENT}, ("prompt",))},
                     "cwd": _CWD}, ("agents",)),
            spawn_sub_agents, identity="strict"),
        CoreMcpTool(
            "wait",
            f"Pause for {WAIT_MIN_SECS}-{WAIT_MAX_SECS} seconds (e.g. for a build or a sub-agent), then resume "
            "with the reason. Cancelling the call ends the wait early.",
            _object({"seconds": {"type": "integer", "minimum": WAIT_MIN_SECS, "maximum": WAIT_MAX_SECS},
                     "reason": {"type": "string", "minLength": 1, "maxLength": 500}}, ("seconds", "reason")),
            wait, read_only=True, identity="none"),
        CoreMcpTool(
            "task_run",
            "Run a task spec as a new conversation and report its id: spec is a file path (relative to this "
            "session's workspace) or the text itself prefixed with __inline__:.",
            _object({"spec": {"type": "string", "minLength": 1, "maxLength": L.TASK_SPEC_MAX_CHARS},
                     "name": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9._-]{0,63}$",
                              "description": "The new conversation's name (unique); default: task-<random>."},
                     "cwd": _CWD}, ("spec",)),
            task_run, identity="lenient"),
    ]


async def _crew(args: dict[str, Any]) -> Crew:
    """The crew ``args`` name (``unknown_crew`` lists those there are); an empty binding when they name none."""
    from kirocrew_core.crews.bindings import Crew, find_crew

    if "crew" not in args:
        return Crew("")
    if "agent" in args or "agents" in args:
        raise ToolRefused("pass crew or agent/agents, not both: a crew runs its own Kiro agent",
                          code="crew_and_agent")
    crew: Crew = await asyncio.to_thread(find_crew, args["crew"])
    return crew


def _configured_cap() -> int:
    """The live cap: the running service's, else what its settings would be."""
    from kirocrew_conversations.hosted import hosted

    service = hosted().service
    if service is not None:
        return service.config.max_subagents
    raw = os.environ.get("KIRO_CONVERSATIONS_MAX_SUBAGENTS", "").strip()
    return int(raw) if raw.isdigit() else L.SUBAGENTS_DEFAULT


async def _spawner(call: ToolCall, hub: Any) -> Conversation | None:
    """The caller's conversation; None for the person (a ``kirocrew`` command outside every session)."""
    if call.session is None and call.is_person_command:
        return None
    return await _parent(call, hub)


async def _parent(call: ToolCall, hub: Any) -> Conversation:
    session = call.require_session()
    if session.kind != "conversation":
        raise ToolRefused(f"{call.tool} works for a conversation's session; this one is a {session.kind} run",
                          code="not_a_conversation_session")
    conversation: Conversation = await hub.conversation_of(session.target_id)
    return conversation
