"""``kirocrew apps …``: list, enable and disable installed apps (loaded lazily, like ``kirocrew mcp``).

Exit codes: 0 when it worked (a second enable or disable too: it says so); 2 for
bad input with nothing changed (an unknown app, a hostile name, a broken
manifest); 1 when a file could not be read.
"""

from __future__ import annotations

import json
from typing import Any

import click


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


@click.group("apps")
def apps() -> None:
    """List, enable and disable apps: their MCP servers and agent files.

    An app is installed as <crew home>/apps/NAME/manifest.json. Enabling it adds
    its servers to ~/.kiro/agents/kirocrew.json as NAME:SERVER entries and writes
    its agent files; disabling drops those entries and leaves its files.
    """


@apps.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print every app as JSON.")
def list_command(as_json: bool) -> None:
    """Every installed app, whether it is enabled, and its servers' state in the rendered agent."""
    from kirocrew_mcp.app_lifecycle import list_apps

    rows = list_apps()
    if as_json:
        _echo_json({"apps": rows})
        return
    if not rows:
        click.echo("no apps are installed")
        return
    for row in rows:
        status = "enabled" if row["enabled"] else "disabled"
        manifest = "" if row["manifest"] == "ok" else f" (manifest {row['manifest']}: {row['problem']['code']})"
        click.echo(f"{row['app']}  {status}{manifest}")
        for server in row["servers"]:
            click.echo(f"  {server['key']}  {server['transport']}  {server['state']}")
        for agent in row["agents"]:
            click.echo(f"  agent {agent}")


@apps.command("enable")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def enable_command(name: str, as_json: bool) -> None:
    """Check NAME's manifest, add its servers as NAME:SERVER, write its agent files.

    Enabling an enabled app again re-reads its manifest and its backend's port.
    """
    from kirocrew_mcp.app_lifecycle import STATE_WAITING, enable_app

    outcome = enable_app(name)
    if as_json:
        _echo_json(outcome.as_dict())
    else:
        click.echo(f"{name} was already enabled; brought up to date" if outcome.already_enabled
                   else f"enabled {name}")
        for key, state in outcome.servers.items():
            click.echo(f"  {key}  {state}")
        for agent in outcome.agents:
            click.echo(f"  wrote agent {agent}")
        if any(state == STATE_WAITING for state in outcome.servers.values()):
            click.echo(f"  waiting for the backend: {outcome.port_note}; `kirocrew apps enable {name}` "
                       "again (or the next host start) adds it once the backend runs")
    for warning in outcome.warnings:
        click.echo(f"warning: {warning}", err=True)


@apps.command("disable")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def disable_command(name: str, as_json: bool) -> None:
    """Drop NAME's servers from the rendered agent; its agent files and folder stay."""
    from kirocrew_mcp.app_lifecycle import disable_app

    outcome = disable_app(name)
    if as_json:
        _echo_json(outcome.as_dict())
    else:
        click.echo(f"{name} was not enabled; nothing changed" if outcome.already_disabled
                   else f"disabled {name}")
        for key in outcome.removed:
            click.echo(f"  removed {key}")
        for path in outcome.left:
            click.echo(f"  left {path} (the app's; remove it yourself if you no longer want it)")
    for warning in outcome.warnings:
        click.echo(f"warning: {warning}", err=True)
