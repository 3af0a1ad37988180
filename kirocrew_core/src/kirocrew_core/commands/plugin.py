"""``kirocrew plugin new``: write a new plugin distribution (``kirocrew plugins`` lists the installed ones)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("plugin")
def plugin() -> None:
    """Make kirocrew plugins."""


@plugin.command("new")
@click.argument("name")
@click.option("--page", is_flag=True, help="A dashboard page and the JSON route it calls.")
@click.option("--tool", is_flag=True, help="A tool in the kirocrew-core MCP server every crew session mounts.")
@click.option("--server", is_flag=True, help="An MCP server of its own, served by the host, with its relay command.")
@click.option("--doctor", is_flag=True, help="A `kirocrew doctor` check.")
@click.option("--dir", "target", type=click.Path(path_type=Path), default=None,
              help="The folder to create (default: ./kirocrew-NAME); it must not exist, or be empty.")
def new(name: str, page: bool, tool: bool, server: bool, doctor: bool, target: Path | None) -> None:
    """Write NAME, a complete plugin distribution you can install and test.

    It has a pyproject.toml (hatchling, the kirocrew.plugins entry point), a src/kirocrew_NAME
    package with the chosen contributions, and tests/ with the test kit's guards and one test
    per contribution, which pass as written. Without an option it writes --page and --tool.
    NAME is lowercase letters, digits and single underscores; its tools are called NAME_<tool>.
    """
    from kirocrew_core import scaffold

    chosen = [part for part, wanted in zip(scaffold.CONTRIBUTIONS, (page, tool, server, doctor), strict=True)
              if wanted]
    scaffold.check_name(name)
    files = scaffold.render_plugin(name, chosen)
    written = scaffold.write_plugin(target if target is not None else scaffold.default_target(name), files)
    click.echo(f"Wrote {written}:")
    for relative in files:
        click.echo(f"  {relative}")
    click.echo("Next: install it into kirocrew's environment with its test extra (pip install -e '.[test]' "
               "in that folder) and run pytest there.")
