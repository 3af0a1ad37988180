"""``kirocrew hooks …``: the owner lists, shows and revokes the inbound webhooks sessions registered.

Every subcommand calls the owner-only ``kirocrew-hooks-admin`` server (:mod:`.admin`: refused from a
session's shell). Registered lazily by :mod:`kirocrew_core.builtin.webhooks`.
"""

from __future__ import annotations

import click


def _admin(tool: str, arguments: dict[str, object]) -> None:
    from kirocrew_core.webhooks.admin import call

    click.echo(call(tool, arguments).rstrip("\n"))


@click.group()
def hooks() -> None:
    """Inbound webhooks: URLs sessions registered with register_hook that wake their conversation."""


@hooks.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the hooks as JSON.")
def list_(as_json: bool) -> None:
    """List every hook: its conversation, deliveries, last delivery and when it was made."""
    _admin("hooks_list", {"json": as_json})


@hooks.command("show")
@click.argument("hook_id")
def show(hook_id: str) -> None:
    """One hook: its URL, conversation, counters and the context its session left (never its token)."""
    _admin("hooks_show", {"hook_id": hook_id})


@hooks.command("revoke")
@click.argument("hook_id")
def revoke(hook_id: str) -> None:
    """Remove a hook: its URL answers 401 from now on."""
    _admin("hooks_revoke", {"hook_id": hook_id})
