"""The notification center's JSON routes, the same ones the feed page's buttons use.

``GET /api/notifications`` lists them newest first with the unread count;
``POST /api/notifications/{id}/read``, ``…/dismiss`` (removes it from the feed) and
``…/actions/{action_id}`` (records the owner's pick and answers the action's link) change
one. The POST routes take an empty body or ``{}`` (anything else: ``bad_json`` /
``bad_request``); an unknown id is ``notification_not_found``. Starlette is imported
inside the functions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError
from kirocrew_core.notifications import store

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import BaseRoute

#: The POST routes carry no fields; 64 KiB is far more than ``{}`` and keeps a bad body a ``bad_json``.
BODY_LIMIT = 64 * 1024


def listing(items: list[store.Notification]) -> dict[str, Any]:
    return {"notifications": [note.as_dict() for note in items], "unread": sum(1 for n in items if not n.read)}


async def _empty_body(request: Request) -> None:
    from kirocrew_core.gateway.body import read_json_object

    body = await read_json_object(request, limit=BODY_LIMIT, default={})
    if body:
        raise BadInputError(f"this route takes no fields, got {', '.join(sorted(body))}", code="bad_request")


async def list_notifications(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    return JSONResponse(listing(await asyncio.to_thread(store.all_notifications)))


async def read_notification(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    await _empty_body(request)
    note = await asyncio.to_thread(store.mark_read, request.path_params["id"])
    return JSONResponse({"ok": True, "notification": note.as_dict()})


async def dismiss_notification(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    await _empty_body(request)
    note = await asyncio.to_thread(store.dismiss, request.path_params["id"])
    return JSONResponse({"ok": True, "id": note.id})


async def choose_action(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    await _empty_body(request)
    note, action = await asyncio.to_thread(store.choose_action, request.path_params["id"],
                                           request.path_params["action_id"])
    return JSONResponse({"ok": True, "notification": note.as_dict(), "url": action.url})


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/api/notifications", list_notifications, methods=["GET"], name="notifications"),
        Route("/api/notifications/{id}/read", read_notification, methods=["POST"], name="notification_read"),
        Route("/api/notifications/{id}/dismiss", dismiss_notification, methods=["POST"],
              name="notification_dismiss"),
        Route("/api/notifications/{id}/actions/{action_id}", choose_action, methods=["POST"],
              name="notification_action"),
    ]
