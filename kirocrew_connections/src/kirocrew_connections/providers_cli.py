"""``kirocrew connections providers``: the registry as the Connect grid sees it."""

from __future__ import annotations

import json

import click

from kirocrew_connections.registry import Provider, routed_registry

COLUMNS = ("slug", "name", "tier", "category", "visibility", "mcp_url")


def _row(provider: Provider) -> dict[str, object]:
    return {column: getattr(provider, column) for column in COLUMNS}


@click.command("providers")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option("--all", "include_hidden", is_flag=True,
              help="Include hidden providers (vendor approval pending).")
def providers(as_json: bool, include_hidden: bool) -> None:
    """List the connection providers: visible and gated ones (--all adds hidden ones)."""
    registry = routed_registry()  # with the operator's clients: a configured GitHub is visible
    chosen = registry.all() if include_hidden else registry.listed()
    rows = [_row(p) for p in chosen]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = [[str(r[c]) if r[c] is not None else "-" for c in COLUMNS] for r in rows]
    widths = [max(len(c), *(len(line[i]) for line in table)) for i, c in enumerate(COLUMNS)]
    for line in ([c.upper() for c in COLUMNS], *table):
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
