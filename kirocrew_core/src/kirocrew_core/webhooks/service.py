"""The ``webhooks`` host service: while hooks are registered, a host started on demand stays up to receive them.

It starts nothing and stops nothing; its ``busy`` says "N webhooks registered", so a host a relay
started in the background does not idle out (``host.idle_secs``) while a sender may still post (as
kirocrew-cron's scheduled jobs keep it up). The host asks every half second on its event loop, so the
answer costs one ``stat`` of the store, and the file is read again only when it changed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kirocrew_core.errors import KirocrewError


@dataclass
class _Seen:
    signature: tuple[int, int, int] | None = None
    count: int = 0


_SEEN = _Seen()


async def start() -> None:
    """Nothing to start: the webhook route reads the store per request."""


async def stop() -> None:
    """Nothing to stop."""


def busy() -> str | None:
    """``"N webhook(s) registered"`` while the store holds hooks, else None (also when it cannot be read)."""
    from kirocrew_core.webhooks import store

    try:
        info = os.stat(store.store_file())
    except OSError:
        return None
    signature = (info.st_mtime_ns, info.st_size, info.st_ino)
    if signature != _SEEN.signature:
        try:
            count = len(store.all_hooks())
        except KirocrewError:
            count = 0
        _SEEN.signature, _SEEN.count = signature, count
    return f"{_SEEN.count} webhook(s) registered" if _SEEN.count else None
