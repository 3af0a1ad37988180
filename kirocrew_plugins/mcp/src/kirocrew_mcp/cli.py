"""``kirocrew mcp …`` and ``kirocrew cli-setup``: the MCP panel's operations from a terminal.

Loaded lazily (``kirocrew_mcp.plugin`` registers the import path only), so
``kirocrew --help`` never imports this module.

Exit codes: 0 when everything worked; 1 when an operation ran but something
failed (a probe ended in ``error``, a change was refused, the rebuild refused,
a provider global could not be checked); 2 for bad input, with nothing changed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from kirocrew_core.errors import BadInputError

if TYPE_CHECKING:
    from kirocrew_mcp.discovery import ServerRow


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _scopes_column(row: ServerRow) -> str:
    parts = []
    for scope_id, present in row.presence.items():
        if present is None:
            parts.append(f"{scope_id}?")
        elif present:
            parts.append(scope_id)
    return ",".join(parts) or "-"


def _print_rows(rows: list[ServerRow]) -> None:
    if not rows:
        click.echo("no MCP servers are configured")
        return
    table = [("NAME", "STATUS", "SCOPES", "TOOLS")]
    table += [(r.name, r.status, _scopes_column(r), str(len(r.tools))) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(3)]
    for line in table:
        click.echo("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line[:3])) + "  " + line[3])
    for row in rows:
        if row.error:
            click.echo(f"{row.name}: {row.error}", err=True)


@click.group("mcp")
def mcp() -> None:
    """Render, list, probe and manage the MCP servers kiro-cli sessions see.

    kirocrew writes one file for kiro-cli, ~/.kiro/agents/kirocrew.json. The
    Kiro global (~/.kiro/settings/mcp.json) and provider globals are written
    only by `kirocrew mcp apply` changes that name them.
    """


@mcp.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the rows and any unreadable sources as JSON.")
@click.option("--probe", "probe", is_flag=True, help="Probe every enabled server first (starts stdio servers).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="Seconds per probe (default: dashboard.mcp_probe_timeout_secs).")
def list_command(as_json: bool, probe: bool, timeout: float | None) -> None:
    """List every MCP server, where it is declared, and its probe status."""
    from kirocrew_mcp.discovery import discover, refresh_probes

    found = discover()
    rows = refresh_probes(found.rows, timeout=timeout) if probe else found.rows
    if as_json:
        _echo_json({"servers": [r.as_dict() for r in rows], "problems": [p.as_dict() for p in found.problems]})
        return
    _print_rows(rows)
    for problem in found.problems:
        click.echo(f"warning: {problem.message()}", err=True)


@mcp.command("probe")
@click.argument("name", required=False)
@click.option("--all", "probe_all", is_flag=True, help="Probe every server (the default without NAME).")
@click.option("--json", "as_json", is_flag=True, help="Print the probed rows as JSON.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=None,
              help="Seconds per probe (default: dashboard.mcp_probe_timeout_secs).")
@click.pass_context
def probe_command(ctx: click.Context, name: str | None, probe_all: bool, as_json: bool,
                  timeout: float | None) -> None:
    """Start NAME (or every server) and check it answers the MCP handshake and lists its tools.

    A disabled server is never started. Exits 1 when a probe ends in error.
    """
    from kirocrew_mcp.discovery import discover, refresh_probes
    from kirocrew_mcp.probe import STATUS_ERROR

    if name is not None and probe_all:
        raise click.UsageError("give a server NAME or --all, not both")
    found = discover()
    targets = found.rows
    if name is not None:
        row = found.row(name)
        if row is None:
            raise BadInputError(f"no MCP server named {name!r} (see `kirocrew mcp list`)", code="unknown_server")
        targets = [row]
    wanted = {row.name for row in targets}
    rows = [r for r in refresh_probes(targets, timeout=timeout) if r.name in wanted]
    if as_json:
        _echo_json({"servers": [r.as_dict() for r in rows]})
    else:
        _print_rows(rows)
    ctx.exit(1 if any(r.status == STATUS_ERROR for r in rows) else 0)


@mcp.command("apply")
@click.argument("source", metavar="FILE|-", type=click.File("rb"))
@click.pass_context
def apply_command(ctx: click.Context, source: Any) -> None:
    """Apply a change list (the JSON `POST /api/mcp/apply` takes), then rebuild once.

    Prints the per-change results as JSON. Exits 2 when the change list is
    malformed (nothing changed), 1 when a change or the rebuild failed.
    """
    from kirocrew_mcp.apply import apply_changes

    raw = source.read(4 * 1024 * 1024 + 1)
    if len(raw) > 4 * 1024 * 1024:
        raise BadInputError("the change list is larger than 4 MiB", code="body_too_large")
    try:
        payload = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadInputError(f"{source.name}: not valid JSON", code="bad_json") from None
    outcome = apply_changes(payload, actor="owner")
    _echo_json(outcome.as_dict())
    for warning in outcome.warnings:
        click.echo(f"warning: {warning}", err=True)
    ctx.exit(0 if outcome.ok else 1)


def _pairs(values: tuple[str, ...], separator: str, option: str) -> dict[str, str]:
    out = {}
    for value in values:
        key, found, rest = value.partition(separator)
        if not found or not key.strip():
            code = "bad_headers" if option == "--header" else "bad_env"
            raise BadInputError(f"{option} {value!r}: expected NAME{separator}VALUE", code=code)
        out[key.strip()] = rest.strip() if separator == ":" else rest
    return out


@mcp.command("add")
@click.argument("name")
@click.option("--command", "command", metavar="CMD", help="Start a local server with CMD (stdio).")
@click.option("--arg", "args", multiple=True, metavar="ARG", help="An argument for CMD (repeatable, in order).")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="An environment variable (repeatable).")
@click.option("--url", metavar="URL", help="Talk to a remote server at URL (https; http only on this machine).")
@click.option("--header", "headers", multiple=True, metavar="'NAME: VALUE'", help="An HTTP header (repeatable).")
@click.option("--scope", "scopes", multiple=True, metavar="ID",
              help="Who sees it: kirocrew (the default), kiro, or a seam scope id such as cc (repeatable).")
@click.pass_context
def add_command(ctx: click.Context, name: str, command: str | None, args: tuple[str, ...], env: tuple[str, ...],
                url: str | None, headers: tuple[str, ...], scopes: tuple[str, ...]) -> None:
    """Declare a new MCP server NAME (the dashboard's "Add a custom server"), then rebuild once.

    Without --scope, kirocrew sessions see it (it goes into ~/.kiro/crew/mcp.json);
    --scope kiro declares it in the Kiro global instead. Prints the result as
    JSON. Exits 2 when the request is refused (nothing changed), 1 when the
    name is taken or the rebuild failed.
    """
    from kirocrew_mcp.add import add_server

    payload: dict[str, Any] = {"name": name, "scopes": list(scopes or ("kirocrew",))}
    if command is not None:
        payload["command"] = command
        payload["args"] = list(args)
        payload["env"] = _pairs(env, "=", "--env")
    if url is not None:
        payload["url"] = url
        payload["headers"] = _pairs(headers, ":", "--header")
    if command is None and (args or env):
        raise BadInputError("--arg and --env go with --command", code="bad_args" if args else "bad_env")
    if url is None and headers:
        raise BadInputError("--header goes with --url", code="bad_headers")
    outcome = add_server(payload, actor="owner")
    _echo_json({"name": name, **outcome.as_dict()})
    for warning in outcome.warnings:
        click.echo(f"warning: {warning}", err=True)
    ctx.exit(0 if outcome.ok else 1)


@mcp.command("rebuild")
@click.option("--clean", is_flag=True, help="Ignore the existing agent file as the merge base.")
@click.option("--json", "as_json", is_flag=True, help="Print the rebuild report as JSON.")
def rebuild_command(clean: bool, as_json: bool) -> None:
    """Re-render ~/.kiro/agents/kirocrew.json from every MCP scope.

    Refuses, writing nothing and leaving every file as it is, when a scope
    file cannot be used: exit 2 (scope_file_malformed) for malformed JSON or
    an mcpServers that is not an object, exit 1 (scope_file_unreadable) for a
    file it cannot read (permissions, a FIFO, a directory). A partial render
    would report success for an agent that does not match your files. Also
    exits 1 when the existing agent file cannot be read.
    """
    from kirocrew_mcp.render import rebuild_agent_config

    report = rebuild_agent_config(clean=clean, strict=True)
    if as_json:
        _echo_json(report.as_dict())
        return
    verb = "wrote" if report.written else "unchanged:"
    click.echo(f"{verb} {report.path} ({len(report.servers)} MCP servers)")
    if report.retracted:
        click.echo(f"removed (no scope declares them any more): {', '.join(report.retracted)}")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)


@click.command("cli-setup")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def cli_setup(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Remove stale kirocrew-managed MCP entries from the Kiro global and provider globals.

    Only kirocrew's own server names (kirocrew-core, kirocrew-cron,
    kirocrew-computer, …) are removed; everything else in those files is kept.
    A file with nothing stale is not touched. Exits 1 when a file could not be
    checked or written.
    """
    from kirocrew_mcp.cleanup import clean_stale_managed_mcp

    report = clean_stale_managed_mcp(dry_run=dry_run)
    if as_json:
        _echo_json(report.as_dict())
    else:
        verb = "would remove" if dry_run else "removed"
        for scope in report.scopes:
            if scope.state == "cleaned":
                click.echo(f"{verb} {', '.join(scope.removed)} from {scope.path}")
            elif scope.state in ("skipped", "failed"):
                click.echo(f"warning: {scope.path}: {scope.error}", err=True)
        if not any(s.state == "cleaned" for s in report.scopes) and report.ok:
            click.echo("no stale kirocrew-managed MCP entries in " +
                       (", ".join(str(s.path) for s in report.scopes) or "any provider global"))
    ctx.exit(0 if report.ok else 1)
