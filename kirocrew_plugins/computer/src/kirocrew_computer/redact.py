"""Credential-shaped text is redacted from everything the model sees (tree and header).

A window shows whatever is on screen; a token in a terminal or a settings
page must not reach the model's context verbatim. Patterns are deliberately
shape-based (no per-app knowledge) and leave ordinary words alone.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"

_PATTERNS = tuple(re.compile(pattern) for pattern in (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    r"(?i)\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}",
    r"\bAKIA[0-9A-Z]{16}\b",
    r"\bASIA[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}\b",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}\b",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b",
    r"\bsk-[A-Za-z0-9_-]{16,}\b",
    r"\bAIza[0-9A-Za-z_-]{30,}\b",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b",
    r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:[^\s@/]+@",
))
# key=value / key: value where the key names a secret: keep the key, hide the value.
_KEYED = re.compile(
    r"(?i)\b((?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|client[_-]?secret)"
    r"[\w-]*\s*[:=]\s*)(\"[^\"]*\"|'[^']*'|\S+)")


def redact(text: str) -> str:
    """``text`` with credential-shaped substrings replaced by ``[redacted]``."""
    if not text:
        return text
    for pattern in _PATTERNS:
        text = pattern.sub(REDACTED, text)
    return _KEYED.sub(lambda m: m.group(1) + REDACTED, text)
