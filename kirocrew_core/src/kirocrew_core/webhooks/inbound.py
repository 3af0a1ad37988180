"""``POST /webhooks/{hook_id}``: the one gateway route third parties call.

It is exempt from the owner's dashboard authentication (:mod:`kirocrew_core.gateway.auth` lets a
``POST`` under :data:`~kirocrew_core.gateway.auth.WEBHOOK_PATH_PREFIX` through to it, the loopback
``Host`` guard still applies) and authenticates by the hook's own bearer token instead. In order:

1. ``Authorization: Bearer <hook token>``: a missing or wrong token, and an unknown or malformed
   hook id, all get the same 401 ``unauthorized``, so ids cannot be probed (a hooks store that
   cannot be read is 503 ``hooks_unavailable``, its details only in the host's log);
2. ``governance.hooks`` must be ``allow`` (403 ``governance_denied``, fail closed);
3. the body, read up to :data:`BODY_LIMIT` bytes (413 ``body_too_large``), must be a JSON object
   ``{"message": str, "name"?: str}`` (400 ``bad_json``, ``bad_request``, ``invalid_message``,
   ``invalid_name``); an ``Idempotency-Key`` header, when sent, must be short printable text
   (400 ``invalid_idempotency_key``);
4. a repeat of a delivery accepted in the last :data:`DEDUP_WINDOW_SECS` (the same
   ``Idempotency-Key``, or without one the same body) is answered 200 ``{"duplicate": true}`` with
   the first delivery's id, and nothing is queued again (409 ``delivery_in_progress`` while that
   first one is still being queued);
5. a per-hook token bucket (:data:`BURST` at once, then one every :data:`REFILL_SECS`) answers
   429 ``rate_limited`` with ``Retry-After`` when empty;
6. the delivery is queued (:func:`kirocrew_core.webhooks.delivery.deliver`), audited
   (``hooks.delivery``: hook, conversation, delivery id, size and body digest; never the token or
   the message) and counted, and only then answered 202 ``{"accepted": true, "delivery", "queued_as"}``.

An accepted delivery is never dropped: the 202 is sent after the run (or the notification) is in
its store, and a failure before that answers 500 ``delivery_failed`` and forgets the delivery, so a
retry is not taken for a duplicate. The bucket and the duplicate window are the host's memory (the
gateway app's state), not the store: a restart forgets them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError, KirocrewError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

log = logging.getLogger(__name__)

BODY_LIMIT = 64 * 1024
MESSAGE_MAX_CHARS = 20000
NAME_MAX_CHARS = 200
IDEMPOTENCY_KEY_MAX_CHARS = 200
DEDUP_WINDOW_SECS = 600.0
#: Deliveries a hook's duplicate window remembers; past it the oldest are forgotten first.
DEDUP_MAX_PER_HOOK = 1000
BURST = 20
REFILL_SECS = 3.0


@dataclass
class _Bucket:
    tokens: float
    at: float

    def take(self, now: float) -> float:
        """0 when a token was taken, else the seconds until one is there."""
        self.tokens = min(BURST, self.tokens + (now - self.at) / REFILL_SECS)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) * REFILL_SECS

    def give_back(self) -> None:
        self.tokens = min(BURST, self.tokens + 1)


@dataclass
class _Seen:
    delivery_id: str
    until: float
    pending: bool = True


@dataclass
class Inbox:
    """One gateway's memory of recent deliveries: each hook's bucket and duplicate window.

    Everything here runs on the event loop between awaits, so a check and its reservation are atomic.
    """

    buckets: dict[str, _Bucket] = field(default_factory=dict)
    seen: dict[str, OrderedDict[str, _Seen]] = field(default_factory=dict)

    def recall(self, hook_id: str, key: str, now: float) -> _Seen | None:
        window = self.seen.get(hook_id)
        if window is None:
            return None
        while window and next(iter(window.values())).until <= now:
            window.popitem(last=False)
        return window.get(key)

    def reserve(self, hook_id: str, key: str, delivery_id: str, now: float) -> _Seen:
        window = self.seen.setdefault(hook_id, OrderedDict())
        entry = window[key] = _Seen(delivery_id, now + DEDUP_WINDOW_SECS)
        while len(window) > DEDUP_MAX_PER_HOOK:
            window.popitem(last=False)
        return entry

    def forget(self, hook_id: str, key: str) -> None:
        self.seen.get(hook_id, OrderedDict()).pop(key, None)

    def take(self, hook_id: str, now: float) -> float:
        bucket = self.buckets.setdefault(hook_id, _Bucket(float(BURST), now))
        return bucket.take(now)

    def give_back(self, hook_id: str) -> None:
        bucket = self.buckets.get(hook_id)
        if bucket is not None:
            bucket.give_back()


def inbox_of(request: Request) -> Inbox:
    state = request.app.state
    inbox = getattr(state, "webhook_inbox", None)
    if inbox is None:
        inbox = state.webhook_inbox = Inbox()
    return inbox


def _answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    from starlette.responses import JSONResponse

    return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store", **(headers or {})})


def _refused(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return _answer(status, {"error": message, "code": code}, headers)


UNAUTHORIZED = "a valid hook token is required (Authorization: Bearer <token> from register_hook)"


def _bearer(request: Request) -> str | None:
    scheme, _, credential = request.headers.get("authorization", "").strip().partition(" ")
    return credential.strip() or None if scheme.lower() == "bearer" else None


def _encodable(text: str) -> bool:
    """False for a lone surrogate (``"\\ud800"`` is valid JSON, but no store can keep it as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _fields(body: dict[str, Any]) -> tuple[str, str | None]:
    """``(message, name)`` from the body, or :class:`BadInputError` naming the first problem."""
    unknown = sorted(set(body) - {"message", "name"})
    if unknown:
        raise BadInputError(f"unknown field {unknown[0][:40]!r}; a delivery is {{\"message\", \"name\"?}}",
                            code="bad_request")
    message = body.get("message")
    if (not isinstance(message, str) or not message.strip() or len(message) > MESSAGE_MAX_CHARS
            or not _encodable(message)):
        raise BadInputError(f"message must be a string of 1 to {MESSAGE_MAX_CHARS} characters",
                            code="invalid_message")
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > NAME_MAX_CHARS or not _encodable(name)
                             or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        raise BadInputError(f"name must be one line of at most {NAME_MAX_CHARS} characters", code="invalid_name")
    return message, (name.strip() or None) if name else None


def _idempotency_key(request: Request) -> str | None:
    value = request.headers.get("idempotency-key")
    if value is None:
        return None
    if not value or len(value) > IDEMPOTENCY_KEY_MAX_CHARS or not value.isprintable():
        raise BadInputError(f"Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX_CHARS} printable characters",
                            code="invalid_idempotency_key")
    return value


async def receive(request: Request) -> Response:
    """The route (module docstring)."""
    from kirocrew_core.gateway.body import read_body, decode_json
    from kirocrew_core.governance import capability_allowed
    from kirocrew_core.webhooks import store

    hook_id = str(request.path_params["hook_id"])
    try:
        hook = await asyncio.to_thread(store.authenticate, hook_id, _bearer(request))
    except KirocrewError as exc:  # a store the owner must repair; its path and details are not the caller's
        log.error("webhook deliveries refused: the hooks store cannot be read: %s", exc.message)
        return _refused(503, "hooks_unavailable", "webhooks are unavailable right now; retry later")
    if hook is None:
        return _refused(401, "unauthorized", UNAUTHORIZED, {"WWW-Authenticate": 'Bearer realm="kirocrew-webhook"'})
    if not await asyncio.to_thread(capability_allowed, "hooks"):
        await _audit("denied", hook, None, 0, "", code="governance_denied")
        return _refused(403, "governance_denied",
                        'webhook deliveries are blocked by governance policy (governance.hooks is not "allow")')
    try:
        raw = await read_body(request, limit=BODY_LIMIT)
        document = decode_json(raw)
        if not isinstance(document, dict):
            raise BadInputError("the request body is not a JSON object", code="bad_json")
        message, name = _fields(document)
        idempotency = _idempotency_key(request)
    except BadInputError as exc:
        return _refused(413 if exc.code == "body_too_large" else 400, exc.code, exc.message)

    digest = hashlib.sha256(raw).hexdigest()
    key = "key:" + idempotency if idempotency is not None else "body:" + digest
    inbox, now = inbox_of(request), time.monotonic()
    seen = inbox.recall(hook.hook_id, key, now)
    if seen is not None:
        if seen.pending:
            return _refused(409, "delivery_in_progress", "an identical delivery is being queued; retry shortly",
                            {"Retry-After": "1"})
        return _answer(200, {"accepted": True, "duplicate": True, "delivery": seen.delivery_id})
    wait = inbox.take(hook.hook_id, now)
    if wait > 0:
        return _refused(429, "rate_limited", f"too many deliveries to this hook; retry in {math.ceil(wait)} s",
                        {"Retry-After": str(math.ceil(wait))})

    delivery_id = "d" + secrets.token_hex(8)
    entry = inbox.reserve(hook.hook_id, key, delivery_id, now)
    try:
        delivered = await _queued(hook, delivery_id, message, name)
    except BaseException:
        inbox.forget(hook.hook_id, key)
        inbox.give_back(hook.hook_id)
        raise
    if delivered is None:
        inbox.forget(hook.hook_id, key)
        inbox.give_back(hook.hook_id)
        return _refused(500, "delivery_failed", "the delivery could not be queued; nothing was kept, retry later")
    entry.pending = False
    await _audit("ok", hook, delivered, len(raw), digest, delivery_id=delivery_id)
    await asyncio.to_thread(_count, hook.hook_id)
    return _answer(202, {"accepted": True, "duplicate": False, "delivery": delivery_id, "queued_as": delivered.via})


async def _queued(hook: Any, delivery_id: str, message: str, name: str | None) -> Any:
    """The :class:`~kirocrew_core.webhooks.delivery.Delivered`, or None when it could be kept nowhere."""
    from kirocrew_core.webhooks.delivery import deliver

    try:
        return await deliver(hook, delivery_id, message, name, time.time())
    except KirocrewError:
        log.exception("webhook %s: delivery %s could be kept nowhere", hook.hook_id, delivery_id)
        return None


def _count(hook_id: str) -> None:
    from kirocrew_core.webhooks import store

    try:
        store.record_delivery(hook_id, time.time())
    except KirocrewError as exc:  # the delivery is queued; only its counter is behind
        log.warning("webhook %s: its delivery count could not be saved: %s", hook_id, exc)


async def _audit(outcome: str, hook: Any, delivered: Any, size: int, digest: str, **fields: Any) -> None:
    """``hooks.delivery`` in the security event log: never the token, never the message."""
    from kirocrew_core import audit

    if delivered is not None:
        fields.update(queued_as=delivered.via, target=delivered.target)
    try:
        await asyncio.to_thread(audit.record, "hooks.delivery", actor="webhook", outcome=outcome,
                                hook_id=hook.hook_id, conversation_id=hook.conversation_id, bytes=size,
                                body_sha256=digest[:16], **fields)
    except Exception as exc:  # noqa: BLE001 - the delivery stands; `kirocrew audit verify` reports the SEL
        log.warning("could not record a webhook delivery in the security event log: %s", exc)
