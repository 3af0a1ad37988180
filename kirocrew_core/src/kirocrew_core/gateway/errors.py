"""Errors as JSON: the one place a :class:`KirocrewError` becomes an HTTP answer.

Every error under ``/api/`` is ``{"error": <message>, "code": <stable code>}``
(a route may add fields, ``test_in_flight`` adds the running ``slug``). The
status says what kind of fault it is and the code says which one:

* 400: :class:`~kirocrew_core.errors.BadInputError`, or any error with
  ``exit_code`` 2; bad input, nothing was changed (``bad_json``,
  ``body_too_large``, ``bad_request``, ``unknown_provider``, ``unknown_server``).
  A name in a body that matches nothing is bad input too; 404 is only for a
  path that does not exist.
* 409: :class:`~kirocrew_core.errors.ConflictError`; sound, but it clashes
  with what runs now (``test_in_flight``).
* 500: any other :class:`KirocrewError`; the operation failed.

The gateway's exception handler calls :func:`error_response`, so a route raises
and never builds an error answer itself; it calls :func:`error_response` only to
add fields. Routing's own refusals (404 ``not_found``, 405
``method_not_allowed``) and the owner check's (401, 403, 421) have the same shape.
Imports nothing from starlette at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import ConflictError, KirocrewError

if TYPE_CHECKING:
    from starlette.responses import JSONResponse

#: The status of each kind of fault, most specific first; the first that matches wins.
STATUS_BY_KIND: tuple[tuple[type[KirocrewError], int], ...] = ((ConflictError, 409),)
#: Bad input (``exit_code`` 2) and any other failure.
BAD_INPUT_STATUS = 400
FAILURE_STATUS = 500


def status_for(exc: KirocrewError) -> int:
    """The HTTP status :func:`error_response` answers ``exc`` with (see the module's table)."""
    for kind, status in STATUS_BY_KIND:
        if isinstance(exc, kind):
            return status
    return BAD_INPUT_STATUS if exc.exit_code == 2 else FAILURE_STATUS


def error_response(exc: KirocrewError, *, extra: Mapping[str, Any] | None = None) -> JSONResponse:
    """``{"error", "code", **extra}`` with the status of ``exc``'s kind of fault."""
    from starlette.responses import JSONResponse

    return JSONResponse({**(extra or {}), **exc.as_dict()}, status_code=status_for(exc))
