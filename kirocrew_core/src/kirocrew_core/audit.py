"""SEL, the security event log: append-only JSONL whose records are HMAC-chained.

Each line is one record::

    {"seq": n, "ts": RFC 3339 UTC, "event": ..., "actor": ..., "outcome": ...,
     "fields": {...}, "prev": <previous record's mac, "" for the first>,
     "mac": HMAC-SHA256(key, prev + canonical JSON of the record without "mac")}

Chaining each MAC to the one before makes an edited, inserted or deleted record
(and a lost head) detectable by :func:`verify`. The chain alone cannot see its
*end* cut off, so every append also rewrites the **head anchor**, ``sel.head``
beside the key (owner-only, replaced atomically): the newest record's ``seq``
and ``mac``, MAC'd with the same key. :func:`verify` then reports a log that
stops short of the anchor (``tail_truncated``), is empty (``log_emptied``) or
gone (``log_missing``), and an anchor that is gone (``anchor_missing``: the
key shows records were written), forged (``anchor_invalid``) or names another
record (``anchor_mismatch``). The key is 32 random bytes only the owner can
read, so someone who can read the log cannot forge a record or an anchor.

Appends take the ``audit`` lock (last in :data:`kirocrew_core.locks.LOCK_ORDER`,
so any code may log while holding another lock), read the previous record from
the file's tail without parsing the rest, write the line with one ``os.write``
on an ``O_APPEND`` descriptor followed by ``fsync``, then replace the anchor,
all under that lock. The log is written first: a crash between the two leaves
the log one valid record ahead of its anchor, which only the key holder could
have produced, so :func:`verify` accepts it and the next append catches the
anchor up. The other order would make a crash look like a removed record.

An anchor is never created over records that already exist: with the key
present and the anchor gone, appends go on chaining but leave the anchor
missing, so deleting the log and the anchor together cannot pass for a fresh
install. After a truncation, appends continue the *anchored* chain (the next
``seq`` after the anchor), so the gap stays visible as a ``seq_gap`` instead of
being re-anchored away. (A crash between creating the key and writing the
very first anchor therefore reads as ``anchor_missing`` too: a window of one
write, on first use only.) An anchor that cannot be replaced raises
``audit_anchor_failed`` after the record is durable. All of this is blocking
I/O: a coroutine calls :func:`record` through ``asyncio.to_thread``.

Secrets never reach the log: values under secret-looking keys (token, password,
cookie, ...: :func:`kirocrew_core.redaction.is_secret_name`) are replaced with
``"[redacted]"``, at any depth, before anything is written.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError, MalformedFileError, UnreadableFileError
from kirocrew_core.jsonfile import ReadState, read_json, write_json_atomic
from kirocrew_core.locks import named_lock
from kirocrew_core.redaction import is_secret_name

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
_ANCHOR_KEYS = frozenset({"seq", "mac", "anchor_mac"})
# Domain separation: an anchor's MAC can never be mistaken for a record's.
_ANCHOR_DOMAIN = b"kirocrew-sel-head\0"
_MAX_ANCHOR_BYTES = 4096
# How far back an append looks for the anchored record when the log ran ahead of
# its anchor (each earlier anchor update failed); beyond it the anchor is left for verify.
_ANCHOR_CATCH_UP_LINES = 1024
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

_SECRET_VALUE = re.compile(r"^\s*(bearer|basic)\s+\S", re.IGNORECASE)

#: Why :func:`verify` stopped, by reason code.
BREAK_REASONS = {
    "bad_json": "the line is not valid JSON",
    "bad_record": "the line is JSON but not a SEL record",
    "truncated": "the last line has no newline: a write was cut short or the file was truncated",
    "seq_gap": "the sequence number is not the next one: a record was deleted or inserted",
    "prev_mismatch": "the record does not chain to the one before it",
    "mac_mismatch": "the record's MAC does not match its content: it was edited",
    "tail_truncated": "the log ends before the record its head anchor names: its newest records were removed",
    "log_emptied": "the log is empty, but its head anchor says records were written",
    "log_missing": "the log is gone, but records were written (its head anchor or key remains)",
    "anchor_missing": "the head anchor is gone although the key exists, so the log's end cannot be vouched for",
    "anchor_invalid": "the head anchor is not one kirocrew wrote: malformed, a symlink, or its MAC does not match",
    "anchor_mismatch": "the log's record at the anchored sequence number is not the one the anchor names",
}


# -- fields -----------------------------------------------------------------


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
    if is_secret_name(key) and not (value is None or isinstance(value, bool)):
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


def _untouched() -> bool:
    """Neither a key nor an anchor exists: only then may a key be created (with no records either)."""
    return not os.path.lexists(home.audit_anchor_file()) and not os.path.lexists(home.audit_key_file())


def derived_key(purpose: bytes) -> bytes | None:
    """HMAC-SHA256(SEL key, ``purpose``): a subkey for another owner-only signature, or None.

    The SEL key never leaves this module; a caller gets a key bound to its purpose (a
    ``b"<owner>.<what>.v1"`` label). Nothing is created
    here: the key comes into being with the log's first record (:func:`record`), so a caller
    that needs it logs first. A key that is missing, insecure or malformed gives None, and
    the caller must then fail closed.
    """
    try:
        key = _load_key(create=False)
    except (KirocrewError, OSError):
        return None
    return hmac.new(key, purpose, hashlib.sha256).digest()


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
class _Link:
    """A record's place in the chain: its ``seq``, its ``mac`` and (for a log record) its ``prev``."""

    seq: int
    mac: str
    prev: str = ""


def _link_of(document: Any) -> _Link:
    """The link of a parsed record line; ValueError/TypeError/KeyError when it is not one."""
    seq, mac, prev = document["seq"], document["mac"], document["prev"]
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1 or not _MAC_HEX.match(mac):
        raise ValueError
    if not isinstance(prev, str):
        raise TypeError
    return _Link(seq, mac, prev)


def _read_last(fd: int, path: Path) -> tuple[_Link | None, bool]:
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
        link = _link_of(json.loads(last.decode("utf-8")))
    except (_LineTooLong, ValueError, TypeError, KeyError, RecursionError):
        raise KirocrewError(
            f"{path}: the last record is not a valid SEL record, so a new one cannot be chained "
            "to it; run `kirocrew audit verify`",
            code="audit_log_broken",
        ) from None
    return link, torn


def _logged_at(fd: int, size: int, seq: int) -> str | None:
    """The MAC of the record with ``seq`` among the log's newest lines; None when not found."""
    try:
        for count, segment in enumerate(_segments_backwards(fd, size)):
            if count > _ANCHOR_CATCH_UP_LINES:
                return None
            if not segment:
                continue
            link = _link_of(json.loads(segment.decode("utf-8")))
            if link.seq == seq:
                return link.mac
            if link.seq < seq:
                return None
    except (_LineTooLong, ValueError, TypeError, KeyError, RecursionError):
        return None
    return None


# -- the head anchor ----------------------------------------------------------


def anchor_mac(key: bytes, seq: int, mac: str) -> str:
    """The MAC an anchor naming record ``seq`` (whose MAC is ``mac``) carries."""
    return hmac.new(key, _ANCHOR_DOMAIN + _canonical({"mac": mac, "seq": seq}), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class _AnchorRead:
    """The head anchor file: absent, a valid ``link``, or ``problem`` saying why it is not usable."""

    present: bool
    link: _Link | None = None
    problem: str = ""


def _read_head_anchor(key_for: Callable[[], bytes]) -> _AnchorRead:
    """Read and check the anchor; ``key_for()`` loads the key only when there is an anchor to check."""
    path = home.audit_anchor_file()
    if os.path.islink(path):  # refused like a symlinked key: the anchor is ours, in an owner-only folder
        return _AnchorRead(True, problem="it is a symlink")
    read = read_json(path, max_bytes=_MAX_ANCHOR_BYTES)
    if read.state is ReadState.ABSENT and not os.path.lexists(path):
        return _AnchorRead(False)
    if read.state is not ReadState.DOCUMENT:
        return _AnchorRead(True, problem=f"{read.state.value}: {read.error or 'no document'}")
    document = read.document
    if not (isinstance(document, dict) and set(document) == _ANCHOR_KEYS
            and type(document["seq"]) is int and document["seq"] >= 1
            and all(isinstance(document[k], str) and _MAC_HEX.match(document[k]) for k in ("mac", "anchor_mac"))):
        return _AnchorRead(True, problem="not a head anchor")
    expected = anchor_mac(key_for(), document["seq"], document["mac"])
    if not hmac.compare_digest(expected, document["anchor_mac"]):
        return _AnchorRead(True, problem="its MAC does not match")
    return _AnchorRead(True, _Link(document["seq"], document["mac"]))


def _write_head_anchor(key: bytes, link: _Link) -> None:
    document = {"seq": link.seq, "mac": link.mac, "anchor_mac": anchor_mac(key, link.seq, link.mac)}
    try:
        write_json_atomic(home.audit_anchor_file(), document, secret=True)
    except OSError as exc:
        raise KirocrewError(
            f"record {link.seq} was written to the SEL, but its head anchor could not be updated "
            f"({exc.strerror or exc}); the next record catches it up",
            code="audit_anchor_failed",
        ) from None


def _chain_point(
    fd: int, last: _Link | None, anchor: _AnchorRead, *, genesis: bool
) -> tuple[_Link | None, bool]:
    """Which record the next one chains to, and whether the anchor may then be moved to it.

    The anchor only ever moves forward along the chain it names: it is never
    created over existing records and never rewritten when it is forged or
    names another chain, so what :func:`verify` would report stays reported.
    """
    if genesis:
        return None, True
    if anchor.link is None:
        return last, False
    head = anchor.link
    if last is None or last.seq < head.seq:
        return head, True  # the tail was removed: go on from the anchored record, leaving the gap
    if last.seq == head.seq:
        return last, hmac.compare_digest(last.mac, head.mac)
    if last.seq == head.seq + 1:
        return last, hmac.compare_digest(last.prev, head.mac)  # an append whose anchor update was cut short
    logged = _logged_at(fd, os.fstat(fd).st_size, head.seq)
    return last, logged is not None and hmac.compare_digest(logged, head.mac)


def _snapshot(fh: Any, anchored: bool) -> tuple[int, _AnchorRead | None, bool]:
    """The log's size, its anchor and whether the key exists, at a moment no append is in flight."""
    with named_lock("audit"):
        size = os.fstat(fh.fileno()).st_size if fh is not None else 0
        if not anchored:
            return size, None, False
        return size, _read_head_anchor(lambda: _load_key(create=False)), home.audit_key_file().exists()


def _snapshot_size(fh: Any) -> int:
    """The log's size at a moment no append is in flight, so its last line is whole."""
    return _snapshot(fh, anchored=False)[0]


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
    return record_many([(event, actor, outcome, fields)])[0]


def record_many(entries: list[tuple[str, str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Append several events ``(event, actor, outcome, fields)`` in order, under one lock and one fsync.

    Each record is checked and chained exactly as :func:`record` does it; nothing is written
    unless every one of them checks. For writers of many records at once (the permission
    gate records every decision): one sync instead of one per record.
    """
    bodies = [_checked_body(event, actor, outcome, fields) for event, actor, outcome, fields in entries]
    if not bodies:
        return []
    _ensure_audit_dir()
    path = home.audit_log_file()
    written: list[dict[str, Any]] = []
    with named_lock("audit"):
        fd = _open_log_for_append(path)
        try:
            last, torn = _read_last(fd, path)
            # Only a crew home that never logged starts a chain (and its key, and its
            # anchor). Records or an anchor already chained to an absent key must not
            # restart under a new one: that is what deleting the key to hide an edit looks like.
            genesis = last is None and _untouched()
            key = _load_key(create=genesis)
            anchor = _read_head_anchor(lambda: key)
            chain_to, move_anchor = _chain_point(fd, last, anchor, genesis=genesis)
            lines: list[bytes] = []
            for body in bodies:
                body["seq"] = 1 if chain_to is None else chain_to.seq + 1
                body["prev"] = "" if chain_to is None else chain_to.mac
                record_written = {**body, "mac": _mac(key, body["prev"], body)}
                written.append(record_written)
                lines.append(_canonical(record_written) + b"\n")
                chain_to = _Link(record_written["seq"], record_written["mac"])
            # A torn line (a crash mid-write) is sealed with a newline and left in
            # place as evidence; the new records chain to the last whole one.
            _write_all(fd, (b"\n" if torn else b"") + b"".join(lines))
            os.fsync(fd)
            if move_anchor:
                _write_head_anchor(key, _Link(written[-1]["seq"], written[-1]["mac"]))
            return written
        finally:
            os.close(fd)


def _checked_body(event: str, actor: str, outcome: str, fields: dict[str, Any]) -> dict[str, Any]:
    """One record's body, checked and with its fields cleaned (seq, prev and mac are set when it is chained)."""
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
    return body


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found. ``reason`` is empty when every record verified.

    ``anchored`` is the seq the head anchor names (None without one); on an ok
    report it is ``verified`` or, right after an interrupted append, one less.
    """

    path: Path
    exists: bool
    verified: int
    reason: str = ""
    line: int | None = None
    seq: int | None = None
    detail: str = ""
    anchored: int | None = None

    @property
    def ok(self) -> bool:
        return not self.reason

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "exists": self.exists,
            "ok": self.ok,
            "verified": self.verified,
            "anchored": self.anchored,
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
    """Walk every record of the SEL, report the first one that breaks the chain, then check the end.

    The key is always the current crew home's. The log's end is checked
    against the head anchor when ``path`` is the crew home's own log (a copy
    elsewhere gets the chain check only): see the module docstring for the
    reasons. First use (no log, no anchor, no key) verifies with 0 records.
    Raises ``audit_key_missing`` (or another key error) when there are records
    or an anchor but the key cannot be used, and :class:`UnreadableFileError`
    when the log cannot be read.
    """
    log = Path(path) if path is not None else home.audit_log_file()
    anchored_log = path is None or os.path.abspath(log) == os.path.abspath(home.audit_log_file())
    try:
        fh = open(log, "rb")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        if not log.parent.is_dir():  # first use: no anchor or key either, and verify creates nothing
            return VerifyReport(log, exists=False, verified=0)
        _, anchor, key_exists = _snapshot(None, anchored_log)
        return _check_end(log, False, 0, None, anchor, key_exists)
    except OSError as exc:
        raise UnreadableFileError(f"{log}: {exc.strerror or exc}") from None
    with fh:
        size, anchor, key_exists = _snapshot(fh, anchored_log)
        anchored_seq = anchor.link.seq if anchor is not None and anchor.link is not None else None
        anchored_mac: str | None = None
        key: bytes | None = None
        prev, offset, verified = "", 0, 0

        def broken(reason: str, line: int, seq: int | None, detail: str = "") -> VerifyReport:
            return VerifyReport(log, True, verified, reason, line, seq, detail or BREAK_REASONS[reason],
                                anchored_seq)

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
            if seq == anchored_seq:
                anchored_mac = prev
    return _check_end(log, True, verified, anchored_mac, anchor, key_exists)


def _check_end(
    log: Path, exists: bool, verified: int, anchored_mac: str | None, anchor: _AnchorRead | None,
    key_exists: bool,
) -> VerifyReport:
    """Compare an intact chain of ``verified`` records with the head anchor."""
    if anchor is None:  # not the crew home's log: there is no anchor to hold it to
        return VerifyReport(log, exists, verified)

    def broken(reason: str, detail: str = "", seq: int | None = None) -> VerifyReport:
        anchored = anchor.link.seq if anchor.link is not None else None
        return VerifyReport(log, exists, verified, reason, None, seq, detail or BREAK_REASONS[reason], anchored)

    if not anchor.present:
        if not key_exists:
            return VerifyReport(log, exists, verified)  # first use: nothing was ever logged
        if not exists or verified == 0:
            return broken("log_missing" if not exists else "log_emptied",
                          "the log and its head anchor are gone, but the key shows records were written")
        return broken("anchor_missing")
    if anchor.link is None:
        return broken("anchor_invalid", f"{BREAK_REASONS['anchor_invalid']} ({anchor.problem})")
    head = anchor.link
    if not exists:
        return broken("log_missing", f"{BREAK_REASONS['log_missing']}: the anchor names seq {head.seq}")
    if verified == 0:
        return broken("log_emptied", f"{BREAK_REASONS['log_emptied']}: the anchor names seq {head.seq}")
    if verified < head.seq:
        missing = head.seq - verified
        return broken(
            "tail_truncated",
            f"{BREAK_REASONS['tail_truncated']}: the anchor names seq {head.seq}, the log ends at seq "
            f"{verified}, so the {missing} newest record{'s' if missing != 1 else ''} "
            f"{'are' if missing != 1 else 'is'} missing",
            verified + 1,
        )
    if anchored_mac is None or not hmac.compare_digest(anchored_mac, head.mac):
        return broken("anchor_mismatch", seq=head.seq)
    return VerifyReport(log, exists, verified, anchored=head.seq)


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
