"""``kirocrew connections gates``: L0 then L1 as one scheduled job, one report, the worst exit status.

A user scheduling the lane wants one command and one number to alert on; the
two rungs' own commands stay for running either alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from kirocrew_core.origin_overrides import OriginOverrides

from kirocrew_connections import endpoint_smoke as l1
from kirocrew_connections import gate_report as gr
from kirocrew_connections import metadata_check as l0

RUNG = "gates"
DEFAULT_REPORT = "connections-gates-report.json"
VERDICTS = tuple(dict.fromkeys((*l0.VERDICTS, *l1.VERDICTS)))


def combine(l0_report: dict[str, Any], l1_report: dict[str, Any]) -> dict[str, Any]:
    """One report of both rungs: every row (each names its rung), each rung's summary, the worst status."""
    parts = {"l0": l0_report, "l1": l1_report}
    status = gr.worst(int(p["exit_status"]) for p in parts.values())
    rows = [*l0_report["rows"], *l1_report["rows"]]
    fatal = next((p["fatal_error"] for p in parts.values()
                  if "fatal_error" in p and p["exit_status"] == status), None)
    report = gr.envelope(RUNG, started_at=l0_report["started_at"], finished_at=l0.utc_now_iso(),
                         exit_status=status, vocabulary=VERDICTS, rows=rows,
                         runbook=[key for p in parts.values() for key in p["runbook"]],
                         fatal=(fatal["code"], fatal["message"]) if fatal else None)
    report["rungs"] = {name: {k: v for k, v in p.items() if k not in ("rows", "schema_version")}
                       for name, p in parts.items()}
    return report


@click.command("gates")
@l0.run_options(report=DEFAULT_REPORT, concurrency=l1.DEFAULT_CONCURRENCY, timeout=None,
                at_once="Providers checked at once (per rung).")
@click.option("--min-exercised", type=click.IntRange(min=0), default=0, show_default=True,
              help="L1: exit 3 (vacuous) unless at least N providers were exercised (not SKIPPED).")
@click.option("--state", "state_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="L0: consecutive-failure state file: enables the drift gate.")
@click.option("--drift-threshold", type=click.IntRange(min=1), default=l0.DEFAULT_DRIFT_THRESHOLD,
              show_default=True, help="L0, with --state: consecutive failed runs before a provider fails.")
@click.option("--prior-run-expected", is_flag=True,
              help="L0, with --state: a missing state file is fatal instead of a fresh start.")
@click.option("--fail-on-stale", is_flag=True, help="L0: fail when a baseline is older than 60 days.")
@click.option("--slug", "slugs", multiple=True, help="Only this provider (repeatable).")
@l0.origin_override_option
def gates_command(report_path: Path, concurrency: int, timeout: float | None, min_exercised: int,
                  state_path: Path | None, drift_threshold: int, prior_run_expected: bool, fail_on_stale: bool,
                  slugs: tuple[str, ...], origin_overrides: OriginOverrides) -> None:
    """Run L0 then L1 and write one report; the exit status is the worse of the two.

    Exit status: 0 green, 1 a finding, 2 usage or configuration error, 3 vacuous, 4 a file could not be
    written (when several apply: 4, then 2, then 1, then 3).
    """
    first = l0.run_l0_lane(l0.L0Options(
        concurrency=concurrency, timeout=timeout or l0.DEFAULT_TIMEOUT_SECS, state_path=state_path,
        drift_threshold=drift_threshold, prior_run_expected=prior_run_expected, fail_on_stale=fail_on_stale,
        slugs=slugs, overrides=origin_overrides))
    second = l1.run_l1_lane(concurrency=concurrency, timeout=timeout or l1.DEFAULT_TIMEOUT_SECS,
                            min_exercised=min_exercised, slugs=slugs, overrides=origin_overrides)
    report = combine(first, second)
    lines = [f"L0 {line}" for line in l0.summary_lines(first)] + [f"L1 {line}" for line in l1.summary_lines(second)]
    lines.append(("ok" if report["ok"] else "FAILED") + f": exit status {report['exit_status']} "
                 f"({report['outcome']})")
    l0.finish(report_path, report, lines, l1.warnings(second))


if __name__ == "__main__":
    l0.run_standalone(gates_command)
