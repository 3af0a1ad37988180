"""kiro-cli's OAuth grant artifacts for remote MCP servers: where they live, whether they exist.

kiro-cli stores one grant per MCP endpoint as a pair of files in its OAuth
cache dir, ``{grant_key}.token.json`` and ``{grant_key}.registration.json``,
where ``grant_key`` mirrors kiro-cli's ``mcp_client::oauth_util::compute_key``.
Both the connections plugin (census, revoke) and the fake kiro-cli (which
writes them) use this module, so the two can never disagree on a name.

Everything here is stat-only: a token file is a credential and is never opened.
Presence is tri-state (present, absent, unknowable) because a destructive
decision must treat "could not tell" as "keep".
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path
from urllib.parse import urlsplit

from kirocrew_core import home

TOKEN_SUFFIX = ".token.json"
REGISTRATION_SUFFIX = ".registration.json"
DEFAULT_HTTPS_PORT = 443

# An absent artifact: the path, or one of its parents, is not there.
_ABSENT_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR})


def grant_key(url: str) -> str:
    """sha256 hex of ``origin + (path or "/")``, as kiro-cli names a grant.

    The scheme and host are lowercased and the host IDNA-encoded (an IPv6 host
    is bracketed); the port is kept only when present and not 443 (kiro-cli
    omits 443 whatever the scheme); query and fragment are dropped; the path
    is kept verbatim, so a trailing slash gives a different key.

    Raises :class:`ValueError` for a URL without a scheme or host, or with a
    port that is not a number.
    """
    parts = urlsplit(url)
    hostname = parts.hostname
    if not parts.scheme or not hostname:
        raise ValueError(f"not an absolute URL with a host: {url!r}")
    port = parts.port  # ValueError on a malformed or out-of-range port
    host = hostname.lower().encode("idna").decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    origin = f"{parts.scheme.lower()}://{host}"
    if port is not None and port != DEFAULT_HTTPS_PORT:
        origin += f":{port}"
    return hashlib.sha256((origin + (parts.path or "/")).encode("utf-8")).hexdigest()


def artifact_paths(url: str) -> tuple[Path, Path]:
    """``(token_path, registration_path)`` of the grant for ``url`` in kiro-cli's OAuth cache dir."""
    key = grant_key(url)
    cache = home.oauth_cache_dir()
    return cache / f"{key}{TOKEN_SUFFIX}", cache / f"{key}{REGISTRATION_SUFFIX}"


def artifact_presence(path: str | os.PathLike[str]) -> bool | None:
    """True for a regular file, False when absent, None when it cannot be told.

    Uses ``os.stat`` directly rather than ``Path.is_file``, which swallows
    OSError on newer Pythons and would turn "unreadable" into "absent".
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno in _ABSENT_ERRNOS:
            return False
        return None
    return stat.S_ISREG(st.st_mode)


def combine_presence(*presences: bool | None) -> bool | None:
    """Pair rule: any False → False; else any None → None; else True.

    A grant needs every artifact, so one proven-absent artifact settles it even
    when another one could not be checked.
    """
    if any(p is False for p in presences):
        return False
    if any(p is None for p in presences):
        return None
    return True


def grant_presence(url: str) -> bool | None:
    """Whether kiro-cli holds a grant for ``url``: both artifacts present (tri-state, stat only)."""
    token, registration = artifact_paths(url)
    return combine_presence(artifact_presence(token), artifact_presence(registration))
