"""What counts as a secret, in one place: the names that mark a value as one, and secret-shaped text.

The audit log redacts fields by these names, kirocrew-mcp keeps credential-named variables out of
headers and error messages, the conversations server and the computer-use tree redact
``name=value`` text: all read this vocabulary, so a new kind of credential is added once. Each
caller keeps its own marker (``[redacted]``, ``<redacted>``) and its own policy on top.
"""

from __future__ import annotations

import re

# Words that make a name (a field key, a variable, the key of ``key=value``) a secret's name,
# matched anywhere in the normalised name (lower case, "-" and " " as "_").
SECRET_NAME_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "authorization",
    "cookie",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "code_verifier",
    "refresh",
    "bearer",
)

#: The words as a regex alternation for text: ``api_key`` also matches ``api-key`` and ``apikey``.
SECRET_NAME_PATTERN = "|".join(word.replace("_", "[_-]?") for word in SECRET_NAME_WORDS)

# Names that only hint at a credential (AUTH_URL, SESSION_ID, a bare KEY or PAT) and kirocrew's own
# variables: not redacted from text, but their values never leave the machine (an HTTP header).
_CREDENTIAL_HINT = re.compile(r"auth|session|private|(?:^|_)key(?:$|_)|(?:^|_)pat(?:$|_)|^kirocrew_")

# Credential-shaped values, whatever they are called.
SECRET_VALUE_PATTERNS = tuple(re.compile(pattern) for pattern in (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bgh[pousr]_[A-Za-z0-9]{20,}\b",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}\b",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b",
    r"\bsk-[A-Za-z0-9_-]{16,}\b",
    r"\bAIza[0-9A-Za-z_-]{30,}\b",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b",  # JWTs
))


_URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s@]+@")
_SECRET_ASSIGNMENT = re.compile(
    rf"(?i)\b([\w.-]*(?:{SECRET_NAME_PATTERN})[\w.-]*)(\s*[=:]\s*)(?:bearer\s+)?[^\s'\",;]+")
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+")


def redact_secrets(text: str, marker: str = "<redacted>") -> str:
    """``text`` with secrets replaced by ``marker``: URL credentials, ``token=...``, bearer tokens and the
    credential shapes above. Paths are kept (a command or a reply the owner must still be able to read)."""
    text = _URL_CREDENTIALS.sub(marker + "@", text)
    text = _SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + m.group(2) + marker, text)
    text = _BEARER.sub("Bearer " + marker, text)
    for pattern in SECRET_VALUE_PATTERNS:
        text = pattern.sub(marker, text)
    return text


def normalise_name(name: str) -> str:
    """``name`` in lower case with "-" and " " as "_", the form :data:`SECRET_NAME_WORDS` are in."""
    return name.lower().replace("-", "_").replace(" ", "_")


def is_secret_name(name: str) -> bool:
    """Whether a value under ``name`` is a secret (``client_secret``, ``X-Api-Key``, ``GITHUB_TOKEN``...)."""
    normal = normalise_name(name)
    return any(word in normal for word in SECRET_NAME_WORDS)


def is_credential_name(name: str) -> bool:
    """Whether a variable's value must never leave the machine: a secret's name, or one hinting at it."""
    return is_secret_name(name) or _CREDENTIAL_HINT.search(normalise_name(name)) is not None
