"""``register_hook``: a session asks for an inbound webhook that wakes its own conversation.

``strict``: only a verified session's call runs, and the hook belongs to that session's
conversation (its identity by process ancestry, never an argument); registering the same id again
from the same conversation rotates the token, another conversation is refused ``hook_taken``.
``governance.hooks`` must be ``allow`` (fail closed). The result is the only place the token is
ever shown: the store keeps its hash.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.webhooks import store

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import ToolCall

REGISTER_HOOK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hook_id": {"type": "string", "minLength": 1, "maxLength": store.HOOK_ID_MAX_CHARS,
                    "pattern": store.HOOK_ID_PATTERN,
                    "description": "A name for the hook, part of its URL: letters, digits, '.', '_', '-'."},
        "context_summary": {"type": "string", "minLength": 1, "maxLength": store.CONTEXT_MAX_CHARS,
                            "description": "What you are waiting for and what to do when a message arrives; "
                                           "it is put above every delivery's message."},
    },
    "required": ["hook_id", "context_summary"],
    "additionalProperties": False,
}


def gateway_url() -> str:
    """The dashboard's address as the running host published it (``host.json``), without a trailing slash."""
    from kirocrew_core.config import get_value
    from kirocrew_core.host import paths
    from kirocrew_core.jsonfile import read_json

    read = read_json(paths.state_file())
    url = read.document.get("url") if read.known and isinstance(read.document, dict) else None
    if isinstance(url, str) and url.startswith("http://"):
        return url.rstrip("/")
    return f"http://127.0.0.1:{get_value('gateway.port')}"


def webhook_url(hook_id: str) -> str:
    from kirocrew_core.gateway.auth import WEBHOOK_PATH_PREFIX

    return gateway_url() + WEBHOOK_PATH_PREFIX + hook_id


def registered_text(registered: store.Registered, url: str) -> str:
    example = json.dumps({"message": "build 42 passed", "name": "ci"})
    verb = "Rotated the token of" if registered.rotated else "Registered"
    return "\n".join([
        f"{verb} webhook `{registered.hook.hook_id}` for this conversation.",
        f"URL: {url}",
        f"Token (shown only now; registering the same hook_id again rotates it): {registered.token}",
        "Send: POST with `Authorization: Bearer <token>` and a JSON body "
        '{"message": "<text, up to 20000 characters>", "name": "<optional sender name>"}; '
        "an optional `Idempotency-Key` header makes retries safe.",
        "Each accepted message is queued as a new run of this conversation, marked as untrusted external "
        "content, below your context summary.",
        "Example:",
        f"curl -sS -X POST '{url}' -H 'Authorization: Bearer {registered.token}' "
        f"-H 'Content-Type: application/json' -d '{example}'",
    ])


async def register_hook(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_core import audit
    from kirocrew_core.coretools.contract import ToolRefused
    from kirocrew_core.coretools.identity import fingerprint
    from kirocrew_core.governance import require_capability

    session = call.require_session()
    if session.kind != "conversation":
        raise ToolRefused("register_hook: only a conversation's session can receive webhook deliveries",
                          code="not_a_conversation")
    require_capability("hooks", "registering webhooks")
    hook_id = store.check_hook_id(args.get("hook_id"))
    context = store.check_context(args.get("context_summary"))
    registered = await asyncio.to_thread(store.register, hook_id, session.target_id, context, agent=session.agent)
    await asyncio.to_thread(audit.record, "hooks.register", actor=fingerprint(session.key), outcome="ok",
                            hook_id=hook_id, conversation_id=session.target_id, rotated=registered.rotated)
    return registered_text(registered, await asyncio.to_thread(webhook_url, hook_id))


def hook_tools() -> list[CoreMcpTool]:
    return [CoreMcpTool(
        "register_hook",
        "Get a webhook URL and token for this conversation: an external service POSTs a message to it and the "
        "message arrives here as a new run (marked untrusted), below the context summary you give now.",
        REGISTER_HOOK_SCHEMA, register_hook, identity="strict")]
