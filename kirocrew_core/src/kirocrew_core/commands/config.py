"""``kirocrew config``: read and change ``config.toml`` keys, keeping the file's comments."""

from __future__ import annotations

import json

import click


def _load_plugin_keys() -> None:
    # Plugins declare their config keys when their module is imported; loading
    # the manager first makes those keys known to get/set/list.
    from kirocrew_core.plugins import get_plugin_manager

    get_plugin_manager()


@click.group("config")
def config() -> None:
    """Get, set and list config.toml keys (in the crew home).

    Values print as TOML literals. Lists are set as a TOML array
    ('["@a", "@b"]') or comma-separated ('@a,@b').
    """


@config.command("get")
@click.argument("key")
def get(key: str) -> None:
    """Print KEY's value (its default when unset) as a TOML literal."""
    from kirocrew_core.config import format_value, get_value

    _load_plugin_keys()
    click.echo(format_value(get_value(key)))


@config.command("set")
@click.argument("key")
@click.argument("value")
def set_(key: str, value: str) -> None:
    """Set KEY to VALUE, validated for the key's type and bounds."""
    from kirocrew_core.config import format_value, set_value

    _load_plugin_keys()
    stored = set_value(key, value)
    click.echo(f"{key} = {format_value(stored)}")


@config.command("unset")
@click.argument("key")
def unset(key: str) -> None:
    """Remove KEY from the file so its default applies again."""
    from kirocrew_core.config import format_value, lookup_key, unset_value

    _load_plugin_keys()
    was_set = unset_value(key)
    default = format_value(lookup_key(key).default)
    click.echo(f"{key} = {default} (default{'' if was_set else ', was not set'})")


@config.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the keys as JSON.")
def list_(as_json: bool) -> None:
    """List every key: value, whether it is the default, and what it does."""
    from kirocrew_core.config import format_value, list_values, lookup_key

    _load_plugin_keys()
    entries = list_values()
    if as_json:
        rows = [
            {
                "key": entry.key,
                "value": entry.value,
                "default": entry.default,
                "set": entry.is_set,
                "type": lookup_key(entry.key).kind,
                "doc": entry.doc,
            }
            for entry in entries
        ]
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    for entry in entries:
        marker = "" if entry.is_set else "  (default)"
        click.echo(f"{entry.key} = {format_value(entry.value)}{marker}")
        if entry.is_set and entry.value != entry.default:
            click.echo(f"    default: {format_value(entry.default)}")
        click.echo(f"    {entry.doc}")
