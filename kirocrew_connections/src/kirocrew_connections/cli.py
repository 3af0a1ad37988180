"""``kirocrew connections …``: subcommands imported only when they run."""

from __future__ import annotations

import click

from kirocrew_core.cli import LazyGroup

# name -> ("module:attribute", short help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "providers": ("kirocrew_connections.providers_cli:providers", "List the connection providers and their state."),
    "l0": ("kirocrew_connections.metadata_check:l0_command", "Check providers' OAuth metadata (RFC 9728, RFC 8414)."),
    "client": ("kirocrew_connections.clients_cli:client",
               "The OAuth app you registered for a pre-registered provider (GitHub, Asana)."),
    "l1": ("kirocrew_connections.endpoint_smoke:l1_command", "Tokenless smoke of the providers that hold a grant."),
    "gates": ("kirocrew_connections.gates_cli:gates_command", "Run L0 then L1: one report, the worse exit status."),
}


@click.group("connections", cls=LazyGroup, lazy_commands=SUBCOMMANDS)
def connections() -> None:
    """Third-party accounts through OAuth MCP servers; kirocrew never holds a credential."""
