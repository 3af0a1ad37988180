"""The workflow tools kirocrew-conversations adds to ``kirocrew-core``: run, list, show, rerun, cancel, save, author.

Thin handlers over the host's :class:`~kirocrew_conversations.workflows.WorkflowEngine`. Who is
asking decides what is seen: a crew session (its conversation) sees and cancels only the runs it
started, and its runs' agent calls are its own sub-agents; the person (a ``kirocrew`` command
outside every session, by ancestry) sees and cancels every run. Another session's run is
``workflow_run_not_found``, exactly as an unknown id. Only the person saves a workflow by name
(:mod:`~kirocrew_conversations.workflow_library`); anyone may run a saved one.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.coretools.contract import ToolCall, ToolRefused

from kirocrew_conversations import limits as L

if TYPE_CHECKING:
    from kirocrew_conversations.service import ConversationsService
    from kirocrew_conversations.store import Conversation
    from kirocrew_conversations.workflows import ActiveRun, WorkflowEngine

PERSON = "person"
SHOW_EVENTS_DEFAULT = 50
LIST_MAX = 100
_NAME = {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]{0,63}$", "description": "A saved workflow's name."}
_RUN_ID = {"type": "string", "pattern": r"^[A-Za-z0-9_\-]{1,64}$", "description": "A run's id (workflow_list)."}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


async def _service() -> ConversationsService:
    from kirocrew_conversations.hosted import hosted

    return await hosted().ready()


def _engine(service: ConversationsService) -> WorkflowEngine:
    if service.workflows is None:
        raise ToolRefused("workflows run in the kirocrew host; this server has none", code="host_required")
    return service.workflows


async def _caller(call: ToolCall, service: ConversationsService) -> tuple[str, Conversation | None]:
    """``(owner, conversation)``: a conversation session's own, or the person's (``"person"``, None)."""
    session = call.acting_session("works with workflow runs")
    if session is None:
        return PERSON, None
    if session.kind != "conversation":
        raise ToolRefused(f"{call.tool} works for a conversation's session; this one is a {session.kind} run",
                          code="not_a_conversation_session")
    conversation = await service.subagents.conversation_of(session.target_id)
    return f"conversation:{conversation.id}", conversation


async def _visible(engine: WorkflowEngine, owner: str, run_id: str) -> dict[str, Any]:
    record = await engine.record(run_id)
    if record is None or (owner != PERSON and record.get("owner") != owner):
        raise ToolRefused(f"no workflow run {run_id!r} of this caller (workflow_list shows yours)",
                          code="workflow_run_not_found")
    return record


async def start_checked(engine: WorkflowEngine, source: str, *, owner: str, args: dict[str, Any],
                        conversation: Conversation | None, cwd: str | None, budget_total: int) -> ActiveRun:
    """Check ``source`` and start it as ``owner``'s run within ``budget_total`` agent calls (``workflow_run``
    and the Workflows page's start both come here); :class:`WorkflowRejected` when the check refuses it."""
    from kirocrew_conversations.workflow_check import check_source
    from kirocrew_conversations.workflows import ceilings_for

    meta = check_source(source)
    ceilings = ceilings_for(meta, agent_calls=budget_total)
    return await engine.start(source, owner=owner, args=args, ceilings=ceilings, owner_conversation=conversation,
                              cwd=cwd)


async def rerun_as_owner(service: ConversationsService, engine: WorkflowEngine, record: dict[str, Any],
                         from_index: int, conversation: Conversation | None) -> ActiveRun:
    """``record`` again from ``from_index``; the person rerunning a session's run reruns it as that session's."""
    kind, _, owner_id = str(record.get("owner", "")).partition(":")
    if conversation is None and kind == "conversation":
        conversation = await service.subagents.conversation_of(owner_id)
    return await engine.rerun(record, from_index, owner_conversation=conversation)


def tools() -> list[CoreMcpTool]:
    from kirocrew_conversations.workflow_author import INTENT_MAX
    from kirocrew_conversations.workflow_check import MAX_SOURCE_BYTES

    async def workflow_run(args: dict[str, Any], call: ToolCall) -> str:
        from kirocrew_conversations.workflow_check import WorkflowRejected
        from kirocrew_conversations.workflows import AGENT_CALLS_MAX

        service = await _service()
        engine = _engine(service)
        owner, conversation = await _caller(call, service)
        if conversation is None and "cwd" not in args:
            raise ToolRefused("a workflow the person runs needs a working directory for its agents (cwd)",
                              code="cwd_required")
        if ("source" in args) == ("workflow" in args):
            raise ToolRefused("pass exactly one of source or workflow (a saved workflow's name)",
                              code="invalid_arguments")
        if "workflow" in args:
            from kirocrew_conversations import workflow_library

            source = await asyncio.to_thread(workflow_library.load, args["workflow"])
        else:
            source = args["source"]
        try:
            run = await start_checked(engine, source, owner=owner, args=args.get("args", {}),
                                      conversation=conversation, cwd=args.get("cwd"),
                                      budget_total=int(args.get("budget_total", AGENT_CALLS_MAX)))
        except WorkflowRejected as exc:
            raise ToolRefused(f"the workflow was rejected before it ran (where: validate): {exc.message}",
                              code=exc.code) from None
        return (f"Started workflow run `{run.run_id}` ({run.record['name']}): at most {run.ceilings.agent_calls} "
                f"agent calls in {run.ceilings.wall_secs:g}s. Follow it with workflow_show run_id={run.run_id}.")

    async def workflow_list(args: dict[str, Any], call: ToolCall) -> str:
        service = await _service()
        owner, _ = await _caller(call, service)
        records = [r for r in await _engine(service).records() if owner == PERSON or r.get("owner") == owner]
        from kirocrew_conversations import workflow_library

        saved = await asyncio.to_thread(workflow_library.names)
        head = [f"Saved workflows: {', '.join(saved)}"] if saved else []
        if not records:
            return "\n".join([*head, "No workflow runs yet."])
        more = len(records) - LIST_MAX
        records = records[:LIST_MAX]
        lines = [f"- `{r['run_id']}` {r.get('name', '')} → {r.get('status')} ({len(r.get('events', []))} events)"
                 + (f" owner={r.get('owner')}" if owner == PERSON else "") for r in records]
        if more > 0:
            lines.append(f"… and {more} older run(s) not shown")
        return "\n".join(head + lines)

    async def workflow_show(args: dict[str, Any], call: ToolCall) -> str:
        service = await _service()
        owner, _ = await _caller(call, service)
        record = await _visible(_engine(service), owner, args["run_id"])
        keep = args.get("events", SHOW_EVENTS_DEFAULT)
        events = record.get("events", [])
        shown = {key: value for key, value in record.items() if key not in ("events", "source")}
        shown["event_count"] = len(events)
        shown["events"] = events[-keep:] if keep else []
        return json.dumps(shown, ensure_ascii=False, indent=1)

    async def workflow_rerun_subtree(args: dict[str, Any], call: ToolCall) -> str:
        service = await _service()
        owner, conversation = await _caller(call, service)
        engine = _engine(service)
        record = await _visible(engine, owner, args["run_id"])
        from_index = args.get("from_index", 0)
        run = await rerun_as_owner(service, engine, record, from_index, conversation)
        return (f"Re-running `{args['run_id']}` as `{run.run_id}`: agent calls before {from_index} replay their "
                f"recorded results. Follow it with workflow_show run_id={run.run_id}.")

    async def workflow_save(args: dict[str, Any], call: ToolCall) -> str:
        if call.acting_session("saves workflows") is not None:
            raise ToolRefused("only the owner saves workflows (a session may run a saved one, or pass its source)",
                              code="owner_only")
        from kirocrew_conversations import workflow_library
        from kirocrew_conversations.workflow_check import WorkflowRejected

        try:
            await asyncio.to_thread(workflow_library.save, args["name"], args["source"],
                                    replace=args.get("replace", False))
        except WorkflowRejected as exc:
            raise ToolRefused(f"the workflow was rejected (where: validate): {exc.message}", code=exc.code) from None
        return f"Saved workflow `{args['name']}`. Run it with workflow_run(workflow=\"{args['name']}\")."

    async def workflow_author(args: dict[str, Any], call: ToolCall) -> str:
        from kirocrew_conversations import workflow_author as author
        from kirocrew_conversations.subagents import Task
        from kirocrew_conversations.workflow_check import WorkflowRejected

        service = await _service()
        _, conversation = await _caller(call, service)
        if conversation is None and "cwd" not in args:
            raise ToolRefused("a workflow the person has authored needs a working directory for its author (cwd)",
                              code="cwd_required")
        hub = service.subagents
        spawned = await hub.spawn(conversation, [Task(author.prompt(args["intent"]))], cwd=args.get("cwd"),
                                  claim=True)
        settled: set[str] = set()
        try:
            settled = await hub.collect(spawned, service.config.subagents_max_wait_secs)
            ended = await hub.latest_run(spawned[0].conversation)
        finally:
            hub.unclaim([s.conversation for s in spawned if s.conversation.id not in settled])
            await asyncio.shield(hub.release(conversation, spawned[0].conversation.id))
        if ended is None or ended.status != "completed" or not ended.reply_text:
            raise author.no_reply(ended.status if ended is not None else "without a run")
        try:
            source = author.extract(ended.reply_text)
        except WorkflowRejected as exc:
            raise ToolRefused(f"the authored script was rejected (where: author): {exc.message}",
                              code=exc.code) from None
        draft = await asyncio.to_thread(author.keep, source)
        return (f"Authored workflow (draft `{draft}`). Review then run it with workflow_run(source=…), or save it "
                f"with workflow_save:\n\n```python\n{source.rstrip()}\n```")

    async def workflow_cancel(args: dict[str, Any], call: ToolCall) -> str:
        service = await _service()
        owner, _ = await _caller(call, service)
        engine = _engine(service)
        record = await _visible(engine, owner, args["run_id"])
        if not await engine.cancel(args["run_id"]):
            raise ToolRefused(f"run {args['run_id']} is not running ({record.get('status')}); nothing to cancel",
                              code="workflow_not_cancellable")
        return f"Run `{args['run_id']}`: cancelled"

    return [
        CoreMcpTool(
            "workflow_run",
            "Run a workflow: a Python module with a literal META dict and `async def workflow(ctx)` that orchestrates "
            "sub-agents (await ctx.agent(prompt, label=, phase=, schema=) → text, JSON or None; ctx.parallel, "
            "ctx.pipeline, ctx.log, ctx.sleep, ctx.args; await ctx.nudge(message, idle_secs=, max_cycles=) re-prompts "
            "this session each time it idles, as monitor_start does). No imports; no other ctx port. It runs "
            "sandboxed, within its ceilings "
            "(META wall_secs 60-21600, default 3600; at most 1000 agent calls, fewer with budget_total or META "
            "agent_calls; 200 tool calls per agent call, fewer with META tool_calls_per_step). Returns the run id "
            "at once; workflow_show follows it.",
            _object({"source": {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE_BYTES},
                     "workflow": {**_NAME, "description": "A saved workflow's name, instead of source."},
                     "args": {"type": "object", "description": "What the script reads as ctx.args."},
                     "budget_total": {"type": "integer", "minimum": 1, "maximum": 1000,
                                      "description": "The most agent calls the run may make (default 1000)."},
                     "cwd": {"type": "string", "minLength": 1, "maxLength": L.PATH_MAX_CHARS,
                             "description": "Where its agents work: as spawn_run's cwd (default: this session's "
                                            "workspace)."}}),
            workflow_run, identity="lenient"),
        CoreMcpTool("workflow_list", "Your workflow runs, newest first: id, name, status and event count.",
                    _object({}), workflow_list, read_only=True, identity="lenient"),
        CoreMcpTool(
            "workflow_show",
            "One workflow run as JSON: status, where and why it failed, its result, ceilings and its latest events.",
            _object({"run_id": _RUN_ID, "events": {"type": "integer", "minimum": 0, "maximum": 10000,
                                                   "default": SHOW_EVENTS_DEFAULT,
                                                   "description": "How many of the latest events to include."}},
                    ("run_id",)),
            workflow_show, read_only=True, identity="lenient"),
        CoreMcpTool(
            "workflow_rerun_subtree",
            "Run a finished, failed or cancelled workflow run of yours again as a new run: its agent calls before "
            "from_index return the results recorded the first time (no agent runs for them); the rest run anew.",
            _object({"run_id": _RUN_ID, "from_index": {"type": "integer", "minimum": 0, "maximum": 1000000,
                                                       "default": 0}}, ("run_id",)),
            workflow_rerun_subtree, identity="lenient"),
        CoreMcpTool(
            "workflow_save",
            "Save a workflow script under a name (the owner only; checked first). replace overwrites a saved one.",
            _object({"name": _NAME, "source": {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE_BYTES},
                     "replace": {"type": "boolean", "default": False}}, ("name", "source")),
            workflow_save, identity="lenient"),
        CoreMcpTool(
            "workflow_author",
            "Have a Kiro sub-agent write a workflow script for an intent. The script is checked and kept as a draft, "
            "never run: review it, then workflow_run(source=…) or workflow_save it.",
            _object({"intent": {"type": "string", "minLength": 1, "maxLength": INTENT_MAX},
                     "cwd": {"type": "string", "minLength": 1, "maxLength": L.PATH_MAX_CHARS,
                             "description": "Where the author works (default: this session's workspace)."}},
                    ("intent",)),
            workflow_author, identity="lenient"),
        CoreMcpTool("workflow_cancel", "Cancel a running workflow run of yours: its agents stop, it ends cancelled.",
                    _object({"run_id": _RUN_ID}, ("run_id",)), workflow_cancel, identity="lenient"),
    ]
