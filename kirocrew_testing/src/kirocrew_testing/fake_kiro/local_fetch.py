"""``!fetch``'s GET: loopback URLs only, so a test's fetch never leaves the machine.

Only ``http://127.0.0.1`` and ``http://localhost`` (any port) are fetched; the environment's proxies
are ignored and redirects are not followed (a redirect could point anywhere), so the fake makes no
network call a test did not serve itself.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
FETCH_TIMEOUT_SECS = 30.0


@dataclass(frozen=True)
class Fetched:
    status: int
    body: str


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then reports the 3xx itself


def refusal(url: str) -> str | None:
    """Why the fake will not fetch ``url``, or None when it is a loopback http URL."""
    try:
        parts = urlsplit(url)
        loopback = parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS and parts.port != 0
    except ValueError:  # e.g. a port that is not a number
        loopback = False
    if not loopback:
        return (f"fake-kiro-cli fetches only http://127.0.0.1 and http://localhost URLs (no network); "
                f"refused {url!r}")
    return None


def fetch(url: str, limit: int) -> Fetched:
    """GET ``url`` (checked by :func:`refusal` first); the body is cut to ``limit`` bytes. Raises OSError."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())
    try:
        with opener.open(url, timeout=FETCH_TIMEOUT_SECS) as response:
            return Fetched(response.status, response.read(limit).decode("utf-8", "replace"))
    except urllib.error.HTTPError as exc:  # a 4xx/5xx (or an unfollowed 3xx) is still an answer
        with exc:
            return Fetched(exc.code, exc.read(limit).decode("utf-8", "replace"))
