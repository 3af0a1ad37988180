"""``kirocrew learn context``: what the rendered agent's ``agentSpawn`` hook prints at a session's start.

kiro-cli runs the hook in the session's working directory and writes the hook event
(``{"hook_event_name": "agentSpawn", "cwd": …}``) to its stdin; its ``cwd`` wins when
present. It runs at every session start, so the launcher calls :func:`print_context`
without click or the plugins, and it never fails: a session must start even when the
store is broken (``kirocrew learn list`` reports that).
"""

from __future__ import annotations

import os
import sys

from kirocrew_core.hook_event import event_cwd
from kirocrew_core.lessons import store


def print_context() -> None:
    """Print the workspace lessons for the event's directory (else the current one); nothing when there are none."""
    directory = event_cwd() or os.getcwd()
    sys.stdout.write(store.context_text(directory))
    sys.stdout.flush()
