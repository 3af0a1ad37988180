"""The hooks store: one owner-only JSON file in the crew state, every change read-modify-written under a lock.

``<crew home>/state/hooks/hooks.json`` (0600) holds each hook by id::

    {"version": 1, "hooks": {"<hook_id>": {"conversation_id", "agent", "context_summary", "token_sha256",
                                           "created", "rotated", "last_delivery", "deliveries"}}}

Why one lock around the whole read-modify-write: the original kept hooks in a file that a second
writer saved from a stale copy, erasing entries another process had just added. Here every change
takes the ``hooks`` lock (:mod:`kirocrew_core.locks`), reads the file fresh, changes one entry and
replaces the file atomically (:func:`kirocrew_core.jsonfile.write_json_atomic`), so concurrent
registrations from several processes all land. A file that cannot be read or parsed is reported
(``malformed_file``/``unreadable_file``) and never overwritten.

A hook's token is shown once, when it is registered (or rotated), and stored only as its SHA-256:
the token is 256 random bits, so a fast hash is as good as a slow one, and the file alone lets
nobody post. :func:`authenticate` compares in constant time and does the same work for an unknown
hook id as for a known one, so ids cannot be probed by timing either.

Bad input raises :class:`~kirocrew_core.errors.BadInputError` with a stable code and changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError, MalformedFileError
from kirocrew_core.jsonfile import read_json, write_json_atomic
from kirocrew_core.locks import named_lock

LOCK = "hooks"
VERSION = 1
HOOK_ID_MAX_CHARS = 500
#: Letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit: safe in a URL path and a log line.
HOOK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,499}$"
_HOOK_ID = re.compile(HOOK_ID_PATTERN)
CONTEXT_MAX_CHARS = 5000
#: One conversation keeps at most this many hooks; the store at most :data:`MAX_HOOKS`.
MAX_PER_CONVERSATION = 50
MAX_HOOKS = 1000
TOKEN_BYTES = 32
# What an unknown hook's token is compared with, so a miss costs what a hit does.
_NO_HASH = hashlib.sha256(b"kirocrew: no such hook").hexdigest()
_MAX_STORE_BYTES = 32 * 1024 * 1024


class HookNotFound(KirocrewError):
    """No hook has that id (the owner's commands and page; the webhook route answers 401 instead)."""

    code = "hook_not_found"
    exit_code = 2


@dataclass(frozen=True)
class Hook:
    """One registered hook: whose conversation it feeds, what its session left as context, its counters."""

    hook_id: str
    conversation_id: str
    context_summary: str
    token_sha256: str
    created: float
    agent: str | None = None
    rotated: float | None = None
    last_delivery: float | None = None
    deliveries: int = 0

    def view(self) -> dict[str, Any]:
        """What the owner sees: everything but the token's hash."""
        out = asdict(self)
        del out["token_sha256"]
        return out


def store_file() -> Path:
    return home.state_dir("hooks") / "hooks.json"


def check_hook_id(value: Any) -> str:
    """``value`` if it is a hook id (:data:`HOOK_ID_PATTERN`), else ``invalid_hook_id``."""
    if not isinstance(value, str) or not _HOOK_ID.match(value):
        raise BadInputError(f"hook_id must be 1 to {HOOK_ID_MAX_CHARS} letters, digits, '.', '_' or '-', starting "
                            "with a letter or digit", code="invalid_hook_id")
    return value


def check_context(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > CONTEXT_MAX_CHARS:
        raise BadInputError(f"context_summary must be 1 to {CONTEXT_MAX_CHARS} characters", code="invalid_context")
    return value


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


# -- the file -------------------------------------------------------------------------------------


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _parse(hook_id: str, raw: Any) -> Hook:
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    return Hook(hook_id=check_hook_id(hook_id), conversation_id=str(raw["conversation_id"]),
                context_summary=str(raw["context_summary"]), token_sha256=str(raw["token_sha256"]),
                created=float(raw["created"]), agent=None if raw.get("agent") is None else str(raw["agent"]),
                rotated=_optional_float(raw.get("rotated")), last_delivery=_optional_float(raw.get("last_delivery")),
                deliveries=int(raw.get("deliveries", 0)))


def _read() -> dict[str, Hook]:
    path = store_file()
    document = read_json(path, max_bytes=_MAX_STORE_BYTES).object_or_empty()
    if not document:
        return {}
    hooks = document.get("hooks")
    if document.get("version") != VERSION or not isinstance(hooks, dict):
        raise MalformedFileError(path, f"expected {{\"version\": {VERSION}, \"hooks\": {{...}}}}")
    try:
        return {hook_id: _parse(hook_id, raw) for hook_id, raw in hooks.items()}
    except (KeyError, TypeError, ValueError, BadInputError) as exc:
        raise MalformedFileError(path, f"a hook entry is malformed: {exc}") from None


def _write(hooks: dict[str, Hook]) -> None:
    document = {"version": VERSION, "hooks": {h.hook_id: {k: v for k, v in asdict(h).items() if k != "hook_id"}
                                              for h in hooks.values()}}
    write_json_atomic(store_file(), document, secret=True)


# -- changes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Registered:
    """A registration's outcome: the hook, its token (the only time it is known), and whether it replaced one."""

    hook: Hook
    token: str
    rotated: bool


def register(hook_id: str, conversation_id: str, context_summary: str, *, agent: str | None = None) -> Registered:
    """Register ``hook_id`` for ``conversation_id`` with a fresh token; the same conversation again rotates it.

    Another conversation's hook id is refused ``hook_taken`` (it cannot be taken over); past the caps,
    ``too_many_hooks``. Blocking file I/O under the ``hooks`` lock.
    """
    check_hook_id(hook_id)
    check_context(context_summary)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    now = time.time()
    with named_lock(LOCK):
        hooks = _read()
        existing = hooks.get(hook_id)
        if existing is not None and existing.conversation_id != conversation_id:
            raise BadInputError(f"hook {hook_id!r} belongs to another conversation; choose another hook_id",
                                code="hook_taken")
        if existing is None:
            mine = sum(1 for h in hooks.values() if h.conversation_id == conversation_id)
            if mine >= MAX_PER_CONVERSATION or len(hooks) >= MAX_HOOKS:
                raise BadInputError(f"a conversation keeps at most {MAX_PER_CONVERSATION} hooks and the owner "
                                    f"{MAX_HOOKS}; ask the owner to revoke some (`kirocrew hooks revoke`)",
                                    code="too_many_hooks")
            hook = Hook(hook_id, conversation_id, context_summary, token_hash(token), now, agent=agent)
        else:
            hook = replace(existing, context_summary=context_summary, token_sha256=token_hash(token), rotated=now,
                           agent=agent or existing.agent)
        hooks[hook_id] = hook
        _write(hooks)
    return Registered(hook, token, existing is not None)


def revoke(hook_id: str) -> Hook:
    """Remove ``hook_id``; its token is refused from now on. ``hook_not_found`` when there is none."""
    with named_lock(LOCK):
        hooks = _read()
        hook = hooks.pop(hook_id, None)
        if hook is None:
            raise HookNotFound(f"no hook {hook_id[:HOOK_ID_MAX_CHARS]!r}")
        _write(hooks)
    return hook


def record_delivery(hook_id: str, at: float) -> Hook | None:
    """Count one accepted delivery of ``hook_id`` (None when it was revoked meanwhile)."""
    with named_lock(LOCK):
        hooks = _read()
        hook = hooks.get(hook_id)
        if hook is None:
            return None
        hooks[hook_id] = hook = replace(hook, last_delivery=at, deliveries=hook.deliveries + 1)
        _write(hooks)
    return hook


# -- reads ----------------------------------------------------------------------------------------


def all_hooks() -> list[Hook]:
    """Every hook, newest first."""
    return sorted(_read().values(), key=lambda h: h.created, reverse=True)


def get(hook_id: str) -> Hook:
    hook = _read().get(hook_id)
    if hook is None:
        raise HookNotFound(f"no hook {hook_id[:HOOK_ID_MAX_CHARS]!r}")
    return hook


def authenticate(hook_id: str, token: str | None) -> Hook | None:
    """The hook when ``token`` is its token, else None; the same work whether or not the hook exists."""
    hook = _read().get(hook_id) if _HOOK_ID.match(hook_id) else None
    expected = hook.token_sha256 if hook is not None else _NO_HASH
    given = token_hash(token) if token else ""
    matches = hmac.compare_digest(given.encode("ascii"), expected.encode("ascii"))
    return hook if matches and hook is not None and token else None
