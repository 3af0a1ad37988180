"""The messages store: every message kirocrew sent for a session, the owner's mutes and file approvals.

One JSON file in the crew state (``<crew home>/state/messages/messages.json``), written by the host
(the tools and the owner's commands run there) under the ``messages`` lock, whole and atomically.
A message records its **sender** (the session's kind and target, its agent, the cron job whose run
it is; never its key), where it went (the feed notification, the channel deliveries) and what
happened (``feed``, ``channel``, ``fallback``, ``muted``, ``injected``).

A **mute** names a sender the owner silenced: ``conversation:<id>`` or ``cron:<job id>`` (a job's
runs are new conversations, so muting the job is what lasts). A muted sender's messages are still
recorded and shown in the feed, never pushed to a channel or injected.

An **approval** is the SHA-256 of a file's content the owner let through ``file_send`` although its
content was flagged as holding a secret.

Bad input raises :class:`~kirocrew_core.errors.BadInputError` with a stable code and changes nothing.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, MalformedFileError
from kirocrew_core.jsonfile import read_json, write_json_atomic
from kirocrew_core.locks import named_lock

LOCK = "messages"
TEXT_MAX_CHARS = 5000
TITLE_MAX_CHARS = 500
#: The store keeps the newest this many messages; older ones fall off (their feed cards stay until dismissed).
MAX_MESSAGES = 1000
MAX_MUTES = 500
MAX_APPROVALS = 500
OUTCOMES = ("feed", "channel", "fallback", "muted", "injected")
MESSAGE_ID_PATTERN = r"^m[0-9a-f]{16}$"
_ID = re.compile(MESSAGE_ID_PATTERN)
#: What a mute names: a conversation, or a cron job (whose every run it silences).
MUTE_PATTERN = r"^(conversation:[A-Za-z0-9._:-]{1,128}|cron:[a-f0-9]{1,16})$"
_MUTE = re.compile(MUTE_PATTERN)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_MAX_STORE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Sender:
    """Who sent a message: the session's kind and target (a conversation), its agent, its cron job if any."""

    kind: str
    target_id: str
    agent: str | None = None
    cron_job: str | None = None
    cron_job_name: str | None = None

    @property
    def mute_keys(self) -> tuple[str, ...]:
        """The mutes that silence it: its conversation's, and its cron job's."""
        keys = [f"{self.kind}:{self.target_id}"]
        if self.cron_job:
            keys.append(f"cron:{self.cron_job}")
        return tuple(keys)

    def line(self) -> str:
        """The attribution every channel shows with the text."""
        who = f"{self.kind} {self.target_id}"
        if self.agent:
            who += f" (agent {self.agent})"
        if self.cron_job:
            who += f", cron job {self.cron_job}" + (f" \u201c{self.cron_job_name}\u201d" if self.cron_job_name else "")
        return f"Sent by kirocrew session {who}"


@dataclass(frozen=True)
class Delivery:
    """One channel delivery: the channel's name and its id there (what a delete asks it to withdraw)."""

    channel: str
    delivery_id: str


@dataclass(frozen=True)
class Message:
    id: str
    title: str
    text: str
    created: float
    sender: Sender
    outcome: str
    notification: str | None = None
    deliveries: tuple[Delivery, ...] = ()
    #: The outbox file a ``file_send`` delivered (its name in the outbox), or None.
    file: str | None = None
    #: Why a wanted channel or injection did not happen (the fallback's reason), or None.
    note: str | None = field(default=None)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["deliveries"] = [asdict(d) for d in self.deliveries]
        return out


def store_file() -> Path:
    return home.state_dir("messages") / "messages.json"


def new_id() -> str:
    return "m" + secrets.token_hex(8)


# -- validation -----------------------------------------------------------------------------------


def mute_key(value: Any) -> str:
    """A mute's name, checked: ``conversation:<id>`` or ``cron:<job id>`` (``bad_mute``)."""
    if not isinstance(value, str) or not _MUTE.match(value):
        raise BadInputError(f"a mute names conversation:<id> or cron:<job id>, got {str(value)[:200]!r}",
                            code="bad_mute")
    return value


# -- the file -------------------------------------------------------------------------------------


@dataclass
class _Document:
    messages: list[Message]
    muted: list[str]
    approved: list[str]


def _parse(raw: dict[str, Any]) -> Message:
    sender = raw["sender"]
    outcome = str(raw["outcome"])
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    return Message(id=str(raw["id"]), title=str(raw["title"]), text=str(raw["text"]), created=float(raw["created"]),
                   sender=Sender(str(sender["kind"]), str(sender["target_id"]), sender.get("agent"),
                                 sender.get("cron_job"), sender.get("cron_job_name")),
                   outcome=outcome, notification=raw.get("notification"),
                   deliveries=tuple(Delivery(str(d["channel"]), str(d["delivery_id"]))
                                    for d in raw.get("deliveries") or ()),
                   file=raw.get("file"), note=raw.get("note"))


def _read() -> _Document:
    try:
        document = read_json(store_file(), max_bytes=_MAX_STORE_BYTES).object_or_empty()
    except MalformedFileError as exc:
        raise MalformedFileError(store_file(), f"{exc.detail} (left as it is)",
                                 code="messages_store_malformed") from exc
    try:
        messages = [_parse(item) for item in document.get("messages", [])]
        muted = [mute_key(item) for item in document.get("muted", [])]
        approved = [str(item) for item in document.get("approved", []) if _SHA256.match(str(item))]
    except (KeyError, TypeError, ValueError, AttributeError, BadInputError) as exc:
        raise MalformedFileError(store_file(), f"not a kirocrew messages store ({exc}; left as it is)",
                                 code="messages_store_malformed") from exc
    return _Document(messages, muted, approved)


def _write(document: _Document) -> None:
    home.ensure_crew_home()
    store_file().parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_json_atomic(store_file(), {"version": 1, "messages": [m.as_dict() for m in document.messages],
                                     "muted": document.muted, "approved": document.approved}, secret=True)


# -- operations (blocking file work: call them through asyncio.to_thread in the host) ---------------


def record(message: Message) -> Message:
    """Store ``message`` as the newest; the oldest past :data:`MAX_MESSAGES` fall off."""
    with named_lock(LOCK):
        document = _read()
        document.messages = [message, *document.messages][:MAX_MESSAGES]
        _write(document)
    return message


def update(message: Message) -> Message:
    """Replace the stored message with the same id (a delivery finished); a message gone since is not brought back."""
    with named_lock(LOCK):
        document = _read()
        for index, existing in enumerate(document.messages):
            if existing.id == message.id:
                document.messages[index] = message
                _write(document)
                break
    return message


def all_messages() -> list[Message]:
    """Every stored message, newest first."""
    with named_lock(LOCK):
        return _read().messages


def find(message_id: Any) -> Message:
    """The message ``message_id``; ``message_not_found`` when there is none."""
    if isinstance(message_id, str) and _ID.match(message_id):
        for message in all_messages():
            if message.id == message_id:
                return message
    raise BadInputError(f"no message {str(message_id)[:40]!r} (deleted, never sent by kirocrew, or pushed out by "
                        "newer ones)", code="message_not_found")


def remove(message_id: str) -> Message:
    """Delete the message ``message_id`` from the store; ``message_not_found`` when there is none."""
    with named_lock(LOCK):
        document = _read()
        for index, message in enumerate(document.messages):
            if message.id == message_id:
                del document.messages[index]
                _write(document)
                return message
    raise BadInputError(f"no message {message_id!r}", code="message_not_found")


def mutes() -> list[str]:
    with named_lock(LOCK):
        return _read().muted


def is_muted(sender: Sender) -> bool:
    muted = set(mutes())
    return any(key in muted for key in sender.mute_keys)


def mute(key: str) -> bool:
    """Mute ``key`` (checked by :func:`mute_key`); False when it already was."""
    key = mute_key(key)
    with named_lock(LOCK):
        document = _read()
        if key in document.muted:
            return False
        if len(document.muted) >= MAX_MUTES:
            raise BadInputError(f"at most {MAX_MUTES} mutes; unmute one first", code="too_many_mutes")
        document.muted.append(key)
        _write(document)
    return True


def unmute(key: str) -> bool:
    """Unmute ``key``; False when it was not muted."""
    key = mute_key(key)
    with named_lock(LOCK):
        document = _read()
        if key not in document.muted:
            return False
        document.muted.remove(key)
        _write(document)
    return True


def approve(digest: str) -> bool:
    """Let a flagged file with this content (its SHA-256, hex) through ``file_send``; False when it already was."""
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise BadInputError("an approval is the file's SHA-256 as 64 lowercase hex digits (file_send's refusal "
                            "names it)", code="bad_digest")
    with named_lock(LOCK):
        document = _read()
        if digest in document.approved:
            return False
        document.approved = [digest, *document.approved][:MAX_APPROVALS]
        _write(document)
    return True


def is_approved(digest: str) -> bool:
    with named_lock(LOCK):
        return digest in _read().approved


def with_outcome(message: Message, **changes: Any) -> Message:
    return replace(message, **changes)
