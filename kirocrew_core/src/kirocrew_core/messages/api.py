"""The messages' JSON routes (the feed page's Mute buttons use them) and the outbox download.

``GET /api/messages`` lists the newest messages with the muted senders; ``POST /api/messages/mute`` and
``…/unmute`` take ``{"sender": "conversation:<id>" | "cron:<job id>"}`` (anything else: ``bad_json``,
``bad_request``, ``bad_mute``); ``GET /api/messages/outbox/{name}`` serves a ``file_send`` copy as a
download (never rendered inline: ``Content-Disposition: attachment``, ``nosniff``), an unknown name is
``outbox_file_not_found``. Owner-only like every gateway route. Starlette is imported inside the functions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError
from kirocrew_core.messages import store

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import BaseRoute

BODY_LIMIT = 64 * 1024
LIST_LIMIT = 200


async def _sender(request: Request) -> str:
    from kirocrew_core.gateway.body import read_json_object

    body = await read_json_object(request, limit=BODY_LIMIT)
    if set(body) != {"sender"}:
        raise BadInputError("the body is {\"sender\": \"conversation:<id>\" or \"cron:<job id>\"}", code="bad_request")
    return store.mute_key(body["sender"])


def _listing() -> dict[str, Any]:
    return {"messages": [m.as_dict() for m in store.all_messages()[:LIST_LIMIT]], "muted": store.mutes()}


async def list_messages(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    return JSONResponse(await asyncio.to_thread(_listing))


async def mute(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    sender = await _sender(request)
    changed = await asyncio.to_thread(store.mute, sender)
    return JSONResponse({"ok": True, "sender": sender, "muted": True, "changed": changed})


async def unmute(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    sender = await _sender(request)
    changed = await asyncio.to_thread(store.unmute, sender)
    return JSONResponse({"ok": True, "sender": sender, "muted": False, "changed": changed})


async def outbox_file(request: Request) -> Response:
    from starlette.responses import FileResponse

    from kirocrew_core.messages import outbox

    path = await asyncio.to_thread(outbox.outbox_file, request.path_params["name"])
    download = outbox.shown_name(path)
    return FileResponse(path, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{download}"',
                                 "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"})


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [
        Route("/api/messages", list_messages, methods=["GET"], name="messages"),
        Route("/api/messages/mute", mute, methods=["POST"], name="messages_mute"),
        Route("/api/messages/unmute", unmute, methods=["POST"], name="messages_unmute"),
        Route("/api/messages/outbox/{name}", outbox_file, methods=["GET"], name="messages_outbox"),
    ]
