"""The cron operations every entry point shares: the MCP tools, ``kirocrew cron`` in process, the Cron page.

Each operation takes the host's :class:`JobHost` (the host's one ``CronHost``, or the CLI's
own over the store when no host runs) and an :class:`Actor`, the one who acts:

* the person (``Actor.person()``: the CLI, the page) sees and changes every job; the jobs it
  makes have owner :data:`~kirocrew_cron.model.PERSON` and choose their own authority and
  working directory;
* a verified session (``Actor.of_session``) sees and changes only the jobs it created; anything
  else is ``job_not_found``, worded as for an unknown id, so ids cannot be enumerated. Its jobs
  run with its conversation's authority and working directory, read from the conversations
  store, never from the arguments (a session cannot widen what its job may do; each fire narrows
  the job to its conversation's authority then, :func:`kirocrew_cron.service.effective_authority`),
  and the ``governance.cron`` switch gates what it schedules, updates, resumes and triggers.

Every check runs before anything is written, so a refused call changes nothing; every change
calls ``host.changed(job_id)`` so the scheduler plans again.

Names and messages reach the person's screen and a later run's prompt, so they hold no control
characters (:func:`_name`, :func:`_message`), and a session's jobs are bounded
(:data:`~kirocrew_cron.model.MAX_JOBS_PER_SESSION` each, :data:`~kirocrew_cron.model.MAX_SESSION_JOBS`
together) well inside the store's :data:`~kirocrew_cron.model.MAX_JOBS`, so sessions at their caps
never stop the person adding jobs. The store counts and inserts in one transaction.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kirocrew_cron.errors import cron_error
from kirocrew_cron.model import (
    CATCH_UP_MAX_DEFAULT,
    PERSON,
    TIMEOUT_SECS_DEFAULT,
    Job,
    RemovedJob,
    RunRecord,
    Schedule,
    session_owner,
)

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import CrewSession

    from kirocrew_cron.clock import Clock

#: The schedule fields of cron_add / cron_update; exactly one makes the schedule.
SCHEDULE_FIELDS = ("every", "cron_expr", "at", "delay", "at_time")
#: Fields only the person sets: a session's job runs with its own conversation's authority and directory.
PERSON_ONLY_FIELDS = ("authority", "cwd")
#: cron_update's fields copied onto the job as they are (after validation).
_PLAIN_UPDATES = ("name", "strict_schedule", "persistent_session", "minimal_context", "silent", "timeout",
                  "timeout_secs", "catch_up", "catch_up_max")
#: Every field cron_update may change (``json`` only shapes the answer).
UPDATE_FIELDS = (*_PLAIN_UPDATES, *SCHEDULE_FIELDS, *PERSON_ONLY_FIELDS, "message", "command", "agent", "model",
                 "skip_dates", "timezone")
INHERIT_MODEL = ("", "auto")


class JobStore(Protocol):
    """What the operations need of the cron store (``kirocrew_cron.store.CronStore``)."""

    def new_id(self) -> str: ...
    def add(self, job: Job, *, capped: bool = False) -> Job: ...
    def get(self, job_id: str) -> Job | None: ...
    def jobs(self, owner: str | None = None) -> list[Job]: ...
    def update(self, job_id: str, **changes: Any) -> Job: ...
    def remove(self, job_id: str, *, keep_history: bool = False) -> Job | None: ...
    def remove_owned(self, owner: str | None) -> int: ...
    def removed_job(self, job_id: str) -> RemovedJob | None: ...
    def history(self, job_id: str, limit: int = 50) -> list[RunRecord]: ...
    def adopt(self, job_id: str, owner: str, **changes: Any) -> Job: ...


class JobHost(Protocol):
    """What the operations need of the host's cron service (``kirocrew_cron.service.CronHost``)."""

    @property
    def store(self) -> JobStore: ...
    @property
    def clock(self) -> Clock: ...
    def changed(self, job_id: str | None = None) -> None: ...
    def is_running(self, job_id: str) -> bool: ...
    def next_fire(self, job: Job) -> float | None: ...
    async def trigger(self, job_id: str) -> RunRecord: ...


@dataclass(frozen=True)
class Actor:
    """Who acts: the person (``owner`` None: sees and changes every job) or a verified session (its own jobs)."""

    owner: str | None
    session: CrewSession | None = None

    @staticmethod
    def person() -> Actor:
        return Actor(None)

    @staticmethod
    def of_session(session: CrewSession) -> Actor:
        return Actor(session_owner(session), session)

    @property
    def is_person(self) -> bool:
        return self.owner is None

    def sees(self, job: Job) -> bool:
        return self.owner is None or job.owner == self.owner


# -- reads --------------------------------------------------------------------------------------------


def visible_jobs(host: JobHost, actor: Actor) -> list[Job]:
    """The jobs ``actor`` may see (the person: all), oldest first."""
    jobs = host.store.jobs(actor.owner)
    return sorted((job for job in jobs if actor.sees(job)), key=lambda job: (job.created_ts, job.id))


def visible_job(host: JobHost, actor: Actor, job_id: str) -> Job:
    """The job ``job_id`` if ``actor`` may see it; else ``job_not_found``, whether it is unknown or someone else's."""
    job = host.store.get(job_id)
    if job is None or not actor.sees(job):
        raise not_found(job_id)
    return job


@dataclass(frozen=True)
class JobHistory:
    """A job's runs, newest first: of a job that is there (``job``), or of a one-shot its run removed
    (``removed``), whose history outlives it."""

    job_id: str
    name: str
    runs: list[RunRecord]
    job: Job | None = None
    removed: RemovedJob | None = None


def job_history(host: JobHost, actor: Actor, job_id: str, limit: int) -> JobHistory:
    """The history of ``job_id`` if ``actor`` may see the job, or saw it before its run removed it (the same
    owner only: another's removed job is ``job_not_found``, worded as for an unknown id)."""
    job = host.store.get(job_id)
    if job is not None:
        visible = visible_job(host, actor, job_id)
        return JobHistory(visible.id, visible.name, host.store.history(visible.id, limit), job=visible)
    removed = host.store.removed_job(job_id)
    if removed is None or not (actor.is_person or removed.owner == actor.owner):
        raise not_found(job_id)
    return JobHistory(removed.id, removed.name, host.store.history(removed.id, limit), removed=removed)


def not_found(job_id: str) -> Exception:
    """The one answer for an unknown id, another session's job and the person's job alike."""
    return cron_error("job_not_found", f"job not found: {job_id}")


def job_view(host: JobHost, job: Job) -> dict[str, Any]:
    """``job`` as JSON for the page, ``kirocrew cron --json`` and the tools' ``json`` answers.

    Every field of :class:`~kirocrew_cron.model.Job` (the schedule as an object, skip dates as a
    list), plus ``kind``, ``enabled``, ``schedule_text`` (the schedule in words), ``next_run``
    (the next fire time, jitter included; None when it never fires again or is paused) and
    ``running``. The last result and error are shown as stored: the store redacts them before it
    keeps them (:mod:`kirocrew_cron.store`), so a listing of many jobs does not redact again.
    """
    from kirocrew_cron import schedule

    view = dataclasses.asdict(job)
    view["skip_dates"] = list(job.skip_dates)
    view.update(kind=job.kind, enabled=job.enabled, schedule_text=schedule.describe(job, host.clock.now()),
                next_run=host.next_fire(job) if job.enabled else None, running=host.is_running(job.id))
    return view


# -- changes ------------------------------------------------------------------------------------------


def add_job(host: JobHost, actor: Actor, args: Mapping[str, Any]) -> Job:
    """A new job from cron_add's (schema-valid) arguments, owned by ``actor``; nothing is stored on a refusal."""
    if not actor.is_person:
        _require_cron_capability("cron_add")
    now = host.clock.now()
    timezone = _timezone(args.get("timezone", ""))
    sched, one_shot = _schedule(args, now, timezone)
    if sched is None:
        raise cron_error("no_schedule", "provide every, cron_expr, at, delay, or at_time")
    message, command = _payload(args.get("message", ""), args.get("command", ""))
    name = clean_name(args["name"])
    placement = _placement(actor, args)
    job = Job(
        id=host.store.new_id(), name=name, schedule=sched, message=message, command=command,
        owner=placement.owner, timezone=timezone, skip_dates=_skip_dates(args.get("skip_dates", ())),
        strict_schedule=bool(args.get("strict_schedule", False)), catch_up=args.get("catch_up", "once"),
        catch_up_max=int(args.get("catch_up_max", CATCH_UP_MAX_DEFAULT)),
        agent=_agent(actor, args.get("agent", "")), model=_model(args.get("model", "")),
        authority=placement.authority, workspace=placement.workspace,
        persistent_session=bool(args.get("persistent_session", True)),
        minimal_context=bool(args.get("minimal_context", False)), silent=bool(args.get("silent", False)),
        timeout=int(args.get("timeout", 0)), timeout_secs=int(args.get("timeout_secs", TIMEOUT_SECS_DEFAULT)),
        delete_after_run=one_shot, created_ts=now, updated_ts=now)
    stored = host.store.add(job, capped=True)
    host.changed(stored.id)
    return stored


def update_job(host: JobHost, actor: Actor, job_id: str, args: Mapping[str, Any]) -> Job:
    """``job_id`` changed by cron_update's arguments (``no_fields`` when there are none)."""
    fields = {name: args[name] for name in UPDATE_FIELDS if name in args}
    if not fields:
        raise cron_error("no_fields", "no fields to update")
    job = visible_job(host, actor, job_id)
    if not actor.is_person:
        _require_cron_capability("cron_update")
    now = host.clock.now()
    changes: dict[str, Any] = {name: fields[name] for name in _PLAIN_UPDATES if name in fields}
    if "name" in fields:
        changes["name"] = clean_name(fields["name"])
    if "timezone" in fields:
        changes["timezone"] = _timezone(fields["timezone"])
    timezone = changes.get("timezone", job.timezone)
    sched, one_shot = _schedule(fields, now, timezone)
    if sched is not None:
        changes.update(schedule=sched, delete_after_run=one_shot)
    if "message" in fields or "command" in fields:
        message, command = _payload(fields.get("message", ""), fields.get("command", ""))
        if bool(command) != bool(job.command):
            raise cron_error("conflicting_payload",
                             f"job {job.id} is {'a command' if job.command else 'an agent'} job; a job keeps its "
                             "kind (remove it and add a new one instead)")
        changes.update(message=message, command=command)
    if "skip_dates" in fields:
        changes["skip_dates"] = _skip_dates(fields["skip_dates"])
    if "agent" in fields:
        changes["agent"] = _agent(actor, fields["agent"])
    if "model" in fields:
        changes["model"] = _model(fields["model"])
    _refuse_person_only(actor, fields)
    if "authority" in fields:
        changes["authority"] = fields["authority"]
    if "cwd" in fields:
        changes["workspace"] = person_workspace(fields["cwd"])
    if any(name in changes and changes[name] != getattr(job, name) for name in ("schedule", "timezone", "skip_dates")):
        # Catch-up counts due instants from last_due_ts: none were missed under a schedule that did not exist.
        changes["last_due_ts"] = now
    updated = host.store.update(job.id, **changes, updated_ts=now)
    host.changed(job.id)
    return updated


def remove_job(host: JobHost, actor: Actor, job_id: str) -> Job:
    job = visible_job(host, actor, job_id)
    removed = host.store.remove(job.id)
    if removed is None:  # removed meanwhile (its at-run ended): gone either way, as an unknown id is
        raise not_found(job_id)
    host.changed(job.id)
    return removed


def remove_all(host: JobHost, actor: Actor) -> int:
    """How many jobs were removed: the session's own, or every job for the person."""
    count = host.store.remove_owned(actor.owner)
    if count:
        host.changed(None)
    return count


def pause_job(host: JobHost, actor: Actor, job_id: str) -> Job:
    job = visible_job(host, actor, job_id)
    paused = host.store.update(job.id, user_paused=True, updated_ts=host.clock.now())
    host.changed(job.id)
    return paused


def resume_job(host: JobHost, actor: Actor, job_id: str) -> Job:
    """Clears a user pause and an auto-pause (with its failure count); instants due while paused are not caught up."""
    job = visible_job(host, actor, job_id)
    if not actor.is_person:
        _require_cron_capability("cron_resume")
    now = host.clock.now()
    changes: dict[str, Any] = {"user_paused": False, "auto_paused": False, "updated_ts": now}
    if not job.enabled:
        changes.update(consecutive_failures=0, last_due_ts=now)
    resumed = host.store.update(job.id, **changes)
    host.changed(job.id)
    return resumed


def adopt_job(host: JobHost, job_id: str, conversation_id: str | None,
              placement: tuple[str, str] | None = None) -> Job:
    """The person gives ``job_id`` to the session of ``conversation_id`` (None: back to the person).

    ``placement`` is that conversation's ``(authority, cwd)`` now (the caller reads it from the host's
    conversations, ``conversation_not_found`` when there is none). An adopted job becomes what the
    session would have made: it runs in the conversation's working directory with the narrower of its
    own authority and the conversation's (``authority_unavailable`` when they cannot be compared), and is
    bounded by the session caps (``session_jobs_full``, ``jobs_full``). Released, it keeps its (narrow)
    authority and directory. Either way its next agent run starts a conversation of its new owner.
    """
    job = visible_job(host, Actor.person(), job_id)
    if conversation_id is None:
        adopted = host.store.adopt(job.id, PERSON, conversation_id="", updated_ts=host.clock.now())
    else:
        from kirocrew_cron.service import narrower_authority

        assert placement is not None
        authority, cwd = placement
        narrowed = narrower_authority(job.authority, authority)
        if narrowed is None:
            raise cron_error("authority_unavailable",
                             f"the job's authority {job.authority} and the conversation's {authority} cannot be "
                             "compared, and a session's job never has more authority than its conversation")
        adopted = host.store.adopt(job.id, f"conversation:{conversation_id}", authority=narrowed, workspace=cwd,
                                   conversation_id="", updated_ts=host.clock.now())
    host.changed(job.id)
    return adopted


async def trigger_job(host: JobHost, actor: Actor, job_id: str) -> RunRecord:
    """Run ``job_id`` now, whatever its schedule (``job_running``, ``scheduler_off`` from the host)."""
    import asyncio

    job = await asyncio.to_thread(visible_job, host, actor, job_id)
    if not actor.is_person:
        _require_cron_capability("cron_trigger")
    return await host.trigger(job.id)


# -- argument checks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Placement:
    owner: str
    authority: str
    workspace: str


def _placement(actor: Actor, args: Mapping[str, Any]) -> _Placement:
    """Who owns the job, and the authority and directory it runs with."""
    if actor.session is None:
        from kirocrew_conversations.public import UNRESTRICTED

        return _Placement(PERSON, args.get("authority") or UNRESTRICTED, person_workspace(args.get("cwd")))
    _refuse_person_only(actor, args)
    from kirocrew_conversations.public import session_placement

    session = actor.session
    if session.kind != "conversation":
        raise cron_error("caller_unverified", f"a {session.kind} session cannot own cron jobs; only a "
                                              "conversation's session can")
    authority, cwd = session_placement(session.target_id)
    assert actor.owner is not None
    return _Placement(actor.owner, authority, cwd)


def _refuse_person_only(actor: Actor, args: Mapping[str, Any]) -> None:
    given = [name for name in PERSON_ONLY_FIELDS if name in args]
    if given and not actor.is_person:
        raise cron_error("person_only_field",
                         f"{' and '.join(given)} cannot be set by a session: a session's job runs with its own "
                         "conversation's authority and working directory (the person sets them with kirocrew cron "
                         "or the Cron page)")


def person_workspace(cwd: Any) -> str:
    """The person's working directory for the job: an existing absolute directory (default: the home directory)."""
    if not cwd:
        from kirocrew_core.home import user_home

        return str(user_home())
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise cron_error("invalid_workspace", "cwd must be an absolute path")
    if not os.path.isdir(cwd):
        raise cron_error("invalid_workspace", f"cwd is not an existing directory: {cwd}")
    return os.path.normpath(cwd)


def _schedule(args: Mapping[str, Any], now: float, timezone: str) -> tuple[Schedule | None, bool]:
    """The schedule the arguments name (None when none does) and whether it is a one-shot that deletes itself."""
    given = [name for name in SCHEDULE_FIELDS if name in args]
    if not given:
        return None, False
    if len(given) > 1:
        raise cron_error("conflicting_schedule", f"give one of every, cron_expr, at, delay or at_time, not "
                                                 f"{' and '.join(given)}")
    from kirocrew_cron import schedule

    [name] = given
    value = args[name]
    if name == "every":
        return schedule.validate_schedule(Schedule("every", every_secs=int(value))), False
    if name == "cron_expr":
        return schedule.validate_schedule(Schedule("cron", cron_expr=str(value).strip())), False
    if name == "at":
        at = schedule.check_future(float(value), now)
    elif name == "delay":
        at = now + float(value)
    else:
        at = schedule.parse_at_time(str(value), now, schedule.resolve_zone(timezone))
    return schedule.validate_schedule(Schedule("at", at_ts=at)), True


def clean_name(name: str) -> str:
    """The job's name as one line: noise dropped, a tab a space; ``name_control_characters`` for the rest."""
    from kirocrew_core import plaintext

    text = plaintext.without_noise(name).replace("\t", " ")
    if (ch := plaintext.unsafe_character(text)) is not None:
        raise cron_error("name_control_characters", f"the job's name holds {plaintext.named(ch)}: a name is one "
                                                    "line of plain text")
    if name and not text:
        raise cron_error("name_control_characters", "the job's name is only invisible characters")
    return text


def clean_message(message: str) -> str:
    """The prompt: line breaks (CR LF read as LF) and tabs kept, noise dropped; ``message_control_characters`` for
    another control character (a lone CR too), a bidirectional control or an invisible format character."""
    from kirocrew_core import plaintext

    text = plaintext.without_noise(message).replace("\r\n", "\n")
    if (ch := plaintext.unsafe_character(text, allowed="\n\t")) is not None:
        raise cron_error("message_control_characters", f"the job's message holds {plaintext.named(ch)}: a message "
                                                       "may hold line breaks and tabs, no other control characters")
    return text


def _payload(message: str, command: str) -> tuple[str, str]:
    message = clean_message(message)
    if message and command:
        raise cron_error("conflicting_payload", "a job has either a message (an agent job) or a command, not both")
    if not message and not command:
        raise cron_error("no_payload", "either 'message' or 'command' is required")
    if command:
        from kirocrew_cron.vet import vet_command

        vet_command(command)
    return message, command


def _timezone(name: str) -> str:
    from kirocrew_cron import schedule

    return schedule.check_timezone(name)


def _skip_dates(dates: Sequence[str]) -> tuple[str, ...]:
    from kirocrew_cron import schedule

    return schedule.check_skip_dates(list(dates))


def _agent(actor: Actor, agent: str) -> str:
    """The job's agent; empty: the session's own agent for a session's job, the default (kirocrew) for the person's."""
    if agent:
        return agent
    return (actor.session.agent or "") if actor.session is not None else ""


def _model(model: str) -> str:
    return "" if model in INHERIT_MODEL else model


def _require_cron_capability(what: str) -> None:
    from kirocrew_core.governance import require_capability

    require_capability("cron", what)
