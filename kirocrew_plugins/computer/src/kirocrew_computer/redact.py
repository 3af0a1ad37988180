"""Credential-shaped text is redacted from everything the model sees (tree and header).

A window shows whatever is on screen; a token in a terminal or a settings
page must not reach the model's context verbatim. Patterns are deliberately
shape-based (no per-app knowledge) and leave ordinary words alone.
"""

from __future__ import annotations

import re

from kirocrew_core.redaction import SECRET_NAME_PATTERN, SECRET_VALUE_PATTERNS

REDACTED = "[redacted]"

_PATTERNS = (
    re.compile(r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    *SECRET_VALUE_PATTERNS,
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:[^\s@/]+@"),
)
# key=value / key: value where the key names a secret: keep the key, hide the value.
_KEYED = re.compile(rf"(?i)\b([\w-]*(?:{SECRET_NAME_PATTERN})[\w-]*\s*[:=]\s*)(\"[^\"]*\"|'[^']*'|\S+)")


def redact(text: str) -> str:
    """``text`` with credential-shaped substrings replaced by ``[redacted]``."""
    if not text:
        return text
    for pattern in _PATTERNS:
        text = pattern.sub(REDACTED, text)
    return _KEYED.sub(lambda m: m.group(1) + REDACTED, text)
