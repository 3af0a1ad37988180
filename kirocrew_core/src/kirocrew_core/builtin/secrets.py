"""Core builtin plugin: kirocrew's own secret values, for the one redactor (:mod:`kirocrew_core.redaction`).

The gateway owner token and the security event log's key: whatever a session's command prints,
neither comes back in a stored or shown result. Paths only; the redactor reads the files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from kirocrew_core.contributions import SecretFile


def core_secret_files() -> list[SecretFile]:
    """The gateway token (text) and the SEL key (32 raw bytes), where the current crew home keeps them."""
    from kirocrew_core import home
    from kirocrew_core.contributions import SecretFile

    return [SecretFile(home.gateway_token_file(), label="the gateway owner token"),
            SecretFile(home.audit_key_file(), binary=True, label="the security event log's key")]


@hookimpl
def secret_files() -> list[SecretFile]:
    return core_secret_files()
