"""What a scheduler reads from a launch-gate run (L0, L1 or both): its exit status and its report.

One owner for both rungs, so a job running either, or ``kirocrew connections gates``,
branches on the same numbers and parses the same document. The exit statuses, in
the order of precedence a combined run picks the worst by:

* ``4`` infrastructure: a report, state or baselines file could not be written, so
  what the run found is not recorded where the schedule looks;
* ``2`` usage or configuration: nothing (or not everything) was checked;
* ``1`` a real finding: FAIL, NEEDS_RECONSENT, tripped L0 drift, enforced stale baselines;
* ``3`` vacuous: fewer providers exercised than ``--min-exercised`` (nothing proven);
* ``0`` green.

The report is ``gate_report.schema.json`` (next to this module); every row not
green names its runbook symptom key, the row of the runbook in ``docs/connections.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 4
SCHEMA_FILE = Path(__file__).with_name("gate_report.schema.json")

EXIT_GREEN = 0
EXIT_FINDING = 1
EXIT_CONFIG = 2
EXIT_VACUOUS = 3
EXIT_INFRASTRUCTURE = 4
OUTCOMES = {EXIT_GREEN: "green", EXIT_FINDING: "finding", EXIT_CONFIG: "config_error",
            EXIT_VACUOUS: "vacuous", EXIT_INFRASTRUCTURE: "infrastructure"}
_PRECEDENCE = (EXIT_INFRASTRUCTURE, EXIT_CONFIG, EXIT_FINDING, EXIT_VACUOUS, EXIT_GREEN)

# Runbook symptom keys: docs/connections.md's runbook has one row per key (a test keeps them in step).
RUNBOOK_VACUOUS = "vacuous"
RUNBOOK_NEEDS_RECONSENT = "needs-reconsent"
RUNBOOK_L1_FAIL = "l1-fail"
RUNBOOK_TOTAL_TIMEOUT = "total-timeout"
RUNBOOK_L0_DRIFT = "l0-drift"
RUNBOOK_L0_NEEDS_APPROVAL = "l0-needs-approval"
RUNBOOK_STALE_BASELINES = "stale-baselines"
RUNBOOK_CONFIG = "config-error"
RUNBOOK_WRITE_FAILED = "write-failed"
RUNBOOK_KEYS = (RUNBOOK_VACUOUS, RUNBOOK_NEEDS_RECONSENT, RUNBOOK_L1_FAIL, RUNBOOK_TOTAL_TIMEOUT, RUNBOOK_L0_DRIFT,
                RUNBOOK_L0_NEEDS_APPROVAL, RUNBOOK_STALE_BASELINES, RUNBOOK_CONFIG, RUNBOOK_WRITE_FAILED)

TOTAL_TIMEOUT_TEXT = "exceeded its total timeout"


def worst(statuses: Iterable[int]) -> int:
    """The exit status a combined run reports: the first of 4, 2, 1, 3, 0 that any part had."""
    return min(statuses, key=_PRECEDENCE.index, default=EXIT_GREEN)


def envelope(rung: str, *, started_at: str, finished_at: str, exit_status: int, vocabulary: Sequence[str],
             rows: Sequence[Mapping[str, Any]], runbook: Iterable[str] = (),
             fatal: tuple[str, str] | None = None) -> dict[str, Any]:
    """The fields every gate report has, whatever its rung; the rung adds its own after them."""
    counts = {verdict: sum(1 for r in rows if r.get("verdict") == verdict) for verdict in vocabulary}
    keys = set(runbook) | {str(r["runbook"]) for r in rows if r.get("runbook")}
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "rung": rung, "started_at": started_at, "finished_at": finished_at,
        "ok": exit_status == EXIT_GREEN, "exit_status": exit_status, "outcome": OUTCOMES[exit_status],
        "verdict_counts": counts, "runbook": sorted(keys), "rows": [dict(r) for r in rows],
    }
    if fatal is not None:
        report["fatal_error"] = {"code": fatal[0], "message": fatal[1]}
    return report


def config_error(rung: str, *, started_at: str, finished_at: str, vocabulary: Sequence[str], code: str,
                 message: str) -> dict[str, Any]:
    """The report of a run whose configuration could not be used: status 2, no rows, the error."""
    return envelope(rung, started_at=started_at, finished_at=finished_at, exit_status=EXIT_CONFIG,
                    vocabulary=vocabulary, rows=[], runbook=[RUNBOOK_CONFIG], fatal=(code, message))


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) every gate report validates against."""
    document: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return document
