"""``/api/cron…``: the Cron page's JSON routes, acting as the person over the host's cron service.

Every route runs the same operations the MCP tools and ``kirocrew cron`` run (:mod:`kirocrew_cron.ops`,
as :meth:`~kirocrew_cron.ops.Actor.person`: the owner of the dashboard sees and changes every job), and
a body is first checked against the matching tool's own input schema (``cron_add``, ``cron_update``)
with kirocrew-core's validator, so the page's form and the tool accept exactly the same arguments
under the same names and fail with the same codes. The gateway authenticates every ``/api`` route as
the owner; each change it makes or refuses is recorded in the security event log as ``cron.dashboard``
(actor ``owner``); a body refused as malformed (``bad_json``, ``body_too_large``, ``bad_request``) is not.

Routes (``{id}`` is a job id)::

    GET    /api/cron/jobs              every job (ops.job_view) and the scheduler's state
    POST   /api/cron/jobs              add: a cron_add body
    GET    /api/cron/jobs/{id}         one job and its history, newest first (also a removed one-shot's)
    PATCH  /api/cron/jobs/{id}         update: a cron_update body without job_id
    DELETE /api/cron/jobs/{id}         remove it and its history
    POST   /api/cron/jobs/{id}/pause   also /resume, /trigger (empty body or {})
    POST   /api/cron/import            {"path": "/abs/crons.json"}: import the original's crons.json v2

The cron service is the host's (:func:`kirocrew_cron.service.cron_host`), reached in process: the
gateway and the host share one event loop in ``kirocrew serve``. A gateway without a host answers
503 ``host_required``. Errors are ``{"error", "code"}`` (plus ``field`` when one form field is at
fault): 400 bad input (nothing changed), 404 ``job_not_found``, 409 a clash with what runs now.
Starlette is imported inside functions.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError, KirocrewError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import BaseRoute

    from kirocrew_cron.model import Job, RunRecord
    from kirocrew_cron.service import CronHost

#: A message is at most 50,000 characters and a command 5,000; JSON escaping can multiply that.
MAX_BODY_BYTES = 512 * 1024
#: The history rows ``GET /api/cron/jobs/{id}`` and the job's page show.
HISTORY_SHOWN = 50
#: A path to import is a local file name.
IMPORT_PATH_MAX = 4096
AUDIT_EVENT = "cron.dashboard"

NOT_FOUND_CODES = frozenset({"job_not_found"})
BAD_INPUT_CODES = frozenset({
    "invalid_arguments", "bad_json", "bad_request", "body_too_large", "invalid_job_id", "no_schedule",
    "conflicting_schedule", "invalid_schedule", "invalid_timezone", "invalid_skip_date", "time_in_past",
    "unparseable_time", "no_payload", "conflicting_payload", "command_refused", "no_fields", "import_unreadable",
    "invalid_workspace", "person_only_field", "cron_step_out_of_range", "name_control_characters",
    "message_control_characters",
})
CONFLICT_CODES = frozenset({"job_running", "scheduler_off", "cron_store_busy", "authority_unavailable",
                            "governance_denied", "session_jobs_full", "jobs_full"})
UNAVAILABLE_CODES = frozenset({"host_required", "cron_store_unusable"})

#: The form field a refusal belongs to when its code says so whatever the message ("schedule": the
#: schedule input the form has chosen).
FIELD_OF_CODE = {
    "invalid_job_id": "job_id",
    "no_schedule": "schedule",
    "conflicting_schedule": "schedule",
    "invalid_schedule": "schedule",
    "cron_step_out_of_range": "schedule",
    "name_control_characters": "name",
    "message_control_characters": "message",
    "time_in_past": "schedule",
    "unparseable_time": "at_time",
    "invalid_timezone": "timezone",
    "invalid_skip_date": "skip_dates",
    "no_payload": "message",
    "conflicting_payload": "command",
    "command_refused": "command",
    "authority_unavailable": "authority",
    "invalid_workspace": "cwd",
    "import_unreadable": "path",
}


def status_of(code: str) -> int:
    """The HTTP status a refusal with ``code`` is answered with (see the module's text)."""
    if code in NOT_FOUND_CODES:
        return 404
    if code in BAD_INPUT_CODES:
        return 400
    if code in CONFLICT_CODES:
        return 409
    if code in UNAVAILABLE_CODES:
        return 503
    return 500


def field_of(exc: KirocrewError) -> str | None:
    """The argument ``exc`` is about: by its code, else the ``<field>: …`` a schema refusal starts with."""
    if exc.code in FIELD_OF_CODE:
        return FIELD_OF_CODE[exc.code]
    if exc.code == "invalid_arguments":
        head, sep, _ = exc.message.partition(":")
        if sep and head.replace("_", "").replace(".", "").isalnum():
            return head.split(".", 1)[0]
    return None


def error_answer(exc: KirocrewError) -> JSONResponse:
    """``{"error", "code"[, "field"]}`` with the status of ``exc``'s code."""
    from starlette.responses import JSONResponse

    body: dict[str, Any] = exc.as_dict()
    field = field_of(exc)
    if field:
        body["field"] = field
    return JSONResponse(body, status_code=status_of(exc.code))


def _answers_errors(route: Callable[[Request], Awaitable[JSONResponse]]) -> Callable[[Request], Awaitable[Any]]:
    """A route whose refusals become :func:`error_answer` (the gateway's shape, this plugin's statuses)."""

    @functools.wraps(route)
    async def wrapped(request: Request) -> Any:
        try:
            return await route(request)
        except KirocrewError as exc:
            return error_answer(exc)

    return wrapped


# -- the operations, as the page's own functions also use them ---------------------------------------


def host_of(request: Request) -> CronHost:
    """The host's cron service; ``host_required`` on a gateway without a host."""
    from kirocrew_cron.errors import cron_error

    if getattr(request.app.state.kirocrew, "host", None) is None:
        raise cron_error("host_required", "cron jobs live in the host (kirocrew serve); this gateway has none")
    from kirocrew_cron.service import cron_host

    return cron_host()


def tool_schema_check(tool_name: str, arguments: dict[str, Any]) -> None:
    """Refuse ``arguments`` exactly as the MCP tool ``tool_name`` would (``invalid_arguments``)."""
    from kirocrew_core.coretools.server import validate_arguments

    from kirocrew_cron.tools import tools_by_name

    problem = validate_arguments(tools_by_name()[tool_name], arguments)
    if problem is not None:
        raise BadInputError(problem, code="invalid_arguments")


def record_view(record: RunRecord) -> dict[str, Any]:
    """One history row as JSON, with its duration and the link to its conversation run (agent runs)."""
    view = asdict(record)
    view["duration_ms"] = record.duration_ms
    view["url"] = run_url(record.conversation_id, record.run_id)
    return view


def run_url(conversation_id: str, run_id: str = "") -> str:
    """Where the conversations page shows a run (its heading), or the conversation; ``""`` for none."""
    from urllib.parse import quote

    if not conversation_id:
        return ""
    page = f"/conversations/{quote(conversation_id, safe='')}"
    return f"{page}#run-{quote(run_id, safe='')}-heading" if run_id else page


def listing(host: CronHost) -> dict[str, Any]:
    """``GET /api/cron/jobs``: every job as the person sees it, with counts and the scheduler's state."""
    from kirocrew_cron import ops

    jobs = [ops.job_view(host, job) for job in ops.visible_jobs(host, ops.Actor.person())]
    paused = sum(1 for view in jobs if view["user_paused"] or view["auto_paused"])
    return {"jobs": jobs, "active": len(jobs) - paused, "paused": paused, "scheduler_on": host.scheduler_on}


def detail(host: CronHost, job_id: str) -> dict[str, Any]:
    """``GET /api/cron/jobs/{id}``: the job and its newest :data:`HISTORY_SHOWN` history rows.

    A one-shot its run removed answers too, with ``job`` null and ``removed`` (its id, name, owner and
    when it was removed): its history outlives it.
    """
    from kirocrew_cron import ops

    found = ops.job_history(host, ops.Actor.person(), job_id, HISTORY_SHOWN)
    return {"job": None if found.job is None else ops.job_view(host, found.job),
            "removed": None if found.removed is None else asdict(found.removed),
            "history": [record_view(r) for r in found.runs], "scheduler_on": host.scheduler_on}


async def _changing(tool: str, job_id: str | None, operation: Callable[[], Any]) -> Any:
    """``operation`` in a worker thread (the store is SQLite), its outcome in the security event log."""
    try:
        result = await asyncio.to_thread(operation)
    except KirocrewError as exc:
        await asyncio.to_thread(_audit, tool, job_id, outcome="refused", code=exc.code)
        raise
    done_id = job_id or getattr(result, "id", None)
    await asyncio.to_thread(_audit, tool, done_id if isinstance(done_id, str) else None, outcome="ok", code="ok")
    return result


def _audit(tool: str, job_id: str | None, *, outcome: str, code: str) -> None:
    from kirocrew_core import audit

    audit.record(AUDIT_EVENT, actor="owner", outcome=outcome, tool=tool, code=code,
                 **({"job_id": job_id} if job_id else {}))


async def _body(request: Request) -> dict[str, Any]:
    from kirocrew_core.gateway.body import read_json_object

    return await read_json_object(request, limit=MAX_BODY_BYTES)


async def _empty_body(request: Request) -> None:
    from kirocrew_core.gateway.body import read_json_object

    body = await read_json_object(request, default={})  # the gateway's usual limit: bad_json like elsewhere
    if body:
        raise BadInputError(f"this route takes no fields, got {', '.join(sorted(body))}", code="bad_request")


def _job_id(request: Request) -> str:
    import re

    from kirocrew_cron.errors import cron_error
    from kirocrew_cron.model import JOB_ID_PATTERN

    job_id = request.path_params["job_id"]
    if not re.fullmatch(JOB_ID_PATTERN, job_id):
        raise cron_error("invalid_job_id", f"Invalid job ID format: {job_id[:40]}")
    return str(job_id)


# -- routes -------------------------------------------------------------------------------------------


@_answers_errors
async def get_jobs(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    host = host_of(request)
    return JSONResponse(await asyncio.to_thread(listing, host))


@_answers_errors
async def add(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_cron import ops

    host = host_of(request)
    body = await _body(request)

    def run() -> Job:
        tool_schema_check("cron_add", body)
        return ops.add_job(host, ops.Actor.person(), body)

    job: Job = await _changing("cron_add", None, run)
    return JSONResponse({"ok": True, "job": await asyncio.to_thread(ops.job_view, host, job)})


@_answers_errors
async def get_job(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    host = host_of(request)
    return JSONResponse(await asyncio.to_thread(detail, host, _job_id(request)))


@_answers_errors
async def update(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_cron import ops

    host = host_of(request)
    body = await _body(request)  # the body first: a malformed one is refused the same way on every route
    job_id = _job_id(request)

    def run() -> Job:
        if "job_id" in body:
            raise BadInputError("job_id comes from the address, not the body", code="invalid_arguments")
        tool_schema_check("cron_update", {"job_id": job_id, **body})
        return ops.update_job(host, ops.Actor.person(), job_id, body)

    job: Job = await _changing("cron_update", job_id, run)
    return JSONResponse({"ok": True, "job": await asyncio.to_thread(ops.job_view, host, job)})


@_answers_errors
async def remove(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_cron import ops

    host = host_of(request)
    await _empty_body(request)
    job_id = _job_id(request)
    await _changing("cron_remove", job_id, lambda: ops.remove_job(host, ops.Actor.person(), job_id))
    return JSONResponse({"ok": True, "id": job_id})


def _switch(tool: str, operation_name: str) -> Callable[[Request], Awaitable[Any]]:
    @_answers_errors
    async def route(request: Request) -> JSONResponse:
        from starlette.responses import JSONResponse

        from kirocrew_cron import ops

        host = host_of(request)
        await _empty_body(request)
        job_id = _job_id(request)
        operation = getattr(ops, operation_name)
        job: Job = await _changing(tool, job_id, lambda: operation(host, ops.Actor.person(), job_id))
        return JSONResponse({"ok": True, "job": await asyncio.to_thread(ops.job_view, host, job)})

    route.__name__ = operation_name
    return route


@_answers_errors
async def trigger(request: Request) -> JSONResponse:
    """Start the job now; the answer is its ``running`` history row (the run goes on in the host)."""
    from starlette.responses import JSONResponse

    from kirocrew_cron import ops

    host = host_of(request)
    await _empty_body(request)
    job_id = _job_id(request)
    try:
        record = await ops.trigger_job(host, ops.Actor.person(), job_id)
    except KirocrewError as exc:
        await asyncio.to_thread(_audit, "cron_trigger", job_id, outcome="refused", code=exc.code)
        raise
    await asyncio.to_thread(_audit, "cron_trigger", job_id, outcome="ok", code="ok")
    return JSONResponse({"ok": True, "run": record_view(record)})


@_answers_errors
async def import_file(request: Request) -> JSONResponse:
    """``{"path": …}``: the original's ``crons.json`` v2 into the store, as the person's jobs (never written)."""
    from pathlib import Path

    from starlette.responses import JSONResponse

    from kirocrew_cron.importer import import_crons_json

    host = host_of(request)
    body = await _body(request)

    def run() -> Any:
        extra = sorted(set(body) - {"path"})
        if extra:
            raise BadInputError(f"{extra[0][:64]}: unknown field; this route takes only path",
                                code="invalid_arguments")
        path = body.get("path")
        if not isinstance(path, str) or not path or len(path) > IMPORT_PATH_MAX or "\0" in path \
                or not Path(path).is_absolute():
            raise BadInputError("path: an absolute file name of a crons.json is required", code="invalid_arguments")
        report = import_crons_json(host.store, Path(path))
        host.changed()
        return report

    report = await _changing("cron_import", None, run)
    return JSONResponse({"ok": True, **report.as_dict()})


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    one = "/api/cron/jobs/{job_id}"
    return [
        Route("/api/cron/jobs", get_jobs, methods=["GET"], name="cron_jobs"),
        Route("/api/cron/jobs", add, methods=["POST"], name="cron_add"),
        Route(one, get_job, methods=["GET"], name="cron_job"),
        Route(one, update, methods=["PATCH"], name="cron_update"),
        Route(one, remove, methods=["DELETE"], name="cron_remove"),
        Route(one + "/pause", _switch("cron_pause", "pause_job"), methods=["POST"], name="cron_pause"),
        Route(one + "/resume", _switch("cron_resume", "resume_job"), methods=["POST"], name="cron_resume"),
        Route(one + "/trigger", trigger, methods=["POST"], name="cron_trigger"),
        Route("/api/cron/import", import_file, methods=["POST"], name="cron_import"),
    ]
