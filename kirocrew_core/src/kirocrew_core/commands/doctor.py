"""``kirocrew doctor``: every plugin's health checks; exit 1 when one fails."""

from __future__ import annotations

import json

import click

_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Check that kirocrew can run here (homes, config, kiro-cli, plugins' own checks)."""
    from kirocrew_core.doctor import run_checks
    from kirocrew_core.plugins import get_plugin_manager

    outcomes = run_checks(get_plugin_manager())
    if as_json:
        click.echo(json.dumps([o.as_dict() for o in outcomes], indent=2))
    else:
        for outcome in outcomes:
            click.echo(f"[{_MARK[outcome.result.status]}] {outcome.check.name}: {outcome.result.summary}")
            for line in outcome.result.detail.splitlines():
                click.echo(f"       {line}")
    failed = [o for o in outcomes if o.result.status == "fail"]
    ctx.exit(1 if failed else 0)
