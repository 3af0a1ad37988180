"""The dashboard's Conversations pages: the list (``/conversations``) and one conversation (``/conversations/{id}``).

Both are rendered on the server from the same functions as their JSON twins
(:func:`~kirocrew_conversations.api.list_conversations` is ``GET /api/conversations``,
:func:`~kirocrew_conversations.api.conversation_detail` is ``GET /api/conversations/{id}``).
Replies are Kiro's Markdown rendered safe (:mod:`kirocrew_core.gateway.markdown`); every
other string is escaped by the templates. The scripts in ``static/`` make every change
through the owner-authenticated ``/api/conversations…`` routes, and a conversation's page
polls its JSON twin every :data:`POLL_SECONDS` while a run is unfinished, redrawing its live
part from this page when the answer's ``revision`` changes. Polling, not server-sent events:
an open event stream would keep an auto-started host alive forever (every open HTTP request
counts as activity) and needs a reconnect protocol; a 2 s poll of a small JSON document costs
little and shows a permission request within two seconds. Starlette is imported inside functions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_conversations"
#: How often a conversation's page asks whether anything changed while a run is unfinished.
POLL_SECONDS = 2
#: A reply's ``#`` heading is shown as ``h4``: it sits under its run's ``h3``.
REPLY_HEADING_OFFSET = 3
ARCHIVE_CHOICES = (("active", "Active"), ("archived", "Archived"), ("all", "All"))
#: Run statuses shown as a failure (red) and as finished well (green).
BAD_STATUSES = frozenset({"failed", "timed_out", "interrupted", "needs_attention_expired"})
GOOD_STATUSES = frozenset({"completed", "idle"})


def status_class(status: str | None) -> str:
    """The shell's colour class for a run or conversation status."""
    if status in BAD_STATUSES:
        return "fail"
    if status in GOOD_STATUSES:
        return "ok"
    return "warn" if status in ("needs_attention", "cancelled") else ""


def _choices() -> dict[str, Any]:
    from kirocrew_conversations import limits
    from kirocrew_conversations.vocabulary import (
        AUTHORITIES,
        DEFAULT_AGENT,
        DELIVERIES,
        EFFORTS,
        UNRESTRICTED,
        WORKSPACE_MODES,
    )

    return {"authorities": AUTHORITIES, "efforts": EFFORTS, "workspace_modes": WORKSPACE_MODES,
            "deliveries": DELIVERIES, "default_authority": UNRESTRICTED, "default_agent": DEFAULT_AGENT,
            "name_max": limits.NAME_MAX_CHARS,
            "message_max": limits.MESSAGE_MAX_CHARS, "status_class": status_class}


async def list_page(request: Request) -> Response:
    """``GET /conversations``: the Start form and the conversations under the archive filter."""
    from kirocrew_core.gateway.shell import render_page

    from kirocrew_conversations.api import list_conversations

    archive = request.query_params.get("archive", "active")
    listing, problem = None, None
    try:
        listing = await list_conversations(request, archive=archive)
    except KirocrewError as exc:
        problem = exc
    crews, crews_problem = await _crews()
    status = 200 if problem is None else (400 if problem.exit_code == 2 else 503)
    return render_page(request, f"{PACKAGE}/conversations.html", title="Conversations", status_code=status,
                       listing=listing, problem=problem, archive=archive, archive_choices=ARCHIVE_CHOICES,
                       crews=crews, crews_problem=crews_problem, **_choices())


async def _crews() -> tuple[list[Any], KirocrewError | None]:
    """The owner's crews (core reads and checks ``config.toml``), or why they cannot be read: the page says so
    in its Crews section and shows everything else."""
    import asyncio

    from kirocrew_core.crews.bindings import all_crews

    try:
        return await asyncio.to_thread(all_crews), None
    except KirocrewError as exc:
        return [], exc


async def conversation_page(request: Request) -> Response:
    """``GET /conversations/{id}``: its runs (reply as safe Markdown, redacted events) and every action."""
    from kirocrew_core.gateway.shell import render_page

    from kirocrew_conversations.api import conversation_detail
    from kirocrew_core.artifacts.views import of_conversation
    from kirocrew_core.gateway.markdown import render_markdown

    try:
        detail = await conversation_detail(request, request.path_params["conversation_id"])
    except KirocrewError as exc:
        status = 404 if exc.code in ("conversation_not_found", "invalid_arguments") else 503
        return render_page(request, f"{PACKAGE}/conversation.html", title="Conversation not available",
                           status_code=status, detail=None, problem=exc, **_choices())
    replies = {run["runId"]: render_markdown(run["reply"]["text"], heading_offset=REPLY_HEADING_OFFSET)
               for run in detail["runs"] if run["reply"]}
    artifacts = await asyncio.to_thread(of_conversation, request.path_params["conversation_id"])  # its saves
    return render_page(request, f"{PACKAGE}/conversation.html", title=detail["name"], detail=detail,
                       replies=replies, artifacts=artifacts, problem=None, poll_seconds=POLL_SECONDS, **_choices())
