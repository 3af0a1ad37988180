"""The channels a message may go to: every plugin's ``message_channels()``, and one bounded delivery.

Core's own implementation (:func:`configured_channels`) builds an e-mail or webhook channel for each
``[channels.NAME]`` table. A delivery runs the channel's blocking ``send`` in a worker thread and waits
at most its ``timeout_secs`` (plus a second for the thread to notice its own socket timeout): a channel
that hangs cannot hold a tool call past it. Any failure is a :class:`DeliveryFailed` naming the
channel and what went wrong in words that carry no secret.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kirocrew_core.errors import BadInputError, KirocrewError

if TYPE_CHECKING:
    from kirocrew_core.contributions import MessageChannel, OutgoingMessage

log = logging.getLogger(__name__)

#: What a delivery waits beyond the channel's own timeout before it gives up on the thread.
GRACE_SECS = 1.0


class DeliveryFailed(KirocrewError):
    code = "channel_failed"


def configured_channels() -> list[MessageChannel]:
    """One channel per ``[channels.NAME]`` table (core's ``message_channels()``); an unknown kind is skipped."""
    from kirocrew_core.messages import email, settings, webhook

    builders = {"email": email.channel, "webhook": webhook.channel}
    out = []
    for name, fields in settings.configured().items():
        build = builders.get(str(fields.get("kind")))
        if build is None:
            log.warning("channel %s has no kind (email or webhook); it is not used", name)
            continue
        out.append(build(name, fields))
    return out


def all_channels() -> dict[str, MessageChannel]:
    """Every plugin's channels by name; for a duplicate name the first in call order wins."""
    from kirocrew_core.contributions import MessageChannel, flatten
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    call = call_hook(get_plugin_manager(), "message_channels", on_error="skip")
    found: dict[str, MessageChannel] = {}
    for contribution in flatten(call.contributions):
        channel = contribution.value
        if not isinstance(channel, MessageChannel):
            log.error("plugin %r returned %r from message_channels(); expected a MessageChannel",
                      contribution.plugin, type(channel).__name__)
            continue
        found.setdefault(channel.name, channel)
    return found


def lookup(name: str) -> MessageChannel:
    """The channel ``name``; ``unknown_channel`` naming the ones there are."""
    channels = all_channels()
    if name not in channels:
        known = ", ".join(sorted(channels)) or "none is configured"
        raise BadInputError(f"no message channel named {name[:64]!r} ({known})", code="unknown_channel")
    return channels[name]


async def deliver(channel: MessageChannel, message: OutgoingMessage) -> str:
    """The delivery id of ``message`` on ``channel``, or :class:`DeliveryFailed` (at most its timeout + grace)."""
    try:
        delivery = await asyncio.wait_for(asyncio.to_thread(channel.send, message),
                                          channel.timeout_secs + GRACE_SECS)
    except (asyncio.TimeoutError, TimeoutError):
        raise DeliveryFailed(f"channel {channel.name} did not answer within {channel.timeout_secs:g}s") from None
    except KirocrewError as exc:
        raise DeliveryFailed(exc.message) from None
    except Exception as exc:  # noqa: BLE001 - a channel's failure, whatever it is, is a fallback, not a crash
        raise DeliveryFailed(f"channel {channel.name} failed ({_describe(exc)})") from None
    if not isinstance(delivery, str) or not delivery:
        raise DeliveryFailed(f"channel {channel.name} returned no delivery id")
    return delivery[:500]


async def withdraw(channel: MessageChannel, delivery_id: str) -> str:
    """Ask ``channel`` to delete a delivery; one sentence saying what happened (never raises)."""
    if channel.delete is None:
        return f"{channel.name} cannot withdraw what it delivered; that copy stays"
    try:
        await asyncio.wait_for(asyncio.to_thread(channel.delete, delivery_id), channel.timeout_secs + GRACE_SECS)
    except Exception as exc:  # noqa: BLE001 - the feed copy is gone either way; say what the channel did
        return f"{channel.name} could not withdraw it ({_describe(exc)})"
    return f"withdrawn from {channel.name}"


def _describe(exc: BaseException) -> str:
    """An exception in words without its arguments' secrets: its type, and an SMTP reply's code."""
    import smtplib

    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{type(exc).__name__} {exc.smtp_code}"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or "timed out" in str(exc):
        return "timed out"  # smtplib reports a socket timeout as SMTPServerDisconnected("... timed out")
    return type(exc).__name__
