"""Sub-agents: child conversations a crew session spawns, steers and hears back from.

A sub-agent is an ordinary conversation on the host's orchestrator, with its own kiro-cli
worker and so its own session key: its ``kirocrew-core`` calls resolve to itself, never to
its parent. The store records its parent conversation and its spawn batch. Only the
conversation that spawned a sub-agent sees or steers it (another's child id is
``subagent_not_found``, exactly as an unknown id); the person (the CLI twins, ``viewer``
None) sees every one.

When a child's run ends, its parent gets a completion message queued (it runs after the
parent's current run), unless a ``spawn_sub_agents`` call is waiting for that child: then
the call returns the result instead. That claim is the only thing kept in memory, in the
service (one per host), never in the MCP server; everything else is in the store.

The ``kirocrew-core`` tools over this live in :mod:`kirocrew_conversations.subagent_tools`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import stat
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kirocrew_core.coretools.contract import ToolRefused
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations import limits
from kirocrew_conversations.redact import workspace_fingerprint
from kirocrew_conversations.store import Conversation, Run, Settings, Workspace
from kirocrew_conversations.vocabulary import UNRESTRICTED

if TYPE_CHECKING:
    from kirocrew_conversations.service import ConversationsService

log = logging.getLogger(__name__)

INLINE_PREFIX = "__inline__:"
# A needs_attention child makes the orchestrator's wait return at once; look again this often meanwhile.
_ATTENTION_POLL_SECS = 1.0


@dataclass(frozen=True)
class Task:
    """One task to spawn: its prompt and the Kiro agent (a conversation's mode) to run it, if not the default."""

    prompt: str
    agent: str | None = None


@dataclass(frozen=True)
class Spawned:
    conversation: Conversation
    run: Run
    task: Task


class SubAgents:
    """The service's sub-agents: spawning under the cap, visibility, and completion delivery."""

    def __init__(self, service: ConversationsService) -> None:
        self.service = service
        self.store = service.store
        self.orchestrator = service.orchestrator
        self._spawning = asyncio.Lock()  # the cap check and the creation it admits are one step
        self._claimed: Counter[str] = Counter()  # child id → spawn_sub_agents calls returning its result
        self._releasing: set[str] = set()  # children being released: their cancelled run reports nothing
        self.orchestrator.run_end_listeners.append(self._run_ended)

    @property
    def cap(self) -> int:
        return self.service.config.max_subagents

    # -- who is asking -------------------------------------------------------------------------

    async def conversation_of(self, conversation_id: str) -> Conversation:
        """The caller session's own conversation (a session key names one)."""
        try:
            return await self._db(self.store.get_conversation, conversation_id)
        except KirocrewError as exc:
            raise ToolRefused("the calling session's conversation no longer exists",
                              code="caller_unverified") from exc

    async def visible(self, viewer: Conversation | None, child_id: str) -> Conversation:
        """``child_id`` if ``viewer`` spawned it (the person, None, sees all); else ``subagent_not_found``."""
        try:
            child = await self._db(self.store.get_conversation, child_id)
        except KirocrewError:
            child = None
        if child is None or not child.subagent or (viewer is not None and child.parent_id != viewer.id):
            raise ToolRefused(f"no sub-agent {child_id!r} of this session (spawn_list shows yours)",
                              code="subagent_not_found")
        return child

    # -- spawning ------------------------------------------------------------------------------

    async def spawn(self, parent: Conversation | None, tasks: Sequence[Task], *, cwd: str | None = None,
                    model: str | None = None, authority: str | None = None, claim: bool = False) -> list[Spawned]:
        """One child per task, in one batch; all or nothing (``subagent_cap_reached`` spawns none).

        ``authority`` (a crew's) narrows what the children get; by default they get their parent's, and
        never more (``authority_escalation``). ``claim``: a ``spawn_sub_agents`` call will collect the
        results (no completion messages), until it calls :meth:`unclaim`.
        """
        workspace = workspace_for(cwd, parent, self.service.config.subagent_roots)
        for task in tasks:  # before anything is created
            await self._check(model, task.agent)
        authority = child_authority(parent, authority)
        # A child runs on its parent's agent (its tools) and model by default; without a parent, as any run.
        inherited_agent, inherited_model = await self.settings_of(parent)
        self.service.require_authority(authority)
        batch = secrets.token_hex(6)
        spawned: list[Spawned] = []
        async with self._spawning:
            if parent is not None:
                active = await self._db(self.store.active_subagents, parent.id)
                if active + len(tasks) > self.cap:
                    raise ToolRefused(
                        f"this session has {active} active sub-agent(s); {len(tasks)} more would pass the cap of "
                        f"{self.cap} (KIRO_CONVERSATIONS_MAX_SUBAGENTS); nothing was spawned. Wait for a "
                        "completion, or spawn_release one you no longer need", code="subagent_cap_reached")
            claimed: list[Conversation] = []
            try:
                for index, task in enumerate(tasks, start=1):
                    child = await self._db(self.store.create_conversation, name=f"sub-{batch}-{index}",
                                           workspace=workspace, authority=authority,
                                           model=model or inherited_model, mode=task.agent or inherited_agent,
                                           parent_id=parent.id if parent is not None else None, spawn_batch=batch)
                    if claim:
                        self._claimed[child.id] += 1
                        claimed.append(child)
                    settings = await self._settings(child, model, task.agent)
                    run = await self.orchestrator.submit(child.id, task.prompt, settings)
                    spawned.append(Spawned(child, run, task))
            except BaseException:  # the caller never gets these to collect: they report as messages
                self.unclaim(claimed)
                raise
        return spawned

    def unclaim(self, children: Sequence[Conversation]) -> None:
        for child in children:
            self._claimed[child.id] -= 1
            if self._claimed[child.id] <= 0:
                del self._claimed[child.id]

    async def collect(self, spawned: Sequence[Spawned], max_wait: float) -> set[str]:
        r"""Wait (at most ``max_wait`` s) until every spawned run has ended; the children whose run has.

        The caller then :meth:`unclaim`\ s the others and reads :meth:`results`. An ended child's claim is
        not the caller's to give up: its run-end listener consumes it (it may run just after the wait saw
        the run end), so a collected result is never also sent as a completion message.
        """
        runs = {s.run.id: s.run for s in spawned}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        while True:
            unfinished = [rid for rid, run in runs.items() if not run.terminal]
            remaining = deadline - loop.time()
            if not unfinished or remaining <= 0:
                return {s.conversation.id for s in spawned if runs[s.run.id].terminal}
            waiting = [rid for rid in unfinished if runs[rid].status != "needs_attention"]
            if waiting:
                await self.orchestrator.wait(waiting, "any", timeout=remaining)
            else:  # every one waits on a person's permission decision: look again shortly
                await asyncio.sleep(min(_ATTENTION_POLL_SECS, remaining))
            for rid in unfinished:
                runs[rid] = await self._db(self.store.get_run, rid)

    async def results(self, spawned: Sequence[Spawned]) -> list[dict[str, Any]]:
        """One result entry per child, read after :meth:`unclaim`: a run that ended in between is in it (and
        may also have queued its completion message), never lost."""
        return [result_entry(s.conversation, await self._db(self.store.get_run, s.run.id)) for s in spawned]

    async def proceed(self, viewer: Conversation, child_id: str, message: str, *, agent: str | None = None,
                      model: str | None = None) -> Run:
        """``spawn_continue``: a new turn for an idle, unreleased child of ``viewer`` (under the cap)."""
        child = await self.runnable(viewer, child_id)
        await self._check(model, agent)
        async with self._spawning:
            if await self._db(self.store.unfinished_runs, child.id):
                raise ToolRefused(f"sub-agent {child.id} is still working; spawn_steer it, or wait for its "
                                  "completion", code="conversation_busy")
            active = await self._db(self.store.active_subagents, viewer.id)
            if active + 1 > self.cap:
                raise ToolRefused(f"this session has {active} active sub-agent(s), the cap is {self.cap}; "
                                  "nothing was sent", code="subagent_cap_reached")
            return await self.orchestrator.submit(child.id, message, await self._settings(child, model, agent))

    async def steer(self, viewer: Conversation, child_id: str, message: str) -> tuple[Run, bool]:
        """Interrupt a working child's turn with ``message`` (True), or run it as an idle child's next turn."""
        child = await self.runnable(viewer, child_id)
        if await self._db(self.store.unfinished_runs, child.id):
            outcome = await self.orchestrator.interrupt(child.id, message)
            return outcome.run, True
        return await self.proceed(viewer, child_id, message), False

    async def runnable(self, viewer: Conversation, child_id: str) -> Conversation:
        child = await self.visible(viewer, child_id)
        if child.released_at is not None:
            raise ToolRefused(f"sub-agent {child.id} was released; it can no longer be continued",
                              code="subagent_released")
        return child

    async def release(self, viewer: Conversation | None, child_id: str) -> bool:
        """End a child for good: its runs are cancelled, its worker closed, it is archived. False if it was."""
        child = await self.visible(viewer, child_id)
        if child.released_at is not None:
            return False
        self._releasing.add(child.id)
        try:
            for run in await self._db(self.store.unfinished_runs, child.id):
                await asyncio.shield(self.orchestrator.cancel(run.id))
            with contextlib.suppress(KirocrewError):  # a worker still winding down closes on its own
                await self.orchestrator.release(child.id, purpose="release")
            await self._db(self.store.release_subagent, child.id)
        finally:
            self._releasing.discard(child.id)
        return True

    async def listing(self, viewer: Conversation | None) -> list[tuple[Conversation, Run | None]]:
        children = await self._db(self.store.subagents, viewer.id if viewer is not None else None)
        out = []
        for child in children:
            runs = await self._db(self.store.list_runs, child.id)
            out.append((child, runs[-1] if runs else None))
        return out

    async def latest_run(self, child: Conversation) -> Run | None:
        runs = await self._db(self.store.list_runs, child.id)
        return runs[-1] if runs else None

    async def settings_of(self, parent: Conversation | None) -> tuple[str | None, str | None]:
        """The parent's agent and model: each its conversation's default, else what its latest run runs on.

        The latest run is the one whose session is calling (a parent spawns from a run in progress), so
        a model or agent that run overrode is the one its children get too.
        """
        if parent is None:
            return None, None
        runs = await self._db(self.store.list_runs, parent.id)
        latest = runs[-1] if runs else None
        return (parent.mode or (latest.mode if latest else None),
                parent.model or (latest.model if latest else None))

    async def _check(self, model: str | None, agent: str | None) -> None:
        """``unknown_model``/``unknown_mode`` for a choice kiro-cli does not offer (nothing to ask without one)."""
        if model is not None or agent is not None:
            await self.service.check_requested({"model": model, "mode": agent})

    async def _settings(self, child: Conversation, model: str | None, agent: str | None) -> Settings:
        """The run's settings: resolved like kiro_spawn's when the task names a choice.

        Without one, the run takes the child's defaults (its parent's agent and model; without a
        parent, the kirocrew agent and the model kiro reports once the run starts), so a spawn
        never waits on the capability probe.
        """
        if model is None and agent is None:
            return Settings()
        settings: Settings = await self.service.resolve_settings({"model": model, "mode": agent}, child)
        return settings

    # -- completion delivery -------------------------------------------------------------------

    async def _run_ended(self, run: Run) -> None:
        """A child's run ended: queue its completion message to the parent (unless claimed or moot)."""
        if run.error_code == "run_replaced":  # a steer replaced it; the steer's own run reports
            return
        child = await self._db(self.store.get_conversation, run.conversation_id)
        # (read and checked with no await in between: a release marks the child released before it stops
        # counting it as releasing, so one of the two always shows)
        if self._claimed[child.id]:  # a spawn_sub_agents call returns this result: consume its claim
            self.unclaim([child])
            return
        if (child.parent_id is None or not child.subagent or child.released_at is not None
                or child.id in self._releasing):
            return
        try:
            parent = await self._db(self.store.get_conversation, child.parent_id)
        except KirocrewError:
            return
        if parent.state == "archived":
            log.info("sub-agent %s finished after its parent was archived; no completion message", child.id)
            return
        try:
            await self.orchestrator.submit(parent.id, completion_message(child, run))
        except KirocrewError as exc:
            log.warning("could not deliver sub-agent %s's completion: %s", child.id, exc.code)

    @staticmethod
    async def _db(fn: Any, *args: Any, **kwargs: Any) -> Any:
        from kirocrew_conversations.orchestrator import db_call

        return await db_call(fn, *args, **kwargs)


# -- pure helpers ----------------------------------------------------------------------------------


def workspace_for(cwd: str | None, parent: Conversation | None, roots: Sequence[str]) -> Workspace:
    """The child's workspace: ``cwd`` (under the parent's workspace or a configured root), else the parent's.

    The person (no parent) may name any existing directory. Refusals: ``cwd_not_allowed``,
    ``workspace_not_found``, and ``cwd_required`` for the person without one.
    """
    base = (parent.workspace.worktree_path or parent.workspace.path) if parent is not None else None
    if cwd is None:
        if base is None:
            raise ToolRefused("a sub-agent the person spawns needs a working directory", code="cwd_required")
        path = base
    else:
        if not os.path.isabs(cwd):
            if base is None:
                raise ToolRefused("cwd must be an absolute path", code="cwd_not_allowed")
            cwd = os.path.join(base, cwd)
        path = os.path.realpath(cwd)
        if parent is not None and not any(_under(path, root) for root in [base or "", *roots] if root):
            raise ToolRefused("cwd must be under this session's workspace or a directory listed in "
                              "KIRO_CONVERSATIONS_SUBAGENT_ROOTS", code="cwd_not_allowed")
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        is_dir = False
    if not is_dir:
        raise ToolRefused("the sub-agent's working directory does not exist", code="workspace_not_found")
    real = os.path.realpath(path)
    return Workspace(strategy="shared", path=real, fingerprint=workspace_fingerprint(real))


def child_authority(parent: Conversation | None, requested: str | None) -> str:
    """The authority a child gets: ``requested`` if its parent's allows it, else the parent's; the person's
    children (no parent) may get any. ``authority_escalation`` for a request above the parent's own."""
    from kirocrew_conversations.authority import escalates
    from kirocrew_conversations.errors import conversation_error

    own = parent.authority if parent is not None else UNRESTRICTED
    if requested is None:
        return own
    if parent is not None and escalates(requested, own):
        raise conversation_error("authority_escalation", f"a session running as {own} cannot give a sub-agent the "
                                 f"{requested} authority; it may use its own or a narrower one")
    return requested


def _under(path: str, root: str) -> bool:
    root = os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def clip(text: str, keep: int = limits.COMPLETION_KEEP_CHARS) -> tuple[str, int | None]:
    """``text`` cut to ``keep`` characters at a line end where one is near; the next line's index if cut."""
    if len(text) <= keep:
        return text, None
    cut = text.rfind("\n", 0, keep)
    cut = keep if cut < keep // 2 else cut + 1
    return text[:cut], text[:cut].count("\n")


def completion_message(child: Conversation, run: Run) -> str:
    """The message a parent gets when one of its children's runs ends: id, status, and the result text."""
    how = run.status if run.error_code is None else f"{run.status} ({run.error_code})"
    head = f"[kirocrew sub-agent completion] Sub-agent {child.id} ({child.name}) finished: {how}."
    text, next_line = clip(run.reply_text or "")
    if not text:
        return f"{head}\nIt left no result text."
    body = f"{head}\nResult:\n{text}"
    if next_line is not None or run.reply_truncated:
        body += (f"\n[result truncated: call spawn_status with agent_id={child.id} and offset={next_line or 0} "
                 "for the rest]")
    return body


def result_entry(child: Conversation, run: Run) -> dict[str, Any]:
    """One ``spawn_sub_agents`` result: completed with its text, error with its code, or timed_out."""
    if not run.terminal:
        return {"agent": child.id, "status": "timed_out"}
    if run.status != "completed":
        return {"agent": child.id, "status": "error", "error": run.error_code or run.status}
    text, next_line = clip(run.reply_text or "")
    entry: dict[str, Any] = {"agent": child.id, "status": "completed", "text": text}
    if next_line is not None or run.reply_truncated:
        entry["more"] = f"truncated: spawn_status agent_id={child.id} offset={next_line or 0} has the rest"
    return entry


def format_results(entries: Sequence[dict[str, Any]]) -> str:
    return "\n\n".join(json.dumps(entry, ensure_ascii=False) for entry in entries)


def status_label(child: Conversation, run: Run | None) -> str:
    if child.released_at is not None:
        return "released"
    if run is None:
        return "new"
    if not run.terminal:
        return "running" if run.status != "queued" else "queued"
    return "done" if run.status == "completed" else f"done error={run.error_code or run.status}"


def elapsed(run: Run | None) -> str:
    if run is None or run.started_at is None:
        return ""
    start = datetime.fromisoformat(run.started_at)
    end = datetime.fromisoformat(run.ended_at) if run.ended_at else datetime.now(timezone.utc)
    return f"{max(0, int((end - start).total_seconds()))}s"


def page_lines(text: str, *, offset: int, limit: int, grep: str | None) -> str:
    """The result text's lines ``offset``…``offset+limit`` (of those matching ``grep``), with a header saying so."""
    lines = text.splitlines()
    total = len(lines)
    header: list[str] = []
    if grep:
        try:
            pattern = re.compile(grep)
        except re.error as exc:
            raise ToolRefused(f"grep is not a valid regular expression: {exc.msg}", code="invalid_grep") from None
        lines = [line for line in lines if pattern.search(line)]
        header.append(f"{len(lines)} line(s) matched grep of {total} total")
    shown = lines[offset:offset + limit]
    if offset or len(lines) > offset + limit:
        header.append(f"showing lines {offset + 1}-{offset + len(shown)} of {len(lines)}")
    if len(lines) > offset + limit:
        header.append(f"more available — call again with offset={offset + limit}")
    out = "\n".join(shown)
    return (f"[{' | '.join(header)}]\n" if header else "") + out
