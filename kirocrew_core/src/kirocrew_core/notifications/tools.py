"""``send_notification``: a crew session publishes to the owner's notification center.

A notification lands in front of a person with the session's words, link and buttons,
so the tool is ``strict`` and fails closed twice: a caller the host cannot tie to a
session it started is refused (no anonymous sender), and so is every call while
``governance.messaging`` is not ``allow`` (or the policy cannot be read).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.notifications import store

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import ToolCall

SEND_NOTIFICATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": store.TITLE_MAX_CHARS},
        "body": {"type": "string", "maxLength": store.BODY_MAX_CHARS, "description": "Markdown."},
        "priority": {"type": "string", "enum": list(store.PRIORITIES), "default": "default"},
        "url": {"type": "string", "maxLength": store.URL_MAX_CHARS, "pattern": store.URL_PATTERN,
                "description": "A dashboard path the notification links to, e.g. /conversations/<id>."},
        "group_key": {"type": "string", "maxLength": store.GROUP_KEY_MAX_CHARS,
                      "description": "A newer notification with the same group_key replaces this one."},
        "actions": {
            "type": "array", "maxItems": store.MAX_ACTIONS,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": store.ACTION_ID_MAX_CHARS},
                    "label": {"type": "string", "minLength": 1, "maxLength": store.ACTION_LABEL_MAX_CHARS},
                    "url": {"type": "string", "maxLength": store.URL_MAX_CHARS, "pattern": store.URL_PATTERN},
                },
                "required": ["id", "label"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["title"],
    "additionalProperties": False,
}


async def send_notification(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_core.coretools.contract import ToolRefused
    from kirocrew_core.governance import require_capability

    if call.session is None:
        raise ToolRefused("cannot verify caller identity for send_notification (it does not descend from a "
                          "kiro-cli the host started): refusing to publish without a trusted identity",
                          code="caller_unverified")
    require_capability("messaging", "publishing notifications")
    new = store.validate_new(args)
    session = call.session
    source = store.Source(session.kind, session.target_id, session.agent)
    await asyncio.to_thread(store.publish, new, source)
    return f"Notification published to the notification center (priority={new.priority})."


def notification_tools() -> list[CoreMcpTool]:
    return [CoreMcpTool(
        "send_notification",
        "Publish a notification to the owner's notification center in the kirocrew dashboard (/notifications): "
        "a title, an optional Markdown body, a priority, a dashboard link and up to 4 action buttons.",
        SEND_NOTIFICATION_SCHEMA, send_notification, identity="strict")]
