"""``kirocrew connections …``: subcommands imported only when they run."""

from __future__ import annotations

from importlib import import_module
from typing import Any

import click

# name -> ("module:attribute", short help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "providers": ("kirocrew_connections.providers_cli:providers", "List the connection providers and their state."),
    "l0": ("kirocrew_connections.metadata_check:l0_command", "Check providers' OAuth metadata (RFC 9728, RFC 8414)."),
    "l1": ("kirocrew_connections.endpoint_smoke:l1_command", "Tokenless smoke of the providers that hold a grant."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module, _, attribute = SUBCOMMANDS[name][0].partition(":")
        command: Any = getattr(import_module(module), attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][1]) for name in sorted(SUBCOMMANDS)])


@click.group("connections", cls=_LazyGroup)
def connections() -> None:
    """Third-party accounts through OAuth MCP servers; kirocrew never holds a credential."""
