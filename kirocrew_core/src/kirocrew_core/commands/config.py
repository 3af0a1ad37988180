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


RESTART_REASON = "config_set"
_RESTART_HELP = ("For a key kiro-cli sessions load when they start: restart kirocrew's sessions now (--restart), "
                 "as the dashboard's Apply & Restart does, or not (--no-restart). Asked when not given "
                 "and the terminal is interactive.")


def _offer_restart(name: str, restart: bool | None) -> None:
    """Say that ``name`` reaches sessions only when they start, and restart them if the owner wants."""
    import sys

    from kirocrew_core.config import lookup_key

    if not lookup_key(name).reloads_sessions:
        return
    click.echo(f"{name} changes what kiro-cli sessions load; the ones running keep the old value until restarted.")
    if restart is None and sys.stdin.isatty():
        restart = click.confirm("Restart kirocrew's sessions now (what Apply & Restart on the dashboard's MCP "
                                "servers page does)?", default=True)
    if not restart:
        click.echo("Not restarted: run `kirocrew config set` again with --restart, or press Apply & Restart "
                   "on the dashboard's MCP servers page.")
        return
    click.echo(_restart_sessions())


def _restart_sessions() -> str:
    """``POST /api/sessions/restart`` on the running host, as Apply & Restart sends it; what happened, in words."""
    from kirocrew_core.gateway.owner_client import OwnerApiError, call, running_host_url

    url = running_host_url()
    if url is None:
        return "No kirocrew host is running, so no session holds the old value; the next one loads the new one."
    try:
        answer = call("POST", "/api/sessions/restart", {"reason": RESTART_REASON}, url=url)
    except OwnerApiError as exc:
        if exc.status == 404:
            raise click.ClickException("the running host restarts no sessions (kirocrew-mcp is not installed); "
                                       "new sessions load the new value") from None
        raise click.ClickException(f"the value is set, but the restart failed ({exc.code}): {exc.message}") from None
    count = answer.get("restarted", 0)
    words = (f"Restarted: {count} kiro-cli session{'' if count == 1 else 's'} closed or replaced (idle ones now, "
             "busy ones when their run ends); new sessions load the new value.")
    if answer.get("mcpSyncOk") is False:
        error = answer.get("mcpSyncError") or {}
        words += f" But rendering the agent file failed ({error.get('code')}): {error.get('error')}"
    return words


@config.command("set")
@click.argument("key")
@click.argument("value")
@click.option("--restart/--no-restart", default=None, help=_RESTART_HELP)
def set_(key: str, value: str, restart: bool | None) -> None:
    """Set KEY to VALUE, validated for the key's type and bounds."""
    from kirocrew_core.config import format_value, set_value

    _load_plugin_keys()
    stored = set_value(key, value)
    click.echo(f"{key} = {format_value(stored)}")
    _offer_restart(key, restart)


@config.command("unset")
@click.argument("key")
@click.option("--restart/--no-restart", default=None, help=_RESTART_HELP)
def unset(key: str, restart: bool | None) -> None:
    """Remove KEY from the file so its default applies again."""
    from kirocrew_core.config import format_value, lookup_key, unset_value

    _load_plugin_keys()
    was_set = unset_value(key)
    default = format_value(lookup_key(key).default)
    click.echo(f"{key} = {default} (default{'' if was_set else ', was not set'})")
    if was_set:
        _offer_restart(key, restart)


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
