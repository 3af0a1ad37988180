"""``kirocrew messages …``: the owner's view of what sessions sent, and the switches over it.

Every command calls the owner-only ``kirocrew-messages-admin`` server (:mod:`.admin`), so the same
command run from a session's shell is refused (a session cannot unmute itself or repoint a channel).
Registered lazily by :mod:`kirocrew_core.builtin.messages`.
"""

from __future__ import annotations

import sys

import click


def _admin(tool: str, arguments: dict[str, object]) -> None:
    from kirocrew_core.messages.admin import call

    click.echo(call(tool, arguments).rstrip("\n"))


def _sender(value: str) -> str:
    """A bare conversation id means that conversation."""
    return value if ":" in value else f"conversation:{value}"


@click.group()
def messages() -> None:
    """Messages sessions sent with send_message and file_send: list, mute, approve, channels."""


@messages.command("list")
@click.option("--limit", type=click.IntRange(1, 200), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the messages and the mutes as JSON.")
def list_(limit: int, as_json: bool) -> None:
    """List the newest messages: id, time, sender, where it went, title."""
    _admin("messages_list", {"limit": limit, "json": as_json})


@messages.command("mute")
@click.argument("sender")
def mute(sender: str) -> None:
    """Mute SENDER (a conversation id, conversation:ID or cron:JOB): its messages stay in the feed, go nowhere else."""
    _admin("messages_mute", {"sender": _sender(sender)})


@messages.command("unmute")
@click.argument("sender")
def unmute(sender: str) -> None:
    """Unmute SENDER (a conversation id, conversation:ID or cron:JOB)."""
    _admin("messages_unmute", {"sender": _sender(sender)})


@messages.command("mutes")
def mutes() -> None:
    """List the muted senders."""
    _admin("messages_mutes", {})


@messages.command("delete")
@click.argument("message_id")
def delete(message_id: str) -> None:
    """Delete a message from the feed (and from its channel where the channel can)."""
    _admin("messages_delete", {"message_id": message_id})


@messages.command("approve")
@click.argument("digest")
def approve(digest: str) -> None:
    """Let file_send deliver a file whose content was flagged (DIGEST: the SHA-256 its refusal names)."""
    _admin("messages_approve", {"digest": digest})


@messages.command("channels")
def channels() -> None:
    """List the configured channels ([channels.NAME] in config.toml), whether their secret is set, the default."""
    _admin("messages_channels", {})


@messages.command("secret")
@click.argument("channel")
@click.option("--remove", is_flag=True, help="Remove the channel's secret instead.")
def secret(channel: str, remove: bool) -> None:
    """Set CHANNEL's secret (the webhook URL, or the SMTP password) from standard input, or a prompt."""
    if remove:
        _admin("messages_secret", {"channel": channel, "remove": True})
        return
    value = sys.stdin.readline() if not sys.stdin.isatty() else click.prompt("Secret", hide_input=True)
    _admin("messages_secret", {"channel": channel, "value": value.strip()})
