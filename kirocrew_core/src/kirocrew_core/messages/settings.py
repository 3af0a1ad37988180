"""How the owner configures message channels: ``[channels.NAME]`` in ``config.toml``, secrets apart.

A channel is a table of the ``channels`` config table (``kirocrew config`` edits it like any other)::

    [channels.team]                  # a webhook: Slack's or Teams' incoming webhook, or any JSON endpoint
    kind = "webhook"

    [channels.mail]                  # e-mail over SMTP
    kind = "email"
    smtp_host = "smtp.example.org"
    smtp_port = 587
    security = "starttls"            # "starttls" (default), "ssl" or "plain"
    username = "kirocrew@example.org"
    from_addr = "kirocrew@example.org"
    to = ["me@example.org"]
    timeout_secs = 10

Each channel's **secret** (the webhook's URL, which carries its token; the SMTP password) never
sits in ``config.toml``: ``kirocrew messages secret NAME`` reads it from standard input into an
owner-only file (:func:`secret_file`, mode 0600, in a folder sessions may not read without the
owner's say-so), and the redactor removes it from every text kirocrew stores or shows.
``messages.default_channel`` names the channel ``send_message`` uses when a call names none.

The table and the key are declared in :mod:`kirocrew_core.config` (a plugin module that declared them
would import the config module, and so tomlkit, into every ``kirocrew --help``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.config import CHANNELS, DEFAULT_CHANNEL_TIMEOUT_SECS
from kirocrew_core.errors import BadInputError
from kirocrew_core.jsonfile import write_bytes_atomic

DEFAULT_TIMEOUT_SECS = DEFAULT_CHANNEL_TIMEOUT_SECS
SECRET_MAX_BYTES = 4096


def secrets_dir() -> Path:
    """The channels' secrets, one owner-only file per channel (``<crew home>/state/messages/channel-secrets``)."""
    return home.state_dir("messages") / "channel-secrets"


def secret_file(name: str) -> Path:
    problem = CHANNELS.name_problem(name)
    if problem:
        raise BadInputError(problem, code="bad_channel_name")
    return secrets_dir() / name


def read_secret(name: str) -> str | None:
    """The channel's secret, or None when none is set (never logged, never shown)."""
    try:
        data = secret_file(name).read_bytes()[:SECRET_MAX_BYTES]
    except FileNotFoundError:
        return None
    return data.decode("utf-8", "replace").strip() or None


def write_secret(name: str, value: str) -> None:
    """Keep ``value`` as the channel's secret: one line, at most :data:`SECRET_MAX_BYTES` bytes, written 0600."""
    value = value.strip()
    if not value or "\n" in value or "\r" in value or len(value.encode()) > SECRET_MAX_BYTES:
        raise BadInputError(f"a channel secret is one non-empty line of at most {SECRET_MAX_BYTES} bytes",
                            code="bad_channel_secret")
    path = secret_file(name)
    home.ensure_crew_home()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    write_bytes_atomic(path, value.encode(), secret=True)


def remove_secret(name: str) -> bool:
    try:
        secret_file(name).unlink()
    except FileNotFoundError:
        return False
    return True


def configured() -> dict[str, dict[str, Any]]:
    """The ``[channels.NAME]`` tables as the owner set them (raises the config's own errors)."""
    from kirocrew_core.config import load_config

    return load_config().entries("channels")


def default_channel() -> str:
    from kirocrew_core.config import load_config

    return str(load_config().get("messages.default_channel"))
