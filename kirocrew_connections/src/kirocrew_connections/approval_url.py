"""The gate every approval URL passes before a card serves it or a browser opens it (cold and warm alike).

kiro-cli discovers the authorization endpoint from metadata the MCP server
publishes, so whoever controls that server (or sits between it and us) chooses
the page the user is sent to. Two checks stand between that URL and the user:

* it carries nothing secret (userinfo, a token, a client secret, a verifier):
  the URL is shown and kept in the mint table;
* its origin is one of the provider's approval origins: the hosts of the
  authorization endpoints the provider documents (the registry's
  ``approval_hosts``, https, default port), exact match, never a suffix, so
  ``mcp.notion.com.attacker.example`` is not Notion. Under ``kirocrew serve
  --override-origin`` an overridden origin is replaced by its loopback target,
  as every other provider URL is.

A refusal is a stable reason (:data:`REFUSED_CREDENTIAL`,
:data:`REFUSED_HOST`); the caller never records the URL, only the reason and,
for a foreign host, that host (a host is not a secret, and it is what an
operator needs to judge the refusal).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    from kirocrew_connections.registry import Provider

#: A URL that carries a credential: disposed and minted once more, then the mint fails with this reason.
REFUSED_CREDENTIAL = "mint_url_rejected"
#: A URL whose origin is not one of the provider's approval origins: refused at once (a retry asks the same server).
REFUSED_HOST = "mint_approval_host_refused"

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Query/fragment keys an authorization URL may carry without leaking a secret.
_CREDENTIAL_KEYS = frozenset({
    "access_token", "refresh_token", "id_token", "client_secret", "code", "code_verifier", "password",
    "passwd", "api_key", "apikey", "token", "assertion", "client_assertion", "secret", "session_token",
})
_CREDENTIAL_KEY_RE = re.compile(r"(secret|password|passwd|verifier|api[_-]?key|(^|[_-])token$)", re.I)
# Characters a browser's URL parser reads differently from urlsplit (``\`` is a path separator there).
_AMBIGUOUS_RE = re.compile(r"[\x00-\x20\x7f\\]")


def oauth_url_contains_credential(url: str) -> bool:
    """Whether an approval URL carries something secret (userinfo, a token, a client secret, a verifier).

    The URL is shown to the user and kept in the mint table; one that embeds a
    credential must never be served or recorded, however kiro-cli came to send it.
    """
    try:
        parts = urlsplit(url)
        has_userinfo = parts.username is not None or parts.password is not None
    except ValueError:
        return True
    if has_userinfo:
        return True
    for section in (parts.query, parts.fragment):
        for key, _value in parse_qsl(section, keep_blank_values=True):
            name = key.strip().lower()
            if name in _CREDENTIAL_KEYS or _CREDENTIAL_KEY_RE.search(name):
                return True
    return False


def url_origin(url: str) -> str | None:
    """``scheme://host[:port]`` of an http(s) URL, lowercase, default port dropped; None when it is not one.

    A URL with whitespace, a control character or a backslash anywhere is None:
    a browser would parse its host differently from this function.
    """
    if _AMBIGUOUS_RE.search(url):
        return None
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not host or "@" in parts.netloc:
        return None
    shown = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        shown = f"{shown}:{port}"
    return f"{scheme}://{shown}"


def url_host(url: str) -> str | None:
    """The URL's host as the audit names a refused one (lowercase), None when it has none."""
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def approval_origins(hosts: Iterable[str]) -> tuple[str, ...]:
    """The origins a registry's ``approval_hosts`` allow: ``https://<host>`` each (default port)."""
    return tuple(f"https://{host}" for host in hosts)


def host_allowed(url: str, provider: Provider) -> bool:
    """Whether ``url``'s origin is exactly one of ``provider``'s approval origins."""
    origin = url_origin(url)
    allowed = {url_origin(candidate) for candidate in provider.approval_origins}
    return origin is not None and origin in allowed


def refusal(url: str, provider: Provider) -> str | None:
    """Why ``url`` must not be served or opened for ``provider`` (a stable reason), None when it may."""
    if oauth_url_contains_credential(url):
        return REFUSED_CREDENTIAL
    if not host_allowed(url, provider):
        return REFUSED_HOST
    return None
