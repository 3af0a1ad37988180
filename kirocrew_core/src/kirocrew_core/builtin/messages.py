"""Core builtin plugin: messages to the owner (``send_message``, ``delete_message``, ``file_send``).

Also the built-in channels (e-mail and webhook, from ``[channels.NAME]`` in ``config.toml``) through
``message_channels()``, ``kirocrew messages``, its owner-only admin server, the JSON routes and the
outbox download, and the channels' secrets for the redactor and the permission gate.

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation. The config keys are
declared by :mod:`kirocrew_core.messages.settings`, imported by :func:`declare_config` when the config
module asks the plugins for their keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import (
        CoreMcpTool,
        HostedMcpServer,
        MessageChannel,
        ProtectedPath,
        SecretFile,
    )


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("messages", "kirocrew_core.messages.cli:messages",
                         "Messages sessions sent: list, mute a session, approve a file, channels and their secrets.")


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.messages.tools import message_tools

    return message_tools()


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    """``kirocrew-messages-admin``: the owner's mutes, approvals and channel secrets, which ``kirocrew messages``
    calls."""
    from kirocrew_core.messages.admin import hosted_server

    return [hosted_server()]


@hookimpl(trylast=True)
def message_channels() -> list[MessageChannel]:
    """One e-mail or webhook channel per ``[channels.NAME]`` table (trylast: a plugin's channel of the same
    name wins)."""
    from kirocrew_core.messages.channels import configured_channels

    return configured_channels()


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from kirocrew_core.messages.api import routes

    return routes()


@hookimpl
def secret_files() -> list[SecretFile]:
    """The channels' secrets (webhook URLs carry their token; SMTP passwords): never in a stored or shown text."""
    from kirocrew_core.contributions import SecretFile
    from kirocrew_core.messages.settings import secrets_dir

    return [SecretFile(secrets_dir(), label="message channel secrets")]


@hookimpl
def protected_paths() -> list[ProtectedPath]:
    """Sessions read the channels' secrets only with the owner's say-so (and never write the crew home)."""
    from kirocrew_core.contributions import ProtectedPath
    from kirocrew_core.messages.settings import secrets_dir

    return [ProtectedPath(secrets_dir(), secret=True, label="message channel secrets")]
