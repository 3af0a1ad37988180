"""``kirocrew plugins``: what is installed, as JSON a script or test can read."""

from __future__ import annotations

import json

import click


@click.command("plugins")
@click.option("--all", "show_all", is_flag=True, help="Include core built-ins.")
@click.option("--hook", "hook_name", default=None, help="Only plugins implementing this hook.")
def plugins(show_all: bool, hook_name: str | None) -> None:
    """List installed plugins: distribution, version, entry point, hooks, status, problems."""
    from kirocrew_core.coretools.tool_names import collect_tools
    from kirocrew_core.plugins import get_plugin_manager

    pm = get_plugin_manager()
    collect_tools(pm)  # records the kirocrew-core tool names a plugin was refused (tool_name_taken)
    rows = []
    for record in pm.loaded_records():
        if record.builtin and not show_all:
            continue
        if hook_name and hook_name not in record.hooks:
            continue
        rows.append(record.as_dict())
    click.echo(json.dumps(rows, indent=2))
