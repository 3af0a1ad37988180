"""The notification center's store: one JSON file in the crew state, newest first, bounded.

The host is its writer (the ``send_notification`` tool and the feed's routes run there);
every change reads and replaces the file whole under the ``notifications`` lock with an
atomic write. A notification records the session it came from (its kind, target and agent;
never its key) and who published it, its **sender** (:func:`sender_of`): one crew session
(its kind and target), kirocrew-cron (``cron``), or the host itself on the owner's side
(``host``: the permission requests the owner must answer, anything published outside a session).

Senders share the feed without being able to crowd each other out:

* a ``group_key`` replaces only the **same sender's** notification with that key (a session
  updating its own progress card; never another session's card, nor cron's or the host's);
* each sender keeps at most its own cap (:data:`MAX_PER_SESSION`, :data:`MAX_FROM_CRON`,
  :data:`MAX_FROM_HOST`): its own oldest falls off when it publishes past it;
* over the total (:data:`MAX_NOTIFICATIONS`) only sessions' notifications fall off, the oldest
  of the session that holds the most first. The host's and cron's caps together are far below
  the total, so a flood of sessions never evicts what the host or cron published.

Its texts are redacted of secrets before they are stored.

Bad input raises :class:`~kirocrew_core.errors.BadInputError` with a stable code and changes nothing.
"""

from __future__ import annotations

import re
import secrets
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, MalformedFileError
from kirocrew_core.jsonfile import read_json, write_json_atomic
from kirocrew_core.locks import named_lock

LOCK = "notifications"
TITLE_MAX_CHARS = 500
BODY_MAX_CHARS = 20000
URL_MAX_CHARS = 500
GROUP_KEY_MAX_CHARS = 200
MAX_ACTIONS = 4
ACTION_ID_MAX_CHARS = 64
ACTION_LABEL_MAX_CHARS = 40
PRIORITIES = ("critical", "default", "passive")
#: The store keeps at most this many; past it the oldest of the session holding the most falls off.
MAX_NOTIFICATIONS = 500
#: One crew session (a conversation, a job run) keeps its newest this many; its own oldest falls off.
MAX_PER_SESSION = 50
#: kirocrew-cron keeps its newest this many (one card per job: its group key ``cron:<id>``).
MAX_FROM_CRON = 100
#: The host keeps its newest this many (permission requests waiting for the owner).
MAX_FROM_HOST = 100
#: Who published a notification: the host (for the owner), kirocrew-cron, or a crew session.
HOST, CRON, SESSION = "host", "cron", "session"
SENDERS = (HOST, CRON, SESSION)
#: A dashboard-internal path: one leading slash (``//host`` would leave the dashboard), no spaces, and
#: no backslash anywhere (browsers read ``/\host`` as ``//host``): the reference's ``^/(?!/)\S*$``, tightened.
URL_PATTERN = r"^/(?![/\\])[^\s\\]*$"
_URL = re.compile(URL_PATTERN)
_ID = re.compile(r"^n[0-9a-f]{16}$")
# Titles, labels and bodies are at most 20000 characters; JSON escaping can multiply that by six.
_MAX_STORE_BYTES = 96 * 1024 * 1024


@dataclass(frozen=True)
class Action:
    """A button on the notification: ``id`` is recorded when the owner picks it; ``url`` is where it leads."""

    id: str
    label: str
    url: str | None = None


@dataclass(frozen=True)
class Source:
    """The crew session a notification came from: what it acts for, never its key."""

    kind: str
    target_id: str
    agent: str | None = None

    @property
    def link(self) -> str | None:
        """Its dashboard page, when it has one (a conversation's)."""
        return f"/conversations/{self.target_id}" if self.kind == "conversation" else None


@dataclass(frozen=True)
class Notification:
    id: str
    title: str
    priority: str
    created: float
    body: str = ""
    url: str | None = None
    group_key: str | None = None
    actions: tuple[Action, ...] = ()
    source: Source | None = None
    #: :data:`HOST`, :data:`CRON` or :data:`SESSION` (then ``source`` is the session).
    sender: str = SESSION
    read: bool = False
    #: The action the owner picked (``{"id", "at"}``), once they pick one.
    chosen: dict[str, Any] | None = field(default=None)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["actions"] = [asdict(action) for action in self.actions]
        out["source"] = None if self.source is None else {**asdict(self.source), "link": self.source.link}
        return out

    @property
    def publisher(self) -> str:
        """Whose caps it counts against: ``host``, ``cron``, or ``session:<kind>:<target>`` (see :func:`sender_of`)."""
        return sender_of(self.sender, self.source)


def sender_of(sender: str, source: Source | None) -> str:
    """The publisher a notification belongs to: ``host``, ``cron``, or one session as ``session:<kind>:<target>``.

    A session is its kind and target (the conversation), not its key: a conversation's kiro-cli
    processes come and go, the cards it publishes stay one sender's.
    """
    if sender != SESSION:
        return sender
    return f"{SESSION}:{source.kind}:{source.target_id}" if source is not None else HOST


@dataclass(frozen=True)
class NewNotification:
    """A validated ``send_notification``."""

    title: str
    priority: str = "default"
    body: str = ""
    url: str | None = None
    group_key: str | None = None
    actions: tuple[Action, ...] = ()


def store_file() -> Path:
    return home.state_dir("notifications") / "notifications.json"


# -- validation -----------------------------------------------------------------------------------


def text_field(value: Any, name: str, limit: int, *, required: bool = False) -> str:
    """A string argument within ``limit`` characters; ``bad_<name>``, ``<name>_required``, ``<name>_too_long``."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise BadInputError(f"{name} must be a string", code=f"bad_{name}")
    if required and not value.strip():
        raise BadInputError(f"{name} is required and must not be blank", code=f"{name}_required")
    if len(value) > limit:
        raise BadInputError(f"{name} is {len(value)} characters; the limit is {limit}", code=f"{name}_too_long")
    return value


def _url(value: Any, name: str) -> str | None:
    if value in (None, ""):
        return None
    text = text_field(value, name, URL_MAX_CHARS)
    if not _URL.match(text):
        raise BadInputError(f"{name} must be a dashboard path such as /conversations/abc (one leading '/', "
                            f"no spaces), got {text!r}", code="bad_url")
    return text


def _actions(value: Any) -> tuple[Action, ...]:
    if value in (None, []):
        return ()
    if not isinstance(value, list):
        raise BadInputError("actions must be a list", code="bad_actions")
    if len(value) > MAX_ACTIONS:
        raise BadInputError(f"at most {MAX_ACTIONS} actions, got {len(value)}", code="too_many_actions")
    out: list[Action] = []
    for raw in value:
        if not isinstance(raw, dict) or set(raw) - {"id", "label", "url"}:
            raise BadInputError("each action is {id, label, url?}", code="bad_actions")
        action = Action(text_field(raw.get("id"), "action_id", ACTION_ID_MAX_CHARS, required=True).strip(),
                        text_field(raw.get("label"), "action_label", ACTION_LABEL_MAX_CHARS, required=True).strip(),
                        _url(raw.get("url"), "action_url"))
        if any(action.id == other.id for other in out):
            raise BadInputError(f"two actions have the id {action.id!r}", code="duplicate_action_id")
        out.append(action)
    return tuple(out)


def validate_new(args: dict[str, Any]) -> NewNotification:
    """Check a ``send_notification``'s arguments; :class:`BadInputError` names the first problem."""
    priority = args.get("priority", "default")
    if priority not in PRIORITIES:
        raise BadInputError(f"priority must be one of {', '.join(PRIORITIES)}, got {priority!r}",
                            code="bad_priority")
    group_key = text_field(args.get("group_key"), "group_key", GROUP_KEY_MAX_CHARS).strip() or None
    return NewNotification(title=text_field(args.get("title"), "title", TITLE_MAX_CHARS, required=True).strip(),
                           priority=priority, body=text_field(args.get("body"), "body", BODY_MAX_CHARS),
                           url=_url(args.get("url"), "url"), group_key=group_key, actions=_actions(args.get("actions")))


# -- the file -------------------------------------------------------------------------------------


def _parse(raw: Any) -> Notification:
    source = raw.get("source")
    # A store written before senders were recorded: a card without a source was the host's.
    sender = raw.get("sender") or (SESSION if isinstance(source, dict) else HOST)
    if sender not in SENDERS:
        raise ValueError(f"unknown sender {sender!r}")
    return Notification(
        id=str(raw["id"]), title=str(raw["title"]), priority=str(raw["priority"]), created=float(raw["created"]),
        body=str(raw.get("body") or ""), url=raw.get("url"), group_key=raw.get("group_key"),
        actions=tuple(Action(str(a["id"]), str(a["label"]), a.get("url")) for a in raw.get("actions") or ()),
        source=None if not isinstance(source, dict) else Source(str(source["kind"]), str(source["target_id"]),
                                                                source.get("agent")),
        sender=sender, read=bool(raw.get("read")),
        chosen=raw.get("chosen") if isinstance(raw.get("chosen"), dict) else None)


def _read() -> list[Notification]:
    try:
        document = read_json(store_file(), max_bytes=_MAX_STORE_BYTES).object_or_empty()
    except MalformedFileError as exc:
        raise MalformedFileError(store_file(), f"{exc.detail} (left as it is)",
                                 code="notifications_store_malformed") from exc
    raw = document.get("notifications", [])
    try:
        if not isinstance(raw, list):
            raise TypeError("notifications is not a list")
        return [_parse(item) for item in raw]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise MalformedFileError(store_file(), f"not a kirocrew notifications store ({exc}; left as it is)",
                                 code="notifications_store_malformed") from exc


def _write(items: list[Notification]) -> None:
    home.ensure_crew_home()
    store_file().parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_json_atomic(store_file(), {"version": 1, "notifications": [n.as_dict() for n in items]}, secret=True)


# -- operations (blocking file work: call them through asyncio.to_thread in the host) ---------------


def publish(new: NewNotification, source: Source | None, *, sender: str | None = None) -> Notification:
    """Store ``new`` as the newest from ``sender`` and apply the caps (see the module's text).

    ``sender`` defaults to :data:`SESSION` when ``source`` is given (``send_notification``) and
    to :data:`HOST` otherwise; kirocrew-cron passes :data:`CRON` with its run's conversation as
    ``source``. It replaces ``sender``'s own notification with the same ``group_key``. Its texts are
    redacted of secrets first (:func:`~kirocrew_core.redaction.redact_secrets`): a notification is
    shown on every page, and the store file must not hold a secret either.
    """
    if sender is None:
        sender = SESSION if source is not None else HOST
    if sender not in SENDERS or (sender == SESSION and source is None):
        raise ValueError(f"sender {sender!r} with source {source!r}")  # a programming error
    new = _redacted(new)
    note = Notification(id="n" + secrets.token_hex(8), title=new.title, priority=new.priority, created=time.time(),
                        body=new.body, url=new.url, group_key=new.group_key, actions=new.actions, source=source,
                        sender=sender)
    with named_lock(LOCK):
        items = _read()
        if note.group_key is not None:
            items = [n for n in items if not (n.group_key == note.group_key and n.publisher == note.publisher)]
        _write(_within_caps([note, *items]))
    return note


def _cap_of(publisher: str) -> int:
    return {HOST: MAX_FROM_HOST, CRON: MAX_FROM_CRON}.get(publisher, MAX_PER_SESSION)


def _within_caps(items: list[Notification]) -> list[Notification]:
    """``items`` (newest first) with each publisher's oldest past its cap dropped, then, while over the
    total, the oldest card of the session publisher that holds the most."""
    counts: Counter[str] = Counter()
    kept: list[Notification] = []
    for note in items:
        counts[note.publisher] += 1
        if counts[note.publisher] <= _cap_of(note.publisher):
            kept.append(note)
    while len(kept) > MAX_NOTIFICATIONS:
        held = Counter(note.publisher for note in kept if note.publisher not in (HOST, CRON))
        if not held:  # unreachable while MAX_FROM_HOST + MAX_FROM_CRON < MAX_NOTIFICATIONS
            break
        most = max(held.values())
        crowded = {who for who, count in held.items() if count == most}
        del kept[max(i for i, note in enumerate(kept) if note.publisher in crowded)]
    return kept


def _redacted(new: NewNotification) -> NewNotification:
    from kirocrew_core.redaction import redact_secrets

    return replace(new, title=redact_secrets(new.title), body=redact_secrets(new.body),
                   actions=tuple(replace(action, label=redact_secrets(action.label)) for action in new.actions))


def all_notifications() -> list[Notification]:
    """Every stored notification, newest first."""
    with named_lock(LOCK):
        return _read()


def unread_count() -> int:
    return sum(1 for n in all_notifications() if not n.read)


def _find(items: list[Notification], notification_id: str) -> int:
    if isinstance(notification_id, str) and _ID.match(notification_id):
        for index, note in enumerate(items):
            if note.id == notification_id:
                return index
    raise BadInputError(f"no notification {notification_id!r} (dismissed, or pushed out by newer ones)",
                        code="notification_not_found")


def mark_read(notification_id: str) -> Notification:
    with named_lock(LOCK):
        items = _read()
        index = _find(items, notification_id)
        if not items[index].read:
            items[index] = replace(items[index], read=True)
            _write(items)
        return items[index]


def dismiss(notification_id: str) -> Notification:
    """Remove it from the feed."""
    with named_lock(LOCK):
        items = _read()
        note = items.pop(_find(items, notification_id))
        _write(items)
        return note


def choose_action(notification_id: str, action_id: str) -> tuple[Notification, Action]:
    """Record that the owner picked ``action_id`` (and so read it); the last pick wins."""
    with named_lock(LOCK):
        items = _read()
        index = _find(items, notification_id)
        note = items[index]
        action = next((a for a in note.actions if a.id == action_id), None)
        if action is None:
            raise BadInputError(f"notification {notification_id} has no action {action_id!r}",
                                code="action_not_found")
        items[index] = replace(note, read=True, chosen={"id": action.id, "at": time.time()})
        _write(items)
        return items[index], action
