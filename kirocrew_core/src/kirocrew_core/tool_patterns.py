"""The syntax of a governance ceiling pattern: ``@server`` or ``@server/tool``.

A leaf both sides read: :mod:`kirocrew_core.config` validates ``governance.ceiling`` with it, and
:mod:`kirocrew_core.governance` (which reads the config) matches references against the patterns.
"""

from __future__ import annotations

import re

_PATTERN = re.compile(r"^@[^\s/@]+(/[^\s/]+)?$")


def pattern_problem(pattern: object) -> str | None:
    """Why ``pattern`` is not a ceiling pattern, or ``None`` when it is one."""
    if isinstance(pattern, str) and _PATTERN.match(pattern):
        return None
    return f"ceiling pattern must look like @server or @server/tool, got {pattern!r}"
