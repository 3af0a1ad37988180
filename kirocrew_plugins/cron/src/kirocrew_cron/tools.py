"""The eight ``kirocrew-cron`` MCP tools: thin handlers over :mod:`kirocrew_cron.ops`.

Every tool is ``identity="lenient"`` and decides who acts itself (:func:`actor_of`): a
verified session acts for its own jobs; a ``kirocrew`` command on the host's socket (caller
session type ``cli``) whose process descends from no session is the person (its ancestry
decides, not its environment: a twin run from a session's shell is that session); anyone else
(a plain MCP client on the relay, a process the host started for no session) reads nothing
and writes nothing. The server's ``strict`` would
refuse the CLI before the handler, which is why the tools are lenient and check here.

Texts are the reference's (``cron_add``'s ``Added job: …``, ``cron_list``'s header and blocks);
an error is the server's ``error[<code>]: <message>``. Each tool also takes ``json`` (a JSON
answer, what ``kirocrew cron … --json`` prints). Nothing is kept between calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.coretools.contract import ToolCall

from kirocrew_cron import model as M
from kirocrew_cron.errors import cron_error
from kirocrew_cron.ops import Actor, JobHost

if TYPE_CHECKING:
    from kirocrew_cron.model import Job

HostProvider = Callable[[], JobHost]

TOOL_NAMES = ("cron_add", "cron_list", "cron_update", "cron_remove", "cron_remove_all", "cron_pause",
              "cron_resume", "cron_trigger")
UNVERIFIED_WRITE = ("cannot determine which session is calling, so this write is refused. Manage jobs from the CLI "
                    "(`kirocrew cron ...`), which acts for you.")
UNVERIFIED_READ_NOTE = ("This caller is not a verified kirocrew session, so it sees no jobs; manage jobs from the CLI "
                        "(`kirocrew cron ...`).")
HEADER = "{count} cron job(s): {active} active, {paused} paused"
#: How much of each text the compact list shows (the reference's cuts).
ERROR_PREVIEW, RESULT_PREVIEW, MESSAGE_PREVIEW = 200, 120, 80
#: How much of the last result the verbose list shows.
VERBOSE_RESULT_MAX = 2_000

_AGENT_PATTERN = r"^([A-Za-z0-9][A-Za-z0-9._-]{0,127})?$"
_MODEL_PATTERN = r"^([A-Za-z0-9][A-Za-z0-9._:/-]{0,127})?$"
_NO_CONTROL = r"^[^\x00-\x08\x0a-\x1f\x7f]*$"


def actor_of(call: ToolCall) -> Actor | None:
    """Who acts in ``call``: its verified session, the person (a CLI twin outside every session), or None."""
    if call.session is not None:
        return Actor.of_session(call.session)
    return Actor.person() if call.is_person_command else None


def _writer(call: ToolCall) -> Actor:
    actor = actor_of(call)
    if actor is None:
        raise cron_error("caller_unverified", UNVERIFIED_WRITE)
    return actor


def _hosted() -> JobHost:
    from kirocrew_cron.service import cron_host

    host: JobHost = cron_host()
    return host


def tools(host: HostProvider = _hosted) -> list[CoreMcpTool]:
    """The eight tools over ``host`` (the host's ``CronHost`` by default; the CLI passes its own without a host)."""
    from kirocrew_cron import ops

    def cron_add(args: dict[str, Any], call: ToolCall) -> str:
        h = host()
        job = ops.add_job(h, _writer(call), args)
        if args.get("json"):
            return _json(ops.job_view(h, job))
        sched = _describe(h, job)
        return f"Added job: {job.id} ({job.name}) [{sched}]. Tell the user: scheduled for {sched}."

    def cron_list(args: dict[str, Any], call: ToolCall) -> str:
        h = host()
        actor = actor_of(call)
        jobs = [] if actor is None else ops.visible_jobs(h, actor)
        if "ids" in args:
            wanted = set(args["ids"])
            jobs = [job for job in jobs if job.id in wanted]
        active = sum(1 for job in jobs if job.enabled)
        counts = {"count": len(jobs), "active": active, "paused": len(jobs) - active}
        if args.get("json"):
            payload: dict[str, Any] = {**counts, "jobs": [ops.job_view(h, job) for job in jobs]}
            if actor is None:
                payload["note"] = UNVERIFIED_READ_NOTE
            return _json(payload)
        verbose = bool(args.get("verbose")) or "ids" in args
        blocks = [HEADER.format(**counts)]
        owners = actor is not None and actor.is_person  # the person sees every session's jobs: say whose
        blocks += [(_verbose if verbose else _compact)(h, job, owners) for job in jobs]
        if actor is None:
            blocks.append(UNVERIFIED_READ_NOTE)
        return "\n\n".join(blocks)

    def cron_update(args: dict[str, Any], call: ToolCall) -> str:
        h = host()
        job = ops.update_job(h, _writer(call), args["job_id"], args)
        if args.get("json"):
            return _json(ops.job_view(h, job))
        return f"Updated job: {job.id} ({job.name}) [{_describe(h, job)}]"

    def cron_remove(args: dict[str, Any], call: ToolCall) -> str:
        h = host()
        job = ops.remove_job(h, _writer(call), args["job_id"])
        return _json(ops.job_view(h, job)) if args.get("json") else f"Removed job: {job.id}"

    def cron_remove_all(args: dict[str, Any], call: ToolCall) -> str:
        actor = _writer(call)
        count = ops.remove_all(host(), actor)
        if args.get("json"):
            return _json({"removed": count})
        if count:
            return f"Removed {count} job(s)."
        return "No cron jobs to remove." if actor.is_person else "No cron jobs owned by this session."

    def cron_pause(args: dict[str, Any], call: ToolCall) -> str:
        h = host()
        job = ops.pause_job(h, _writer(call), args["job_id"])
        return _json(ops.job_view(h, job)) if args.get("json") else f"Paused job: {job.id}"

    def cron_resume(args: dict[str, Any], call: ToolCall) -> str:
        h = host()
        job = ops.resume_job(h, _writer(call), args["job_id"])
        return _json(ops.job_view(h, job)) if args.get("json") else f"Resumed job: {job.id}"

    async def cron_trigger(args: dict[str, Any], call: ToolCall) -> str:
        import asyncio
        import dataclasses

        h = await asyncio.to_thread(host)
        actor = _writer(call)
        job = await asyncio.to_thread(ops.visible_job, h, actor, args["job_id"])
        record = await ops.trigger_job(h, actor, job.id)
        if args.get("json"):
            view = await asyncio.to_thread(ops.job_view, h, job)
            return _json({"job": view, "run": dataclasses.asdict(record)})
        return f"Triggered job: {job.id} ({job.name}) - executing now."

    return [
        CoreMcpTool(
            "cron_add",
            "Schedule recurring or one-time work: use when asked to do something every N minutes/hours, daily, "
            "weekly, at a time, to 'remind me', to 'check regularly', or to schedule anything. Give exactly one "
            "schedule (every, cron_expr, at, delay or at_time) and either a message (a prompt run by an agent in "
            "this job's own conversation) or a command (a shell command run without an agent). The job belongs to "
            "this session and runs with this conversation's authority and working directory; a session owns at "
            f"most {M.MAX_JOBS_PER_SESSION} jobs.",
            _object({"name": _text(M.NAME_MAX, "The job's name, shown in lists and notifications: one line, no "
                                               "control characters."),
                     **_SCHEDULE, **_PAYLOAD, **_OPTIONS, **_PERSON_ONLY, "json": _JSON}, ("name",)),
            cron_add),
        CoreMcpTool(
            "cron_list",
            "List this session's cron jobs: a header '{n} cron job(s): {a} active, {p} paused', then one block per "
            "job (id, schedule, next run, last status). verbose shows every field and the last result; ids lists "
            "just those jobs, verbosely; json answers with the jobs as JSON.",
            _object({"verbose": _flag("Every field, the full message and the last result."),
                     "ids": {"type": "array", "items": _JOB_ID, "maxItems": M.LIST_IDS_MAX, "uniqueItems": True,
                             "description": "Only these jobs (shown verbosely)."},
                     "json": _JSON}),
            cron_list, read_only=True),
        CoreMcpTool(
            "cron_update",
            "Change a cron job of this session: give its job_id and only the fields to change. A new schedule field "
            "(every, cron_expr, at, delay, at_time) replaces the schedule; skip_dates replaces the list; model '' "
            "inherits the agent's model again. A job keeps its kind (message or command).",
            _object({"job_id": _JOB_ID, "name": _text(M.NAME_MAX, "A new name."), **_SCHEDULE, **_PAYLOAD,
                     **_OPTIONS, **_PERSON_ONLY, "json": _JSON}, ("job_id",)),
            cron_update),
        CoreMcpTool("cron_remove", "Remove a cron job of this session for good (its history too).",
                    _object({"job_id": _JOB_ID, "json": _JSON}, ("job_id",)), cron_remove),
        CoreMcpTool("cron_remove_all", "Remove every cron job of this session.",
                    _object({"json": _JSON}), cron_remove_all),
        CoreMcpTool("cron_pause", "Pause a cron job of this session: it keeps its settings and stops firing.",
                    _object({"job_id": _JOB_ID, "json": _JSON}, ("job_id",)), cron_pause),
        CoreMcpTool("cron_resume",
                    "Resume a paused (or auto-paused) cron job of this session; times that passed while it was "
                    "paused are not run.",
                    _object({"job_id": _JOB_ID, "json": _JSON}, ("job_id",)), cron_resume),
        CoreMcpTool("cron_trigger",
                    "Trigger immediate execution of a cron job of this session regardless of its schedule (not "
                    "while it is running).",
                    _object({"job_id": _JOB_ID, "json": _JSON}, ("job_id",)), cron_trigger),
    ]


def tools_by_name(host: HostProvider = _hosted) -> dict[str, CoreMcpTool]:
    return {tool.name: tool for tool in tools(host)}


# -- the list's text ----------------------------------------------------------------------------------


def _describe(host: JobHost, job: Job) -> str:
    from kirocrew_cron import schedule

    return schedule.describe(job, host.clock.now())


def _compact(host: JobHost, job: Job, owners: bool) -> str:
    lines = [f"• {_clean(job.name, M.NAME_MAX)} {'✅' if job.enabled else '⏸️'} [{job.kind}]",
             f"  ID: {job.id} | {_describe(host, job)}{_next_run(host, job)}"]
    details = [f"owner={job.owner}"] if owners and job.owner else []
    if job.agent:
        details.append(f"agent={job.agent}")
    if job.model:
        details.append(f"model={job.model}")
    if host.is_running(job.id):
        details.append("running")
    if job.last_status:
        details.append(f"last={job.last_status}")
    if job.last_error:
        details.append(f"err={_clean(job.last_error, ERROR_PREVIEW)}")
    if job.last_result:
        details.append(f"result={_clean(job.last_result, RESULT_PREVIEW)}")
    if details:
        lines.append("  " + " | ".join(details))
    lines.append(f"  → {_payload_preview(job)}")
    return "\n".join(lines)


def _verbose(host: JobHost, job: Job, owners: bool) -> str:
    if job.enabled:
        state = "✅ active"
    elif job.auto_paused:
        state = f"⏸️ paused after {job.consecutive_failures} failures in a row"
    else:
        state = "⏸️ paused"
    lines = [f"• {_clean(job.name, M.NAME_MAX)} ({state}) [{job.kind}]", f"  ID: {job.id}",
             f"  Schedule: {_describe(host, job)}{_next_run(host, job)}",
             f"  Agent: {job.agent or 'default'} | Model: {job.model or 'inherited'} | Authority: {job.authority}",
             *([f"  Owner: {job.owner or 'you'}"] if owners else []),
             f"  Workspace: {job.workspace}",
             f"  Timeout: {job.timeout_secs}s | Catch-up: {job.catch_up} (at most {job.catch_up_max}) | "
             f"{'persistent' if job.persistent_session else 'fresh'} conversation"
             + (" | minimal context" if job.minimal_context else "") + (" | silent" if job.silent else "")
             + (" | strict schedule" if job.strict_schedule else "")]
    if job.skip_dates:
        lines.append(f"  Skip dates: {', '.join(job.skip_dates)}")
    if host.is_running(job.id):
        lines.append("  Running now")
    if job.last_run_ts is not None:
        lines.append(f"  Last run: {_when(job.last_run_ts, job)} ({job.last_status or 'running'})")
    lines.append(f"  Command: {_clean(job.command, M.COMMAND_MAX, flat=False)}" if job.command
                 else f"  Message: {_clean(job.message, M.MESSAGE_MAX, flat=False)}")
    if job.last_error:
        lines.append(f"  ⚠️ last error: {_clean(job.last_error, M.LAST_RESULT_MAX, flat=False)}")
    if job.last_result:
        lines.append(f"  last result: {_clean(job.last_result, VERBOSE_RESULT_MAX, flat=False)}")
    return "\n".join(lines)


def _next_run(host: JobHost, job: Job) -> str:
    """``\\n  Next run: 2026-03-28 05:00 PM CET (in 2h 5m)``, or nothing when it never fires (paused, a past at)."""
    at = host.next_fire(job) if job.enabled else None
    if at is None:
        return ""
    return f"\n  Next run: {_when(at, job)} ({until(at - host.clock.now())})"


def _when(ts: float, job: Job) -> str:
    from kirocrew_cron import schedule

    return datetime.fromtimestamp(ts, schedule.resolve_zone(job.timezone)).strftime("%Y-%m-%d %I:%M %p %Z")


def until(seconds: float) -> str:
    """``in Xd Yh``, ``in Xh Ym``, ``in Xm``, ``in <1m`` or ``now``."""
    if seconds <= 0:
        return "now"
    if seconds < 60:
        return "in <1m"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"in {minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"in {hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"in {days}d {hours}h"


def _payload_preview(job: Job) -> str:
    return f"$ {_clean(job.command, MESSAGE_PREVIEW)}" if job.command else _clean(job.message, MESSAGE_PREVIEW)


def _clean(text: str, limit: int, *, flat: bool = True) -> str:
    """``text`` redacted of secrets, then (``flat``) on one line, then cut at ``limit`` with ``…``.

    Redacting first means a cut never leaves half a secret that the redaction would no longer match.
    """
    from kirocrew_core.redaction import redact_secrets

    cleaned = redact_secrets(text)
    if flat:
        cleaned = " ".join(cleaned.split())
    return cleaned if len(cleaned) <= limit else cleaned[:limit] + "…"


def _json(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False, sort_keys=True)


# -- schemas ------------------------------------------------------------------------------------------


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _text(max_length: int, description: str, *, pattern: str | None = None, min_length: int = 1) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "minLength": min_length, "maxLength": max_length,
                              "description": description}
    if pattern:
        schema["pattern"] = pattern
    return schema


def _integer(minimum: int, maximum: int, description: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": minimum, "maximum": maximum, "description": description}


def _flag(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


_JOB_ID = _text(16, "A job id (cron_list shows them).", pattern=M.JOB_ID_PATTERN)
_JSON = _flag("Answer with JSON (the job as kirocrew cron --json prints it) instead of text.")
_SCHEDULE: dict[str, Any] = {
    "every": _integer(M.EVERY_MIN_SECS, M.EVERY_MAX_SECS, "Repeat every N seconds (at least 60; 3600 = hourly)."),
    "cron_expr": _text(M.CRON_EXPR_MAX, "A 5-field cron expression 'min hour dom month dow' (dow 0=Sun..6=Sat), "
                                        "e.g. '0 9 * * 1-5' for 9:00 on weekdays, in the job's timezone."),
    "at": {"type": "number", "minimum": 0, "maximum": M.AT_MAX_TS,
           "description": "Run once at this Unix timestamp; the job removes itself after the run."},
    "delay": {"type": "number", "minimum": 1, "maximum": M.DELAY_MAX_SECS,
              "description": "Run once this many seconds from now; the job removes itself after the run."},
    "at_time": _text(M.AT_TIME_MAX, "Run once at a human time: '5pm', '17:00', 'tomorrow 9:30am', 'in 2 hours', "
                                    "'2026-03-28 14:00' (the job's timezone); the job removes itself after the run."),
}
_PAYLOAD: dict[str, Any] = {
    "message": _text(M.MESSAGE_MAX, "The prompt an agent runs each time, in the job's own conversation (which "
                                    "sees the previous run's result unless persistent_session is false). Line "
                                    "breaks and tabs are fine; other control characters are refused."),
    "command": _text(M.COMMAND_MAX, "A shell command to run instead of an agent (no control characters), under "
                                    "this session's authority. Its text is vetted (a tripwire, not a sandbox): "
                                    "credential paths, secret names, exfiltration and constructs that hide what "
                                    "runs are refused; secrets in its output are redacted.", pattern=_NO_CONTROL),
}
_OPTIONS: dict[str, Any] = {
    "agent": _text(128, "The Kiro agent that runs the message; '' or unset: this session's agent.",
                   pattern=_AGENT_PATTERN, min_length=0),
    "model": _text(128, "The model; '' or 'auto': the agent's.", pattern=_MODEL_PATTERN, min_length=0),
    "silent": _flag("Publish no notification after a run."),
    "skip_dates": {"type": "array", "maxItems": M.SKIP_DATES_MAX,
                   "items": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
                   "description": "Dates (YYYY-MM-DD, in the job's timezone) on which it does not run."},
    "timezone": _text(M.TIMEZONE_MAX, "IANA time zone for cron_expr, at_time and skip_dates, e.g. Europe/Paris; "
                                      "'' or unset: the configured cron.timezone, else UTC.",
                      pattern=r"^[A-Za-z0-9_/+-]*$", min_length=0),
    "persistent_session": _flag("true (default): every run continues one conversation, which is given the previous "
                                "result; false: a fresh conversation per run."),
    "minimal_context": _flag("A lean prompt: the previous result is cut to 2000 characters."),
    "strict_schedule": _flag("Fire exactly on time: no jitter (hourly and daily jobs otherwise spread by up to 5 "
                             "or 59 minutes)."),
    "catch_up": {"type": "string", "enum": list(M.CATCH_UPS),
                 "description": "Runs missed while the host was down or the machine asleep: skip them, run once "
                                "(default) or run each, up to catch_up_max."},
    "catch_up_max": _integer(1, M.CATCH_UP_MAX_LIMIT, "The most missed runs catch_up 'all' runs (default 10)."),
    "timeout": _integer(0, M.TIMEOUT_MAX_SECS, "A command's time limit in seconds; 0: 300."),
    "timeout_secs": _integer(1, M.TIMEOUT_SECS_MAX, "A run's whole time budget in seconds (default 1800)."),
}


def _authority_schema() -> dict[str, Any]:
    from kirocrew_conversations.public import AUTHORITIES

    return {"type": "string", "enum": list(AUTHORITIES),
            "description": "Only for kirocrew cron and the Cron page (a session's job runs with the session's "
                           "authority): the job's execution authority."}


_PERSON_ONLY: dict[str, Any] = {
    "authority": _authority_schema(),
    "cwd": _text(4096, "Only for kirocrew cron and the Cron page (a session's job runs in the session's working "
                       "directory): the absolute directory the job runs in.", pattern=r"^/[^\x00]*$"),
}
