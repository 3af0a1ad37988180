"""The Workflows page (``/workflows``) and the owner's JSON routes it calls.

- ``GET /api/workflows/runs``: ``{"runs", "saved"}``, newest first, each run without its events or source;
- ``GET /api/workflows/runs/{run_id}``: one run's record, events included;
- ``POST /api/workflows/runs/{run_id}/cancel``: ``{"cancelled"}``; 409 ``workflow_not_cancellable`` when it
  is not running, 404 ``workflow_run_not_found`` for an unknown id.

The page is rendered on the server from the same view; ``static/workflows.js`` posts a cancel and
redraws the table from the page. Like every ``/api/`` route these are the owner's only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import ConflictError, KirocrewError
from kirocrew_core.gateway.fields import answers

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from kirocrew_conversations.workflows import WorkflowEngine

PACKAGE = "kirocrew_conversations"
_answers = answers({"workflow_run_not_found"})
STATUS_CLASSES = {"finished": "good", "failed": "bad", "cancelled": "", "running": ""}


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


@_answers
async def show_run(request: Request) -> Response:
    from starlette.responses import JSONResponse

    _, record = await _record(str(request.path_params["run_id"]))
    return JSONResponse({k: v for k, v in record.items() if k != "source"}, headers={"Cache-Control": "no-store"})


@_answers
async def cancel_run(request: Request) -> Response:
    from starlette.responses import JSONResponse

    run_id = str(request.path_params["run_id"])
    engine, record = await _record(run_id)
    if not await engine.cancel(run_id):
        raise ConflictError(f"run {run_id} is not running ({record.get('status')})", code="workflow_not_cancellable")
    return JSONResponse({"cancelled": run_id})


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [Route("/api/workflows/runs", list_runs, methods=["GET"], name="workflows_list"),
            Route("/api/workflows/runs/{run_id}", show_run, methods=["GET"], name="workflows_show"),
            Route("/api/workflows/runs/{run_id}/cancel", cancel_run, methods=["POST"], name="workflows_cancel")]


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
