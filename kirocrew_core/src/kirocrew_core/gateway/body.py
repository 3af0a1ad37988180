"""Request bodies: the one reader every JSON route of the gateway uses.

A body the ``json`` module cannot decode is 400 ``bad_json`` whatever the
reason, a syntax error, bad UTF-8 or nesting deeper than the interpreter's
recursion limit (``[[[…]]]`` a few kilobytes long raises ``RecursionError``,
which would otherwise escape as a 500). A body over the route's limit is 400
``body_too_large``, checked while reading, so a client lying in (or omitting)
``Content-Length`` cannot make the gateway buffer more than the limit.
Imports nothing from starlette at module level.
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
    """The request's JSON body (``None`` when empty); ``body_too_large`` / ``bad_json`` otherwise."""
    return decode_json(await read_body(request, limit=limit))
