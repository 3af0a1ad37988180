"""``kirocrew crew list|add|remove``: the owner keeps the crews of ``config.toml`` from the shell.

``add`` and ``remove`` edit the one ``[crews.NAME]`` table through tomlkit under the config lock
and write atomically, so the rest of the file (comments included) is kept and a bad value changes
nothing. Registered lazily by :mod:`kirocrew_core.builtin.crews`.
"""

from __future__ import annotations

import json
import os

import click

from kirocrew_core.crews import bindings

INHERITS_ALL = "(the spawning session's agent, model, workspace and authority)"


@click.group()
def crew() -> None:
    """Crews: named bindings (Kiro agent, model, workspace, authority, triggers) for spawn_run(crew=NAME)."""


@crew.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the crews as JSON.")
def list_(as_json: bool) -> None:
    """List the crews and what each binds."""
    crews = bindings.all_crews()
    if as_json:
        click.echo(json.dumps([c.as_dict() for c in crews], indent=2, ensure_ascii=False))
        return
    if not crews:
        click.echo("No crews. Add one with: kirocrew crew add NAME --agent AGENT --trigger WORD")
        return
    for c in crews:
        bound = "  ".join(f"{key}={value}" for key, value in c.bound().items() if value is not None)
        triggers = ", ".join(c.triggers) if c.triggers else "(none: selected by name only)"
        click.echo(f"{c.name}  {bound or INHERITS_ALL}")
        click.echo(f"  triggers: {triggers}")


@crew.command("add")
@click.argument("name")
@click.option("--agent", "kiro_agent", help="The Kiro agent the crew runs (default: the spawning session's).")
@click.option("--model", help="The model id (default: the spawning session's).")
@click.option("--workspace", help="Its working directory (default: the spawning session's workspace).")
@click.option("--authority", help="read_only, workspace_write or unrestricted (never more than the spawner has).")
@click.option("--trigger", "triggers", multiple=True, help="A word or phrase that routes a task to it (repeatable).")
@click.option("--replace", is_flag=True, help="Replace a crew of that name instead of refusing.")
def add(name: str, kiro_agent: str | None, model: str | None, workspace: str | None, authority: str | None,
        triggers: tuple[str, ...], replace: bool) -> None:
    """Add the crew NAME to config.toml."""
    if workspace and not workspace.startswith("~"):
        workspace = os.path.abspath(workspace)
    added = bindings.add_crew(bindings.Crew(name, kiro_agent, model, workspace, authority, triggers), replace=replace)
    click.echo(f"Saved crew {added.name}.")


@crew.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Remove the crew NAME from config.toml."""
    bindings.remove_crew(name)
    click.echo(f"Removed crew {name}.")
