"""``kirocrew host status|stop`` and ``kirocrew dashboard``: the running host from a terminal.

The host is whichever ``kirocrew serve`` owns this crew home, foreground or started on
demand by a relay; these commands find it through its socket, never by guessing a port.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from kirocrew_core.errors import KirocrewError
from kirocrew_core.host import client  # standard library only: cheap to import


def _running() -> dict[str, Any] | None:
    try:
        return dict(client.ping())
    except client.HostError as exc:
        if exc.code == "host_unavailable":
            return None
        raise


@click.group("host")
def host() -> None:
    """The long-lived host of this crew home: see it, stop it."""


@host.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the host's full status as JSON.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Say whether a host runs for this crew home, and what it serves. Exits 1 when none runs."""
    pong = _running()
    if as_json:
        click.echo(json.dumps(pong, indent=2))
    elif pong is None:
        click.echo("no kirocrew host runs for this crew home (MCP clients start one on demand; "
                   "`kirocrew serve` runs one in the foreground)")
    else:
        how = "started on demand, exits when idle" if pong.get("background") else "foreground"
        click.echo(f"host pid {pong['pid']} ({how}), up {_duration(time.time() - pong['startedAt'])}")
        click.echo(f"dashboard: {pong['url']} (`kirocrew dashboard` prints the sign-in URL)")
        click.echo(f"socket:    {pong['socket']}")
        click.echo(f"serves:    {', '.join(pong.get('servers') or []) or 'no MCP servers'}")
        click.echo(f"clients:   {pong.get('connections', 0)} connected")
        for reason in pong.get("busy") or []:
            click.echo(f"busy:      {reason}")
        for name, error in (pong.get("failedServices") or {}).items():
            click.echo(f"failed:    {name}: {error}")
        if pong.get("retiring"):
            click.echo(f"retiring:  {pong['retiring']}")
    ctx.exit(0 if pong is not None else 1)


@host.command("stop")
@click.option("--timeout", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to wait for the host to finish stopping.")
def stop(timeout: float) -> None:
    """Stop the host gracefully: runs in progress become interrupted, relays start a new host when next used."""
    try:
        pid = client.request_stop(wait=timeout)
    except client.HostError as exc:
        if exc.code != "host_unavailable":
            raise
        click.echo("no kirocrew host runs for this crew home")
        return
    click.echo(f"stopped the kirocrew host (pid {pid})")


@click.command("dashboard")
@click.option("--open", "open_browser", is_flag=True, help="Also open the sign-in URL in a browser.")
@click.option("--no-start", is_flag=True, help="Fail instead of starting a host when none runs.")
def dashboard(open_browser: bool, no_start: bool) -> None:
    """Print the running host's dashboard sign-in URL, starting a host in the background if needed.

    The URL carries the owner token: opening it signs the browser in. Treat it like a password.
    """
    from kirocrew_core.gateway.auth import load_or_create_token

    pong = _running() if no_start else client.ensure_host()
    if pong is None:
        raise KirocrewError("no kirocrew host runs for this crew home", code="host_unavailable")
    url = f"{pong['url']}?token={load_or_create_token()}"
    click.echo(url)
    if open_browser:
        import webbrowser

        if not webbrowser.open(url):
            click.echo("kirocrew: no browser could be opened here; open the URL above yourself", err=True)


def _duration(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
