"""Owner authentication: one random token, a session cookie, and the guards around them.

The owner is whoever can read ``<crew home>/gateway.token`` (0600 inside the
0700 crew home). ``kirocrew serve`` prints ``http://<host>:<port>/?token=<t>``;
opening it sets an HttpOnly, SameSite=Strict cookie holding the token and
redirects (303) to the same page without the query, so the token leaves the
address bar and the history. Scripts send ``Authorization: Bearer <t>``.

Every HTTP answer carries the dashboard's Content-Security-Policy
(:data:`~kirocrew_core.gateway.shell.CONTENT_SECURITY_POLICY`). The only requests
that pass without the owner's credential are GETs of the sign-in page's stylesheet and icon
(:data:`~kirocrew_core.gateway.shell.PUBLIC_STATIC_PATHS`) and POSTs of inbound webhooks
under :data:`WEBHOOK_PATH_PREFIX`, which authenticate by their hook's own token
(:mod:`kirocrew_core.webhooks.inbound`; no plugin but core may route there). The Host guard
still applies to both.

:class:`OwnerAuthMiddleware` runs three guards on every HTTP and WebSocket
request, before routing (so an unknown path answers 401, not 404):

1. **Host**, when the gateway is bound to loopback: a page on ``evil.example``
   whose DNS later resolves to 127.0.0.1 (DNS rebinding) still sends
   ``Host: evil.example``; it gets 421 ``bad_host``. The port is not checked:
   the hostname is what a rebinding attacker forges.
2. **Credential**: no token gives 401 ``unauthenticated``, a wrong one 401
   ``bad_token``. JSON under ``/api/``; a small HTML page elsewhere.
3. **Origin**, for POST/PUT/PATCH/DELETE and WebSockets: cookies are shared by
   every port of a host (``localhost:8080`` is "same-site" for SameSite), so a
   foreign ``Origin`` gets 403 ``foreign_origin``. A request without ``Origin``
   passes only with the Bearer header, which a browser page cannot forge.

The token is never logged: ``serve`` turns uvicorn's access log off, because it
would print the ``?token=`` query string.
"""

from __future__ import annotations

import hmac
import logging
import os
import re
import secrets
import stat
import warnings
from collections.abc import Collection, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from kirocrew_core import home
from kirocrew_core.errors import MalformedFileError, UnreadableFileError
from kirocrew_core.gateway.shell import CONTENT_SECURITY_POLICY, PUBLIC_STATIC_PATHS, SANDBOX_CONTENT_SECURITY_POLICY
from kirocrew_core.jsonfile import write_bytes_atomic

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection
    from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

SESSION_COOKIE = "kirocrew_session"
TOKEN_QUERY = "token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: POSTs under this prefix are inbound webhooks: third parties call them with a hook's token, not the owner's.
WEBHOOK_PATH_PREFIX = "/webhooks/"
MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

# secrets.token_urlsafe(32) gives 43 characters; a hand-written token must be as long.
_TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{32,512}")
_MAX_TOKEN_FILE_BYTES = 4096
_SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
# Added even when the app set a policy of its own: a browser enforces both, so a page can only tighten it.
_CSP_HEADER = (b"content-security-policy", CONTENT_SECURITY_POLICY.encode("ascii"))
# The one answer that goes without the dashboard's policy: sandboxed artifact content, under a stricter one.
_SANDBOX_CSP_HEADER = (b"content-security-policy", SANDBOX_CONTENT_SECURITY_POLICY.encode("ascii"))


class TokenFileWarning(UserWarning):
    """The token file could have been read by someone else, so a new token was issued."""


# --- the token file -----------------------------------------------------------


def load_or_create_token() -> str:
    """The owner token from ``home.gateway_token_file()``, created (0600, atomically) if absent.

    The same token is reused across restarts, so an open dashboard tab keeps
    working. A token file with any group or other permission bit is not
    tightened but replaced: its token may already have been read, so it is
    treated as leaked and a new one is issued, with a :class:`TokenFileWarning`.
    A file that does not hold a token is reported (``malformed_token_file``) and
    left alone; deleting it has a new one made.
    """
    home.ensure_crew_home()
    path = home.gateway_token_file()
    token = _read_token(path)
    if token is None:
        token = secrets.token_urlsafe(32)
        write_bytes_atomic(path, (token + "\n").encode("ascii"), secret=True)
    return token


def _read_token(path: Path) -> str | None:
    """The stored token, or ``None`` when absent or possibly leaked (see above)."""
    try:
        with open(path, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            raw = fh.read(_MAX_TOKEN_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableFileError(f"{path}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        raise MalformedFileError(path, "not a regular file", code="malformed_token_file")
    if mode & 0o077:
        warnings.warn(
            f"{path} was accessible to other users (mode {stat.S_IMODE(mode):04o}), so its token "
            "may have leaked; a new owner token was issued (0600)",
            TokenFileWarning,
            stacklevel=3,
        )
        return None
    text = raw.decode("ascii", errors="replace").strip()
    if len(raw) > _MAX_TOKEN_FILE_BYTES or not _TOKEN_SHAPE.fullmatch(text):
        raise MalformedFileError(
            path,
            "not a gateway token (expected 32 to 512 URL-safe characters); "
            "delete the file to have a new token made",
            code="malformed_token_file",
        )
    return text


def token_matches(candidate: str | None, token: str) -> bool:
    """Constant-time comparison, so response timing does not reveal a token prefix."""
    if not candidate:
        return False
    return hmac.compare_digest(candidate.encode("utf-8", "replace"), token.encode("utf-8"))


# --- request parsing ------------------------------------------------------------


def is_api_path(path: str) -> bool:
    """Paths whose answers, refusals included, are JSON."""
    return path == "/api" or path.startswith("/api/")


def is_webhook_path(path: str) -> bool:
    """Paths of inbound webhooks, which authenticate by their hook's token (see :data:`WEBHOOK_PATH_PREFIX`)."""
    return path.startswith(WEBHOOK_PATH_PREFIX)


def split_host(value: str) -> tuple[str, int | None] | None:
    """``Host``-header ``name[:port]`` (``[v6]:port`` too), lowercased; ``None`` if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end == -1:
            return None
        name, rest = value[1:end], value[end + 1 :]
    else:
        name, colon, port_text = value.partition(":")
        rest = colon + port_text
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    return name, int(rest[1:]) if rest else None


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, credential = value.strip().partition(" ")
    return credential.strip() if scheme.lower() == "bearer" else None


def is_same_origin(origin: str, scope: Scope, host_header: str) -> bool:
    """True when ``origin`` is the scheme + host:port this request was addressed to."""
    addressed = split_host(host_header)
    if addressed is None:
        return False
    name, port = addressed
    scheme = {"ws": "http", "wss": "https"}.get(scope.get("scheme", "http"), scope.get("scheme", "http"))
    default_port = 443 if scheme == "https" else 80
    try:
        parts = urlsplit(origin.strip())
        origin_port = parts.port
    except ValueError:
        return False
    if parts.scheme.lower() != scheme or not parts.hostname:
        return False
    return parts.hostname.lower() == name and (origin_port or default_port) == (port or default_port)


def _sign_in_location(conn: HTTPConnection) -> str:
    """The same page without ``?token=``; a path like ``//evil.example`` stays on this host."""
    path = "/" + conn.scope["path"].lstrip("/\\")
    kept = [(k, v) for k, v in conn.query_params.multi_items() if k != TOKEN_QUERY]
    return quote(path) + (f"?{urlencode(kept)}" if kept else "")


# --- the middleware -------------------------------------------------------------

_SIGN_IN_HINT = "Open the address printed by `kirocrew serve` (it ends in ?token=…) to sign in."


class OwnerAuthMiddleware:
    """Pure ASGI middleware enforcing the three guards in the module docstring.

    ``allowed_hosts`` is the set of ``Host`` names accepted (the loopback names
    by default); ``None`` turns the Host guard off, for ``serve --allow-remote``
    on a non-loopback address, where the Host is whatever name reaches it.
    """

    def __init__(
        self, app: ASGIApp, *, token: str, allowed_hosts: Collection[str] | None = LOOPBACK_HOSTS
    ) -> None:
        self.app = app
        self.token = token
        self.allowed_hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":
            send = _with_security_headers(send)
        refusal = self.check(scope)
        await (refusal or self.app)(scope, receive, send)

    def check(self, scope: Scope) -> ASGIApp | None:
        """``None`` to let the request through, else the ASGI response that refuses (or signs in)."""
        from starlette.requests import HTTPConnection

        conn = HTTPConnection(scope)
        websocket = scope["type"] == "websocket"
        method = "GET" if websocket else scope["method"].upper()
        host = conn.headers.get("host", "")
        addressed = split_host(host)
        if self.allowed_hosts is not None and (addressed is None or addressed[0] not in self.allowed_hosts):
            return _refusal(
                scope, 421, "bad_host",
                f"Host {host!r} is not this gateway's loopback address (DNS rebinding guard); "
                "use http://127.0.0.1:<port>/",
                json=True,
            )

        if not websocket and method in ("GET", "HEAD") and scope["path"] in PUBLIC_STATIC_PATHS:
            return None  # the sign-in page's stylesheet and icon (see PUBLIC_STATIC_PATHS)
        if not websocket and method == "POST" and is_webhook_path(scope["path"]):
            return None  # an inbound webhook: the route checks its hook's token (see WEBHOOK_PATH_PREFIX)
        bearer = _bearer(conn.headers.get("authorization"))
        if bearer is not None:
            if not token_matches(bearer, self.token):
                return _refusal(scope, 401, "bad_token", "the bearer token is not this gateway's owner token")
        else:
            signing_in = not websocket and method in ("GET", "HEAD") and not is_api_path(scope["path"])
            query_token = conn.query_params.get(TOKEN_QUERY) if signing_in else None
            if query_token is not None:
                if not token_matches(query_token, self.token):
                    refusal = _refusal(scope, 401, "bad_token", f"that sign-in token is not valid. {_SIGN_IN_HINT}")
                    return _audited(refusal, "gateway.sign_in", "denied", conn)
                return _audited(self._sign_in(conn), "gateway.sign_in", "ok", conn)
            cookie = conn.cookies.get(SESSION_COOKIE)
            if cookie is None:
                return _refusal(scope, 401, "unauthenticated", f"owner authentication required. {_SIGN_IN_HINT}")
            if not token_matches(cookie, self.token):
                return _refusal(
                    scope, 401, "bad_token", f"the session cookie is stale (the token changed). {_SIGN_IN_HINT}"
                )

        if websocket or method in MUTATING_METHODS:
            origin = conn.headers.get("origin")
            if origin is None and bearer is None:
                return _refusal(
                    scope, 403, "foreign_origin",
                    "a request that changes something needs an Origin header from this gateway's "
                    "own pages (scripts: send Authorization: Bearer <token>)",
                )
            if origin is not None and not is_same_origin(origin, scope, host):
                return _refusal(scope, 403, "foreign_origin", f"Origin {origin!r} is not this gateway")
        return None

    def _sign_in(self, conn: HTTPConnection) -> ASGIApp:
        from starlette.responses import RedirectResponse

        response = RedirectResponse(_sign_in_location(conn), status_code=303, headers={"Cache-Control": "no-store"})
        response.set_cookie(
            SESSION_COOKIE,
            self.token,
            httponly=True,
            samesite="strict",
            path="/",
            secure=conn.url.scheme == "https",
        )
        return response


def _audited(response: ASGIApp, event: str, outcome: str, conn: HTTPConnection) -> ASGIApp:
    """Record a sign-in attempt in the SEL (off the event loop), then send ``response``.

    An audit failure is logged and never blocks the owner from signing in.
    """
    client = conn.client.host if conn.client else "?"

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        import asyncio

        from kirocrew_core import audit

        try:
            await asyncio.to_thread(audit.record, event, actor="owner", outcome=outcome, client=client)
        except Exception as exc:  # noqa: BLE001 - the SEL being unusable is reported by `kirocrew audit verify`
            logger.warning("could not record %s in the security event log: %s", event, exc)
        await response(scope, receive, send)

    return app


def _refusal(scope: Scope, status: int, code: str, message: str, *, json: bool = False) -> ASGIApp:
    """JSON ``{"error", "code"}`` under ``/api/``; an explanatory HTML page for pages."""
    if scope["type"] == "websocket":
        from starlette.websockets import WebSocketClose

        return WebSocketClose(code=1008, reason=code)
    headers = {"Cache-Control": "no-store"}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="kirocrew"'
    if json or is_api_path(scope["path"]):
        from starlette.responses import JSONResponse

        return JSONResponse({"error": message, "code": code}, status_code=status, headers=headers)
    from starlette.responses import HTMLResponse

    from kirocrew_core.gateway.pages import render_refusal

    return HTMLResponse(render_refusal(status, code, message), status_code=status, headers=headers)


def _with_security_headers(send: Send) -> Send:
    """Add anti-framing, no-sniff and no-referrer headers unless the app set its own, and the CSP always
    (but to an answer whose own policy is exactly the sandbox's, which only the dashboard may frame)."""

    async def send_with_headers(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            present = {bytes(name).lower() for name, _ in headers}
            headers.extend(h for h in _SECURITY_HEADERS if h[0] not in present)
            sandboxed = any(bytes(n).lower() == _SANDBOX_CSP_HEADER[0] and bytes(v) == _SANDBOX_CSP_HEADER[1]
                            for n, v in headers)
            if not sandboxed:
                headers.append(_CSP_HEADER)
            message = {**message, "headers": headers}
        await send(message)

    return send_with_headers
