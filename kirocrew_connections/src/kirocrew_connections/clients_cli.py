"""``kirocrew connections client set|show|remove``: the operator's OAuth client of a pre-registered provider.

``set`` stores the client id in ``config.toml`` (``connections.<slug>.client_id``)
and, for a confidential client, the secret in an owner-only file, read from
stdin (a hidden prompt on a terminal) so it never sits in shell history or a
process list. Everything is checked before anything is written; a bad slug,
a DCR provider, an empty id or secret, or a secret file kirocrew refuses is a
stable error code and changes nothing. ``show`` never prints the secret.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from kirocrew_core.errors import BadInputError

if TYPE_CHECKING:
    from kirocrew_connections.registry import Provider


def _provider(slug: str) -> Provider:
    from kirocrew_connections.clients import preregistered_provider
    from kirocrew_connections.registry import load_registry

    return preregistered_provider(load_registry(), slug.strip().lower())


def _read_secret() -> str:
    if sys.stdin.isatty():
        return str(click.prompt("Client secret", hide_input=True, default="", show_default=False))
    return sys.stdin.read(64 * 1024)


def _audit(event: str, slug: str) -> None:
    from kirocrew_core import audit
    from kirocrew_core.errors import KirocrewError

    try:
        audit.record(event, actor="owner", provider=slug)
    except (KirocrewError, OSError) as exc:
        click.echo(f"warning: not recorded in the security event log: {exc}", err=True)


@click.group("client")
def client() -> None:
    """The OAuth app you registered for a pre-registered provider (GitHub, Asana)."""


@client.command("set")
@click.argument("slug")
@click.option("--client-id", required=True, help="The OAuth app's client id.")
@click.option("--no-secret", is_flag=True,
              help="Do not read a secret (it comes from KIROCREW_CONNECTIONS_<SLUG>_CLIENT_SECRET).")
def set_client(slug: str, client_id: str, no_secret: bool) -> None:
    """Store SLUG's client id, and its secret read from stdin (never an argument)."""
    from kirocrew_core.config import set_value

    from kirocrew_connections import clients

    provider = _provider(slug)
    client_id = clients.check_client_id(client_id)
    if provider.slug not in clients.CONFIGURABLE_SLUGS:
        id_name, _ = clients.client_env_names(provider.slug)
        raise BadInputError(f"{provider.slug} has no config key; set {id_name} (and the secret variable) instead",
                            code="client_id_via_environment")
    secret = None
    if clients.confidential(provider) and not no_secret:
        secret = clients.check_secret(_read_secret())
        clients.refuse_unsafe_secret_target(provider.slug)
    set_value(clients.config_key(provider.slug), json.dumps(client_id))
    if secret is not None:
        clients.write_secret_file(provider.slug, secret)
        _audit("connections_client.secret_set", provider.slug)
    click.echo(f"{provider.slug}: client id set" + ("; secret stored owner-only" if secret is not None else ""))
    click.echo(f"Register {provider.redirect_uri} as the app's callback URL.")


@client.command("show")
@click.argument("slug")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def show_client(slug: str, as_json: bool) -> None:
    """Where SLUG's client id and secret come from (the secret itself is never shown)."""
    from kirocrew_connections.clients import describe

    info = describe(_provider(slug))
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"provider:      {info['slug']}")
    click.echo(f"client id:     {info['clientId'] or '-'}" + (f" (from {info['clientIdSource']})"
                                                              if info["clientIdSource"] else ""))
    secret = "not needed" if not info["confidential"] else (
        f"set (from {info['secretSource']})" if info["secretSet"] else "not set")
    if info["secretProblem"]:
        secret += f"; the stored file is refused: {info['secretProblem']}"
    click.echo(f"client secret: {secret}")
    click.echo(f"callback URL:  {info['redirectUri']}")
    click.echo(f"ready:         {'yes' if info['ready'] else 'no'}")


@client.command("remove")
@click.argument("slug")
def remove_client(slug: str) -> None:
    """Forget SLUG's client id (config key) and stored secret; the environment is yours to clear."""
    from kirocrew_core.config import unset_value

    from kirocrew_connections import clients

    provider = _provider(slug)
    had_id = unset_value(clients.config_key(provider.slug)) if provider.slug in clients.CONFIGURABLE_SLUGS \
        else False
    had_secret = clients.remove_secret_file(provider.slug)
    if had_secret:
        _audit("connections_client.secret_removed", provider.slug)
    click.echo(f"{provider.slug}: " + ("removed" if had_id or had_secret else "nothing was configured"))
