"""Importing the original's ``crons.json`` (``{"version": 2, "jobs": [...]}``) into the cron store.

A user of the original keeps their jobs: each entry becomes a job of the person (the
original's session keys name chat slots that mean nothing here), with its schedule, payload,
options and last-run state. What only made sense there (Slack channels and threads, chat
slots, folders, approval modes, posting dedup, per-job environment) is dropped and named in
the report. An entry this store cannot hold (a ``script`` job, wrong types, a bad schedule,
a refused command) is reported with its index and reason and skipped. Nothing is deleted and
the source file is never written. Importing again adds nothing twice: the store remembers
which source ids it imported (a job removed since stays removed).

A recurring imported job's missed runs count from the import, not from its creation: what it
missed before was the original's business, and a flood of catch-up runs on the first start
would surprise its owner. A one-shot that never ran is still due, as it was in the original.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kirocrew_core import home
from kirocrew_core.coretools.contract import ToolRefused
from kirocrew_core.jsonfile import ReadState, read_json
from kirocrew_core.redaction import redact_secrets

from kirocrew_cron.errors import cron_error
from kirocrew_cron.model import (
    COMMAND_MAX,
    JOB_ID_PATTERN,
    LAST_RESULT_MAX,
    MESSAGE_MAX,
    NAME_MAX,
    PERSON,
    TIMEOUT_MAX_SECS,
    TIMEOUT_SECS_DEFAULT,
    TIMEOUT_SECS_MAX,
    Job,
    Schedule,
)
from kirocrew_cron.store import CronStore

FILE_NAME = "crons.json"
SUPPORTED_VERSION = 2
#: The meta row that marks the host's one automatic import done.
IMPORTED_META = "crons_json_imported"

#: Fields of the original's record that have no meaning here (see the module docstring and docs/cron.md).
DROPPED_FIELDS = frozenset({
    "channel", "thread_ts", "created_by", "approval_mode", "hide_in_chat", "folder_id", "acked_items", "env",
    "project_path", "last_posted_hash", "last_posted_at", "consecutive_dupes", "last_failure_hash",
    "last_failure_at", "context_enabled", "member_id", "folder",
})
_ID = re.compile(JOB_ID_PATTERN)


@dataclass
class ImportReport:
    """What an import did: ids imported (as stored), entries skipped ``(index, reason)``, ids imported before."""

    imported: list[str] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    #: ``(source id, new id)`` for entries whose id was taken or not a job id here.
    renamed: list[tuple[str, str]] = field(default_factory=list)
    #: Fields present in the file that were dropped (sorted, each once).
    dropped: list[str] = field(default_factory=list)
    #: Imported ids whose entry named a chat session (now the person's job, seen by no session).
    session_keys: list[str] = field(default_factory=list)
    #: Why nothing was imported (:func:`import_once` only: the file could not be read).
    problem: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"imported": self.imported, "skipped": [{"index": i, "reason": r} for i, r in self.skipped],
                "already": self.already, "renamed": [{"from": a, "to": b} for a, b in self.renamed],
                "dropped": self.dropped, "session_keys": self.session_keys, "problem": self.problem}

    def text(self, path: Path) -> str:
        """The report for a person (``kirocrew cron import``)."""
        lines = [f"Imported {len(self.imported)} job(s) from {path}"
                 + (f": {', '.join(self.imported)}" if self.imported else ".")]
        if self.already:
            lines.append(f"Already imported before (not added again): {', '.join(self.already)}")
        lines += [f"Entry {old}: its id was taken or not a job id here; imported as {new}" for old, new in self.renamed]
        lines += [f"Skipped entry #{index}: {reason}" for index, reason in self.skipped]
        if self.dropped:
            lines.append(f"Dropped fields with no meaning here: {', '.join(self.dropped)}")
        if self.session_keys:
            lines.append("These belonged to a chat session of the original; they are now yours (the CLI and the "
                         f"Cron page see them, no session does): {', '.join(self.session_keys)}")
        return "\n".join(lines)


def default_path() -> Path:
    """``<crew home>/crons.json``: where the original kept its jobs."""
    return home.crew_home() / FILE_NAME


class _Malformed(Exception):
    """An entry this store cannot hold; the message is the reason in the report."""


def _read(path: Path) -> list[Any]:
    read = read_json(path)
    if read.state is ReadState.ABSENT:
        raise cron_error("import_unreadable", f"{path} does not exist")
    if read.state is not ReadState.DOCUMENT:
        why = read.error or "it is empty"
        raise cron_error("import_unreadable", f"{path} cannot be read as JSON: {why}"
                         + (f" (line {read.line})" if read.line else ""))
    document = read.document
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), list):
        raise cron_error("import_unreadable", f'{path} is not a crons.json: expected {{"version": 2, "jobs": [...]}}')
    if document.get("version") != SUPPORTED_VERSION:
        raise cron_error("import_unreadable", f"{path} has version {document.get('version')!r}; only version "
                                              f"{SUPPORTED_VERSION} (the original's current format) is read")
    return document["jobs"]


def _text(entry: dict[str, Any], key: str, limit: int, default: str = "") -> str:
    value = entry.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _Malformed(f"{key} must be a string")
    if len(value) > limit:
        raise _Malformed(f"{key} is longer than {limit} characters")
    return value


def _flag(entry: dict[str, Any], key: str, default: bool = False) -> bool:
    value = entry.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _Malformed(f"{key} must be true or false")
    return value


def _number(entry: dict[str, Any], key: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _Malformed(f"{key} must be a non-negative number")
    return float(value)


def _integer(entry: dict[str, Any], key: str, low: int, high: int, default: int) -> int:
    value = entry.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Malformed(f"{key} must be a whole number from {low} to {high}")
    return value


def _schedule(entry: dict[str, Any]) -> Schedule:
    from kirocrew_cron.schedule import validate_schedule

    raw = entry.get("schedule")
    if not isinstance(raw, dict):
        raise _Malformed("schedule must be an object")
    kind = raw.get("kind")
    if kind == "every":
        every = raw.get("every_secs")
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not math.isfinite(every):
            raise _Malformed("schedule.every_secs must be a number")
        schedule = Schedule("every", every_secs=int(every))
    elif kind == "at":
        at = raw.get("at_ts")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
            raise _Malformed("schedule.at_ts must be a number")
        schedule = Schedule("at", at_ts=float(at))
    elif kind == "cron":
        expr = raw.get("cron_expr")
        if not isinstance(expr, str):
            raise _Malformed("schedule.cron_expr must be a string")
        schedule = Schedule("cron", cron_expr=expr)
    else:
        raise _Malformed(f"schedule.kind {kind!r} is not every, at or cron")
    try:
        return validate_schedule(schedule)
    except ToolRefused as refused:
        raise _Malformed(refused.message) from None


def _agent(entry: dict[str, Any], dropped: set[str]) -> str:
    sequence = entry.get("agent_sequence")
    if isinstance(sequence, list) and sequence:
        if len(sequence) > 1 or not isinstance(sequence[0], str):
            dropped.add("agent_sequence")  # several agents in turn: this job runs its first (or agent_id) only
        elif sequence[0]:
            return sequence[0][:200]
    return _text(entry, "agent_id", 200)


def _job(entry: Any, job_id: str, now: float, dropped: set[str]) -> Job:
    """The job an entry becomes (``_Malformed`` when it cannot be one)."""
    from kirocrew_cron.ops import clean_message, clean_name
    from kirocrew_cron.schedule import check_skip_dates, check_timezone
    from kirocrew_cron.vet import vet_command

    if entry.get("script"):
        raise _Malformed("script jobs are not supported (the original's in-process Python hooks); recreate it as a "
                         "command job, e.g. kirocrew cron add NAME --command 'python3 script.py' …")
    try:  # a name and a message reach the screen and a later prompt: no character that changes what they say
        name = clean_name(_text(entry, "name", NAME_MAX))
        message = clean_message(_text(entry, "message", MESSAGE_MAX))
    except ToolRefused as refused:
        raise _Malformed(refused.message) from None
    if not name.strip():
        raise _Malformed("name is missing")
    command = _text(entry, "command", COMMAND_MAX)
    if not message.strip() and not command.strip():
        raise _Malformed("it has neither a message nor a command")
    if command:
        try:
            vet_command(command)
        except ToolRefused as refused:
            raise _Malformed(f"its command is refused: {refused.message}") from None
        if message:
            dropped.add("message (of a command job)")
            message = ""
    schedule = _schedule(entry)
    raw_dates = entry.get("skip_dates") or []
    if not isinstance(raw_dates, list):
        raise _Malformed("skip_dates must be a list of YYYY-MM-DD strings")
    try:
        timezone = check_timezone(_text(entry, "timezone", 50))
        skip_dates = check_skip_dates(raw_dates)
    except ToolRefused as refused:
        raise _Malformed(refused.message) from None
    last_run_ts = _number(entry, "last_run_ts")
    enabled = _flag(entry, "enabled", True)
    auto_paused = _flag(entry, "auto_paused")
    last_status: Literal["", "ok", "error"] = "ok" if entry.get("last_status") == "ok" else (
        "error" if entry.get("last_status") == "error" else "")
    model = _text(entry, "model", 200)
    return Job(
        id=job_id, name=name, schedule=schedule, message=message, command=command, owner=PERSON,
        timezone=timezone, skip_dates=skip_dates, strict_schedule=_flag(entry, "strict_schedule"),
        agent=_agent(entry, dropped), model="" if model == "auto" else model,
        workspace=str(home.user_home()),
        persistent_session=_flag(entry, "persistent_session", True), minimal_context=_flag(entry, "minimal_context"),
        silent=_flag(entry, "silent"), timeout=_integer(entry, "timeout", 0, TIMEOUT_MAX_SECS, 0),
        timeout_secs=_integer(entry, "timeout_secs", 1, TIMEOUT_SECS_MAX, TIMEOUT_SECS_DEFAULT),
        delete_after_run=_flag(entry, "delete_after_run"),
        # The original derived enabled from the two pause flags; an entry that says only enabled: false
        # was paused by someone, so it stays paused.
        user_paused=_flag(entry, "user_paused") or (not enabled and not auto_paused), auto_paused=auto_paused,
        created_ts=_number(entry, "created_ts") or now, updated_ts=now,
        # A one-shot that never ran is still due (the original fired an overdue one once); a recurring job's
        # missed runs count from the import.
        last_due_ts=last_run_ts if schedule.kind == "at" else now, last_run_ts=last_run_ts,
        last_status=last_status,
        # Stored results are redacted when written (the runner does the same), so no reader has to.
        last_error=redact_secrets(_text(entry, "last_error", 100_000)[:LAST_RESULT_MAX]),
        last_result=redact_secrets(_text(entry, "last_result", 10_000_000)[:LAST_RESULT_MAX]),
        consecutive_failures=_integer(entry, "consecutive_failures", 0, 1_000_000, 0),
    )


def import_crons_json(store: CronStore, path: Path, *, now: float | None = None) -> ImportReport:
    """Import the crons.json at ``path`` (``import_unreadable`` when it is not one); see the module docstring.

    The caller is the store's writer (the host, or a CLI command holding the owner lock).
    """
    when = time.time() if now is None else now
    report = ImportReport()
    dropped: set[str] = set()
    seen: dict[str, int] = {}
    for index, entry in enumerate(_read(path)):
        if not isinstance(entry, dict):
            report.skipped.append((index, "not an object"))
            continue
        source_id = entry.get("id")
        if not isinstance(source_id, str) or not source_id:
            report.skipped.append((index, "id is missing"))
            continue
        if source_id in seen:
            report.skipped.append((index, f"{source_id}: the same id as entry #{seen[source_id]}"))
            continue
        seen[source_id] = index
        if store.imported_as(source_id) is not None:
            report.already.append(source_id)
            continue
        dropped |= DROPPED_FIELDS.intersection(entry)
        free = bool(_ID.match(source_id)) and store.id_free(source_id)
        job_id = source_id if free else store.new_id()
        try:
            job = _job(entry, job_id, when, dropped)
        except _Malformed as malformed:
            report.skipped.append((index, f"{source_id}: {malformed}"))
            continue
        try:
            added = store.add_imported(job, source_id, when)
        except ToolRefused as full:  # jobs_full: the rest cannot fit either
            report.skipped.append((index, f"{source_id}: {full.message}"))
            continue
        if not added:
            report.already.append(source_id)
            continue
        report.imported.append(job_id)
        if not free:
            report.renamed.append((source_id, job_id))
        if entry.get("session_key"):
            report.session_keys.append(job_id)
    report.dropped = sorted(dropped)
    return report


def import_once(store: CronStore, crew_home: Path | None = None) -> ImportReport | None:
    """The host's first-start import of ``<crew home>/crons.json``; None when done before or there is no file.

    A meta row marks it done (also when there was no file: a crons.json that appears later is
    imported with ``kirocrew cron import``). A file that cannot be read leaves it unmarked, so the
    next start tries again; the report then says why in ``problem``.
    """
    if store.meta(IMPORTED_META) is not None:
        return None
    path = (crew_home or home.crew_home()) / FILE_NAME
    now = time.time()
    if read_json(path).state is ReadState.ABSENT:
        store.set_meta(IMPORTED_META, json.dumps({"at": now, "path": str(path), "found": False}))
        return None
    try:
        report = import_crons_json(store, path, now=now)
    except ToolRefused as refused:
        return ImportReport(problem=refused.message)
    store.set_meta(IMPORTED_META, json.dumps({"at": now, "path": str(path), "found": True,
                                              "imported": len(report.imported)}))
    return report
