"""Workflow runs on disk: one JSON file per run, written atomically, owner-only, redacted.

``<crew home>/state/workflows/runs/<run_id>.json`` holds a run's record: who owns it, its
status (``running``, ``finished``, ``failed``, ``cancelled``), where and why it failed, its
ceilings, its result and its events ``{run_id, seq, ts, type, data}``. Only the host writes
it; every text in it passed :func:`~kirocrew_core.redaction.redact_secrets` first. A run
still ``running`` when the host starts was cut off by the host's end: :func:`recover` marks
it failed with that reason.
"""

from __future__ import annotations

import os
import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RUN_ID = re.compile(r"^wf_[0-9a-f]{16}$")
STATES = ("running", "finished", "failed", "cancelled")
TERMINAL = frozenset({"finished", "failed", "cancelled"})
TEXT_MAX = 20000


def runs_dir() -> Path:
    from kirocrew_core import home

    return home.state_dir("workflows") / "runs"


def new_run_id() -> str:
    return f"wf_{secrets.token_hex(8)}"


def now() -> str:
    """UTC, to the millisecond: an agent call's events time it."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def redacted(value: Any, limit: int = TEXT_MAX) -> Any:
    """``value`` with every string in it redacted and clipped (lists and dicts walked)."""
    from kirocrew_core.redaction import redact_secrets

    if isinstance(value, str):
        return redact_secrets(value)[:limit]
    if isinstance(value, list):
        return [redacted(item, limit) for item in value]
    if isinstance(value, dict):
        return {str(key): redacted(item, limit) for key, item in value.items()}
    return value


def save(record: dict[str, Any], directory: Path | None = None) -> Path:
    """Write ``record`` (already redacted) to its file, atomically and 0600."""
    from kirocrew_core.jsonfile import write_json_atomic

    folder = directory or runs_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return write_json_atomic(folder / f"{record['run_id']}.json", record, secret=True)


def load(run_id: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The stored record of ``run_id``; None for an unknown (or malformed) id, a file that is no record."""
    from kirocrew_core.jsonfile import ReadState, read_json

    if not RUN_ID.match(run_id):
        return None
    read = read_json((directory or runs_dir()) / f"{run_id}.json")
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        return None
    return read.document


def listing(directory: Path | None = None) -> list[dict[str, Any]]:
    """Every stored record, newest first."""
    folder = directory or runs_dir()
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = [load(name[:-5], folder) for name in names if name.endswith(".json")]
    records = [record for record in found if record is not None]
    return sorted(records, key=lambda r: str(r.get("created_at", "")), reverse=True)


def recover(directory: Path | None = None) -> int:
    """Mark every run still ``running`` failed (the host that ran it ended); how many were."""
    count = 0
    for record in listing(directory):
        if record.get("status") != "running":
            continue
        reason = "the host stopped while this run was running"
        record.update(status="failed", where="exec", reason=reason, ended_at=now())
        events = record.setdefault("events", [])
        events.append({"run_id": record["run_id"], "seq": len(events) + 1, "ts": now(), "type": "run_failed",
                       "data": {"where": "exec", "reason": reason}})
        save(record, directory)
        count += 1
    return count
