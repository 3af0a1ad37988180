"""The event kiro-cli writes to an agent hook's stdin, read by the hook commands kirocrew renders.

kiro-cli runs each ``agentSpawn`` hook in the session's working directory and writes the hook
event (``{"hook_event_name": "agentSpawn", "cwd": …}``) to its stdin; its ``cwd`` wins when
present. Standard library only: the hooks run at every session start.
"""

from __future__ import annotations

import json
import os
import sys

#: The hook event is a small JSON object; read no more than this.
EVENT_MAX_BYTES = 64 * 1024


def event_cwd() -> str | None:
    """The ``cwd`` of the hook event on stdin, or None (no event, a terminal, not JSON, not absolute)."""
    if sys.stdin is None or sys.stdin.isatty():
        return None
    try:
        event = json.loads(sys.stdin.read(EVENT_MAX_BYTES) or "{}")
    except (ValueError, OSError):
        return None
    cwd = event.get("cwd") if isinstance(event, dict) else None
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) else None
