"""``/api/conversations…``: the dashboard's JSON routes over the host's conversations service.

Every route calls one of the MCP tools through :meth:`ConversationsService.call`, so the
arguments are checked by the same strict schemas, the same orchestrator operations run and
the same error codes come back; a route only moves path parameters and the JSON body into
the tool's arguments. The gateway authenticates every ``/api`` route as the owner, so each
call acts for the person (:mod:`kirocrew_conversations.scope`), who sees every conversation;
each change made here is recorded in the security event log as ``conversations.dashboard``
with actor ``owner``.

The service is the host's (:mod:`kirocrew_conversations.hosted`), reached in process: the
gateway and the host share one event loop in ``kirocrew serve``. A gateway without a host
(an app built for tests) answers ``host_not_running``.

Status codes follow :mod:`kirocrew_core.gateway.errors`: a code in :data:`BAD_INPUT_CODES`
is 400, one in :data:`CONFLICT_CODES` 409, anything else 500. Starlette is imported inside
functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError, ConflictError, KirocrewError
from kirocrew_core.gateway.body import read_json_object

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import BaseRoute

    from kirocrew_conversations.service import ConversationsService

#: A message is at most 200k characters; JSON escaping can multiply that.
MAX_BODY_BYTES = 2 * 1024 * 1024
#: The newest runs a conversation's page and ``GET /api/conversations/{id}`` show.
MAX_RUNS_SHOWN = 20
#: The events shown per run (the first page of ``kiro_events``; the rest through the events route).
EVENTS_PER_RUN = 100
#: How many conversations the list shows per page.
LIST_PAGE = 50

#: The caller named something that does not exist or asked for something malformed: nothing changed.
BAD_INPUT_CODES = frozenset({
    "invalid_arguments", "conversation_not_found", "run_not_found", "permission_not_found", "bad_cursor",
    "conversation_mismatch", "confirmation_mismatch", "workspace_not_found", "unknown_model", "unknown_mode",
    "unsupported_permission_option", "slash_command_refused", "unknown_slash_command", "invalid_image",
    "not_a_git_repository", "not_repository_root", "invalid_base_ref", "base_ref_not_found",
    "not_a_worktree_conversation", "conversation_name_taken", "question_not_found", "question_ambiguous",
    "answer_not_asked", "answer_too_long",
})
#: Sound, but it clashes with the conversation's state now.
CONFLICT_CODES = frozenset({
    "conversation_busy", "conversation_archived", "conversation_not_archived", "permission_not_pending",
    "illegal_transition", "conversation_retired", "conversation_retiring", "kiro_session_in_use",
    "repository_dirty", "worktree_exists", "worktree_not_found", "worktree_active", "worktree_dirty",
    "worktree_ignored_files", "worktree_not_cleaned_up", "worktree_conflicted", "worktree_unintegrated",
    "authority_unavailable", "session_image_limit", "no_kiro_session", "kiro_session_not_found",
})
AUDIT_EVENT = "conversations.dashboard"


async def service_of(request: Request) -> ConversationsService:
    """The host's conversations service (started on demand, like a relay's connection would)."""
    from kirocrew_conversations.hosted import hosted

    if request.app.state.kirocrew.host is None:
        raise KirocrewError("conversations run in the host (kirocrew serve); this gateway has none",
                            code="host_not_running")
    return await hosted().ready()


def _as_http_error(exc: KirocrewError) -> KirocrewError:
    """The same code and message, as the kind of fault the gateway answers with its status."""
    if exc.code in BAD_INPUT_CODES and not isinstance(exc, BadInputError):
        return BadInputError(exc.message, code=exc.code)
    if exc.code in CONFLICT_CODES and not isinstance(exc, ConflictError):
        return ConflictError(exc.message, code=exc.code)
    return exc


async def call_tool(request: Request, tool: str, arguments: dict[str, Any], *, audited: bool = False) -> Any:
    """``tool`` with ``arguments`` on the host's service; a change (``audited``) goes to the event log."""
    from kirocrew_conversations.scope import PERSON

    service = await service_of(request)
    try:
        result = await service.call(tool, arguments, viewer=PERSON)  # the gateway authenticated the owner
    except KirocrewError as exc:
        if audited:
            await asyncio.to_thread(_audit, tool, arguments, outcome="refused", code=exc.code)
        raise _as_http_error(exc) from exc
    if audited:
        await asyncio.to_thread(_audit, tool, arguments, outcome="ok", code="ok")
    return result


def _audit(tool: str, arguments: dict[str, Any], *, outcome: str, code: str) -> None:
    from kirocrew_core import audit

    ids = {key: arguments[key] for key in ("conversationId", "runId") if isinstance(arguments.get(key), str)}
    audit.record(AUDIT_EVENT, actor="owner", outcome=outcome, tool=tool, code=code, **ids)


def _query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise BadInputError(f"{name} must be a whole number from {low} to {high}", code="invalid_arguments")
    return int(raw)


async def _body(request: Request, *, forbidden: tuple[str, ...] = ()) -> dict[str, Any]:
    document = await read_json_object(request, limit=MAX_BODY_BYTES)
    for key in forbidden:
        if key in document:
            raise BadInputError(f"{key} comes from the address, not the body", code="invalid_arguments")
    return document


# -- reads ---------------------------------------------------------------------------------------


async def list_conversations(request: Request, *, archive: str | None = None, cursor: str | None = None) -> Any:
    """``kiro_status`` for the list: ``archive`` is active (default), archived or all."""
    arguments: dict[str, Any] = {"archive": archive or request.query_params.get("archive", "active"),
                                 "limit": LIST_PAGE}
    cursor = cursor or request.query_params.get("cursor")
    if cursor:
        arguments["cursor"] = cursor
    return await call_tool(request, "kiro_status", arguments)


async def conversation_detail(request: Request, conversation_id: str) -> dict[str, Any]:
    """One conversation: its defaults and state, and its newest runs each with its redacted events.

    Built from ``kiro_result`` and ``kiro_events`` (their redaction and views), plus the store's
    list of the conversation's runs, which no tool returns. ``revision`` changes whenever
    anything shown changes, so a page polls cheaply and redraws only then.
    """
    from kirocrew_conversations.orchestrator import db_call
    from kirocrew_conversations.views import conversation_settings, session_view

    from kirocrew_conversations.tool_schemas import validate_arguments

    service = await service_of(request)
    try:
        validate_arguments("kiro_archive", {"conversationId": conversation_id})  # the tools' id check
        conversation = await db_call(service.store.get_conversation, conversation_id)
        runs = await db_call(service.store.list_runs, conversation_id)
        family = await _family(service, conversation)
    except KirocrewError as exc:
        raise _as_http_error(exc) from exc
    shown = []
    for run in runs[-MAX_RUNS_SHOWN:]:
        target = {"conversationId": conversation_id, "runId": run.id}
        view = await call_tool(request, "kiro_result", target)
        view.pop("session", None)  # the conversation's, shown once below
        events = await call_tool(request, "kiro_events", {**target, "limit": EVENTS_PER_RUN})
        shown.append({**view, "events": events["events"], "moreEvents": events["nextCursor"] is not None})
    directives = service.store.directives
    session = session_view(conversation, await db_call(directives.followups, conversation_id),
                           await db_call(directives.monitor, conversation_id))
    state = "retired" if conversation.retired else conversation.state
    attention = next((run["attention"] for run in reversed(shown) if run["attention"]), None)
    questions = service.pending_questions(conversation.id)
    detail: dict[str, Any] = {
        "conversationId": conversation.id, "name": conversation.name, "state": state,
        "defaults": conversation_settings(conversation), "createdAt": conversation.created_at,
        "updatedAt": conversation.updated_at, "runCount": len(runs), "runs": shown,
        "olderRuns": max(0, len(runs) - len(shown)), "attention": attention, "questions": questions,
        "live": any(run["status"] in ("queued", "running", "needs_attention") for run in shown),
        **family,
        "session": session,
    }
    detail["revision"] = hashlib.sha256(json.dumps(detail, sort_keys=True).encode()).hexdigest()[:16]
    return detail


async def _family(service: ConversationsService, conversation: Any) -> dict[str, Any]:
    """A sub-agent's parent (``parent``: id and name, or None) and the conversation's own sub-agents."""
    from kirocrew_conversations.orchestrator import db_call
    from kirocrew_conversations.subagents import status_label

    parent = None
    if conversation.parent_id is not None:
        with contextlib.suppress(KirocrewError):  # deleted meanwhile: the link is simply not shown
            found = await db_call(service.store.get_conversation, conversation.parent_id)
            parent = {"conversationId": found.id, "name": found.name}
    children = []
    for child, run in await service.subagents.listing(conversation):
        children.append({"conversationId": child.id, "name": child.name, "status": status_label(child, run)})
    return {"subagent": conversation.subagent, "parent": parent, "subagents": children}


async def get_list(request: Request) -> JSONResponse:
    """``GET /api/conversations?archive=active|archived|all&cursor=…``: ``kiro_status``'s page."""
    from starlette.responses import JSONResponse

    return JSONResponse(await list_conversations(request))


async def get_one(request: Request) -> JSONResponse:
    """``GET /api/conversations/{id}``: :func:`conversation_detail`."""
    from starlette.responses import JSONResponse

    return JSONResponse(await conversation_detail(request, request.path_params["conversation_id"]))


async def get_events(request: Request) -> JSONResponse:
    """``GET /api/conversations/{id}/runs/{run}/events?cursor=…&limit=…``: ``kiro_events``."""
    from starlette.responses import JSONResponse

    from kirocrew_conversations import limits

    arguments: dict[str, Any] = {"conversationId": request.path_params["conversation_id"],
                                 "runId": request.path_params["run_id"],
                                 "limit": _query_int(request, "limit", EVENTS_PER_RUN, 1, limits.PAGE_SIZE_MAX)}
    if request.query_params.get("cursor"):
        arguments["cursor"] = request.query_params["cursor"]
    return JSONResponse(await call_tool(request, "kiro_events", arguments))


async def get_questions(request: Request) -> JSONResponse:
    """``GET /api/conversations/{id}/questions``: the open question cards, oldest first (a reloaded page's source)."""
    from starlette.responses import JSONResponse

    from kirocrew_conversations.orchestrator import db_call
    from kirocrew_conversations.tool_schemas import validate_arguments

    service = await service_of(request)
    conversation_id = request.path_params["conversation_id"]
    try:
        validate_arguments("kiro_archive", {"conversationId": conversation_id})  # the tools' id check
        conversation = await db_call(service.store.get_conversation, conversation_id)
    except KirocrewError as exc:
        raise _as_http_error(exc) from exc
    return JSONResponse({"conversationId": conversation.id, "pending": service.pending_questions(conversation.id)})


async def get_capabilities(request: Request) -> JSONResponse:
    """``GET /api/conversations/capabilities``: ``kiro_capabilities`` (models, modes, authorities, limits)."""
    from starlette.responses import JSONResponse

    return JSONResponse(await call_tool(request, "kiro_capabilities", {}))


async def get_worktree(request: Request) -> JSONResponse:
    """``GET /api/conversations/{id}/worktree``: ``kiro_worktree_inspect``."""
    from starlette.responses import JSONResponse

    arguments = {"conversationId": request.path_params["conversation_id"]}
    return JSONResponse(await call_tool(request, "kiro_worktree_inspect", arguments))


# -- changes -------------------------------------------------------------------------------------


async def _change(request: Request, tool: str, *, body: bool = True, **fixed: Any) -> JSONResponse:
    """``tool`` with the body's fields plus the address's (which the body may not repeat)."""
    from starlette.responses import JSONResponse

    if body:
        document = await _body(request, forbidden=tuple(fixed))
    elif await read_json_object(request, limit=MAX_BODY_BYTES, default={}):
        raise BadInputError(f"{tool} takes no body (the address names what it acts on)", code="invalid_arguments")
    else:
        document = {}
    return JSONResponse(await call_tool(request, tool, {**document, **fixed}, audited=True))


async def start(request: Request) -> JSONResponse:
    """``POST /api/conversations``: ``kiro_spawn`` of a new conversation (name, workspace, message, settings)."""
    return await _change(request, "kiro_spawn", conversation="new")


async def send(request: Request) -> JSONResponse:
    """``POST /api/conversations/{id}/messages``: ``kiro_send`` (message, delivery queue or interrupt)."""
    return await _change(request, "kiro_send", conversationId=request.path_params["conversation_id"])


async def cancel(request: Request) -> JSONResponse:
    """``POST /api/conversations/{id}/runs/{run}/cancel``: ``kiro_cancel``."""
    return await _change(request, "kiro_cancel", body=False, conversationId=request.path_params["conversation_id"],
                         runId=request.path_params["run_id"])


async def decide(request: Request) -> JSONResponse:
    """``POST /api/conversations/{id}/runs/{run}/permissions/{request}``: ``kiro_permission_decide`` (decision)."""
    return await _change(request, "kiro_permission_decide", conversationId=request.path_params["conversation_id"],
                         runId=request.path_params["run_id"],
                         permissionRequestId=request.path_params["permission_id"])


async def answer(request: Request) -> JSONResponse:
    """``POST /api/conversations/{id}/questions/{ask}``: ``kiro_question_answer`` (answers, or dismissed)."""
    return await _change(request, "kiro_question_answer", conversationId=request.path_params["conversation_id"],
                         askId=request.path_params["ask_id"])


async def configure(request: Request) -> JSONResponse:
    """``PATCH /api/conversations/{id}/settings``: ``kiro_configure`` while idle (model, effort, mode, authority)."""
    return await _change(request, "kiro_configure", conversationId=request.path_params["conversation_id"])


async def archive(request: Request) -> JSONResponse:
    """``POST /api/conversations/{id}/archive``: ``kiro_archive``."""
    return await _change(request, "kiro_archive", body=False, conversationId=request.path_params["conversation_id"])


async def delete(request: Request) -> JSONResponse:
    """``DELETE /api/conversations/{id}`` with ``{"confirmName": <exact name>}``: ``kiro_delete``."""
    return await _change(request, "kiro_delete", conversationId=request.path_params["conversation_id"])


async def cleanup_worktree(request: Request) -> JSONResponse:
    """``POST /api/conversations/{id}/worktree/cleanup``: ``kiro_worktree_cleanup``."""
    return await _change(request, "kiro_worktree_cleanup", body=False,
                         conversationId=request.path_params["conversation_id"])


async def _session_action(request: Request, action: str) -> JSONResponse:
    """Run the service's ``action`` (hand_over, repair_session) for the person, audited like a tool change."""
    from starlette.responses import JSONResponse

    from kirocrew_conversations.scope import PERSON

    if await read_json_object(request, limit=MAX_BODY_BYTES, default={}):
        raise BadInputError(f"{action} takes no body (the address names what it acts on)", code="invalid_arguments")
    service = await service_of(request)
    arguments = {"conversationId": request.path_params["conversation_id"]}
    try:
        result = await getattr(service, action)(PERSON, arguments["conversationId"])
    except KirocrewError as exc:
        await asyncio.to_thread(_audit, action, arguments, outcome="refused", code=exc.code)
        raise _as_http_error(exc) from exc
    await asyncio.to_thread(_audit, action, arguments, outcome="ok", code="ok")
    return JSONResponse(result)


async def hand_over(request: Request) -> JSONResponse:
    """``POST /api/conversations/{id}/open``: release the worker; the ``kiro-cli chat --resume-id`` command."""
    return await _session_action(request, "hand_over")


async def repair(request: Request) -> JSONResponse:
    """``POST /api/conversations/{id}/repair``: mend the Kiro session's images (worker released first)."""
    return await _session_action(request, "repair_session")


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    one = "/api/conversations/{conversation_id}"
    run = one + "/runs/{run_id}"
    return [
        Route("/api/conversations", get_list, methods=["GET"], name="conversations_list"),
        Route("/api/conversations", start, methods=["POST"], name="conversations_start"),
        Route("/api/conversations/capabilities", get_capabilities, methods=["GET"],
              name="conversations_capabilities"),
        Route(one, get_one, methods=["GET"], name="conversations_get"),
        Route(one, delete, methods=["DELETE"], name="conversations_delete"),
        Route(one + "/messages", send, methods=["POST"], name="conversations_send"),
        Route(one + "/settings", configure, methods=["PATCH"], name="conversations_configure"),
        Route(one + "/archive", archive, methods=["POST"], name="conversations_archive"),
        Route(one + "/open", hand_over, methods=["POST"], name="conversations_open"),
        Route(one + "/repair", repair, methods=["POST"], name="conversations_repair"),
        Route(one + "/worktree", get_worktree, methods=["GET"], name="conversations_worktree"),
        Route(one + "/worktree/cleanup", cleanup_worktree, methods=["POST"], name="conversations_worktree_cleanup"),
        Route(one + "/questions", get_questions, methods=["GET"], name="conversations_questions"),
        Route(one + "/questions/{ask_id}", answer, methods=["POST"], name="conversations_answer"),
        Route(run + "/events", get_events, methods=["GET"], name="conversations_events"),
        Route(run + "/cancel", cancel, methods=["POST"], name="conversations_cancel"),
        Route(run + "/permissions/{permission_id}", decide, methods=["POST"], name="conversations_decide"),
    ]
