"""Call the running host's owner-only HTTP API from a command line, the way a dashboard page does.

A CLI command sometimes needs what only the host holds (its live MCP probe results) or
wants the host to do what a page button does (Apply & Restart's session restart). The
host's pong names its dashboard address; the owner token is the gateway's own
(``<crew home>/gateway.token``, 0600), sent as ``Authorization: Bearer``, so the request
passes the same owner check as the page's, and it sends no ``Origin`` (a script, not a
browser).

- :func:`running_host_url` is the address of the host of this crew home, or ``None``
  when none runs, or when this process is that host (it holds the answers itself). It
  never starts one: a command that only wants to reach a running host must not leave
  one behind.
- :func:`call` sends one JSON request and answers the JSON object, raising
  :class:`OwnerApiError` with the route's own ``code`` for an error answer.

Standard library only (``urllib``): no command pays for an HTTP client to reach loopback.
"""

from __future__ import annotations

import json
from typing import Any

from kirocrew_core.errors import KirocrewError

#: A bound on one request; the host's own routes cap their slow parts (a restart waits 30 s for its render).
TIMEOUT_SECS = 60.0


class OwnerApiError(KirocrewError):
    """The host answered with an error (its ``code``), or could not be asked (``host_request_failed``)."""

    code = "host_request_failed"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 answer: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.answer = answer or {}


def running_host_url() -> str | None:
    """The running host's dashboard address (without a token); ``None`` when no host answers or we are it."""
    import os

    from kirocrew_core.host import client

    try:
        pong = client.ping()
    except client.HostError:
        return None
    if pong.get("pid") == os.getpid():
        return None
    url = pong.get("url")
    return url.rstrip("/") if isinstance(url, str) and url.startswith("http://") else None


def call(method: str, path: str, body: dict[str, Any] | None = None, *, url: str | None = None,
         timeout: float = TIMEOUT_SECS) -> dict[str, Any]:
    """``method path`` on the running host (or ``url``) as the owner; the answer's JSON object.

    :class:`OwnerApiError` ``host_not_running`` when no host answers, the route's own code
    (and ``status``, ``answer``) for an error answer, ``host_request_failed`` when the
    request itself failed.
    """
    import urllib.error
    import urllib.request

    from kirocrew_core.gateway.auth import load_or_create_token

    base = url or running_host_url()
    if base is None:
        raise OwnerApiError("no kirocrew host is running", code="host_not_running")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", data=data, method=method, headers={
        "Authorization": f"Bearer {load_or_create_token()}", "Content-Type": "application/json",
        "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return _json_object(response.read(), response.status)
    except urllib.error.HTTPError as exc:
        answer = _json_object(exc.read(), exc.code, strict=False)
        code = answer.get("code")
        raise OwnerApiError(str(answer.get("error") or f"the host answered {exc.code}"),
                            code=code if isinstance(code, str) and code.isidentifier() else f"http_{exc.code}",
                            status=exc.code, answer=answer) from None
    except (OSError, ValueError) as exc:
        raise OwnerApiError(f"could not ask the host ({base}{path}): {exc}") from None


def _json_object(raw: bytes, status: int, *, strict: bool = True) -> dict[str, Any]:
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        return answer
    if strict:
        raise OwnerApiError(f"the host answered {status} with something that is not a JSON object")
    return {}


__all__ = ["OwnerApiError", "TIMEOUT_SECS", "call", "running_host_url"]
