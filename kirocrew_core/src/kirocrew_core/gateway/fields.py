"""JSON routes whose refusals name the request field at fault: one owner for the pages' API modules.

A page's JSON routes (the Artifacts, Knowledge and Policy pages') wrap themselves in :func:`answers`:
a :class:`FieldError` answers ``{"error", "code", "field"}`` (the page puts the message at that form
field), a code of ``not_found`` answers 404, any other refusal goes through
:func:`kirocrew_core.gateway.errors.error_response`. :func:`read_fields` reads a JSON object body with
only the named fields, each of its types. Imports nothing from starlette at module level.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError, KirocrewError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

Route = Callable[["Request"], Awaitable["Response"]]


class FieldError(BadInputError):
    """Bad input about one request field, named in the answer's ``field``."""

    def __init__(self, message: str, *, field: str, code: str = "bad_request") -> None:
        super().__init__(message, code=code)
        self.field = field


def answers(not_found: Collection[str] = ()) -> Callable[[Route], Route]:
    """Refusals as JSON: 404 for a code in ``not_found`` (what does not exist), ``field`` when one is at fault."""

    def decorate(route: Route) -> Route:
        @functools.wraps(route)
        async def wrapped(request: Request) -> Response:
            from starlette.responses import JSONResponse

            from kirocrew_core.gateway.errors import error_response

            try:
                return await route(request)
            except KirocrewError as exc:
                if exc.code in not_found:
                    return JSONResponse(exc.as_dict(), status_code=404)
                field = getattr(exc, "field", None)
                return error_response(exc, extra={"field": field} if field else None)

        return wrapped

    return decorate


async def read_fields(request: Request, fields: dict[str, tuple[type, ...]], required: tuple[str, ...] = (), *,
                      limit: int) -> dict[str, Any]:
    """The JSON object body with only ``fields`` (each of its types), ``required`` present; else refused."""
    from kirocrew_core.gateway.body import read_json_object

    body = await read_json_object(request, limit=limit, default={} if not required else None)
    for key in body:
        if key not in fields:
            raise FieldError(f"unknown field {str(key)[:40]!r}; this takes {', '.join(fields) or 'no field'}",
                             field=str(key)[:40])
    for key in required:
        if key not in body:
            raise FieldError(f"{key} is required", field=key)
    for key, value in body.items():
        types = fields[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise FieldError(f"{key} must be {wanted}", field=key)
    return body


async def json_answer(fn: Callable[..., Any], *args: Any) -> Response:
    """``fn(*args)`` run in a worker thread (blocking store work), answered as JSON that is never cached."""
    from starlette.responses import JSONResponse

    return JSONResponse(await asyncio.to_thread(fn, *args), headers={"Cache-Control": "no-store"})
