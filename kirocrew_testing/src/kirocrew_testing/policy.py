"""The owner's permission policy for a test: write ``<crew home>/policy.toml`` in the test's isolated home.

Sessions kirocrew starts are governed by that file (:mod:`kirocrew_core.gate`); with none, the
``unrestricted`` authority allows what no protection or ceiling stops. A test that needs kiro's
permission requests to reach an owner says so::

    write_policy(defaults={"unrestricted": "ask"})                        # the owner decides every call
    write_policy(rules=[{"decision": "deny", "tool": "shell", "command": "rm"}])

The host and every process started with the test's environment read the same file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ASK_EVERYTHING = {"unrestricted": "ask", "read_only": "ask", "workspace_write": "ask"}


def write_policy(*, defaults: Mapping[str, str] | None = None,
                 rules: Sequence[Mapping[str, Any]] = ()) -> Path:
    """Replace the owner's policy file with ``defaults`` and ``rules`` (each a ``[[rule]]`` table); its path."""
    import tomlkit

    from kirocrew_core import home
    from kirocrew_core.jsonfile import write_bytes_atomic

    document = tomlkit.document()
    if defaults:
        document["defaults"] = dict(defaults)
    if rules:
        document["rule"] = [dict(rule) for rule in rules]
    home.ensure_crew_home()
    path = home.crew_home() / "policy.toml"
    write_bytes_atomic(path, document.as_string().encode("utf-8"), secret=True)
    return path
