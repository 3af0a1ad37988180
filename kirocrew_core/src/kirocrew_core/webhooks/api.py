"""The owner's hooks routes: the JSON the Hooks page's buttons call (owner-only, like every ``/api/`` route).

- ``GET /api/hooks``: ``{"hooks"}``, newest first, each with its URL and counters (never a token or its hash);
- ``DELETE /api/hooks/{hook_id}``: ``{"revoked"}``; the hook's URL answers 401 from then on.

An unknown hook is 404 ``hook_not_found``; a store that cannot be read is refused with its code
(400 ``malformed_file``, 500 ``unreadable_file``), and nothing is changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kirocrew_core.gateway.fields import answers, json_answer

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

_answers = answers({"hook_not_found"})


def hooks_view() -> list[dict[str, Any]]:
    from kirocrew_core.webhooks import store
    from kirocrew_core.webhooks.tools import gateway_url
    from kirocrew_core.gateway.auth import WEBHOOK_PATH_PREFIX

    base = gateway_url() + WEBHOOK_PATH_PREFIX
    return [{**hook.view(), "url": base + hook.hook_id} for hook in store.all_hooks()]


def revoke_hook(hook_id: str) -> dict[str, Any]:
    from kirocrew_core import audit
    from kirocrew_core.webhooks import store

    hook = store.revoke(hook_id)
    audit.record("hooks.revoke", actor="owner", outcome="ok", hook_id=hook.hook_id,
                 conversation_id=hook.conversation_id)
    return {"revoked": hook.hook_id}


@_answers
async def list_hooks(request: Request) -> Response:
    return await json_answer(lambda: {"hooks": hooks_view()})


@_answers
async def revoke(request: Request) -> Response:
    return await json_answer(revoke_hook, str(request.path_params["hook_id"]))


def routes() -> list[BaseRoute]:
    from starlette.routing import Route

    return [Route("/api/hooks", list_hooks, methods=["GET"], name="hooks_list"),
            Route("/api/hooks/{hook_id}", revoke, methods=["DELETE"], name="hooks_revoke")]
