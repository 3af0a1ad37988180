"""What a job does when it fires: an agent job is a run of a conversation, a command job a process.

:class:`JobRunner` is the host's default runner (:class:`~kirocrew_cron.service.CronHost` takes
another one only in tests). It raises nothing for an ordinary failure: it returns an
:class:`Outcome`, which the host turns into the history row, the job's last result and the
notification. A refusal before anything ran (the job's authority cannot run here) is
``denied``. Cancelling it (the job's deadline, the reaper, the host stopping) tears down what
it started: the conversation run is cancelled, the command's process group is killed.

* **Agent jobs** run in the host's conversations service, as any conversation's run: a
  persistent job keeps one conversation (``cron-<id>``, its id kept in ``job.conversation_id``;
  created again if it was deleted or archived) and gets its previous result as context (the
  reference's preamble); a fresh job gets a new conversation ``cron-<id>-<8 hex>`` per run and
  the bare message. The conversation works in the job's workspace under the job's authority, on
  the job's agent (its mode) and model. The run's reply is the result.
* **Command jobs** run ``/bin/sh -c COMMAND`` in the job's workspace under the job's authority
  (the authority backend's launcher, as a conversation's kiro-cli gets it; an authority that
  cannot run refuses the fire), bounded by ``timeout`` (0: 300 s), in their own process group.
  Exit status 0 is success; the output, redacted, is the result. A session's command job also
  runs *as* that session: it gets a session key of its conversation (bound to the job's process,
  revoked when it ends), so a ``kirocrew`` command it runs acts for the session, never for the
  person; the person's command job is vouched for as the person's
  (:meth:`~kirocrew_core.coretools.identity.SessionRegistry.vouch_person`), so a ``kirocrew``
  command it runs acts for the person, as one run from their shell would. The group is tied to
  the host (:func:`kirocrew_core.proc.spawn_tied_async`: it is killed when the host dies, even by
  SIGKILL) and recorded with the run's history row (its id and its leader's start), so a host that
  starts after one died can kill what is left; nothing of it outlives the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kirocrew_cron.model import (
    COMMAND_TIMEOUT_DEFAULT_SECS,
    LAST_RESULT_MAX,
    MINIMAL_LAST_RESULT_MAX,
    Job,
    RunStatus,
)

if TYPE_CHECKING:
    from kirocrew_core.processes import ProcessRef
    from kirocrew_core.proc import GroupRecord

    from kirocrew_conversations.public import Conversation, ConversationsService, Run

#: The reference's wrapper of the previous result a persistent job's prompt starts with.
PREVIOUS_RESULT_HEAD = "[Previous run result — do NOT repeat the same content]\n"
PREVIOUS_RESULT_TAIL = "\n[End of previous run result]\n\n"
NO_RESPONSE = "_No response._"
#: How many command jobs run at once (the rest wait for a slot).
MAX_CONCURRENT_COMMANDS = 16
#: The most output a command run keeps (read past it is discarded, so a chatty command cannot fill memory).
OUTPUT_READ_MAX = 1024 * 1024


@dataclass
class Outcome:
    """How a run ended. ``status``: success, failure, timeout, cancelled or denied (refused before it ran)."""

    status: RunStatus
    result: str = ""
    error: str = ""
    conversation_id: str = ""
    run_id: str = ""


@dataclass
class ActiveRun:
    """A run in progress, as the host tracks it (the runner fills in what it starts, so it can be torn down)."""

    job_id: str
    record_id: int
    trigger: str
    started_at: float
    #: When the job's ``timeout_secs`` cancels it, and when the reaper force-ends it if the cancel did not.
    deadline: float
    reap_at: float
    task: asyncio.Task[Any] | None = None
    conversation_id: str = ""
    run_id: str = ""
    process: asyncio.subprocess.Process | None = None
    reaped: bool = False
    #: Called with (conversation id, run id) once an agent run exists, so history can link it while it runs.
    on_linked: Callable[[str, str], None] | None = field(default=None, repr=False)
    #: Called (in a worker thread) with a command's process group once it runs, so history records it.
    on_process: Callable[[GroupRecord], None] | None = field(default=None, repr=False)


class Runner(Protocol):
    def __call__(self, job: Job, active: ActiveRun) -> Awaitable[Outcome]: ...


def capped_result(job: Job, text: str) -> str:
    """A result as ``last_result`` keeps it: ``minimal_context`` jobs keep less."""
    return text[: MINIMAL_LAST_RESULT_MAX if job.minimal_context else LAST_RESULT_MAX]


def agent_prompt(job: Job) -> str:
    """The message a run of ``job`` sends: a persistent job's previous result (capped) first, as context."""
    if job.persistent_session and job.last_result:
        return PREVIOUS_RESULT_HEAD + capped_result(job, job.last_result) + PREVIOUS_RESULT_TAIL + job.message
    return job.message


class JobRunner:
    """The host's runner (see the module docstring); ``conversations`` is the host's conversations service.

    At most ``max_commands`` command jobs run at once (a catch-up after a long downtime must not
    start hundreds of processes together); the others wait their turn, their deadline running.
    Agent jobs need no bound here: the conversations service queues runs beyond its workers.
    """

    def __init__(self, conversations: Callable[[], Awaitable[ConversationsService]] | None = None, *,
                 max_commands: int = MAX_CONCURRENT_COMMANDS) -> None:
        self._conversations = conversations or _hosted_conversations
        self._commands = asyncio.Semaphore(max_commands)

    async def __call__(self, job: Job, active: ActiveRun) -> Outcome:
        if job.command:
            async with self._commands:
                return await run_command(job, active)
        return await self._run_agent(job, active)

    # -- agent jobs ------------------------------------------------------------------------------

    async def _run_agent(self, job: Job, active: ActiveRun) -> Outcome:
        from kirocrew_core.errors import KirocrewError

        try:
            service = await self._conversations()
            service.require_authority(job.authority)
        except KirocrewError as exc:
            return _refused(exc)
        problem = _workspace_problem(job.workspace)
        if problem:
            return Outcome("failure", error=problem)
        try:
            conversation = await self._conversation(service, job)
            # The job's authority for this run, even in a persistent conversation made under another one
            # (the host narrows a session's job to its conversation's authority at each fire).
            settings = await service.resolve_settings(
                {"model": None if job.model in ("", "auto") else job.model, "mode": job.agent or None,
                 "authority": job.authority}, conversation)
            run = await service.orchestrator.submit(conversation.id, agent_prompt(job), settings)
        except KirocrewError as exc:
            return _refused(exc) if exc.code == "authority_unavailable" else Outcome(
                "failure", error=_error_text(f"the run could not start: {exc.code}: {exc.message}"))
        active.conversation_id, active.run_id = conversation.id, run.id
        if active.on_linked is not None:
            active.on_linked(conversation.id, run.id)
        try:
            ended = await _run_end(service, run.id)
        except asyncio.CancelledError:  # the deadline or the reaper: the conversation's run ends too
            with contextlib.suppress(Exception):
                await asyncio.shield(service.orchestrator.cancel(run.id))
            raise
        return _agent_outcome(ended, conversation.id)

    async def _conversation(self, service: ConversationsService, job: Job) -> Conversation:
        """The job's persistent conversation (made again if it went away), or a fresh one for this run."""
        from kirocrew_core.errors import KirocrewError

        from kirocrew_conversations.public import db_call

        store = service.store
        if job.persistent_session and job.conversation_id:
            try:
                existing = await db_call(store.get_conversation, job.conversation_id)
            except KirocrewError:
                existing = None
            if existing is not None and existing.state != "archived" and not existing.retired:
                return existing
        name = f"cron-{job.id}" if job.persistent_session else f"cron-{job.id}-{secrets.token_hex(4)}"
        if await db_call(store.name_in_use, name):  # an archived conversation of this job keeps the plain name
            name = f"cron-{job.id}-{secrets.token_hex(4)}"
        from kirocrew_conversations.public import Workspace, workspace_fingerprint

        real = os.path.realpath(job.workspace)
        # A session's job runs in a conversation of that session's tree, so the session may follow it.
        kind, _, owner = job.owner.partition(":")
        return await db_call(store.create_conversation, name=name,
                             workspace=Workspace(strategy="shared", path=real, fingerprint=workspace_fingerprint(real)),
                             authority=job.authority, mode=job.agent or None,
                             model=None if job.model in ("", "auto") else job.model,
                             created_by=owner if kind == "conversation" and owner else None)


async def _hosted_conversations() -> ConversationsService:
    from kirocrew_conversations.public import ready_service

    return await ready_service()


async def _run_end(service: ConversationsService, run_id: str) -> Run:
    """The run once it reached a terminal status: event-driven (the orchestrator's waits and run-end listeners)."""
    orchestrator = service.orchestrator
    ended: asyncio.Future[Run] = asyncio.get_running_loop().create_future()

    async def listener(run: Run) -> None:
        if run.id == run_id and not ended.done():
            ended.set_result(run)

    orchestrator.run_end_listeners.append(listener)
    try:
        while True:
            waited = await orchestrator.wait([run_id], "any")
            run = waited.runs[0]
            if run.terminal:
                return run
            if run.status == "needs_attention":  # a permission or question waits on its conversation's page
                return await ended
    finally:
        with contextlib.suppress(ValueError):
            orchestrator.run_end_listeners.remove(listener)


def _agent_outcome(run: Run, conversation_id: str) -> Outcome:
    from kirocrew_core.redaction import redact_secrets

    reply = redact_secrets(run.reply_text or "")
    if run.status == "completed":
        return Outcome("success", result=reply or NO_RESPONSE, conversation_id=conversation_id, run_id=run.id)
    detail = f": {run.error_detail}" if run.error_detail else ""
    status: RunStatus = "cancelled" if run.status == "cancelled" else "failure"
    return Outcome(status, result=reply, error=_error_text(f"the run ended {run.status} ({run.error_code}){detail}"),
                   conversation_id=conversation_id, run_id=run.id)


# -- command jobs ----------------------------------------------------------------------------------


async def run_command(job: Job, active: ActiveRun) -> Outcome:
    """``sh -c`` the job's command under its authority, in its workspace, bounded; see the module docstring."""
    from kirocrew_core import proc
    from kirocrew_core.errors import KirocrewError

    problem = _workspace_problem(job.workspace)
    if problem:
        return Outcome("failure", error=problem)
    key = _session_key(job)
    vouched: list[ProcessRef] = []  # the person's command, while it runs
    try:
        try:
            launcher, env = command_launch(job.authority, job.workspace)
            if key is not None:
                from kirocrew_core.host.protocol import HOST_PID_ENV, SESSION_KEY_ENV

                env[SESSION_KEY_ENV] = key
                env.pop(HOST_PID_ENV, None)  # an inherited one would name another process
            child = await _started_uncancelled(proc.spawn_tied_async(
                [*launcher, "/bin/sh", "-c", job.command], env=env, cwd=job.workspace, stdout=proc.PIPE,
                stderr=asyncio.subprocess.STDOUT))
        except KirocrewError as exc:
            return _refused(exc) if exc.code == "authority_unavailable" else Outcome(
                "failure", error=_error_text(f"the command could not start: {exc.message}"))
        active.process = child
        return await _supervise_command(job, active, child, key, vouched)
    finally:
        from kirocrew_core.coretools import identity

        if key is not None:
            identity.registry().revoke(key)
        for process in vouched:
            identity.registry().unvouch(process)


async def _supervise_command(job: Job, active: ActiveRun, child: asyncio.subprocess.Process,
                             key: str | None, vouched: list[ProcessRef]) -> Outcome:
    """Bind and record the running command, read it to its end (bounded), and leave nothing of it behind."""
    from kirocrew_core import proc

    bound = job.timeout or COMMAND_TIMEOUT_DEFAULT_SECS
    try:
        await asyncio.to_thread(_started, active, child, key, vouched)
        assert child.stdout is not None
        output = await asyncio.wait_for(_read_all(child.stdout), timeout=bound)
        code = await asyncio.wait_for(child.wait(), timeout=max(1.0, bound))
    except TimeoutError:
        await proc.terminate_async(child, reason=f"cron job {job.id} passed its {bound}s bound")
        return Outcome("failure", error=f"Command timed out after {bound}s")
    except BaseException:  # cancelled (the deadline, the reaper, the host stopping): nothing outlives the run
        await asyncio.shield(proc.terminate_async(child, reason=f"cron job {job.id} was cancelled"))
        raise
    # What the command left running in its group (a `cmd &` whose output went elsewhere) ends with the run.
    await proc.terminate_async(child, reason=f"cron job {job.id} ended")
    from kirocrew_core.redaction import redact_secret_bytes, redact_secrets

    # Raw bytes first: a binary secret (the SEL key as `cat` prints it) is matched before decoding mangles it.
    text = redact_secrets(redact_secret_bytes(output).decode("utf-8", "replace")).strip()
    if code != 0:
        return Outcome("failure", result=text, error=_error_text(f"exit status {code}" + (f": {text[-500:]}"
                                                                                           if text else "")))
    return Outcome("success", result=text)


async def _started_uncancelled(spawning: Awaitable[asyncio.subprocess.Process]) -> asyncio.subprocess.Process:
    """The child ``spawning`` starts; a cancel that arrives meanwhile lets the start finish, ends the child,
    then propagates (the child would otherwise run on, unknown to anyone, until the host stops)."""
    from kirocrew_core import proc

    task = asyncio.ensure_future(spawning)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await proc.terminate_async(await task, reason="a cron run was cancelled while its command started")
        raise


def _session_key(job: Job) -> str | None:
    """A session key for a session's command job (its conversation's), so it acts as the session; None for
    the person's jobs, which act as the person."""
    kind, _, target = job.owner.partition(":")
    if kind != "conversation" or not target:
        return None
    from kirocrew_core.coretools import identity

    return identity.registry().issue("conversation", target, agent=job.agent or None, workspace=job.workspace)


def _started(active: ActiveRun, child: asyncio.subprocess.Process, key: str | None,
             vouched: list[ProcessRef]) -> None:
    """The key bound to the command's process (its group leader: the command descends from it), or that process
    vouched for as the person's (added to ``vouched``) when the job is the person's, and the group
    recorded in history. Blocking file I/O (a worker thread); a failure to record is logged, the run goes on:
    the group is still tied to the host's life."""
    import logging

    from kirocrew_core import proc

    from kirocrew_core.coretools import identity

    if key is not None:
        identity.registry().bind_pid(key, child.pid)
    elif (process := identity.registry().vouch_person(child.pid)) is not None:
        vouched.append(process)
    group = proc.group_record(child)
    if group is not None and active.on_process is not None:
        try:
            active.on_process(group)
        except Exception:  # the tie still ends the group with the host; history just lacks it
            logging.getLogger(__name__).exception("cron job %s: its process group could not be recorded",
                                                  active.job_id)


def command_launch(authority_name: str, workspace: str) -> tuple[list[str], dict[str, str]]:
    """The argv prefix and environment a command runs with under ``authority_name``: its backend's launcher,
    and the environment a kiro-cli would get (the augmented ``PATH``, unless the backend gives its own).

    ``authority_unavailable`` (a KirocrewError) when the authority cannot run here: never run unrestricted instead.
    """
    from kirocrew_conversations.public import authority_launch

    return authority_launch(authority_name, workspace)


async def _read_all(stream: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    kept = 0
    while True:
        chunk = await stream.read(64 * 1024)
        if not chunk:
            return b"".join(chunks)
        if kept < OUTPUT_READ_MAX:
            chunks.append(chunk[: OUTPUT_READ_MAX - kept])
            kept += len(chunks[-1])


# -- shared ----------------------------------------------------------------------------------------


def _workspace_problem(workspace: str) -> str:
    try:
        if workspace and stat.S_ISDIR(os.stat(workspace).st_mode):
            return ""
    except OSError:
        pass
    return "the job's workspace is not an existing directory"


def _refused(exc: Any) -> Outcome:
    return Outcome("denied", error=_error_text(f"{exc.code}: {exc.message}"))


def _error_text(text: str) -> str:
    from kirocrew_conversations.public import redact_text

    return redact_text(text, 2000)
