"""Redaction for anything a client sees: error details, workspace identities, stored replies and events.

Status, events and error messages never carry absolute paths (they reveal user
names and project layout) — only a workspace's last path component and a hash —
nor secrets an external tool may echo (URL credentials, ``token=...``, bearer
tokens, and the credential shapes of :mod:`kirocrew_core.redaction`: AWS access key ids,
GitHub and Slack tokens, JWTs, private keys).
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any

from kirocrew_core.redaction import redact_secrets

from kirocrew_conversations import limits

# An absolute path: a "/" not preceded by a word character, dot or another path character.
_ABSOLUTE_PATH = re.compile(r"(?<![\w./~-])(?:~|/)[^\s'\"`,;:()<>\[\]{}]*")


def redact_text(text: str, limit: int = limits.ERROR_MESSAGE_MAX_CHARS) -> str:
    """``text`` with secrets replaced by ``<redacted>``, absolute paths by ``<path>``, cut to ``limit``."""
    return _ABSOLUTE_PATH.sub("<path>", redact_secrets(text))[:limit]


def redact_payload(value: Any) -> Any:
    """``value`` (an event's payload: dicts, lists, strings, numbers) with every string passed through
    :func:`~kirocrew_core.redaction.redact_secrets`; keys are the store's own names and are kept."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {key: redact_payload(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_payload(item) for item in value]
    return value


def workspace_fingerprint(path: str) -> str:
    """A stable, non-reversible id of a directory, for filtering without showing the path."""
    digest = hashlib.sha256(os.path.realpath(path).encode("utf-8", "surrogateescape")).hexdigest()
    return f"ws_{digest[:20]}"


def workspace_label(path: str) -> str:
    """The last path component: enough to recognise a project, never where it lives."""
    return os.path.basename(os.path.normpath(path))[: limits.NAME_MAX_CHARS * 4]
