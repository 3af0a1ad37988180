"""``send_message``, ``delete_message`` and ``file_send``: a crew session's messages to its owner.

Every message lands in the owner's feed (the notification center) with its **attribution**: the
session (conversation, agent) and the cron job whose run sent it. Beyond the feed it goes to one
place at most: a **channel** (``channel`` names one; else ``messages.default_channel``), or, with
``session="origin"``, **into the conversation that created the calling cron job**. What happened is
in the result, plainly: a channel that failed (or timed out) falls back to the feed and says so; a
session the owner **muted** is recorded in the feed and pushed nowhere.

Sending is ``strict`` and fails closed twice (as ``send_notification``): a caller the host cannot
tie to a session it started is refused ``caller_unverified``, and every send while
``governance.messaging`` is not ``allow`` (or the config cannot be read) ``governance_denied``.
``delete_message`` is for what kirocrew sent: a session deletes only its own messages, the owner's
own ``kirocrew`` command any.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kirocrew_core.config import ENTRY_NAME
from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.messages import store
from kirocrew_core.notifications.store import text_field

if TYPE_CHECKING:
    from kirocrew_core.contributions import CronJobRef, MessageChannel, OutgoingMessage
    from kirocrew_core.coretools.contract import CrewSession, ToolCall

FEED = "feed"
ORIGIN = "origin"
CHANNEL_SCHEMA: dict[str, Any] = {
    "type": "string", "maxLength": 64, "pattern": f"^({FEED}|{ENTRY_NAME.pattern[1:-1]})$",
    "description": "A configured channel's name (`kirocrew messages channels`), or \"feed\" for the owner's feed "
                   "only. Default: the owner's default channel, if any.",
}
SEND_MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "minLength": 1, "maxLength": store.TEXT_MAX_CHARS},
        "title": {"type": "string", "maxLength": store.TITLE_MAX_CHARS},
        "session": {"type": "string", "enum": [ORIGIN],
                    "description": "\"origin\": inject into the conversation that created the cron job this run "
                                   "belongs to (falls back to the feed, and says so)."},
        "channel": CHANNEL_SCHEMA,
    },
    "required": ["text"],
    "additionalProperties": False,
}
DELETE_MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"message_id": {"type": "string", "pattern": store.MESSAGE_ID_PATTERN,
                                  "description": "The id send_message or file_send returned (m + 16 hex)."}},
    "required": ["message_id"],
    "additionalProperties": False,
}
FILE_SEND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 4096,
                 "description": "An absolute path of a file in your workspace."},
        "description": {"type": "string", "maxLength": store.TITLE_MAX_CHARS},
        "channel": CHANNEL_SCHEMA,
    },
    "required": ["path"],
    "additionalProperties": False,
}


def _require_sender(call: ToolCall, doing: str) -> CrewSession:
    from kirocrew_core.coretools.contract import ToolRefused
    from kirocrew_core.governance import require_capability

    if call.session is None:  # the server refuses it first for a strict tool; never send without an identity
        raise ToolRefused(f"cannot verify caller identity for {call.tool}: refusing to send without a trusted "
                          "identity", code="caller_unverified")
    require_capability("messaging", doing)
    return call.session


def _wanted_channel(args: dict[str, Any]) -> str | None:
    """The channel a call names, else the owner's default; None for the feed only (blocking: reads the config)."""
    from kirocrew_core.messages import settings

    named = args.get("channel")
    if named == FEED:
        return None
    return str(named) if named else (settings.default_channel() or None)


def _redacted(text: str) -> str:
    from kirocrew_core.redaction import redact_secrets

    return redact_secrets(text)


@dataclass(frozen=True)
class _Plan:
    """Where one message goes, decided before anything is sent (so bad input changes nothing)."""

    sender: store.Sender
    job: CronJobRef | None
    muted: bool
    channel: MessageChannel | None
    origin: bool
    note: str | None


def _plan(session: CrewSession, args: dict[str, Any]) -> _Plan:
    """Attribution, mute, and the one destination beyond the feed (blocking: hook calls, store and config reads)."""
    from kirocrew_core.errors import BadInputError
    from kirocrew_core.messages import channels
    from kirocrew_core.messages.senders import sender_of

    sender, job = sender_of(session)
    muted = store.is_muted(sender)
    if args.get("session") == ORIGIN:
        if args.get("channel"):
            raise BadInputError("name a channel or session=\"origin\", not both", code="bad_destination")
        return _Plan(sender, job, muted, None, True, None)
    name = _wanted_channel(args)
    if name is None:
        return _Plan(sender, job, muted, None, False, None)
    try:
        channel = channels.lookup(name)
    except BadInputError:
        if args.get("channel"):  # the session named it: its mistake, refused before anything is sent
            raise
        return _Plan(sender, job, muted, None, False, f"the default channel {name} is not configured")
    return _Plan(sender, job, muted, channel, False, None)


async def _inject(plan: _Plan, text: str) -> str | None:
    """Inject into the conversation that created the cron job; None when done, else why not."""
    from kirocrew_core.conversation_runs import queue_run

    if plan.job is None:
        return "this session is not a cron job's run"
    if not plan.job.created_by:
        return f"cron job {plan.job.job_id} was made by the owner, not by a conversation"
    queued = await queue_run(plan.job.created_by, text, what=f"send_message of cron job {plan.job.job_id}")
    return None if queued.run_id is not None else queued.reason[:300]


async def _dispatch(plan: _Plan, outgoing: OutgoingMessage) -> tuple[str, tuple[store.Delivery, ...], str | None]:
    """``(outcome, deliveries, note)`` of one message beyond the feed."""
    from kirocrew_core.messages import channels

    if plan.muted:
        return "muted", (), "the owner muted this session"
    if plan.origin:
        why = await _inject(plan, f"{outgoing.title}\n\n{outgoing.text}\n\n({outgoing.sender}, message "
                                  f"{outgoing.id})")
        return ("injected", (), None) if why is None else ("fallback", (), why)
    if plan.channel is None:
        return ("fallback", (), plan.note) if plan.note else ("feed", (), None)
    try:
        delivery = await channels.deliver(plan.channel, outgoing)
    except channels.DeliveryFailed as exc:
        return "fallback", (), exc.message
    return "channel", (store.Delivery(plan.channel.name, delivery),), None


def _where(message: store.Message, plan: _Plan) -> str:
    """The result's sentence: where the message went, plainly."""
    channel = plan.channel.name if plan.channel is not None else None
    if message.outcome == "channel":
        return f"Message {message.id} sent to channel {channel} and recorded in the owner's feed."
    if message.outcome == "injected":
        assert plan.job is not None
        return (f"Message {message.id} injected into conversation {plan.job.created_by} (which created cron job "
                f"{plan.job.job_id}) and recorded in the owner's feed.")
    if message.outcome == "muted":
        target = f"channel {channel}" if channel else "the origin conversation" if plan.origin else None
        return (f"Message {message.id} recorded in the owner's feed only: the owner has muted this session"
                + (f", so it was not sent to {target}." if target else " (it reaches no channel)."))
    if message.outcome == "fallback":
        target = f"channel {channel}" if channel else "the origin conversation" if plan.origin else "a channel"
        return (f"\u26a0\ufe0f {target[0].upper() + target[1:]} unavailable ({message.note}): message {message.id} "
                f"delivered to the owner's feed only (NOT to {target}).")
    return f"Message {message.id} delivered to the owner's feed."


def _feed_body(message: store.Message, plan: _Plan, file_link: str | None) -> str:
    lines = [message.text] if message.text else []
    if file_link:
        lines.append(f"[Download the file]({file_link})")
    status = {"channel": f"Also sent to channel {plan.channel.name if plan.channel else ''}.",
              "injected": "Also injected into the conversation that created its cron job.",
              "muted": "You muted this session: it was not sent anywhere else.",
              "fallback": f"Not delivered beyond this feed: {message.note}."}.get(message.outcome)
    lines.append(f"_{message.sender.line()} (message {message.id})._" + (f" {status}" if status else ""))
    return "\n\n".join(lines)


async def _send(session: CrewSession, args: dict[str, Any], title: str, text: str, *,
                file: Any = None) -> str:
    """The send both tools share: plan, dispatch, publish to the feed, record; the result sentence."""
    from kirocrew_core.contributions import OutgoingMessage
    from kirocrew_core.messages import outbox
    from kirocrew_core.notifications import store as feed

    plan = await asyncio.to_thread(_plan, session, args)
    message_id = store.new_id()
    copy = await asyncio.to_thread(outbox.store_copy, message_id, file) if file is not None else None
    try:
        outgoing = OutgoingMessage(message_id, title, text, plan.sender.line(), copy)
        outcome, deliveries, note = await _dispatch(plan, outgoing)
        message = store.Message(message_id, title, text, _now(), plan.sender, outcome, deliveries=deliveries,
                                file=copy.name if copy else None, note=note)
        link = f"/api/messages/outbox/{copy.name}" if copy else None
        source = feed.Source(session.kind, session.target_id, session.agent)
        note_card = feed.NewNotification(title=title[:feed.TITLE_MAX_CHARS],
                                         priority="passive" if outcome == "muted" else "default",
                                         body=_feed_body(message, plan, link)[:feed.BODY_MAX_CHARS], url=link)
        published = await asyncio.to_thread(feed.publish, note_card, source)
        message = replace(message, notification=published.id)
        await asyncio.to_thread(store.record, message)
    except BaseException:
        if copy is not None:
            await asyncio.to_thread(outbox.remove_copy, copy.name)
        raise
    return _where(message, plan)


def _now() -> float:
    import time

    return time.time()


async def send_message(args: dict[str, Any], call: ToolCall) -> str:
    session = _require_sender(call, "sending messages")
    text = _redacted(text_field(args.get("text"), "text", store.TEXT_MAX_CHARS, required=True))
    # A title is one line wherever it is shown (an e-mail's Subject must not carry a line break).
    title = _redacted(" ".join(text_field(args.get("title"), "title", store.TITLE_MAX_CHARS).split()))
    if not title:
        first = text.strip().splitlines()[0] if text.strip() else "Message"
        title = first[:80] + ("\u2026" if len(first) > 80 else "")
    return await _send(session, args, title, text)


async def file_send(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_core.messages import outbox

    session = _require_sender(call, "sending files")
    description = _redacted(text_field(args.get("description"), "description", store.TITLE_MAX_CHARS).strip())
    checked = await asyncio.to_thread(outbox.check, args.get("path"), session.workspace)
    title = f"File: {checked.name}"
    result = await _send(session, args, title, description, file=checked)
    return f"File sent: {checked.name}" + (f" ({description})" if description else "") + f". {result}"


async def delete_message(args: dict[str, Any], call: ToolCall) -> str:
    session = call.acting_session("deletes a message kirocrew sent")
    return await delete(args.get("message_id"), session)


async def delete(message_id: Any, session: CrewSession | None) -> str:
    """Delete a message kirocrew sent: ``session``'s own, or any for the owner (None); the result sentence."""
    from kirocrew_core.coretools.contract import ToolRefused
    from kirocrew_core.errors import BadInputError
    from kirocrew_core.messages import channels, outbox
    from kirocrew_core.notifications import store as feed

    message = await asyncio.to_thread(store.find, message_id)
    if session is not None and (message.sender.kind, message.sender.target_id) != (session.kind, session.target_id):
        raise ToolRefused(f"message {message.id} was sent by another session; a session deletes only its own",
                          code="message_not_yours")
    await asyncio.to_thread(store.remove, message.id)
    await asyncio.to_thread(outbox.remove_copy, message.file)
    if message.notification:
        with contextlib.suppress(BadInputError):  # the owner dismissed the card already
            await asyncio.to_thread(feed.dismiss, message.notification)
    said = [f"Message {message.id} deleted from the owner's feed"]
    known = await asyncio.to_thread(channels.all_channels) if message.deliveries else {}
    for delivery in message.deliveries:
        channel = known.get(delivery.channel)
        said.append(f"channel {delivery.channel} is no longer configured; its copy stays" if channel is None
                    else await channels.withdraw(channel, delivery.delivery_id))
    return "; ".join(said) + "."


def message_tools() -> list[CoreMcpTool]:
    return [
        CoreMcpTool("send_message",
                    "Send the owner a message: it lands in their feed (/notifications) with your session named, and "
                    "in a channel they configured (e-mail, a Slack or Teams webhook) when you name one or they set "
                    "a default; session=\"origin\" injects it into the conversation that created your cron job "
                    "instead. The result says where it went, and when it fell back to the feed only.",
                    SEND_MESSAGE_SCHEMA, send_message, identity="strict"),
        CoreMcpTool("delete_message",
                    "Delete a message kirocrew sent for you (its id from send_message or file_send): from the "
                    "owner's feed, and from its channel where the channel can withdraw it.",
                    DELETE_MESSAGE_SCHEMA, delete_message, identity="lenient"),
        CoreMcpTool("file_send",
                    "Send the owner a file of your workspace: text, PDF, a raster image, audio or video up to "
                    "25 MB. Refused: files outside your workspace, credentials and kirocrew's own files, other "
                    "binaries, SVG, and text that holds a secret (unless the owner approved it). It is copied to "
                    "the owner's outbox and linked from their feed (and sent on a channel as send_message is).",
                    FILE_SEND_SCHEMA, file_send, identity="strict"),
    ]
