"""What the sandbox backends (bubblewrap, Seatbelt) share: failure texts and their hook entries."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping
from typing import Any

from kirocrew_core.contributions import AuthorityBackend

from kirocrew_conversations.redact import redact_text
from kirocrew_conversations.vocabulary import SANDBOXED_AUTHORITIES


def failure_text(what: str, done: subprocess.CompletedProcess[bytes]) -> str:
    """``what (exit N): <the tool's last stderr line>``, redacted: the reason an authority is unavailable."""
    detail = (done.stderr or b"").decode("utf-8", "replace").strip().splitlines()
    return redact_text(f"{what} (exit {done.returncode}): {detail[-1] if detail else 'no message'}")


def restricted_backends(backend: Any, descriptions: Mapping[str, str],
                        platforms: tuple[str, ...]) -> list[AuthorityBackend]:
    """``read_only`` and ``workspace_write``, both served by one preflighted ``backend``."""
    return [AuthorityBackend(name=mode, description=descriptions[mode], available=backend.available,
                             factory=functools.partial(backend.factory, mode=mode), platforms=platforms)
            for mode in SANDBOXED_AUTHORITIES]
