"""``GET /history``: the History page, rendered on the server (plain GET forms and links, no script needed).

One endpoint, three views by query:

* the session list (no ``q``): every session newest first, :data:`PAGE_SIZE` a page, filtered by
  ``workspace``, ``after`` and ``before``, with each one's cached summary; ``summarize=1`` writes
  the page's missing ones first (:mod:`.summaries`: its limits, its budget, its notes);
* search results (``q``): each matching session with a redacted snippet, the match marked;
* one session (``session=<key>``): its messages newest first, redacted, :data:`MESSAGES_PAGE` a
  page (``mpage``); the command that resumes it in a terminal (the page shows it for the owner
  to run: it never starts a terminal itself); ``export=md`` answers the session as a Markdown file.

The page belongs to the owner (the gateway authenticates it), so it shows every workspace.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError
from kirocrew_core.gateway.paging import page_number, page_query

if TYPE_CHECKING:
    from markupsafe import Markup
    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_core.history.index import HistoryIndex

PACKAGE = "kirocrew_core.history"
PAGE_SIZE = 50
MESSAGES_PAGE = 50


def marked(snippet: str) -> Markup:
    """A snippet (already redacted) escaped, its ``<<<…>>>`` markers turned into ``<mark>``."""
    from markupsafe import Markup, escape

    from kirocrew_core.history.text import MARK_CLOSE, MARK_OPEN

    before, _, rest = snippet.partition(MARK_OPEN)
    match, _, after = rest.partition(MARK_CLOSE)
    if not rest:
        return Markup(escape(snippet))
    return escape(before) + Markup("<mark>") + escape(match) + Markup("</mark>") + escape(after)



def _page_data(params: dict[str, str]) -> dict[str, Any]:
    from kirocrew_core.history import summaries, text
    from kirocrew_core.history.index import Scope, fts_query, shared
    from kirocrew_core.history.tools import SEARCH_MAX

    index = shared()
    problems = index.refresh().problems
    workspace = params.get("workspace", "")
    scope = Scope((workspace,)) if workspace else Scope.everything()
    errors: dict[str, str] = {}
    bounds = {}
    for field in ("after", "before"):
        try:
            bounds[field] = text.day_bound(params.get(field) or None, field)
        except KirocrewError as exc:
            errors[field], bounds[field] = exc.message, ""
    data: dict[str, Any] = {"params": params, "errors": errors, "problems": problems, "summaries": None,
                            "workspaces": index.workspaces(), "short_time": text.short_time, "shown": text.shown,
                            "marked": marked, "hits": None, "rows": [], "total": 0}
    query = params.get("q", "").strip()
    if query:
        try:
            _, words = fts_query(query)
            hits = index.search(query, scope, limit=SEARCH_MAX, after=bounds["after"], before=bounds["before"])
        except KirocrewError as exc:
            errors["q"], hits, words = exc.message, [], []
        data["hits"] = [(hit.session, found) for hit in hits
                        if (found := next((s for s in (text.snippet(t, words) for t in hit.texts) if s), None))]
        return data
    page = page_number(params.get("page"))
    data["total"] = index.count(scope, after=bounds["after"], before=bounds["before"])
    data["rows"] = index.sessions(scope, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE, after=bounds["after"],
                                  before=bounds["before"])
    data["page"], data["pages"] = page, max(1, -(-data["total"] // PAGE_SIZE))
    data["summaries"] = summaries.cached(index, data["rows"])  # free: only what the index holds
    data["per_call"] = summaries.PER_CALL
    return data


def _session_data(index: HistoryIndex, key: str, mpage: int) -> dict[str, Any] | None:
    from kirocrew_core.history import text
    from kirocrew_core.history.index import KEY_PATTERN

    row = index.session(key) if KEY_PATTERN.match(key) else None
    if row is None:
        return None
    messages = index.messages(key, limit=MESSAGES_PAGE, offset=(mpage - 1) * MESSAGES_PAGE)
    return {"row": row, "messages": messages, "mpage": mpage, "mpages": max(1, -(-row.messages // MESSAGES_PAGE)),
            "short_time": text.short_time, "shown": text.shown}



async def history_page(request: Request) -> Response:
    from starlette.responses import Response

    from kirocrew_core.gateway.shell import render_page
    from kirocrew_core.history.index import shared

    params = {k: v[:500] for k, v in request.query_params.items()
              if k in ("q", "after", "before", "workspace", "page", "session", "mpage", "export", "summarize")}
    key = params.get("session", "")
    if key:
        def load() -> dict[str, Any] | None:
            index = shared()
            index.refresh()
            return _session_data(index, key, page_number(params.get("mpage")))

        view = await asyncio.to_thread(load)
        if view is None:
            return render_page(request, f"{PACKAGE}/history.html", title="History", status_code=404,
                               missing=True, query=page_query, params=params)
        if params.get("export") == "md":
            from kirocrew_core.history.cli import export_markdown

            document = await asyncio.to_thread(export_markdown, shared(), key)
            return Response(document, media_type="text/markdown; charset=utf-8",
                            headers={"Content-Disposition": f'attachment; filename="session-{key}.md"',
                                     "Cache-Control": "no-store"})
        return render_page(request, f"{PACKAGE}/session.html", title="History", query=page_query, params=params, **view)
    data = await asyncio.to_thread(_page_data, params)
    if data["summaries"] is not None and params.get("summarize") == "1":
        # The owner asked for this page's missing summaries: written now, within the tool's limits and budget.
        from kirocrew_core.history import summaries

        outcome, wanted = data["summaries"]
        await summaries.write(shared(), wanted, outcome)
    return render_page(request, f"{PACKAGE}/history.html", title="History", query=page_query, missing=False, **data)
