"""The owner's messaging decisions: mutes, file approvals, channel secrets, listing and deleting messages.

No model's to make, so not ``kirocrew-core`` tools: they are the tools of the host server
``kirocrew-messages-admin``, which no agent config names, and each refuses any caller but the person's
own ``kirocrew`` command (by process ancestry: a session's shell running ``kirocrew messages unmute`` is
that session, refused ``person_only_command``; see
:func:`kirocrew_core.coretools.person_tools.require_person`). ``kirocrew messages …`` calls them; with
``KIROCREW_NO_HOST=1`` the same handlers run in that process as the person.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kirocrew_core.coretools.person_tools import object_schema as _schema
from kirocrew_core.messages import store

if TYPE_CHECKING:
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer
    from kirocrew_core.coretools.contract import ToolCall

ADMIN_SERVER = "kirocrew-messages-admin"
ADMIN_COMMAND = "mcp-messages-admin"
INSTRUCTIONS = "The owner's messaging decisions (mutes, approvals, channel secrets); not for models."
LIST_MAX = 200
_MUTE = {"type": "string", "pattern": store.MUTE_PATTERN,
         "description": "conversation:<id> or cron:<job id>"}
_CHANNEL = {"type": "string", "minLength": 1, "maxLength": 64}


def describe(message: store.Message) -> str:
    import time

    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(message.created))
    where = {"channel": "to " + ", ".join(d.channel for d in message.deliveries), "feed": "feed",
             "injected": "injected", "muted": "muted", "fallback": f"feed only ({message.note})"}[message.outcome]
    who = f"{message.sender.kind}:{message.sender.target_id}"
    if message.sender.cron_job:
        who += f" cron:{message.sender.cron_job}"
    extra = f"  file {message.file}" if message.file else ""
    return f"{message.id}  {when}  {who}  [{where}]  {message.title}{extra}"


def list_messages(args: dict[str, Any]) -> str:
    messages = store.all_messages()[: int(args.get("limit", 50))]
    if args.get("json"):
        return json.dumps({"messages": [m.as_dict() for m in messages], "muted": store.mutes()}, indent=2)
    if not messages:
        return "No messages sent yet."
    return "\n".join(map(describe, messages))


def mute(args: dict[str, Any]) -> str:
    key = args["sender"]
    done = store.mute(key)
    return (f"Muted {key}: its messages are recorded in the feed and sent nowhere else." if done
            else f"{key} was already muted.")


def unmute(args: dict[str, Any]) -> str:
    key = args["sender"]
    return f"Unmuted {key}." if store.unmute(key) else f"{key} was not muted."


def mutes(args: dict[str, Any]) -> str:
    muted = store.mutes()
    return "\n".join(muted) if muted else "No session is muted."


def approve(args: dict[str, Any]) -> str:
    digest = args["digest"]
    done = store.approve(digest)
    return (f"Approved content {digest}: file_send may deliver a file with exactly this content." if done
            else f"Content {digest} was already approved.")


def channel_list(args: dict[str, Any]) -> str:
    from kirocrew_core.messages import channels, settings

    found = channels.all_channels()
    default = settings.default_channel()
    if not found:
        return "No message channels: messages go to the owner's feed only (add a [channels.NAME] table)."
    lines = []
    for name, channel in sorted(found.items()):
        secret = "secret set" if settings.read_secret(name) else "no secret"
        mark = "  (default)" if name == default else ""
        lines.append(f"{name}  {channel.kind}  {channel.description}  [{secret}]{mark}")
    return "\n".join(lines)


def set_secret(args: dict[str, Any]) -> str:
    from kirocrew_core.messages import settings

    name = args["channel"]
    if args.get("remove"):
        return f"Removed channel {name}'s secret." if settings.remove_secret(name) else f"{name} had no secret."
    settings.write_secret(name, args.get("value", ""))
    return f"Saved channel {name}'s secret (owner-only; never shown)."


async def _delete(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_core.coretools.person_tools import require_person
    from kirocrew_core.messages.tools import delete

    require_person(call, "delete any message kirocrew sent")
    return await delete(args["message_id"], None)


def admin_tools() -> dict[str, CoreMcpTool]:
    from kirocrew_core.contributions import CoreMcpTool
    from kirocrew_core.coretools.person_tools import person_tool as tool
    from kirocrew_core.messages.tools import DELETE_MESSAGE_SCHEMA

    found = [
        tool("messages_list", "list the messages kirocrew sent",
             _schema({"limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX}, "json": {"type": "boolean"}}),
             list_messages, read_only=True),
        tool("messages_mute", "mute a session's or a cron job's messages", _schema({"sender": _MUTE}, ("sender",)),
             mute),
        tool("messages_unmute", "unmute a session's or a cron job's messages",
             _schema({"sender": _MUTE}, ("sender",)), unmute),
        tool("messages_mutes", "list the muted senders", _schema({}), mutes, read_only=True),
        tool("messages_approve", "let a flagged file's exact content through file_send",
             _schema({"digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}, ("digest",)), approve),
        tool("messages_channels", "list the message channels", _schema({}), channel_list, read_only=True),
        tool("messages_secret", "set or remove a message channel's secret",
             _schema({"channel": _CHANNEL, "value": {"type": "string", "maxLength": 4096},
                      "remove": {"type": "boolean"}}, ("channel",)), set_secret),
        CoreMcpTool("messages_delete", "The owner's: delete any message kirocrew sent.", DELETE_MESSAGE_SCHEMA,
                    _delete, identity="lenient"),
    ]
    return {t.name: t for t in found}


def hosted_server() -> HostedMcpServer:
    from kirocrew_core.coretools.person_tools import admin_server

    return admin_server(ADMIN_SERVER, ADMIN_COMMAND, admin_tools, INSTRUCTIONS,
                        "The owner's messaging decisions (mutes, approvals, channel secrets); no agent config "
                           "names it.")


def call(tool: str, arguments: dict[str, Any]) -> str:
    """One admin tool call through the host, or in this process as the person without one; a refusal raised."""
    from kirocrew_core.coretools.person_tools import person_call

    return person_call(ADMIN_SERVER, admin_tools, tool, arguments)
