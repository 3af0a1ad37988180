"""``POST /api/connections/test``: the card's opt-in liveness check.

Always HTTP 200 with ``{schema_version, slug, verdict, code, toolCount}`` once
the request names a provider; a bad body or unknown slug is a 400, and a
second Test while one runs (any slug) is a 409 ``test_in_flight`` naming the
running slug, because each Test spawns a kiro-cli and two at once would only
double the cost of the same answer. Importing this module never imports the
mint engine.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_connections.registry import Provider

SCHEMA_VERSION = 1
MAX_BODY_BYTES = 64 * 1024
MAX_SLUG_CHARS = 64
SLUG_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

_guard = threading.Lock()
_running: str | None = None


class RequestRefused(Exception):
    """A request the handler answers with ``status`` and ``{error, code}``; nothing was done."""

    def __init__(self, status: int, code: str, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.code = code
        self.error = error

    def response(self) -> Response:
        from starlette.responses import JSONResponse

        return JSONResponse({"error": self.error, "code": self.code}, status_code=self.status)


async def read_provider_request(request: Request) -> tuple[dict[str, Any], Provider]:
    """The JSON object body and the registry provider its ``slug`` names, or :class:`RequestRefused`.

    The slug is trimmed and lowercased, then must be a registry slug: a caller
    can only ever point these endpoints at a provider we ship.
    """
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.gateway.body import read_json_body

    from kirocrew_connections.registry import load_registry

    try:
        body = await read_json_body(request, limit=MAX_BODY_BYTES)
    except KirocrewError as exc:  # body_too_large, bad_json
        raise RequestRefused(400, exc.code, exc.message) from None
    if not isinstance(body, dict):
        raise RequestRefused(400, "invalid_body", "the body must be a JSON object")
    slug = body.get("slug")
    slug = slug.strip().lower() if isinstance(slug, str) else ""
    if not slug or len(slug) > MAX_SLUG_CHARS or not SLUG_PATTERN.match(slug):
        raise RequestRefused(400, "unknown_provider", "slug must name a provider in the registry")
    try:
        provider = load_registry().get(slug)
    except KirocrewError as exc:
        if exc.code != "unknown_provider":
            raise
        raise RequestRefused(400, "unknown_provider", f"no provider {slug!r} in the registry") from None
    return body, provider


def _claim(slug: str) -> str | None:
    """Take the single Test slot for ``slug``; the slug already running when it is taken."""
    global _running
    with _guard:
        if _running is not None:
            return _running
        _running = slug
        return None


def _release() -> None:
    global _running
    with _guard:
        _running = None


async def post_test(request: Request) -> Response:
    """Run the Test session for the body's ``slug`` and answer its verdict."""
    from starlette.responses import JSONResponse

    from kirocrew_mcp.aliases import mcp_server_alias

    from kirocrew_connections.tool_test import run_connection_test

    try:
        _, provider = await read_provider_request(request)
    except RequestRefused as refused:
        return refused.response()
    running = _claim(provider.slug)
    if running is not None:
        return JSONResponse(
            {"error": f"a connection test for {running!r} is already running", "code": "test_in_flight",
             "slug": running},
            status_code=409,
        )
    try:
        verdict = await run_connection_test(mcp_server_alias(provider.slug))
    finally:
        _release()
    return JSONResponse({"schema_version": SCHEMA_VERSION, "slug": provider.slug, **verdict.as_dict()})
