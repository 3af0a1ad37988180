"""Request bodies: the one reader every JSON route of the gateway uses.

Every route's body is a JSON object. A body that is not one is 400 ``bad_json``
whatever the reason: a syntax error, bad UTF-8, nesting deeper than the
interpreter's recursion limit (``[[[…]]]`` a few kilobytes long raises
``RecursionError``, which would otherwise escape as a 500), another JSON type,
or nothing where the route needs a body. A body over the route's limit is 400
``body_too_large``, checked while reading, so a client lying in (or omitting)
``Content-Length`` cannot make the gateway buffer more than the limit. Both are
:class:`~kirocrew_core.errors.BadInputError`, which the gateway answers through
:func:`kirocrew_core.gateway.errors.error_response`, so a route just lets them
propagate. Imports nothing from starlette at module level.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError

if TYPE_CHECKING:
    from starlette.requests import Request

#: The default limit of :func:`read_json_body`; routes pass their own when smaller.
MAX_JSON_BODY_BYTES = 1024 * 1024


def decode_json(body: bytes) -> Any:
    """The JSON document in ``body``, ``None`` when it is empty or blank; ``bad_json`` otherwise."""
    if not body.strip():
        return None
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadInputError("the request body is not valid JSON", code="bad_json") from None


async def read_body(request: Request, *, limit: int = MAX_JSON_BODY_BYTES) -> bytes:
    """The raw body, refused with ``body_too_large`` as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise BadInputError(f"request body larger than {limit} bytes", code="body_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadInputError(f"request body larger than {limit} bytes", code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_body(request: Request, *, limit: int = MAX_JSON_BODY_BYTES) -> Any:
    """The request's JSON document, any type (``None`` when empty); ``body_too_large`` / ``bad_json`` otherwise."""
    return decode_json(await read_body(request, limit=limit))


async def read_json_object(
    request: Request, *, limit: int = MAX_JSON_BODY_BYTES, default: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The request's body as a JSON object; ``body_too_large`` / ``bad_json`` otherwise.

    An empty body is ``default`` when the route gives one (a body it may omit),
    else ``bad_json``.
    """
    document = await read_json_body(request, limit=limit)
    if document is None and default is not None:
        return dict(default)
    if not isinstance(document, dict):
        raise BadInputError("the request body is not a JSON object", code="bad_json")
    return document
