"""The built-in e-mail channel: one message per ``send_message`` over SMTP, with the standard library.

``security`` picks how: ``starttls`` (the default: plain connect, then STARTTLS, refused if the server
cannot), ``ssl`` (TLS from the first byte) or ``plain`` (no TLS; a password is never sent over it, so a
``plain`` channel with a username is refused before connecting). Certificates are verified against the
system's roots. Every socket operation is bounded by the channel's ``timeout_secs``, so a server that
accepts and never answers fails the delivery in that time (the message then falls back to the feed).

The delivery id is the Message-ID kirocrew gave the mail. Mail cannot be recalled: the channel has no
``delete``, and ``delete_message`` says the copy in the mailbox stays.
"""

from __future__ import annotations

from typing import Any

from kirocrew_core.contributions import MessageChannel, OutgoingMessage
from kirocrew_core.errors import KirocrewError
from kirocrew_core.messages import settings

DEFAULT_PORTS = {"starttls": 587, "ssl": 465, "plain": 25}
#: A file_send attachment larger than this goes as a link to the outbox instead (most servers cap at 10-25 MB).
ATTACH_MAX_BYTES = 10 * 1024 * 1024


class ChannelNotReady(KirocrewError):
    """A configured channel that cannot deliver as configured (a missing field or secret)."""

    code = "channel_not_ready"


def channel(name: str, fields: dict[str, Any]) -> MessageChannel:
    """The e-mail channel ``name`` from its ``[channels.NAME]`` fields (checked when it sends)."""
    security = str(fields.get("security", "starttls"))
    host = fields.get("smtp_host") or "?"
    port = int(fields.get("smtp_port") or DEFAULT_PORTS.get(security, 587))
    timeout = float(fields.get("timeout_secs") or settings.DEFAULT_TIMEOUT_SECS)
    recipients = list(fields.get("to") or ())

    def send(message: OutgoingMessage) -> str:
        return _send(name, fields, security, port, timeout, message)

    return MessageChannel(name, "email", f"e-mail to {', '.join(recipients) or '(no recipients)'} via "
                          f"{host}:{port} ({security})", send, None, timeout)


def _compose(fields: dict[str, Any], message: OutgoingMessage) -> Any:
    import mimetypes
    from email.message import EmailMessage
    from email.utils import formatdate, make_msgid

    mail = EmailMessage()
    mail["Subject"] = f"[kirocrew] {message.title}"
    mail["From"] = fields["from_addr"]
    mail["To"] = ", ".join(fields["to"])
    mail["Date"] = formatdate(localtime=False)
    mail["Message-ID"] = make_msgid(idstring=message.id, domain="kirocrew.local")
    mail["X-Kirocrew-Message"] = message.id
    mail.set_content(f"{message.text}\n\n-- \n{message.sender} (message {message.id}).\n")
    if message.file is not None:
        from kirocrew_core.messages.outbox import shown_name

        data = message.file.read_bytes()
        if len(data) <= ATTACH_MAX_BYTES:
            name = shown_name(message.file)
            kind, _ = mimetypes.guess_type(name)
            main, _, sub = (kind or "application/octet-stream").partition("/")
            mail.add_attachment(data, maintype=main, subtype=sub, filename=name)
    return mail


def _send(name: str, fields: dict[str, Any], security: str, port: int, timeout: float,
          message: OutgoingMessage) -> str:
    import smtplib
    import ssl

    missing = [f for f in ("smtp_host", "from_addr", "to") if not fields.get(f)]
    if missing:
        raise ChannelNotReady(f"e-mail channel {name} lacks {', '.join(missing)} in [channels.{name}]")
    username = fields.get("username")
    password = settings.read_secret(name) if username else None
    if username and security == "plain":
        raise ChannelNotReady(f"e-mail channel {name} would send its password without TLS; use security = "
                              '"starttls" or "ssl", or drop the username')
    if username and password is None:
        raise ChannelNotReady(f"e-mail channel {name} has a username but no password: run `kirocrew messages "
                              f"secret {name}`")
    mail = _compose(fields, message)
    context = ssl.create_default_context()
    client: smtplib.SMTP
    if security == "ssl":
        client = smtplib.SMTP_SSL(fields["smtp_host"], port, timeout=timeout, context=context)
    else:
        client = smtplib.SMTP(fields["smtp_host"], port, timeout=timeout)
    with client:
        if security == "starttls":
            client.starttls(context=context)  # raises SMTPNotSupportedError when the server cannot
        if username and password is not None:
            client.login(str(username), password)
        client.send_message(mail)
    return str(mail["Message-ID"])
