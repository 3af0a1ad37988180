"""``POST /api/connections/relay``: deliver a consent's return address to kiro-cli's loopback listener.

kiro-cli finishes OAuth on a one-shot listener on the gateway machine's
loopback (the ``redirect_uri`` of the approval URL). When the browser runs on
another machine (a remote gateway), its redirect to ``http://127.0.0.1:PORT/?code=…``
lands on the wrong computer and fails; the user pastes the address it landed
on into the card, and the gateway, which is on the right machine, opens it.

Only that one address can be opened: the mint for the slug must be waiting
(and still the caller's, when a token is sent), and the pasted address must
name exactly the scheme, loopback host, port and path of the ``redirect_uri``
in that mint's own approval URL, with exactly one non-empty ``code``, no
userinfo and no fragment. So the route can never be pointed at anything but
the listener kiro-cli opened for this consent. The code is a credential: it
is never logged, audited or echoed back.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

from kirocrew_core.errors import BadInputError, ConflictError, KirocrewError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

MAX_RETURN_ADDRESS_CHARS = 4096
RELAY_TIMEOUT_SECS = 10.0
_LOOPBACK_NAMES = frozenset({"localhost"})


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _endpoint(url: str) -> tuple[str, str, int, str] | None:
    """``(scheme, host, port, path)`` of an http loopback URL with an explicit port; None otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if parts.scheme != "http" or port is None or not _loopback(host) or parts.username or parts.password:
        return None
    if host == "localhost":
        host = "127.0.0.1"
    return parts.scheme, str(ipaddress.ip_address(host)), port, parts.path or "/"


def return_address(raw: object) -> str:
    """The pasted address, normalised (``http://`` added when missing); 400 ``invalid_return_address`` otherwise."""
    text = raw.strip() if isinstance(raw, str) else ""
    if text and "://" not in text:
        text = "http://" + text
    invalid = BadInputError("paste the full http://127.0.0.1:PORT/?code=… address from your browser",
                            code="invalid_return_address")
    if not text or len(text) > MAX_RETURN_ADDRESS_CHARS or _endpoint(text) is None:
        raise invalid
    parts = urlsplit(text)
    codes = [value for key, value in parse_qsl(parts.query, keep_blank_values=True) if key == "code"]
    if parts.fragment or len(codes) != 1 or not codes[0]:
        raise invalid
    return text


def listener_of(oauth_url: str) -> tuple[str, str, int, str] | None:
    """The loopback listener kiro-cli named as the approval URL's ``redirect_uri``, if it is one."""
    try:
        uris = parse_qs(urlsplit(oauth_url).query).get("redirect_uri", [])
    except ValueError:
        return None
    return _endpoint(uris[0]) if len(uris) == 1 else None


def relay_target(view: dict[str, Any], pasted: str, token: object) -> str:
    """The URL to open: the pasted address, once it is proven to be this waiting mint's listener."""
    if view.get("state") != "waiting" or not view.get("oauth_url"):
        raise ConflictError("no consent is waiting for this provider; connect again", code="no_consent_waiting")
    if token is not None and token != view.get("token"):
        raise ConflictError("this consent was replaced by a newer one", code="no_consent_waiting")
    listener = listener_of(str(view["oauth_url"]))
    if listener is None or _endpoint(pasted) != listener:
        raise BadInputError("that address is not the one this consent is waiting for; paste the address the "
                            "approval page sent your browser to", code="return_address_mismatch")
    scheme, host, port, path = listener
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}{path}?{urlsplit(pasted).query}"


async def deliver(target: str) -> int:
    """GET ``target`` on this machine's loopback (no proxy, no redirect); its status."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=RELAY_TIMEOUT_SECS, follow_redirects=False, trust_env=False) as client:
            response = await client.get(target)
    except httpx.HTTPError as exc:
        raise KirocrewError(f"kiro-cli's listener did not answer ({type(exc).__name__}); connect again",
                            code="return_address_unreachable") from None
    return response.status_code


async def post_relay(request: Request) -> Response:
    """``{slug, redirect_url, token?}`` → ``{ok, slug, delivered, status}`` (see the module docstring)."""
    from starlette.responses import JSONResponse

    from kirocrew_connections.liveness_api import read_provider_request

    body, provider = await read_provider_request(request)
    pasted = return_address(body.get("redirect_url"))
    token = body.get("token")
    mint = sys.modules.get("kirocrew_connections.mint")  # never loaded: no consent can be waiting
    view = mint.mint_engine().view(provider.slug) if mint is not None else {"state": "idle"}
    status = await deliver(relay_target(view, pasted, token))
    return JSONResponse({"ok": True, "slug": provider.slug, "delivered": True, "status": status})
