"""The owner's knowledge and skills routes: the JSON the Knowledge page's buttons call.

Owner-only like every gateway route (:mod:`kirocrew_core.gateway.auth`: the token or its cookie, and
a same-origin ``Origin`` on every change). The gateway runs in the host, so these act on the host's
own library (:func:`kirocrew_core.knowledge.store.shared`) and wake its ingestion
(:func:`kirocrew_core.knowledge.service.wake`): adding a source or including a document again never
waits for it to be read; the page shows the progress.

- ``GET /api/knowledge/sources``: ``{"sources"}``, each with its counts and live ``progress``;
- ``POST /api/knowledge/sources`` ``{path | artifact | lessons}``: ``{"source"}`` (read in the background);
- ``DELETE /api/knowledge/sources/{id}``; ``POST /api/knowledge/sources/{id}/reindex``;
- ``GET /api/knowledge/sources/{id}/documents?page=N&named=TEXT``: ``{"documents", "total", "skipped", "excluded"}``;
- ``POST /api/knowledge/sources/{id}/exclude`` ``{document}`` and ``/include`` ``{document}``;
- ``GET /api/knowledge/search?q&limit``: ``{"hits"}``, redacted, as ``local_knowledge_search`` ranks them;
- ``GET /api/knowledge-changes[?source=ID]``: ``{"stamp"}``, which moves when the library or progress does;
- ``GET /api/skills``: ``{"skills", "problems"}`` the owner's sessions see (no project folder);
- ``GET /api/skills/registry?q``, ``GET /api/skills/registry/{owner}/{repo}/{skill}`` (its files and their
  ``digest``), ``POST /api/skills/install`` ``{id, digest}``: installed only when the files fetched again
  are the ones shown (``skill_changed`` otherwise), through :mod:`kirocrew_core.skills.install`.

Refusals are ``{"error", "code", "field"?}``: 400 for bad input (``bad_json``, ``bad_request``,
``path_not_absolute``, ``source_unreadable``, ``source_exists``, ``document_not_found``,
``excluded_not_found``, ``source_single_document``, ``invalid_slug``, ``artifact_not_found`` …), 404 for
a source in the address that does not exist (``source_not_found``) or a registry skill that does not
(``not_found``), 409 ``registry_unconfigured`` / ``skill_changed`` / ``install_refused``; the registry's
own failures are 500 with their codes. A refused change changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError, ConflictError, KirocrewError
from kirocrew_core.gateway.fields import FieldError, answers, json_answer, read_fields

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from kirocrew_core.skills.registry import SkillFile

BODY_LIMIT = 64 * 1024  # as the other pages' routes: far above a path or a slug, small enough to read at once
SEARCH_LIMIT_MAX = 20
DOCUMENTS_PAGE = 100
_answers = answers({"source_not_found", "not_found"})


def _source(request: Request) -> str:
    return str(request.path_params["id"])


async def _body(request: Request, fields: dict[str, tuple[type, ...]], required: tuple[str, ...] = ()
                ) -> dict[str, Any]:
    return await read_fields(request, fields, required, limit=BODY_LIMIT)


# --- the library ------------------------------------------------------------------------------------


@_answers
async def sources(request: Request) -> Response:
    from kirocrew_core.knowledge.service import source_states

    return await json_answer(lambda: {"sources": source_states()})


def add_source(body: dict[str, Any]) -> dict[str, Any]:
    """Add the source ``body`` names (exactly one of path, artifact, lessons) and wake the ingestion."""
    from kirocrew_core.knowledge.service import wake
    from kirocrew_core.knowledge.store import shared

    chosen = [name for name in ("path", "artifact", "lessons") if body.get(name)]
    if len(chosen) != 1:
        raise FieldError("name one source: a path, an artifact's slug, or the lessons", field=chosen[-1] if chosen
                         else "path")
    library = shared()
    if chosen == ["lessons"]:
        source = library.add_lessons()
    elif chosen == ["artifact"]:
        try:
            source = library.add_artifact(body["artifact"].strip())
        except KirocrewError as exc:
            raise FieldError(exc.message, field="artifact", code=exc.code) from None
    else:
        path = os.path.expanduser(body["path"].strip())
        if "\x00" in path or len(path) > 4096 or not os.path.isabs(path):
            raise FieldError("path must be an absolute path (or start with ~)", field="path", code="path_not_absolute")
        try:
            source = library.add(path)
        except KirocrewError as exc:
            raise FieldError(exc.message, field="path", code=exc.code) from None
    wake()
    return {"source": source.as_dict()}


@_answers
async def add(request: Request) -> Response:
    body = await _body(request, {"path": (str,), "artifact": (str,), "lessons": (bool,)})
    return await json_answer(add_source, body)


@_answers
async def remove(request: Request) -> Response:
    from kirocrew_core.knowledge.store import shared

    ref = _source(request)
    return await json_answer(lambda: {"removed": shared().remove(ref).as_dict()})


@_answers
async def reindex(request: Request) -> Response:
    from kirocrew_core.knowledge.service import wake
    from kirocrew_core.knowledge.store import shared

    ref = _source(request)
    await _body(request, {})

    def work() -> dict[str, Any]:
        source = shared().need(ref)
        wake()
        return {"queued": source.id}

    return await json_answer(work)


def source_detail(ref: str, page: int, named: str = "") -> dict[str, Any]:
    """One source's page of documents (those whose name holds ``named``), its skipped files (with why) and its
    excluded documents."""
    from kirocrew_core.knowledge.store import shared

    library = shared()
    documents, total = library.documents(ref, offset=(page - 1) * DOCUMENTS_PAGE, limit=DOCUMENTS_PAGE, named=named)
    return {"documents": [dict(d.__dict__) for d in documents], "total": total, "page": page,
            "pages": max(1, -(-total // DOCUMENTS_PAGE)), "skipped": library.skipped(ref),
            "excluded": library.excluded(ref)}


@_answers
async def documents(request: Request) -> Response:
    from kirocrew_core.gateway.paging import page_number

    ref, page = _source(request), page_number(request.query_params.get("page"))
    return await json_answer(source_detail, ref, page, request.query_params.get("named", "")[:4096])


async def _document(request: Request) -> str:
    body = await _body(request, {"document": (str,)}, ("document",))
    name = body["document"]
    if not name or len(name) > 4096:
        raise FieldError("document must be a document's path in its source", field="document")
    return str(name)


@_answers
async def exclude(request: Request) -> Response:
    from kirocrew_core.knowledge.store import shared

    ref, name = _source(request), await _document(request)

    def work() -> dict[str, Any]:
        try:
            shared().exclude(ref, name)
        except KirocrewError as exc:
            if exc.code == "source_not_found":
                raise
            raise FieldError(exc.message, field="document", code=exc.code) from None
        return {"excluded": name}

    return await json_answer(work)


@_answers
async def include(request: Request) -> Response:
    from kirocrew_core.knowledge.service import wake
    from kirocrew_core.knowledge.store import shared

    ref, name = _source(request), await _document(request)

    def work() -> dict[str, Any]:
        try:
            shared().include(ref, name)
        except KirocrewError as exc:
            if exc.code == "source_not_found":
                raise
            raise FieldError(exc.message, field="document", code=exc.code) from None
        wake()
        return {"included": name}

    return await json_answer(work)


def search_hits(query: str, limit: int) -> list[dict[str, Any]]:
    """The library's best chunks for ``query`` (the tool's ranking, vector plugins included), redacted."""
    from kirocrew_core.history.text import shown
    from kirocrew_core.knowledge.store import shared
    from kirocrew_core.knowledge.tools import vector_rankings

    query = query.strip()
    if not query:
        return []
    if len(query) > 500:
        raise FieldError("q is longer than 500 characters", field="q", code="invalid_arguments")
    hits = shared().search(query, limit, vector_rankings(query, limit))
    return [{"chunk": h.chunk, "title": shown(h.title), "kind": h.kind, "location": h.location, "name": shown(h.name),
             "section": shown(h.section), "line_start": h.line_start, "line_end": h.line_end, "text": shown(h.text)}
            for h in hits]


@_answers
async def search(request: Request) -> Response:
    raw = request.query_params.get("limit", "10")
    if not raw.isdigit() or not 1 <= int(raw) <= SEARCH_LIMIT_MAX:
        raise FieldError(f"limit must be a whole number from 1 to {SEARCH_LIMIT_MAX}", field="limit")
    query = request.query_params.get("q", "")[:4096]
    return await json_answer(lambda: {"hits": search_hits(query, int(raw))})


def stamp(ref: str | None = None) -> str:
    """A short digest that moves whenever the library's database or the host's progress on it changes.

    The database and its write-ahead log are only stat'ed (every writer, this host or an offline
    command, changes one of them), and the live progress is read from memory: a page polls it.
    """
    from kirocrew_core.knowledge import service
    from kirocrew_core.knowledge.store import database_path

    digest = hashlib.blake2b(digest_size=10)
    base = database_path()
    for path in (base, base.with_name(base.name + "-wal")):
        try:
            info = path.stat()
            digest.update(f"{path.name}:{info.st_mtime_ns}:{info.st_size};".encode())
        except FileNotFoundError:
            digest.update(f"{path.name}:-;".encode())
    digest.update(json.dumps(service.progress_snapshot(None if ref is None else int(ref)), sort_keys=True).encode())
    return digest.hexdigest()


@_answers
async def changes(request: Request) -> Response:
    ref = request.query_params.get("source")
    if ref is not None and (not ref.isdigit() or len(ref) > 18):
        raise FieldError("source must be a source's id", field="source")
    return await json_answer(lambda: {"stamp": stamp(ref)})


# --- skills -----------------------------------------------------------------------------------------


def skills_view() -> dict[str, Any]:
    """The skills the owner's sessions see, by precedence, and the broken or skipped ones with why."""
    from kirocrew_core.gateway.shell import home_relative
    from kirocrew_core.skills.discovery import catalog, short_description

    found = catalog(None)
    return {"skills": [{"key": s.key, "name": s.name, "description": short_description(s),
                        "always": s.always, "source": s.source.kind, "path": home_relative(str(s.path))}
                       for s in found.skills],
            "problems": [{"key": p.key, "state": p.state, "reason": p.reason, "source": p.source.kind,
                          "root": home_relative(str(p.source.root))} for p in found.problems]}


@_answers
async def skills(request: Request) -> Response:
    return await json_answer(skills_view)


def _registry(work: Any, *args: Any) -> Any:
    """A registry call; not configured is 409 (the owner's setting), a skill the registry lacks 404."""
    from kirocrew_core.skills import registry

    try:
        return work(*args)
    except registry.RegistryError as exc:
        if exc.code == "registry_unconfigured":
            raise ConflictError(exc.message, code=exc.code) from None
        if exc.code == "invalid_arguments":
            raise BadInputError(exc.message, code=exc.code) from None
        raise


def registry_search(query: str) -> list[dict[str, Any]]:
    from kirocrew_core.redaction import redact_secrets
    from kirocrew_core.skills import registry

    query = redact_secrets(query.strip())
    if not query:
        return []
    if len(query) > 500:
        raise FieldError("q is longer than 500 characters", field="q", code="invalid_arguments")
    found = _registry(registry.search, query, registry.DISCOVER_DEFAULT)
    return [dict(skill.__dict__) for skill in found]


def digest(files: list[SkillFile]) -> str:
    """What the owner was shown: every file's path and content, so an install can check it is the same."""
    hashed = hashlib.sha256()
    for entry in sorted(files, key=lambda f: f.path):
        hashed.update(json.dumps([entry.path, entry.content]).encode())
    return hashed.hexdigest()


def registry_preview(skill_id: str) -> dict[str, Any]:
    """A registry skill's files as the owner sees them before installing: each path, size and content."""
    from kirocrew_core.gateway.shell import home_relative
    from kirocrew_core.skills import install, registry

    files = _registry(registry.fetch, skill_id)
    problem = None
    try:
        install.check(skill_id, files)
    except install.InstallError as exc:
        problem = exc.message
    ordered = sorted(files, key=lambda f: (f.path != "SKILL.md", f.path))
    return {"id": skill_id, "target": home_relative(str(install.target_dir(skill_id))), "digest": digest(files),
            "installed": os.path.lexists(install.target_dir(skill_id)), "problem": problem,
            "files": [{"path": f.path, "size": len(f.content.encode("utf-8")), "content": f.content} for f in ordered]}


def install_shown(skill_id: str, shown: str) -> dict[str, Any]:
    """Fetch the skill again and install it only if its files are the ones the owner was shown."""
    from kirocrew_core.gateway.shell import home_relative
    from kirocrew_core.skills import install, registry

    files = _registry(registry.fetch, skill_id)
    if digest(files) != shown:
        raise ConflictError(f"{skill_id} changed in the registry since its files were shown; look at them again",
                            code="skill_changed")
    try:
        path = install.install(skill_id, files)
    except install.InstallError as exc:  # broken, too big, or one is installed there already
        raise ConflictError(exc.message, code=exc.code) from None
    return {"installed": skill_id, "path": home_relative(str(path)), "files": len(files)}


@_answers
async def registry_skills(request: Request) -> Response:
    query = request.query_params.get("q", "")[:4096]
    return await json_answer(lambda: {"skills": registry_search(query)})


@_answers
async def registry_skill(request: Request) -> Response:
    skill_id = str(request.path_params["skill_id"])
    return await json_answer(registry_preview, skill_id)


@_answers
async def install(request: Request) -> Response:
    body = await _body(request, {"id": (str,), "digest": (str,)}, ("id", "digest"))
    return await json_answer(install_shown, body["id"], body["digest"])


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/api/knowledge/sources", sources, methods=["GET"], name="knowledge_sources"),
        Route("/api/knowledge/sources", add, methods=["POST"], name="knowledge_add"),
        Route("/api/knowledge/sources/{id:int}", remove, methods=["DELETE"], name="knowledge_remove"),
        Route("/api/knowledge/sources/{id:int}/reindex", reindex, methods=["POST"], name="knowledge_reindex"),
        Route("/api/knowledge/sources/{id:int}/documents", documents, methods=["GET"], name="knowledge_documents"),
        Route("/api/knowledge/sources/{id:int}/exclude", exclude, methods=["POST"], name="knowledge_exclude"),
        Route("/api/knowledge/sources/{id:int}/include", include, methods=["POST"], name="knowledge_include"),
        Route("/api/knowledge/search", search, methods=["GET"], name="knowledge_search"),
        Route("/api/knowledge-changes", changes, methods=["GET"], name="knowledge_changes"),
        Route("/api/skills", skills, methods=["GET"], name="skills"),
        Route("/api/skills/registry", registry_skills, methods=["GET"], name="skills_registry"),
        Route("/api/skills/registry/{skill_id:path}", registry_skill, methods=["GET"], name="skills_registry_skill"),
        Route("/api/skills/install", install, methods=["POST"], name="skills_install"),
    ]
