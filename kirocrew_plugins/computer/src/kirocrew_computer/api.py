"""``GET/PUT /api/computer-use/config``: the dashboard's keystone switch (and the page's read-only routes).

The gateway authenticates every ``/api`` route as the owner, so this is the
owner-only write path besides ``kirocrew computer keystone``. PUT replaces the
whole document (validated strictly: unknown keys, non-boolean ``enabled`` or
bad app lists are 400 and change nothing); the write is atomic and audited.
Errors are the gateway's JSON (:mod:`kirocrew_core.gateway.errors`).
Starlette is imported inside functions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kirocrew_core.gateway.body import read_json_object

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import BaseRoute

MAX_BODY_BYTES = 256 * 1024


async def get_config(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_computer.keystone import read_keystone

    return JSONResponse((await asyncio.to_thread(read_keystone)).as_dict())


async def put_config(request: Request) -> JSONResponse:
    from starlette.responses import JSONResponse

    from kirocrew_computer.keystone import write_keystone

    document = await read_json_object(request, limit=MAX_BODY_BYTES)
    state = await asyncio.to_thread(write_keystone, document, action="put_config", actor="owner")
    return JSONResponse(state.as_dict())


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    from kirocrew_computer.page import calls, doctor

    return [Route("/api/computer-use/doctor", doctor, methods=["GET"], name="computer_use_doctor"),
            Route("/api/computer-use/calls", calls, methods=["GET"], name="computer_use_calls"),
            Route("/api/computer-use/config", get_config, methods=["GET"], name="computer_use_config"),
            Route("/api/computer-use/config", put_config, methods=["PUT"], name="computer_use_config_put")]
