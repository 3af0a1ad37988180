"""SEL, the security event log: append-only JSONL whose records are HMAC-chained.

Each line is one record::

    {"seq": n, "ts": RFC 3339 UTC, "event": ..., "actor": ..., "outcome": ...,
     "fields": {...}, "prev": <previous record's mac, "" for the first>,
     "mac": HMAC-SHA256(key, prev + canonical JSON of the record without "mac")}

Chaining each MAC to the one before makes an edited, inserted or deleted record
(and a lost head) detectable by :func:`verify`; dropping records from the *end*
is not, since the chain has no outside anchor. The key is 32 random bytes only
the owner can read, so someone who can read the log cannot forge a record.

Appends take the ``audit`` lock (last in :data:`kirocrew_core.locks.LOCK_ORDER`,
so any code may log while holding another lock), read the previous record from
the file's tail without parsing the rest, and write the line with one
``os.write`` on an ``O_APPEND`` descriptor followed by ``fsync``. That is
blocking I/O: a coroutine calls :func:`record` through ``asyncio.to_thread``.

Secrets never reach the log: values under secret-looking keys (token, password,
cookie, ...) are replaced with ``"[redacted]"``, at any depth, before anything
is written.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError, MalformedFileError, UnreadableFileError
from kirocrew_core.locks import named_lock

KEY_BYTES = 32
KEY_FILE_MODE = 0o600
LOG_FILE_MODE = 0o600
AUDIT_DIR_MODE = 0o700
#: The largest record line (JSON plus newline) :func:`record` writes.
MAX_RECORD_BYTES = 8 * 1024
REDACTED = "[redacted]"

EVENT_NAME = re.compile(r"^[a-z][a-z0-9_.]{0,63}$")
MAX_ACTOR_CHARS = 256
_MAX_DEPTH = 16
# A line this long is not one of ours; reading it whole would only cost memory.
_MAX_SCAN_BYTES = 1024 * 1024
_MAC_HEX = re.compile(r"^[0-9a-f]{64}$")
_RECORD_KEYS = frozenset({"seq", "ts", "event", "actor", "outcome", "fields", "prev", "mac"})
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

# Substrings of a normalised key (lower case, "-" and " " as "_") whose value is a secret.
_SECRET_KEY_PARTS = (
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "authorization",
    "cookie",
    "api_key",
    "apikey",
    "code_verifier",
    "refresh",
    "credential",
    "private_key",
    "access_key",
    "bearer",
)
_SECRET_VALUE = re.compile(r"^\s*(bearer|basic)\s+\S", re.IGNORECASE)

#: Why :func:`verify` stopped, by reason code.
BREAK_REASONS = {
    "bad_json": "the line is not valid JSON",
    "bad_record": "the line is JSON but not a SEL record",
    "truncated": "the last line has no newline: a write was cut short or the file was truncated",
    "seq_gap": "the sequence number is not the next one: a record was deleted or inserted",
    "prev_mismatch": "the record does not chain to the one before it",
    "mac_mismatch": "the record's MAC does not match its content: it was edited",
}


# -- fields -----------------------------------------------------------------


def _is_secret_key(key: str) -> bool:
    normal = key.lower().replace("-", "_").replace(" ", "_")
    return any(part in normal for part in _SECRET_KEY_PARTS)


def _clean(value: Any, where: str, depth: int = 0) -> Any:
    """A JSON-safe copy of ``value`` with secrets redacted; bad input raises."""
    if depth > _MAX_DEPTH:
        raise BadInputError(f"audit field {where} is nested too deeply", code="audit_field_invalid")
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadInputError(f"audit field {where} is not a finite number", code="audit_field_invalid")
        return value
    if isinstance(value, str):
        return REDACTED if _SECRET_VALUE.match(value) else value
    if isinstance(value, (list, tuple)):
        return [_clean(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        cleaned: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise BadInputError(
                    f"audit field {where} has a non-string key {key!r}", code="audit_field_invalid"
                )
            cleaned[key] = _clean_item(key, item, f"{where}.{key}", depth + 1)
        return cleaned
    raise BadInputError(
        f"audit field {where} is a {type(value).__name__}; only JSON values can be logged",
        code="audit_field_invalid",
    )


def _clean_item(key: str, value: Any, where: str, depth: int) -> Any:
    # A bool or null cannot carry a secret, and "token_present": true is the kind
    # of fact the SEL exists to record.
    if _is_secret_key(key) and not (value is None or isinstance(value, bool)):
        return REDACTED
    return _clean(value, where, depth)


def _canonical(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _mac(key: bytes, prev: str, body: dict[str, Any]) -> str:
    return hmac.new(key, prev.encode("ascii") + _canonical(body), hashlib.sha256).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- files ------------------------------------------------------------------


def _ensure_audit_dir() -> Path:
    home.ensure_crew_home()
    directory = home.audit_log_file().parent
    directory.mkdir(mode=AUDIT_DIR_MODE, exist_ok=True)
    if (directory.stat().st_mode & 0o777) != AUDIT_DIR_MODE:
        os.chmod(directory, AUDIT_DIR_MODE)
    return directory


def _owned_by_someone_else(st: os.stat_result) -> bool:
    return hasattr(os, "geteuid") and st.st_uid != os.geteuid()


def _load_key(*, create: bool) -> bytes:
    """The HMAC key; created when ``create`` and absent (callers hold the audit lock)."""
    path = home.audit_key_file()
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        if not create:
            raise KirocrewError(
                f"{path}: the SEL key is missing, so the log cannot be verified or extended",
                code="audit_key_missing",
            ) from None
        return _create_key(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise KirocrewError(
                f"{path}: the SEL key is a symlink; refusing it", code="audit_key_insecure"
            ) from None
        raise UnreadableFileError(f"{path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or _owned_by_someone_else(st) or st.st_mode & 0o077:
            raise KirocrewError(
                f"{path}: the SEL key must be a regular file you own with mode 0600 "
                f"(found {stat.S_IMODE(st.st_mode):04o}); fix it with `chmod 600 {path}`",
                code="audit_key_insecure",
            )
        key = fh.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise KirocrewError(
            f"{path}: expected a {KEY_BYTES}-byte key, found {len(key)} bytes", code="audit_key_invalid"
        )
    return key


def _create_key(path: Path) -> bytes:
    key = secrets.token_bytes(KEY_BYTES)
    try:
        # O_EXCL: of two processes creating the key, exactly one wins; the other reads it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, KEY_FILE_MODE)
    except FileExistsError:
        return _load_key(create=False)
    try:
        _write_all(fd, key)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return key


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    if written != len(data):
        raise KirocrewError(f"short write ({written} of {len(data)} bytes)", code="audit_write_failed")


def _open_log_for_append(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW, LOG_FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise KirocrewError(
                f"{path}: the SEL is a symlink; refusing it", code="audit_log_insecure"
            ) from None
        raise KirocrewError(
            f"{path}: cannot open the SEL: {exc.strerror or exc}", code="audit_unavailable"
        ) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or _owned_by_someone_else(st):
        os.close(fd)
        raise KirocrewError(f"{path}: the SEL must be a regular file you own", code="audit_log_insecure")
    if st.st_mode & 0o077:
        os.fchmod(fd, LOG_FILE_MODE)  # our own file, only ever tightened
    return fd


class _LineTooLong(Exception):
    pass


def _segments_backwards(fd: int, size: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    """The file's first ``size`` bytes split on newlines, last segment first.

    The first segment is what follows the last newline: ``b""`` when the file
    ends with one, otherwise a torn (unterminated) line.
    """
    pending = b""
    pos = size
    while pos > 0:
        step = min(chunk, pos)
        pos -= step
        os.lseek(fd, pos, os.SEEK_SET)
        data = os.read(fd, step) + pending
        parts = data.split(b"\n")
        pending = parts[0]
        if len(pending) > _MAX_SCAN_BYTES:
            raise _LineTooLong
        yield from reversed(parts[1:])
    yield pending


@dataclass(frozen=True)
class _Anchor:
    seq: int
    mac: str


def _read_anchor(fd: int, path: Path) -> tuple[_Anchor | None, bool]:
    """The last complete record (None for an empty log) and whether a torn line follows it."""
    size = os.fstat(fd).st_size
    if size == 0:
        return None, False
    try:
        segments = _segments_backwards(fd, size)
        fragment = next(segments)
        last = next(segments, None)
        torn = fragment != b""
        if last is None:
            return None, torn
        document = json.loads(last.decode("utf-8"))
        seq, mac = document["seq"], document["mac"]
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1 or not _MAC_HEX.match(mac):
            raise ValueError
    except (_LineTooLong, ValueError, TypeError, KeyError, RecursionError):
        raise KirocrewError(
            f"{path}: the last record is not a valid SEL record, so a new one cannot be chained "
            "to it; run `kirocrew audit verify`",
            code="audit_log_broken",
        ) from None
    return _Anchor(seq, mac), torn


def _snapshot_size(fh: Any) -> int:
    """The log's size at a moment no append is in flight, so its last line is whole."""
    with named_lock("audit"):
        return os.fstat(fh.fileno()).st_size


# -- the API ----------------------------------------------------------------


def record(event: str, *, actor: str = "system", outcome: str = "ok", **fields: Any) -> dict[str, Any]:
    """Append one security event to the SEL and return the record written.

    ``event`` and ``outcome`` are lower-case dotted words (``connections.mint``,
    ``ok``, ``denied``); ``actor`` says who acted (``owner``, a session key).
    ``fields`` are JSON values; a value under a secret-looking key, or a string
    that looks like an ``Authorization`` value, becomes ``"[redacted]"``.
    Raises :class:`BadInputError` (``audit_event_invalid``, ``audit_field_invalid``,
    ``audit_record_too_large``) before anything is written, and
    :class:`KirocrewError` when the key or log cannot be used safely.
    """
    if not isinstance(event, str) or not EVENT_NAME.match(event):
        raise BadInputError(
            f"audit event name {event!r} must match {EVENT_NAME.pattern}", code="audit_event_invalid"
        )
    if not isinstance(outcome, str) or not EVENT_NAME.match(outcome):
        raise BadInputError(
            f"audit outcome {outcome!r} must match {EVENT_NAME.pattern}", code="audit_event_invalid"
        )
    if not isinstance(actor, str) or not actor or len(actor) > MAX_ACTOR_CHARS:
        raise BadInputError(
            f"audit actor must be a non-empty string of at most {MAX_ACTOR_CHARS} characters",
            code="audit_event_invalid",
        )
    clean_fields = _clean(fields, "fields")
    body: dict[str, Any] = {
        "seq": 0,
        "ts": _now(),
        "event": event,
        "actor": actor,
        "outcome": outcome,
        "fields": clean_fields,
        "prev": "",
    }
    # Sized with the widest seq/prev/mac it could get, so the check needs no lock.
    widest = {**body, "seq": 10**15, "prev": "0" * 64, "mac": "0" * 64}
    if len(_canonical(widest)) + 1 > MAX_RECORD_BYTES:
        raise BadInputError(
            f"audit record for {event!r} is larger than {MAX_RECORD_BYTES} bytes; log less",
            code="audit_record_too_large",
        )

    _ensure_audit_dir()
    path = home.audit_log_file()
    with named_lock("audit"):
        fd = _open_log_for_append(path)
        try:
            anchor, torn = _read_anchor(fd, path)
            # Records already chained to an absent key must not silently restart
            # under a new one: that is what deleting the key to hide an edit looks like.
            key = _load_key(create=anchor is None)
            body["seq"] = 1 if anchor is None else anchor.seq + 1
            body["prev"] = "" if anchor is None else anchor.mac
            written = {**body, "mac": _mac(key, body["prev"], body)}
            # A torn line (a crash mid-write) is sealed with a newline and left in
            # place as evidence; the new record chains to the last whole one.
            _write_all(fd, (b"\n" if torn else b"") + _canonical(written) + b"\n")
            os.fsync(fd)
            return written
        finally:
            os.close(fd)


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found. ``reason`` is empty when every record verified."""

    path: Path
    exists: bool
    verified: int
    reason: str = ""
    line: int | None = None
    seq: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "exists": self.exists,
            "ok": self.ok,
            "verified": self.verified,
            "reason": self.reason or None,
            "line": self.line,
            "seq": self.seq,
            "detail": self.detail or None,
        }


def _record_shape_ok(document: Any) -> bool:
    return (
        isinstance(document, dict)
        and set(document) == _RECORD_KEYS
        and isinstance(document["seq"], int)
        and not isinstance(document["seq"], bool)
        and all(isinstance(document[k], str) for k in ("ts", "event", "actor", "outcome", "prev", "mac"))
        and isinstance(document["fields"], dict)
    )


def verify(path: str | os.PathLike[str] | None = None) -> VerifyReport:
    """Walk every record of the SEL and report the first one that breaks the chain.

    The key is always the current crew home's. An absent or empty log verifies
    with 0 records. Raises ``audit_key_missing``
    (or another key error) when the log has records but the key cannot be used,
    and :class:`UnreadableFileError` when the log cannot be read.
    """
    log = Path(path) if path is not None else home.audit_log_file()
    try:
        fh = open(log, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return VerifyReport(log, exists=False, verified=0)
    except OSError as exc:
        raise UnreadableFileError(f"{log}: {exc.strerror or exc}") from None
    with fh:
        size = _snapshot_size(fh)
        key: bytes | None = None
        prev, offset, verified = "", 0, 0

        def broken(reason: str, line: int, seq: int | None, detail: str = "") -> VerifyReport:
            return VerifyReport(log, True, verified, reason, line, seq, detail or BREAK_REASONS[reason])

        for number, raw in enumerate(fh, start=1):
            if offset >= size:
                break  # appended after the snapshot
            raw = raw[: size - offset]
            offset += len(raw)
            if not raw.endswith(b"\n"):
                return broken("truncated", number, None)
            try:
                document = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                return broken("bad_json", number, None, f"{BREAK_REASONS['bad_json']}: {exc}")
            if not _record_shape_ok(document):
                seq_seen = document.get("seq") if isinstance(document, dict) else None
                return broken("bad_record", number, seq_seen if type(seq_seen) is int else None)
            seq = document["seq"]
            if seq != verified + 1:
                return broken("seq_gap", number, seq, f"expected seq {verified + 1}, found {seq}")
            if document["prev"] != prev:
                return broken("prev_mismatch", number, seq)
            if key is None:
                key = _load_key(create=False)
            body = {k: v for k, v in document.items() if k != "mac"}
            if not hmac.compare_digest(_mac(key, prev, body), document["mac"]):
                return broken("mac_mismatch", number, seq)
            prev = document["mac"]
            verified += 1
    return VerifyReport(log, exists=True, verified=verified)


def tail(n: int = 20, path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The last ``n`` records, oldest first, parsed but not verified.

    A line that is not a JSON object (a torn write, a hand edit) is returned as
    ``{"malformed": <its text>}`` so a viewer can say so instead of hiding it.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise BadInputError(f"tail count must be a non-negative integer, not {n!r}", code="bad_input")
    log = Path(path) if path is not None else home.audit_log_file()
    if n == 0:
        return []
    try:
        fh = open(log, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UnreadableFileError(f"{log}: {exc.strerror or exc}") from None
    lines: list[bytes] = []
    with fh:
        size = _snapshot_size(fh)
        segments = _segments_backwards(fh.fileno(), size)
        try:
            fragment = next(segments)
            if fragment:
                lines.append(fragment)
            for segment in segments:
                if len(lines) >= n:
                    break
                lines.append(segment)
        except _LineTooLong:
            raise MalformedFileError(log, f"a line is longer than {_MAX_SCAN_BYTES} bytes") from None
    return [_parse_for_view(raw) for raw in reversed(lines)]


def _parse_for_view(raw: bytes) -> dict[str, Any]:
    text = raw.decode("utf-8", errors="replace")
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return {"malformed": text}
    return document if isinstance(document, dict) else {"malformed": text}
