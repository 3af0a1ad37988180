"""An OAuth-protected streamable-HTTP MCP fixture server, built on the mcp SDK's auth support.

``python -m kirocrew_testing.servers.oauth_server --port 0 [--issuer-path /tenant/a/]
[--mcp-path /mcp] [--access-token-ttl SECS] [--tools N | --names a,b] [discovery switches]
[--client-id ID [--client-secret S] [--token-auth-method post|basic] [--redirect-uri URI] [--no-dcr]]``

Prints one line ``READY {json}`` with ``base_url``, ``mcp_url``, ``issuer``,
``resource_metadata_url``, ``authorization_server_metadata_url`` and
``control_url`` once it accepts connections, then serves until SIGTERM.

The resource server, the Protected Resource Metadata route (RFC 9728), the
authorization server metadata (RFC 8414), dynamic client registration
(RFC 7591), the authorize/token/revoke endpoints and the bearer-token check in
front of the MCP endpoint are the SDK's own (``MCPServer`` with an
``OAuthAuthorizationServerProvider`` and ``AuthSettings``). What is ours is the
provider below (in-memory state), a consent page, a control API for tests, and
relocating the SDK's routes for a path issuer, which it mounts at the root:

* The authorization endpoint never redirects back by itself: it records the
  request and redirects the browser to ``{issuer}/consent?request=ID``. A test
  plays the user by a GET of ``{issuer}/consent/allow?request=ID`` (302 to the
  client's ``redirect_uri`` with ``code``, ``state`` and RFC 9207 ``iss``) or
  ``.../consent/deny`` (302 with ``error=access_denied``).
* PKCE: the SDK handler requires ``code_challenge`` and accepts only ``S256``
  (``plain`` is refused with ``invalid_request``; an absent method is taken as
  S256, and the token endpoint then demands the matching S256 verifier).
* Tokens: access tokens live ``--access-token-ttl`` seconds; a refresh rotates
  both tokens (the old pair stops working); revoking either revokes both.
* Control API (no auth, loopback only): ``GET /_control/pending``,
  ``GET /_control/state``, ``POST /_control/revoke-all``,
  ``POST /_control/expire-access-tokens``, ``POST /_control/reset`` (forget every
  registered client, request, code, token and counter: a server shared by several
  tests starts each one as a fresh server would; a pre-registered client stays).

A pre-registered client, as GitHub and Asana have: ``--client-id`` is known to
the authorization server from the start (public, or confidential with
``--client-secret``, authenticated at the token endpoint by
``client_secret_post`` or, with ``--token-auth-method basic``, HTTP Basic,
the one method the AS metadata then lists; a wrong or missing secret is
``invalid_client``); ``--redirect-uri`` is the
one callback it accepts, compared exactly (default
``http://127.0.0.1:48101/callback``); ``--no-dcr`` refuses dynamic
registration: no ``/register`` route and no ``registration_endpoint`` in the
AS metadata.

Discovery edge cases: ``--issuer-path`` (with or without a trailing slash) makes
a path issuer whose metadata lives at ``/.well-known/oauth-authorization-server``
+ path (trailing slash removed, RFC 8414 §3.1); ``--as-metadata`` chooses the
locations served (``oauth``, ``openid-insert``, ``openid-append``);
``--prm-location`` serves the PRM at the path-suffixed location, the root one,
or both; ``--no-challenge-metadata`` leaves ``resource_metadata`` out of the
401 challenge so a client must fall back to the well-known locations.
"""

from __future__ import annotations

import argparse
import html
import json
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kirocrew_core.sdk_models import prepare as prepare_sdk_models
from kirocrew_testing.servers._common import (
    LOOPBACK,
    add_tool_options,
    bind_loopback,
    build_mcp_server,
    serve_app,
)

AS_METADATA_CHOICES = ("oauth", "openid-insert", "openid-append")
PRM_LOCATIONS = ("path", "root", "both")
DEFAULT_SCOPES = ["mcp:tools", "offline_access"]
AUTH_CODE_TTL_SECS = 300
DEFAULT_PREREGISTERED_REDIRECT = "http://127.0.0.1:48101/callback"
_SDK_AS_PATHS = ("/authorize", "/token", "/register", "/revoke")
_SDK_AS_METADATA_PATH = "/.well-known/oauth-authorization-server"
_PRM_ROOT = "/.well-known/oauth-protected-resource"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="oauth_server", description=__doc__.splitlines()[0])
    add_tool_options(parser)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mcp-path", default="/mcp")
    parser.add_argument("--issuer-path", default="", help="path of the issuer, e.g. /tenant/a/")
    parser.add_argument("--access-token-ttl", type=int, default=3600, metavar="SECS")
    parser.add_argument("--refresh-token-ttl", type=int, default=None, metavar="SECS")
    parser.add_argument("--scopes", default=",".join(DEFAULT_SCOPES),
                        help="scopes the authorization server supports (comma-separated)")
    parser.add_argument("--as-metadata", default="oauth",
                        help=f"where AS metadata is served, comma-separated of {AS_METADATA_CHOICES}")
    parser.add_argument("--prm-location", default="path", choices=PRM_LOCATIONS)
    parser.add_argument("--no-challenge-metadata", action="store_true",
                        help="omit resource_metadata from the 401 challenge")
    parser.add_argument("--no-iss", action="store_true",
                        help="omit the RFC 9207 iss parameter from the authorization response")
    parser.add_argument("--client-id", default=None, help="a client registered in advance")
    parser.add_argument("--client-secret", default=None, help="its secret (a confidential client)")
    parser.add_argument("--token-auth-method", choices=("post", "basic"), default="post",
                        help="how the confidential client authenticates at the token endpoint")
    parser.add_argument("--redirect-uri", default=DEFAULT_PREREGISTERED_REDIRECT,
                        help="the one redirect URI the pre-registered client may use (exact match)")
    parser.add_argument("--no-dcr", action="store_true",
                        help="refuse dynamic client registration (no registration_endpoint)")
    args = parser.parse_args(argv)
    if args.client_secret is not None and args.client_id is None:
        parser.error("--client-secret needs --client-id")
    for name in ("mcp_path", "issuer_path"):
        value = getattr(args, name)
        if value and not value.startswith("/"):
            parser.error(f"--{name.replace('_', '-')} must start with /")
    args.as_metadata = [s.strip() for s in args.as_metadata.split(",") if s.strip()]
    unknown = set(args.as_metadata) - set(AS_METADATA_CHOICES)
    if unknown or not args.as_metadata:
        parser.error(f"--as-metadata takes {AS_METADATA_CHOICES}, got {sorted(unknown) or 'nothing'}")
    args.scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    return args


@dataclass
class PendingConsent:
    """An authorization request waiting for the user to click Allow or Deny."""

    id: str
    client_id: str
    params: Any  # mcp.server.auth.provider.AuthorizationParams
    created_at: float = field(default_factory=time.time)


class FixtureAuthProvider:
    """``OAuthAuthorizationServerProvider`` keeping everything in memory.

    The SDK's handlers do the protocol work (validation, PKCE verification,
    client authentication, error responses); this class only stores and issues.
    """

    def __init__(self, *, issuer: str, consent_base: str, resource: str, access_ttl: int,
                 refresh_ttl: int | None, include_iss: bool) -> None:
        self.issuer = issuer
        self.consent_base = consent_base
        self.resource = resource
        self.access_ttl = access_ttl
        self.refresh_ttl = refresh_ttl
        self.include_iss = include_iss
        self.clients: dict[str, Any] = {}
        self.pending: dict[str, PendingConsent] = {}
        self.codes: dict[str, Any] = {}
        self.access: dict[str, Any] = {}
        self.refresh: dict[str, Any] = {}
        self.pair_of: dict[str, str] = {}  # access <-> refresh, both directions
        self.counters: Counter[str] = Counter()
        self.preregistered: set[str] = set()  # client ids known from the start, kept by reset()

    # -- registration -------------------------------------------------------
    async def get_client(self, client_id: str) -> Any:
        return self.clients.get(client_id)

    async def register_client(self, client_info: Any) -> None:
        self.clients[client_info.client_id] = client_info
        self.counters["registrations"] += 1

    # -- authorization: park the request until a test consents ---------------
    async def authorize(self, client: Any, params: Any) -> str:
        request_id = secrets.token_urlsafe(12)
        self.pending[request_id] = PendingConsent(request_id, client.client_id, params)
        self.counters["authorization_requests"] += 1
        return f"{self.consent_base}/consent?request={request_id}"

    def consent(self, request_id: str, allow: bool) -> str | None:
        """Resolve a pending request; the URL to redirect the browser to, None if unknown."""
        from mcp.server.auth.provider import AuthorizationCode, construct_redirect_uri

        pending = self.pending.pop(request_id, None)
        if pending is None:
            return None
        params = pending.params
        iss = self.issuer if self.include_iss else None
        if not allow:
            self.counters["consents_denied"] += 1
            return construct_redirect_uri(str(params.redirect_uri), error="access_denied",
                                          error_description="the user denied the request",
                                          state=params.state, iss=iss)
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + AUTH_CODE_TTL_SECS,
            client_id=pending.client_id, code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        self.counters["consents_allowed"] += 1
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=iss)

    # -- tokens ---------------------------------------------------------------
    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> Any:
        from mcp.server.auth.provider import AccessToken, RefreshToken
        from mcp.shared.auth import OAuthToken

        now = int(time.time())
        access = "at_" + secrets.token_urlsafe(24)
        refresh = "rt_" + secrets.token_urlsafe(24)
        resource = resource or self.resource
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=now + self.access_ttl, resource=resource)
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource,
            expires_at=now + self.refresh_ttl if self.refresh_ttl else None)
        self.pair_of[access] = refresh
        self.pair_of[refresh] = access
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.access_ttl,
                          scope=" ".join(scopes) or None, refresh_token=refresh)

    def _forget(self, token: str) -> None:
        """Drop a token and its pair partner."""
        partner = self.pair_of.pop(token, None)
        self.access.pop(token, None)
        self.refresh.pop(token, None)
        if partner is not None:
            self.pair_of.pop(partner, None)
            self.access.pop(partner, None)
            self.refresh.pop(partner, None)

    async def load_authorization_code(self, client: Any, authorization_code: str) -> Any:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(self, client: Any, authorization_code: Any) -> Any:
        self.codes.pop(authorization_code.code, None)  # single use
        self.counters["code_exchanges"] += 1
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client: Any, refresh_token: str) -> Any:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client: Any, refresh_token: Any, scopes: list[str]) -> Any:
        self._forget(refresh_token.token)  # rotation: the old pair is dead from now on
        self.counters["refreshes"] += 1
        return self._issue(client.client_id, scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> Any:
        found = self.access.get(token)
        self.counters["access_checks_ok" if found is not None else "access_checks_unknown"] += 1
        return found

    async def revoke_token(self, token: Any) -> None:
        self._forget(token.token)
        self.counters["revocations"] += 1

    # -- control ----------------------------------------------------------------
    def revoke_all(self) -> int:
        count = len(self.access) + len(self.refresh)
        self.access.clear()
        self.refresh.clear()
        self.pair_of.clear()
        self.counters["revocations"] += count
        return count

    def reset(self) -> None:
        """Back to the state at start: only the pre-registered client, if any, stays known."""
        kept = {cid: c for cid, c in self.clients.items() if cid in self.preregistered}
        for table in (self.clients, self.pending, self.codes, self.access, self.refresh, self.pair_of):
            table.clear()
        self.clients.update(kept)
        self.counters.clear()

    def expire_access_tokens(self) -> int:
        past = int(time.time()) - 1
        for token in self.access.values():
            token.expires_at = past
        return len(self.access)

    def state(self) -> dict[str, Any]:
        now = int(time.time())
        return {
            "clients": sorted(self.clients),
            "pending": len(self.pending),
            "access_tokens": len(self.access),
            "live_access_tokens": sum(1 for t in self.access.values()
                                      if t.expires_at is None or t.expires_at >= now),
            "refresh_tokens": len(self.refresh),
            "counters": dict(self.counters),
        }


def _issuer_url(base: str, issuer_path: str) -> str:
    return base + issuer_path if issuer_path else base


def _metadata_paths(issuer_path: str, choices: list[str]) -> list[str]:
    """Where the AS metadata document is served, in the order a client tries them."""
    trimmed = issuer_path.rstrip("/")
    paths = {
        "oauth": f"{_SDK_AS_METADATA_PATH}{trimmed}",
        "openid-insert": f"/.well-known/openid-configuration{trimmed}",
        "openid-append": f"{trimmed}/.well-known/openid-configuration",
    }
    return [paths[c] for c in AS_METADATA_CHOICES if c in choices]


def _relocate(routes: list[Any], old_path: str, new_paths: list[str]) -> None:
    """Replace the route at ``old_path`` by copies of it at ``new_paths`` (the SDK mounts at the root)."""
    from starlette.routing import Route

    index = next(i for i, r in enumerate(routes) if getattr(r, "path", None) == old_path)
    route = routes.pop(index)
    for offset, path in enumerate(new_paths):
        routes.insert(index + offset, Route(path, endpoint=route.endpoint, methods=route.methods))


def _advertise_token_auth(routes: list[Any], paths: list[str], settings: Any, method: str) -> None:
    """Serve the SDK's AS metadata at ``paths`` with ``token_endpoint_auth_methods_supported`` = [method]."""
    from mcp.server.auth.handlers.metadata import MetadataHandler
    from mcp.server.auth.routes import build_metadata, cors_middleware
    from starlette.routing import Route

    metadata = build_metadata(settings.issuer_url, settings.service_documentation_url,
                              settings.client_registration_options, settings.revocation_options)
    metadata.token_endpoint_auth_methods_supported = [method]
    for index, route in enumerate(routes):
        if getattr(route, "path", None) in paths:
            routes[index] = Route(route.path, methods=["GET", "OPTIONS"],
                                  endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]))


def _preregistered_client(args: argparse.Namespace) -> Any:
    """The client the operator registered with the provider: its id, secret and one exact redirect URI."""
    from mcp.shared.auth import OAuthClientInformationFull
    from pydantic import AnyUrl

    method = "none"
    if args.client_secret is not None:
        method = "client_secret_basic" if args.token_auth_method == "basic" else "client_secret_post"
    return OAuthClientInformationFull(
        client_id=args.client_id, client_secret=args.client_secret, client_name="pre-registered",
        redirect_uris=[AnyUrl(args.redirect_uri)], grant_types=["authorization_code", "refresh_token"],
        response_types=["code"], scope=" ".join(args.scopes), token_endpoint_auth_method=method)


def build_app(args: argparse.Namespace, base_url: str) -> tuple[Any, dict[str, str]]:
    """The Starlette app and the URLs the READY line reports."""
    from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

    issuer = _issuer_url(base_url, args.issuer_path)
    mcp_url = base_url + args.mcp_path
    trimmed_issuer_path = args.issuer_path.rstrip("/")
    consent_base = base_url + trimmed_issuer_path
    provider = FixtureAuthProvider(issuer=issuer, consent_base=consent_base, resource=mcp_url,
                                   access_ttl=args.access_token_ttl,
                                   refresh_ttl=args.refresh_token_ttl, include_iss=not args.no_iss)
    settings = AuthSettings(
        # A str on purpose: the SDK's field keeps a bare origin as given, AnyHttpUrl(...) would add a "/".
        issuer_url=issuer,  # type: ignore[arg-type]
        resource_server_url=mcp_url,
        validate_token_resource=True,
        client_registration_options=ClientRegistrationOptions(
            enabled=not args.no_dcr, valid_scopes=args.scopes, default_scopes=args.scopes),
        revocation_options=RevocationOptions(enabled=True),
    )
    if args.client_id is not None:
        provider.clients[args.client_id] = _preregistered_client(args)
        provider.preregistered.add(args.client_id)
    server = build_mcp_server(args, auth_server_provider=provider, auth=settings)

    def _consent_answer(request: Request, allow: bool) -> Response:
        target = provider.consent(request.query_params.get("request", ""), allow)
        if target is None:
            return JSONResponse({"error": "unknown or already answered consent request"}, 404)
        return RedirectResponse(target, status_code=302)

    @server.custom_route(f"{trimmed_issuer_path}/consent", methods=["GET"])
    async def consent_page(request: Request) -> Response:
        request_id = request.query_params.get("request", "")
        pending = provider.pending.get(request_id)
        if pending is None:
            return HTMLResponse("<p>No such consent request.</p>", 404)
        rid = html.escape(request_id)
        who = html.escape(pending.client_id)
        return HTMLResponse(
            f"<h1>Allow {who} to use {html.escape(args.label)}?</h1>"
            f'<a href="consent/allow?request={rid}">Allow</a> '
            f'<a href="consent/deny?request={rid}">Deny</a>')

    @server.custom_route(f"{trimmed_issuer_path}/consent/allow", methods=["GET"])
    async def consent_allow(request: Request) -> Response:
        return _consent_answer(request, allow=True)

    @server.custom_route(f"{trimmed_issuer_path}/consent/deny", methods=["GET"])
    async def consent_deny(request: Request) -> Response:
        return _consent_answer(request, allow=False)

    @server.custom_route("/_control/pending", methods=["GET"])
    async def control_pending(request: Request) -> Response:
        rows = [{
            "id": p.id,
            "client_id": p.client_id,
            "redirect_uri": str(p.params.redirect_uri),
            "state": p.params.state,
            "scopes": p.params.scopes,
            "resource": p.params.resource,
            "consent_url": f"{consent_base}/consent?request={p.id}",
            "allow_url": f"{consent_base}/consent/allow?request={p.id}",
            "deny_url": f"{consent_base}/consent/deny?request={p.id}",
        } for p in sorted(provider.pending.values(), key=lambda p: p.created_at)]
        return JSONResponse(rows)

    @server.custom_route("/_control/state", methods=["GET"])
    async def control_state(request: Request) -> Response:
        return JSONResponse(provider.state())

    @server.custom_route("/_control/revoke-all", methods=["POST"])
    async def control_revoke_all(request: Request) -> Response:
        return JSONResponse({"revoked": provider.revoke_all()})

    @server.custom_route("/_control/reset", methods=["POST"])
    async def control_reset(request: Request) -> Response:
        provider.reset()
        return JSONResponse({"reset": True})

    @server.custom_route("/_control/expire-access-tokens", methods=["POST"])
    async def control_expire(request: Request) -> Response:
        return JSONResponse({"expired": provider.expire_access_tokens()})

    app = server.streamable_http_app(streamable_http_path=args.mcp_path)
    routes = app.router.routes
    metadata_paths = _metadata_paths(args.issuer_path, args.as_metadata)
    _relocate(routes, _SDK_AS_METADATA_PATH, metadata_paths)
    if args.client_secret is not None:  # the AS metadata names the one method the client must use
        method = "client_secret_basic" if args.token_auth_method == "basic" else "client_secret_post"
        _advertise_token_auth(routes, metadata_paths, settings, method)
    if trimmed_issuer_path:
        for path in _SDK_AS_PATHS:
            if path == "/register" and args.no_dcr:
                continue  # the SDK mounts no registration route then
            _relocate(routes, path, [trimmed_issuer_path + path])
    prm_path = _PRM_ROOT + (args.mcp_path if args.mcp_path != "/" else "")
    prm_paths = {"path": [prm_path], "root": [_PRM_ROOT], "both": [prm_path, _PRM_ROOT]}
    if prm_path != _PRM_ROOT:
        _relocate(routes, prm_path, prm_paths[args.prm_location])
    # The SDK's challenge names the path-suffixed PRM; point it wherever the PRM really is.
    guard = next(r for r in routes if getattr(r, "path", None) == args.mcp_path).endpoint
    guard.resource_metadata_url = (None if args.no_challenge_metadata
                                   else base_url + prm_paths[args.prm_location][0])
    urls = {
        "base_url": base_url,
        "mcp_url": mcp_url,
        "issuer": issuer,
        "resource_metadata_url": base_url + prm_paths[args.prm_location][0],
        "authorization_server_metadata_url": base_url + metadata_paths[0],
        "control_url": base_url + "/_control",
    }
    return app, urls


def main(argv: list[str] | None = None) -> None:
    prepare_sdk_models()
    args = parse_args(argv)
    sock = bind_loopback(args.port)
    base_url = f"http://{LOOPBACK}:{sock.getsockname()[1]}"
    app, urls = build_app(args, base_url)
    serve_app(app, sock, json.dumps(urls, sort_keys=True))


if __name__ == "__main__":
    main()
