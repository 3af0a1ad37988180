"""``GET /artifacts`` and ``GET /artifacts/{slug}``: the Artifacts page, rendered on the server.

The list filters with a plain GET form (search words, folder, tag, kind, source, starred) and pages
through :data:`PAGE_SIZE` at a time; the pending deploys sit above it. One artifact shows its
content by kind: Markdown through the dashboard's safe renderer
(:func:`kirocrew_core.gateway.markdown.render_markdown`: no raw HTML passes), HTML and SVG only in an
``<iframe sandbox>`` fed by the sandbox route (:mod:`.api`), JSON and text as text, an image as its
``data:`` URL. The version picker and the diff are a GET form too; the page's script
(``static/artifacts.js``) only posts comments, resolves, reverts, moves, stars, deletes and answers
deploys through the JSON routes, then swaps in the page's fresh server-rendered regions, and polls
``/api/artifact-changes`` to do the same when something else changed the artifact.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError
from kirocrew_core.gateway.paging import page_number, page_query

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_core.artifacts"
PAGE_SIZE = 100
#: How often an open page asks whether anything changed (one small stat-only request).
POLL_SECONDS = 3
#: Markdown headings start at h3 under the page's own h1 and h2s.
HEADING_OFFSET = 2




def _list_data(params: dict[str, str]) -> dict[str, Any]:
    from kirocrew_core.artifacts import views
    from kirocrew_core.artifacts.api import pending_view

    error = None
    every = views.everything()
    try:
        rows = views.listing(views.Filters.parse(params), every, redact=False)
    except KirocrewError as exc:
        error, rows = f"{exc.message} ({exc.code})", []
    page = page_number(params.get("page"))
    pages = max(1, -(-len(rows) // PAGE_SIZE))
    shown = views.redact_summaries(rows[(page - 1) * PAGE_SIZE:page * PAGE_SIZE])
    return {"rows": shown, "total": len(rows), "page": page, "pages": pages,
            "library": views.library(every), "error": error, "pending": pending_view(), "stamp": views.stamp()}


def rendered(view: dict[str, Any]) -> Any:
    """The shown version's content as safe HTML for the page (None for html/svg: the sandbox shows those)."""
    from markupsafe import Markup, escape

    from kirocrew_core.gateway.markdown import render_markdown

    kind, content = view["kind"], view["content"]
    if kind == "markdown":
        return Markup(render_markdown(content, heading_offset=HEADING_OFFSET))  # html is off in the renderer
    if kind == "json":
        with contextlib.suppress(ValueError):  # a version saved before the check: shown as it is
            content = json.dumps(json.loads(content), indent=2, ensure_ascii=False)
    if kind in ("json", "text"):
        return Markup("<pre>") + escape(content) + Markup("</pre>")
    return None


def _detail_data(slug: str, params: dict[str, str]) -> dict[str, Any]:
    from kirocrew_core.artifacts import views
    from kirocrew_core.artifacts.api import pending_view

    version = page_number(params["version"]) if params.get("version") else None
    view = views.detail(slug, version)
    compare = page_number(params["compare"]) if params.get("compare") else None
    diff, diff_error = None, None
    if compare is not None and compare != view["shown_version"]:
        try:
            older, newer = sorted((compare, int(view["shown_version"])))
            diff = views.diff(slug, older, newer)
        except KirocrewError as exc:
            diff_error = f"{exc.message} ({exc.code})"
    return {"a": view, "body": rendered(view), "diff": diff, "diff_error": diff_error, "compare": compare,
            "live": view["shown_version"] == view["version"], "folders": sorted(views.folder_paths().values()),
            "pending": [p for p in pending_view() if p["slug"] == slug], "stamp": views.stamp(slug),
            "open_comments": sum(1 for c in view["comments"] if c["status"] != "resolved")}


async def artifacts_page(request: Request) -> Response:
    from kirocrew_core.artifacts import views
    from kirocrew_core.gateway.shell import render_page

    params = {k: v[:500] for k, v in request.query_params.items() if k in (*views.FILTERS, "page")}
    data = await asyncio.to_thread(_list_data, params)
    return render_page(request, f"{PACKAGE}/artifacts.html", title="Artifacts", params=params, query=page_query,
                       poll_seconds=POLL_SECONDS, **data)


async def artifact_page(request: Request) -> Response:
    from kirocrew_core.gateway.shell import render_page

    slug = request.path_params["slug"]
    params = {k: v[:20] for k, v in request.query_params.items() if k in ("version", "compare")}
    try:
        data = await asyncio.to_thread(_detail_data, slug, params)
    except KirocrewError as exc:
        status = 404 if exc.code in ("artifact_not_found", "invalid_slug", "version_not_found") else 500
        return render_page(request, f"{PACKAGE}/artifact.html", title="Artifact not available", status_code=status,
                           problem=exc, slug=slug)
    return render_page(request, f"{PACKAGE}/artifact.html", title=data["a"]["name"], problem=None,
                       poll_seconds=POLL_SECONDS, params=params, **data)
