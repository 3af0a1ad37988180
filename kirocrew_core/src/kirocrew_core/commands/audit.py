"""``kirocrew audit``: read the security event log and verify its HMAC chain."""

from __future__ import annotations

import json
from typing import Any

import click


@click.group("audit")
def audit() -> None:
    """Read and verify the security event log (SEL)."""


def _show_value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c.isspace() or c in '="' for c in value):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _human_line(entry: dict[str, Any]) -> str:
    if "malformed" in entry and "event" not in entry:
        return f"[malformed line] {entry['malformed']}"
    fields = entry.get("fields")
    fields = fields if isinstance(fields, dict) else {}
    shown = " ".join(f"{k}={_show_value(v)}" for k, v in sorted(fields.items()))
    parts = [str(entry.get(k, "?")) for k in ("ts", "event", "actor", "outcome")]
    return " ".join(parts + ([shown] if shown else []))


@audit.command("tail")
@click.option("-n", "count", default=20, show_default=True, type=click.IntRange(min=0),
              help="How many of the newest records to show.")
@click.option("--json", "as_json", is_flag=True, help="Print the records as a JSON array.")
def tail_command(count: int, as_json: bool) -> None:
    """Show the newest records, oldest first (not verified; see `kirocrew audit verify`)."""
    from kirocrew_core.audit import tail

    entries = tail(count)
    if as_json:
        click.echo(json.dumps(entries, indent=2, ensure_ascii=False))
        return
    for entry in entries:
        click.echo(_human_line(entry))


@audit.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def verify_command(ctx: click.Context, as_json: bool) -> None:
    """Check every record's HMAC chain and that the log reaches its head anchor; exit 1 if not."""
    from kirocrew_core.audit import verify

    report = verify()
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2))
    elif report.ok and not report.exists:
        click.echo(f"ok: 0 records (no log yet at {report.path})")
    elif report.ok:
        click.echo(f"ok: {report.verified} records verified")
        if report.anchored is not None and report.anchored < report.verified:
            click.echo(f"  the newest {report.verified - report.anchored} not yet anchored (an append was "
                       "interrupted before its anchor update); the next record anchors them")
    elif report.line is None:  # the chain is intact but its end or its anchor is not
        click.echo(f"broken: {report.reason}")
        click.echo(f"  {report.detail}")
        click.echo(f"  {report.verified} records verified; {report.path}")
    else:
        seq = "?" if report.seq is None else report.seq
        click.echo(f"broken at line {report.line} (seq {seq}): {report.reason}")
        click.echo(f"  {report.detail}")
        click.echo(f"  {report.verified} records before it verified; {report.path}")
    ctx.exit(0 if report.ok else 1)
