"""The Workflows page (``/workflows``) and the owner's JSON routes it calls.

- ``GET /api/workflows/runs``: ``{"runs", "saved"}``, newest first, each run without its events or source;
- ``GET /api/workflows/runs/{run_id}[?since=SEQ]``: one run's record, its events (only those after ``SEQ``
  with ``since``, so a page following a running run fetches each event once);
- ``POST /api/workflows/runs/{run_id}/cancel``: ``{"cancelled"}``; 409 ``workflow_not_cancellable`` when it
  is not running, 404 ``workflow_run_not_found`` for an unknown id;
- ``POST /api/workflows/runs/{run_id}/rerun`` ``{"from_index": N}``: ``{"run_id"}`` of the new run, whose
  agent calls before ``N`` replay their recorded results (``workflow_rerun_subtree``); 409
  ``workflow_not_rerunnable`` while it runs, 400 ``invalid_index`` past its agent calls;
- ``POST /api/workflows/run`` ``{"workflow": NAME | "source": SCRIPT, "args": {...}, "cwd": DIR, "budget": N}``:
  ``{"run_id"}``, the saved workflow or the pasted script started as the person's run (``kirocrew workflow
  run NAME|FILE --budget N``); the refusals (``workflow_or_source``, ``invalid_budget``,
  ``workflow_not_found``, the check's codes at ``source``, ``authority_unavailable``) change nothing.

The page is rendered on the server from the same view; ``static/workflows.js`` posts a cancel, a rerun or
a start, redraws the table from the page, and draws a run's detail as a tree from its events, following
it while it runs. Like every ``/api/`` route these are the owner's only.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import ConflictError, KirocrewError
from kirocrew_core.gateway.fields import FieldError, answers, read_fields

from kirocrew_conversations.workflow_check import MAX_SOURCE_BYTES

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from kirocrew_conversations.workflows import WorkflowEngine

PACKAGE = "kirocrew_conversations"
_answers = answers({"workflow_run_not_found"})
STATUS_CLASSES = {"finished": "good", "failed": "bad", "cancelled": "", "running": ""}
#: A rerun's or cancel's body: a number at most; nothing near this size.
BODY_LIMIT = 64 * 1024
#: A start's body: a script of up to 256 KiB as a JSON string (its newlines and quotes escaped), and the rest.
START_BODY_LIMIT = 2 * MAX_SOURCE_BYTES + BODY_LIMIT
ARGS_MAX = 64
SEQ_MAX = 1_000_000
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
PERSON = "person"


async def _engine() -> WorkflowEngine:
    from kirocrew_conversations.hosted import hosted

    service = await hosted().ready()
    if service.workflows is None:
        raise KirocrewError("workflows run in the kirocrew host", code="host_required")
    return service.workflows


def summary(record: dict[str, Any]) -> dict[str, Any]:
    keep = ("run_id", "name", "owner", "status", "where", "reason", "created_at", "ended_at", "agent_calls",
            "rerun_of")
    return {**{key: record.get(key) for key in keep}, "events": len(record.get("events", []))}


async def runs_view() -> dict[str, Any]:
    from kirocrew_conversations import workflow_library

    engine = await _engine()
    records = await engine.records()
    return {"runs": [summary(r) for r in records], "saved": await asyncio.to_thread(workflow_library.names)}


async def _record(run_id: str) -> tuple[WorkflowEngine, dict[str, Any]]:
    engine = await _engine()
    record = await engine.record(run_id)
    if record is None:
        raise KirocrewError(f"no workflow run {run_id!r}", code="workflow_run_not_found")
    return engine, record


@_answers
async def list_runs(request: Request) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(await runs_view(), headers={"Cache-Control": "no-store"})


def _since(raw: str | None) -> int:
    if raw is None:
        return 0
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 7) or int(raw) > SEQ_MAX:  # "²" is a digit too
        raise FieldError(f"since must be an event number 0-{SEQ_MAX}", field="since", code="invalid_since")
    return int(raw)


@_answers
async def show_run(request: Request) -> Response:
    from starlette.responses import JSONResponse

    since = _since(request.query_params.get("since"))
    _, record = await _record(str(request.path_params["run_id"]))
    shown = {k: v for k, v in record.items() if k not in ("source", "events", "calls")}
    events = record.get("events", [])
    shown["event_count"] = len(events)
    shown["events"] = [e for e in events[since:] if e.get("seq", 0) > since]  # seq is 1-based, in order
    return JSONResponse(shown, headers={"Cache-Control": "no-store"})


@_answers
async def cancel_run(request: Request) -> Response:
    from starlette.responses import JSONResponse

    from kirocrew_core.gateway.body import read_json_object

    await read_json_object(request, limit=BODY_LIMIT, default={})  # no fields, but a body is still checked
    run_id = str(request.path_params["run_id"])
    engine, record = await _record(run_id)
    if not await engine.cancel(run_id):
        raise ConflictError(f"run {run_id} is not running ({record.get('status')})", code="workflow_not_cancellable")
    return JSONResponse({"cancelled": run_id})


@_answers
async def rerun_run(request: Request) -> Response:
    from starlette.responses import JSONResponse

    from kirocrew_conversations.workflow_tools import rerun_as_owner

    body = await read_fields(request, {"from_index": (int,)}, ("from_index",), limit=BODY_LIMIT)
    run_id = str(request.path_params["run_id"])
    engine, record = await _record(run_id)
    if record.get("status") == "running":
        raise ConflictError(f"run {run_id} is still running; cancel it or wait for its end",
                            code="workflow_not_rerunnable")
    known = len(record.get("calls") or {})  # every call the script asked, replayed or run, by index
    from_index = body["from_index"]
    if not 0 <= from_index <= known:
        raise FieldError(f"from_index must be 0-{known}: the run asked for {known} agent call(s)",
                         field="from_index", code="invalid_index")
    from kirocrew_conversations.hosted import hosted

    run = await rerun_as_owner(await hosted().ready(), engine, record, from_index, None)
    return JSONResponse({"run_id": run.run_id, "rerun_of": run_id}, status_code=201)


def _arguments(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or len(value) > ARGS_MAX or not all(
            isinstance(key, str) and 0 < len(key) <= 100 for key in value):
        raise FieldError(f"args must be an object of at most {ARGS_MAX} named values", field="args",
                         code="invalid_arguments")
    return value


def _workdir(value: object) -> str:
    if value is None:
        return os.path.expanduser("~")
    if not isinstance(value, str) or not os.path.isabs(value) or len(value) > 4096:
        raise FieldError("cwd must be an absolute path", field="cwd", code="invalid_cwd")
    if not os.path.isdir(value):
        raise FieldError("cwd is not a directory", field="cwd", code="invalid_cwd")
    return value


def _budget(value: object) -> int:
    from kirocrew_conversations.workflows import AGENT_CALLS_MAX

    if value is None:
        return AGENT_CALLS_MAX
    if not isinstance(value, int) or not 1 <= value <= AGENT_CALLS_MAX:
        raise FieldError(f"budget must be 1-{AGENT_CALLS_MAX} agent calls", field="budget", code="invalid_budget")
    return value


async def _source(body: dict[str, Any]) -> str:
    """The script to run: the saved workflow's, or the one pasted (exactly one of them)."""
    from kirocrew_conversations import workflow_library

    if ("workflow" in body) == ("source" in body):
        raise FieldError("give a saved workflow's name or a script's source (exactly one)",
                         field="source" if "source" in body else "workflow", code="workflow_or_source")
    if "source" in body:
        return str(body["source"])
    name = body["workflow"]
    if not _NAME.match(name):
        raise FieldError("workflow must be a saved workflow's name", field="workflow", code="invalid_name")
    try:
        return await asyncio.to_thread(workflow_library.load, name)
    except KirocrewError as exc:
        if exc.code != "workflow_not_found":
            raise
        raise FieldError(exc.message, field="workflow", code=exc.code) from None  # a name matching nothing: bad input


@_answers
async def start_run(request: Request) -> Response:
    from starlette.responses import JSONResponse

    from kirocrew_conversations.workflow_check import WorkflowRejected
    from kirocrew_conversations.workflow_tools import start_checked

    body = await read_fields(request, {"workflow": (str,), "source": (str,), "args": (dict,),
                                       "cwd": (str, type(None)), "budget": (int, type(None))},
                             limit=START_BODY_LIMIT)
    source = await _source(body)
    args = _arguments(body.get("args", {}))
    budget = _budget(body.get("budget"))
    cwd = await asyncio.to_thread(_workdir, body.get("cwd"))
    engine = await _engine()
    try:
        run = await start_checked(engine, source, owner=PERSON, args=args, conversation=None, cwd=cwd,
                                  budget_total=budget)
    except WorkflowRejected as exc:
        if "source" not in body:
            raise
        raise FieldError(exc.message, field="source", code=exc.code) from None  # the pasted script is at fault
    return JSONResponse({"run_id": run.run_id, "name": run.record["name"]}, status_code=201)


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [Route("/api/workflows/runs", list_runs, methods=["GET"], name="workflows_list"),
            Route("/api/workflows/run", start_run, methods=["POST"], name="workflows_start"),
            Route("/api/workflows/runs/{run_id}", show_run, methods=["GET"], name="workflows_show"),
            Route("/api/workflows/runs/{run_id}/cancel", cancel_run, methods=["POST"], name="workflows_cancel"),
            Route("/api/workflows/runs/{run_id}/rerun", rerun_run, methods=["POST"], name="workflows_rerun")]


async def workflows_page(request: Request) -> Response:
    from kirocrew_core.gateway.shell import render_page

    view: dict[str, Any] = {"runs": [], "saved": []}
    problem = None
    try:
        view = await runs_view()
    except KirocrewError as exc:
        problem = exc
    return render_page(request, f"{PACKAGE}/workflows.html", title="Workflows", status_code=503 if problem else 200,
                       runs=view["runs"], saved=view["saved"], problem=problem, status_classes=STATUS_CLASSES)
