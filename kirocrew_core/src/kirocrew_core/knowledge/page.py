"""``GET /knowledge`` and ``GET /knowledge/sources/{id}``: the Knowledge page, rendered on the server.

The page lists the library's sources with their live state (the host reads them in the background:
``indexing`` shows how many files of how many), a search box (``q``: the best chunks as
``local_knowledge_search`` ranks them, redacted), a form to add a folder or file, an artifact or the
lessons, and the Skills section: every skill the owner's sessions see (source, always or summary) and
the broken or skipped ones with why, and the configured registry (``registry``: a search; ``skill``:
one skill's files, shown before the owner installs it). One source's page lists its documents
(:data:`~kirocrew_core.knowledge.api.DOCUMENTS_PAGE` a page, ``named`` narrowing them by name), the
files skipped with why, and the documents the owner removed, each with **Include again**. The
script (``static/knowledge.js``) only calls the JSON routes (:mod:`.api`) and swaps in fresh
server-rendered regions; it polls ``/api/knowledge-changes`` to do the same while something changes.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError
from kirocrew_core.gateway.paging import page_number, page_query

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_core.knowledge"
#: How often an open page asks whether anything changed (one stat-only request).
POLL_SECONDS = 1
SEARCH_SHOWN = 10
_PARAMS = ("q", "registry", "skill")


def _problem(exc: KirocrewError) -> str:
    return f"{exc.message} ({exc.code})"


def _shown_url(url: str) -> str:
    """The registry's address as the page shows it: no user or password, secrets in it redacted."""
    from urllib.parse import urlsplit

    from kirocrew_core.redaction import redact_secrets

    if not url:
        return ""
    try:
        parts = urlsplit(url)
        url = parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()
    except ValueError:
        pass
    return redact_secrets(url)


def _registry_data(params: dict[str, str]) -> dict[str, Any]:
    """The Skills section's registry part: configured or not, a search's results, one skill's files."""
    from kirocrew_core.config import get_value
    from kirocrew_core.knowledge import api

    url = str(get_value("skills.registry_url"))
    data: dict[str, Any] = {"registry_url": _shown_url(url), "registry_hits": None, "registry_error": None,
                            "preview": None}
    if not url:
        return data
    try:
        if params.get("skill"):
            data["preview"] = api.registry_preview(params["skill"])
        elif params.get("registry", "").strip():
            data["registry_hits"] = api.registry_search(params["registry"])
    except KirocrewError as exc:
        data["registry_error"] = _problem(exc)
    return data


def _page_data(params: dict[str, str]) -> dict[str, Any]:
    from kirocrew_core.knowledge import api
    from kirocrew_core.knowledge.service import source_states

    data: dict[str, Any] = {"sources": source_states(), "hits": None, "search_error": None,
                            "stamp": api.stamp(), **api.skills_view(), **_registry_data(params)}
    data["has_lessons"] = any(s["kind"] == "lessons" for s in data["sources"])
    if params.get("q", "").strip():
        try:
            data["hits"] = api.search_hits(params["q"], SEARCH_SHOWN)
        except KirocrewError as exc:
            data["search_error"] = _problem(exc)
    return data


async def knowledge_page(request: Request) -> Response:
    from kirocrew_core.gateway.shell import render_page

    params = {k: v[:500] for k, v in request.query_params.items() if k in _PARAMS}
    data = await asyncio.to_thread(_page_data, params)
    return render_page(request, f"{PACKAGE}/knowledge.html", title="Knowledge", params=params,
                       poll_seconds=POLL_SECONDS, **data)


def _source_data(ref: str, page: int, named: str) -> dict[str, Any] | None:
    from kirocrew_core.knowledge import api
    from kirocrew_core.knowledge.service import source_states

    state = next((s for s in source_states() if str(s["id"]) == ref), None)
    if state is None:
        return None
    return {"s": state, "stamp": api.stamp(ref), **api.source_detail(ref, page, named)}


async def source_page(request: Request) -> Response:
    from kirocrew_core.gateway.shell import render_page

    ref = str(request.path_params["id"])
    params = {k: v[:500] for k, v in request.query_params.items() if k in ("page", "named")}
    named = params.get("named", "").strip()
    data = await asyncio.to_thread(_source_data, ref, page_number(params.get("page")), named) if ref.isdigit() else None
    if data is None:
        return render_page(request, f"{PACKAGE}/source.html", title="Knowledge source not found", status_code=404,
                           s=None, ref=ref)
    return render_page(request, f"{PACKAGE}/source.html", title="Knowledge source", params=params, query=page_query,
                       poll_seconds=POLL_SECONDS, **data)
