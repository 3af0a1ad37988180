"""The owner's artifact routes: the JSON the Artifacts page's buttons call, and the sandboxed content view.

Owner-only like every gateway route (:mod:`kirocrew_core.gateway.auth`: the token or its cookie, and
a same-origin ``Origin`` on every change). Each acts as the owner through :mod:`.store` and
:mod:`.deploy`, the same calls the tools and ``kirocrew artifact``/``deploy`` make:

- ``GET /api/artifacts?q&folder&tag&kind&source&starred``: ``{"artifacts": [...], "library"}``;
- ``GET /api/artifact-changes[?slug=S]``: ``{"stamp"}``, which moves whenever the library (or S) or
  the pending deploys change (the page polls it);
- ``GET /api/artifacts/{slug}[?version=N]``: the summary, ``content`` (redacted), ``versions``, ``comments``;
- ``GET /api/artifacts/{slug}/diff?from=A&to=B``: unified diff lines;
- ``GET|POST /api/artifacts/{slug}/comments``: list; post ``{text, quote?, parent_id?}``;
- ``POST /api/artifacts/{slug}/comments/{id}/resolve``;
- ``POST /api/artifacts/{slug}/revert {version}``, ``/move {folder}``, ``/star {starred}``;
  ``DELETE /api/artifacts/{slug}``;
- ``GET /api/deploys``; ``POST /api/deploys/{id}/confirm`` and ``/discard`` (claimed atomically).
- ``GET /artifacts/{slug}/sandbox[?version=N]``: an ``html`` or ``svg`` artifact's content for the
  page's sandboxed iframe, under :data:`~kirocrew_core.gateway.shell.SANDBOX_CONTENT_SECURITY_POLICY`.

Refusals are ``{"error", "code", "field"?}``: 400 ``bad_json`` / ``body_too_large`` / ``bad_request``
(a field missing, unknown or of the wrong type: ``field`` names it) and the artifact tools' own codes;
404 for an artifact, version, comment or deploy that does not exist (``artifact_not_found``,
``version_not_found``, ``comment_not_found``, ``deploy_not_found``). A refused change changes nothing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError
from kirocrew_core.gateway.fields import FieldError, answers, json_answer, read_fields

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

#: Comments are at most 10,000 characters and quotes 2,000: every body fits in 64 KiB.
BODY_LIMIT = 64 * 1024
#: The codes that mean "nothing there": answered 404, not 400.
NOT_FOUND_CODES = frozenset({"artifact_not_found", "version_not_found", "comment_not_found", "deploy_not_found"})
_VERSION_MAX = 1_000_000_000


_answers = answers(NOT_FOUND_CODES)


async def _body(request: Request, fields: dict[str, tuple[type, ...]], required: tuple[str, ...] = ()
                ) -> dict[str, Any]:
    return await read_fields(request, fields, required, limit=BODY_LIMIT)


def _version(raw: str | None, field: str) -> int | None:
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= _VERSION_MAX:
        raise FieldError(f"{field} must be a version number", field=field)
    return int(raw)


def _slug(request: Request) -> str:
    from kirocrew_core.artifacts import names

    return names.check_slug(request.path_params["slug"])


_json = json_answer


# --- reading ----------------------------------------------------------------------------------------


@_answers
async def list_artifacts(request: Request) -> Response:
    from kirocrew_core.artifacts import views

    params = {k: request.query_params.get(k, "")[:4096] for k in views.FILTERS}

    def work() -> dict[str, Any]:
        filters = views.Filters.parse(params)
        every = views.everything()
        return {"artifacts": views.listing(filters, every), "library": views.library(every)}

    return await _json(work)


@_answers
async def changes(request: Request) -> Response:
    from kirocrew_core.artifacts import names, views

    slug = request.query_params.get("slug")
    if slug is not None:
        names.check_slug(slug)
    return await _json(lambda: {"stamp": views.stamp(slug)})


@_answers
async def get_artifact(request: Request) -> Response:
    from kirocrew_core.artifacts import views

    slug = _slug(request)
    return await _json(views.detail, slug, _version(request.query_params.get("version"), "version"))


@_answers
async def get_diff(request: Request) -> Response:
    from kirocrew_core.artifacts import views

    slug = _slug(request)
    older = _version(request.query_params.get("from"), "from")
    newer = _version(request.query_params.get("to"), "to")
    if older is None or newer is None:
        raise FieldError("a diff needs from and to (version numbers)", field="from" if older is None else "to")
    return await _json(views.diff, slug, older, newer)


# --- changing ---------------------------------------------------------------------------------------


@_answers
async def comments(request: Request) -> Response:
    from kirocrew_core.artifacts import store, views
    from kirocrew_core.artifacts.access import OWNER

    slug = _slug(request)
    if request.method == "GET":
        return await _json(lambda: {"comments": views.comments(slug)})
    body = await _body(request, {"text": (str,), "quote": (str, type(None)), "parent_id": (str, type(None))},
                       ("text",))

    def post() -> dict[str, Any]:
        quote = (body.get("quote") or "").strip() or None
        comment = store.post_comment(slug, OWNER, body["text"], quote=quote, parent_id=body.get("parent_id"))
        return {"comment": views.comment_view(comment)}

    return await _json(post)


@_answers
async def resolve(request: Request) -> Response:
    from kirocrew_core.artifacts import store, views
    from kirocrew_core.artifacts.access import OWNER

    slug = _slug(request)
    await _body(request, {})
    comment_id = request.path_params["comment_id"]
    return await _json(lambda: {"comment": views.comment_view(store.resolve_comment(slug, OWNER, comment_id))})


@_answers
async def revert(request: Request) -> Response:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    slug = _slug(request)
    body = await _body(request, {"version": (int,)}, ("version",))
    if not 1 <= body["version"] <= _VERSION_MAX:
        raise FieldError("version must be a version number", field="version")

    def work() -> dict[str, Any]:
        meta = store.revert(slug, OWNER, body["version"])
        return {"slug": slug, "version": meta["version"], "reverted_to": body["version"]}

    return await _json(work)


@_answers
async def move(request: Request) -> Response:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    slug = _slug(request)
    body = await _body(request, {"folder": (str, type(None))}, ("folder",))

    def work() -> dict[str, Any]:
        from kirocrew_core.artifacts import views

        folder_id = store.move(slug, OWNER, body["folder"])
        return {"slug": slug, "folder_id": folder_id, "folder": views.folder_paths().get(str(folder_id), "/")}

    return await _json(work)


@_answers
async def star(request: Request) -> Response:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    slug = _slug(request)
    body = await _body(request, {"starred": (bool,)}, ("starred",))
    return await _json(lambda: {"slug": slug, "starred": bool(store.set_pinned(slug, OWNER, body["starred"])["pinned"])
                                })


@_answers
async def delete(request: Request) -> Response:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    slug = _slug(request)

    def work() -> dict[str, Any]:
        store.delete(slug, OWNER)
        return {"deleted": slug}

    return await _json(work)


# --- deploys ----------------------------------------------------------------------------------------


def pending_view() -> list[dict[str, Any]]:
    from kirocrew_core.artifacts import deploy

    return [{**entry.as_dict(), "expires": deploy.iso_time(entry.expires_at)} for entry in deploy.pending()]


@_answers
async def deploys(request: Request) -> Response:
    return await _json(lambda: {"pending": pending_view()})


@_answers
async def confirm(request: Request) -> Response:
    from kirocrew_core.artifacts import deploy

    await _body(request, {})
    pending_id = request.path_params["id"]
    return await _json(lambda: {"published": deploy.confirm(pending_id)})


@_answers
async def discard(request: Request) -> Response:
    from kirocrew_core.artifacts import deploy

    await _body(request, {})
    pending_id = request.path_params["id"]
    return await _json(lambda: {"discarded": deploy.discard(pending_id).as_dict()})


# --- the sandboxed view -----------------------------------------------------------------------------


async def sandbox(request: Request) -> Response:
    """An html/svg artifact's content, for the page's ``<iframe sandbox>`` only (see the module docstring).

    The answer's own policy (no script, no request, no form, no navigation, an opaque origin by its
    ``sandbox`` directive) holds even when the address is opened on its own, outside the iframe.
    """
    from starlette.responses import PlainTextResponse, Response

    from kirocrew_core.artifacts import names, store, views
    from kirocrew_core.artifacts.access import OWNER
    from kirocrew_core.gateway.shell import SANDBOX_CONTENT_SECURITY_POLICY

    headers = {"Content-Security-Policy": SANDBOX_CONTENT_SECURITY_POLICY, "X-Frame-Options": "SAMEORIGIN",
               "Cache-Control": "no-store", "Cross-Origin-Resource-Policy": "same-origin"}
    try:
        slug = names.check_slug(request.path_params["slug"])
        version = _version(request.query_params.get("version"), "version")
        meta, content = await asyncio.to_thread(store.get, slug, OWNER, version)
    except KirocrewError as exc:
        return PlainTextResponse(f"{exc.message} ({exc.code})", status_code=404 if exc.code in NOT_FOUND_CODES
                                 else 400, headers=headers)
    kind = meta.get("kind")
    if kind not in ("html", "svg"):
        return PlainTextResponse("only html and svg artifacts are shown in the sandbox (not_sandboxed)",
                                 status_code=400, headers=headers)
    media = "text/html; charset=utf-8" if kind == "html" else "image/svg+xml"
    shown, _ = await asyncio.to_thread(views.page_content, content)
    return Response(shown, media_type=media, headers=headers)


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/api/artifacts", list_artifacts, methods=["GET"], name="artifacts"),
        Route("/api/artifact-changes", changes, methods=["GET"], name="artifact_changes"),
        Route("/api/artifacts/{slug}", get_artifact, methods=["GET"], name="artifact"),
        Route("/api/artifacts/{slug}", delete, methods=["DELETE"], name="artifact_delete"),
        Route("/api/artifacts/{slug}/diff", get_diff, methods=["GET"], name="artifact_diff"),
        Route("/api/artifacts/{slug}/comments", comments, methods=["GET", "POST"], name="artifact_comments"),
        Route("/api/artifacts/{slug}/comments/{comment_id}/resolve", resolve, methods=["POST"],
              name="artifact_comment_resolve"),
        Route("/api/artifacts/{slug}/revert", revert, methods=["POST"], name="artifact_revert"),
        Route("/api/artifacts/{slug}/move", move, methods=["POST"], name="artifact_move"),
        Route("/api/artifacts/{slug}/star", star, methods=["POST"], name="artifact_star"),
        Route("/api/deploys", deploys, methods=["GET"], name="deploys"),
        Route("/api/deploys/{id}/confirm", confirm, methods=["POST"], name="deploy_confirm"),
        Route("/api/deploys/{id}/discard", discard, methods=["POST"], name="deploy_discard"),
        Route("/artifacts/{slug}/sandbox", sandbox, methods=["GET"], name="artifact_sandbox"),
    ]
