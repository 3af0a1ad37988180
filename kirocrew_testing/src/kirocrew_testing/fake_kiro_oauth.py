"""kiro-cli's side of MCP OAuth, for the fake kiro-cli. kirocrew itself never uses this.

A product rule says kirocrew never opens an OAuth token file: it only stats the
grant pair (:mod:`kirocrew_core.grants`). kiro-cli is the one that reads and
writes them, so this module, which does what kiro-cli does, lives under
``testing`` and is imported only by the fake kiro-cli and by tests.

What kiro-cli 2.x does for a remote MCP server (``mcp_client/oauth_util.rs``):

1. Probe: POST the MCP URL. A 401/403 or a ``Bearer`` challenge means OAuth.
2. With a stored grant pair ``{grant_key}.token.json`` +
   ``{grant_key}.registration.json`` in ``~/.aws/sso/cache``, use that token.
   If the server refuses it, refresh once and persist the rotated token; if
   that fails too, the grant is rejected: kiro-cli then deletes the token file
   and starts a new consent (``reauthorize_on_rejection``, which the fake
   kiro-cli passes unless ``KIRO_FAKE_OAUTH_NO_REAUTH`` is set; without it the
   rejection raises and the fake reports ``server_init_failure``).
3. Without one: RFC 9728 → RFC 8414 discovery, dynamic client registration
   (RFC 7591, client name ``Q DEV CLI``), PKCE S256, a one-shot loopback
   listener on ``127.0.0.1:<ephemeral>`` as the ``redirect_uri``, the
   authorization URL handed to the UI (the fake emits
   ``_kiro.dev/mcp/oauth_request``), then, when the browser lands on the
   listener, the code exchange and the pair written to disk (registration
   first, then the token).

With a pre-registered client (the entry's ``oauth.clientId``, kiro-cli 2.12+),
step 3 skips registration and authenticates as that app: ``oauth.redirectUri``
(``host:port``, or a full loopback URL) fixes the listener's address, a port
already taken fails the server as kiro-cli does, ``oauth.clientSecret`` makes
the code exchange a confidential client's (``client_secret_post``, or
``client_secret_basic`` when that is all the AS metadata lists), and the
registration written with the token records that client. The redirect URI the
fake builds from ``host:port`` is ``http://host:port/callback`` (the path our
registration guides name; kiro's docs say only that kiro builds the full URI).
``oauthScopes`` replaces the default scope choice in the authorization request.

Steps 1 and 3 follow the mcp SDK's ``OAuthClientProvider`` (mcp 2.3.0) request for request,
written on httpx2 alone because importing the SDK cost every fake process about 0.5 CPU-s
(:mod:`kirocrew_testing.oauth_documents` holds the documents and discovery: the path-insertion
rules and fallbacks, a metadata ``issuer`` equal to the advertised one): registration, PKCE
with a 128-character verifier, ``state`` and RFC 9207 ``iss`` checks, the scope choice
(challenge, then PRM, then AS ``scopes_supported``, plus ``offline_access`` when the AS lists
it; ``prompt=consent`` with ``offline_access``), RFC 8707 ``resource`` when a PRM was found or
the request named protocol 2025-06-18 or later, the token requests' client authentication,
and redirects of its own requests followed within their origin. Step 2 is kiro-cli's (the
SDK, on a 401, goes straight back to consent). Known differences from kiro-cli: the scope
requested is that choice rather than kiro-cli's default ``openid email profile
offline_access``; files are written 0600 (kiro-cli leaves them to the umask); a stored token's
expiry is taken as the token file's mtime plus ``expires_in``, so an expired token is
refreshed before it is even sent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import inspect
import os
import secrets
import string
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urljoin, urlsplit

import httpx2

from kirocrew_core import grants
from kirocrew_core.jsonfile import ReadState, read_json, write_json_atomic
from kirocrew_testing.oauth_documents import (
    VERSION_HEADER,
    Challenge,
    ClientInfo,
    Discovery,
    OAuthFlowError,
    OAuthToken,
    challenge_of,
    discovery_flow,
    json_object,
    origin,
    resource_allowed,
    resource_metadata_of,
    resource_url,
    www_auth_field,
)

# kiro-cli registers under this name; its source says servers use it to recognise the client.
CLIENT_NAME = "Q DEV CLI"
LOOPBACK = "127.0.0.1"
# kiro-cli's probe: a bodiless POST with the streamable-HTTP Accept header.
PROBE_HEADERS = {"Accept": "application/json, text/event-stream"}
DEFAULT_HTTP_TIMEOUT = 30.0
CALLBACK_PAGE = b"You can close this page now"
GRANT_TYPES = ("authorization_code", "refresh_token")
# Token endpoint methods a registration may assign that this flow can act on (the SDK's set
# without private_key_jwt, which needs a key this client does not hold).
USABLE_AUTH_METHODS = (None, "none", "client_secret_post", "client_secret_basic")
SECRET_AUTH_METHODS = ("client_secret_post", "client_secret_basic")
PKCE_ALPHABET = string.ascii_letters + string.digits + "-._~"
REDIRECT_LIMIT = 5
_MAX_REQUEST_HEAD = 16 * 1024

AuthorizationUrlCallback = Callable[[str], Awaitable[None] | None]


class OAuthGrantError(Exception):
    """An MCP server's OAuth could not be satisfied; the fake reports ``server_init_failure``."""

    def __init__(self, message: str, *, server_url: str) -> None:
        super().__init__(message)
        self.server_url = server_url


class GrantRejectedError(OAuthGrantError):
    """The server refused the stored token, and refreshing it failed too."""


class GrantUnreadableError(OAuthGrantError):
    """A grant file exists but is malformed or unreadable (kiro-cli fails the server on it)."""


class AuthorizationFailedError(OAuthGrantError):
    """Discovery, registration, consent or the code exchange failed."""


async def probe(url: str, *, http_client: httpx2.AsyncClient) -> Challenge | None:
    """POST ``url`` without credentials; the challenge if the server wants OAuth, else None."""
    response = await http_client.post(url, headers=PROBE_HEADERS)
    return challenge_of(response)


async def _drive(flow: AsyncGenerator[httpx2.Request, httpx2.Response],
                 send: Callable[[httpx2.Request], Awaitable[httpx2.Response]]) -> None:
    try:
        request = await flow.__anext__()
        while True:
            request = await flow.asend(await send(request))
    except StopAsyncIteration:
        pass


async def discover(
    server_url: str, challenge: Challenge | None = None, *, http_client: httpx2.AsyncClient
) -> Discovery:
    """Run :func:`discovery_flow` with ``http_client`` (no redirects followed)."""
    found = Discovery()
    await _drive(discovery_flow(server_url, challenge.resource_metadata_url if challenge else None, found),
                 lambda request: http_client.send(request, follow_redirects=False))
    return found


# -- the loopback callback listener -------------------------------------------------


@dataclass(frozen=True)
class PreregisteredClient:
    """An MCP entry's ``oauth`` block and ``oauthScopes``; with ``client_id``, an app registered in advance."""

    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    redirect: str | None = None  # "host:port" or a full loopback URL; None: a random port
    scopes: tuple[str, ...] = ()

    def listener_address(self) -> tuple[str, int, str]:
        """``(host, port, redirect_uri)``; port 0 for a random one. Raises ValueError for a bad value."""
        if not self.redirect:
            return LOOPBACK, 0, ""
        text = self.redirect if "://" in self.redirect else f"http://{self.redirect}/callback"
        parts = urlsplit(text)
        host, port = parts.hostname or "", parts.port
        if parts.scheme != "http" or host not in ("127.0.0.1", "localhost") or not port:
            raise ValueError(f"redirectUri must be a localhost host:port, got {self.redirect!r}")
        return host, port, text


class LoopbackListener:
    """kiro-cli's one-shot callback server on 127.0.0.1 (ephemeral port, unless a client fixes it).

    Any path is accepted (kiro-cli's ``redirect_uri`` has none); the first request
    carrying ``code`` or ``error`` settles it and the listener closes. Other
    requests (a browser's favicon) get a 404 and are otherwise ignored.
    """

    def __init__(self, host: str = LOOPBACK, port: int = 0, redirect_uri: str = "") -> None:
        self._server: asyncio.Server | None = None
        self._result: asyncio.Future[dict[str, str]] | None = None
        self._host, self._port, self._fixed_uri = host, port, redirect_uri
        self.redirect_uri = ""

    async def start(self) -> str:
        """Listen; an OSError (the fixed port taken) propagates."""
        self._result = asyncio.get_running_loop().create_future()
        host = LOOPBACK if self._host == "localhost" else self._host
        self._server = await asyncio.start_server(self._serve, host, self._port)
        port = self._server.sockets[0].getsockname()[1]
        self.redirect_uri = self._fixed_uri or f"http://{LOOPBACK}:{port}/"
        return self.redirect_uri

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > _MAX_REQUEST_HEAD:
                raise ValueError("request head too large")
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
            params = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
            settles = ("code" in params or "error" in params) and self._result is not None \
                and not self._result.done()
            if settles:
                assert self._result is not None
                self._result.set_result(params)
                body = CALLBACK_PAGE if "error" not in params else \
                    f"OAuth failed: {params['error']}".encode("utf-8", "replace")
                status = b"200 OK"
            else:
                body, status = b"not found", b"404 Not Found"
            writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
                         + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError,
                ConnectionError):
            pass
        finally:
            writer.close()

    async def wait(self, timeout: float | None = None) -> dict[str, str]:
        """The callback's query parameters, once the browser arrives."""
        if self._result is None:
            raise RuntimeError("listener not started")
        try:
            return await asyncio.wait_for(asyncio.shield(self._result), timeout)
        finally:
            if self._result.done():
                await self.aclose()

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()


# -- kiro-cli's grant files -------------------------------------------------------------


def _token_document(token: OAuthToken) -> dict[str, Any]:
    """A token as kiro-cli serialises rmcp's ``OAuthTokenResponse`` (no absolute expiry)."""
    document = {"access_token": token.access_token, "token_type": token.token_type.lower(),
                "expires_in": token.expires_in, "refresh_token": token.refresh_token,
                "scope": token.scope}
    return {k: v for k, v in document.items() if v is not None}


def _registration_document(info: ClientInfo) -> dict[str, Any]:
    """kiro-cli's ``Registration``: client id, secret, scopes and the redirect URI it registered."""
    return {"client_id": info.client_id, "client_secret": info.client_secret,
            "scopes": (info.scope or "").split(),
            "redirect_uri": info.redirect_uris[0] if info.redirect_uris else ""}


@dataclass(frozen=True)
class StoredGrant:
    token: OAuthToken
    client: ClientInfo
    expires_at: float | None


class KiroGrantStore:
    """kiro-cli's grant pair for one MCP URL.

    The registration is held back until the token arrives, so the pair appears
    together after a successful exchange, as kiro-cli writes it (a consent left
    unfinished leaves nothing on disk).
    """

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.token_path, self.registration_path = grants.artifact_paths(server_url)
        self._unwritten_client: ClientInfo | None = None

    def load(self) -> StoredGrant | None:
        """The stored pair, None unless both files exist; raise when either is unusable."""
        token_read, registration_read = read_json(self.token_path), read_json(self.registration_path)
        if ReadState.ABSENT in (token_read.state, registration_read.state):
            return None
        for read in (token_read, registration_read):
            if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
                raise GrantUnreadableError(f"{read.path}: {read.error or read.state.value}",
                                           server_url=self.server_url)
        try:
            assert isinstance(token_read.document, dict) and isinstance(registration_read.document, dict)
            token = OAuthToken.parse(token_read.document)
            reg = registration_read.document
            scopes, redirect, secret = reg.get("scopes") or [], reg.get("redirect_uri"), reg.get("client_secret")
            if not isinstance(reg["client_id"], str) or not isinstance(secret, (str, type(None))) \
                    or not isinstance(redirect, (str, type(None))) \
                    or not (isinstance(scopes, list) and all(isinstance(s, str) for s in scopes)):
                raise ValueError("client_id, client_secret, redirect_uri and scopes have the wrong types")
            client = ClientInfo(reg["client_id"], secret, [redirect] if redirect else [], " ".join(scopes) or None,
                                "client_secret_post" if secret else "none")
        except (KeyError, TypeError, ValueError) as exc:
            raise GrantUnreadableError(f"malformed grant for {self.server_url}: {exc}",
                                       server_url=self.server_url) from exc
        try:
            issued_at = os.stat(self.token_path).st_mtime
        except OSError:
            issued_at = time.time()
        expires_at = issued_at + token.expires_in if token.expires_in else None
        return StoredGrant(token, client, expires_at)

    def forget_token(self) -> None:
        """Delete the token file, as kiro-cli does before a fresh consent."""
        with suppress(FileNotFoundError):
            os.unlink(self.token_path)

    def hold_client(self, client: ClientInfo) -> None:
        """A new registration, written with the token that follows it."""
        self._unwritten_client = client

    async def save_token(self, token: OAuthToken) -> None:
        """Write the token (and a registration held back for it, first), 0600 and atomically."""
        if self._unwritten_client is not None:
            await asyncio.to_thread(write_json_atomic, self.registration_path,
                                    _registration_document(self._unwritten_client), secret=True)
            self._unwritten_client = None
        await asyncio.to_thread(write_json_atomic, self.token_path, _token_document(token), secret=True)


# -- the httpx2.Auth ---------------------------------------------------------------


def _pkce() -> tuple[str, str]:
    """``(verifier, S256 challenge)``: a 128-character verifier, as the SDK makes."""
    verifier = "".join(secrets.choice(PKCE_ALPHABET) for _ in range(128))
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def _version_at_least(version: str | None, floor: str) -> bool:
    return bool(version) and str(version) >= floor  # revisions are ISO dates


def _within_origin(response: httpx2.Response) -> httpx2.Request | None:
    """The request following ``response``'s redirect, as the SDK follows one: within the origin, same method.

    A GET follows any redirect status; another method only 307 and 308, which keep the body.
    """
    location = response.headers.get("location")
    request = response.request
    if not response.is_redirect or not location or (request.method != "GET" and response.status_code not in (307, 308)):
        return None
    target = request.url.join(location)
    if (target.scheme, target.host, target.port) != (request.url.scheme, request.url.host, request.url.port):
        return None
    return httpx2.Request(request.method, target, headers=request.headers, content=request.content or None)


class KiroOAuth(httpx2.Auth):
    """An ``httpx2.Auth`` holding one MCP server's grant the way kiro-cli does.

    Pass it to ``httpx2.AsyncClient(auth=...)``. Without a stored grant the first
    401 runs the full flow (``on_authorization_url`` receives the URL to open); with
    one, an expired or refused token is refreshed once, and a refusal after that
    raises :class:`GrantRejectedError` (or, with ``reauthorize_on_rejection``,
    deletes the token file and asks for consent again, as kiro-cli does).
    """

    requires_response_body = True

    def __init__(self, server_url: str, *, on_authorization_url: AuthorizationUrlCallback,
                 consent_timeout: float | None = None, reauthorize_on_rejection: bool = False,
                 client: PreregisteredClient | None = None) -> None:
        self.server_url = server_url
        self.store = KiroGrantStore(server_url)
        self._client = client
        self._on_authorization_url = on_authorization_url
        self._consent_timeout = consent_timeout
        self._reauthorize = reauthorize_on_rejection
        self._listener: LoopbackListener | None = None
        self.consents = 0  # how many times this auth asked for consent
        self.refreshes = 0
        self._rejected = False
        self._initialized = False
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = \
            weakref.WeakKeyDictionary()
        self._protocol_version: str | None = None
        self.discovery = Discovery()
        self.client_info: ClientInfo | None = None
        self.token: OAuthToken | None = None
        self.token_expiry: float | None = None
        self._redirect_uri = f"http://{LOOPBACK}/"
        self._scope: str | None = None

    @property
    def access_token(self) -> str | None:
        return self.token.access_token if self.token else None

    # -- the grant held ---------------------------------------------------------

    def _lock(self) -> asyncio.Lock:
        """One lock per event loop: a test may use the auth from several ``asyncio.run`` calls."""
        return self._locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())

    def _token_valid(self) -> bool:
        return bool(self.token and self.token.access_token
                    and (not self.token_expiry or time.time() <= self.token_expiry))

    def _clear_token(self) -> None:
        self.token, self.token_expiry = None, None

    def _set_token(self, token: OAuthToken) -> None:
        self.token = token
        self.token_expiry = time.time() + token.expires_in if token.expires_in is not None else None

    def _add_auth_header(self, request: httpx2.Request) -> None:
        if self.token and self.token.access_token:
            request.headers["Authorization"] = f"Bearer {self.token.access_token}"

    async def _initialize(self) -> None:
        grant = await asyncio.to_thread(self.store.load)
        if grant is not None:
            self.token, self.client_info, self.token_expiry = grant.token, grant.client, grant.expires_at
        self._initialized = True

    # -- the token endpoint -----------------------------------------------------

    def _endpoint(self, name: str) -> str:
        """The AS metadata's ``{name}_endpoint``; without metadata the legacy ``/authorize`` or ``/token``."""
        metadata = self.discovery.metadata
        found = getattr(metadata, f"{name}_endpoint", None) if metadata is not None else None
        return found or urljoin(origin(self.server_url), "/authorize" if name == "authorization" else f"/{name}")

    def _resource(self) -> str | None:
        """RFC 8707 ``resource``: with a PRM (its resource if it covers ours) or protocol 2025-06-18+."""
        prm = self.discovery.protected_resource
        if prm is None and not _version_at_least(self._protocol_version, "2025-06-18"):
            return None
        resource = resource_url(self.server_url)
        if prm is not None and resource_allowed(resource, prm.resource):
            resource = prm.resource
        return resource

    def _token_request(self, data: dict[str, str]) -> httpx2.Request:
        """A token endpoint POST, authenticated as the client's method says."""
        assert self.client_info is not None
        info = self.client_info
        if resource := self._resource():
            data["resource"] = resource
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        method = info.token_endpoint_auth_method
        if method == "client_secret_basic" and info.client_secret:
            pair = f"{quote(info.client_id, safe='')}:{quote(info.client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
            data.pop("client_secret", None)
        elif method == "client_secret_post" and info.client_secret:
            data["client_id"], data["client_secret"] = info.client_id, info.client_secret
        elif method not in (*USABLE_AUTH_METHODS, "private_key_jwt"):
            raise OAuthFlowError(f"Registered client uses unsupported token_endpoint_auth_method {method!r}")
        return httpx2.Request("POST", self._endpoint("token"), data=data, headers=headers)

    async def _refresh_flow(self, challenge: httpx2.Response | None,
                            outcome: list[bool]) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Discover the token endpoint if needed, then refresh; ``outcome[0]`` says if it worked."""
        outcome.append(False)
        if self.discovery.metadata is None:
            found = Discovery()
            flow = discovery_flow(self.server_url, resource_metadata_of(challenge), found)
            try:
                request = await flow.__anext__()
                while True:
                    request = await flow.asend((yield request))
            except StopAsyncIteration:
                pass
            self.discovery = found
        if not (self.token and self.token.refresh_token and self.client_info):
            return
        response = yield self._token_request({"grant_type": "refresh_token", "refresh_token": self.token.refresh_token,
                                              "client_id": self.client_info.client_id})
        outcome[0] = await self._refreshed(response)
        if outcome[0]:
            self.refreshes += 1

    async def _refreshed(self, response: httpx2.Response) -> bool:
        """Take a refresh answer; a refusal or a malformed token drops the token held."""
        if response.status_code != 200:
            self._clear_token()
            return False
        try:
            token = OAuthToken.parse(json_object(await response.aread()))
        except ValueError:
            self._clear_token()
            return False
        prior = self.token
        if prior is not None:  # RFC 6749 §6: an omitted scope or refresh token stays as it was
            token.scope = token.scope if token.scope is not None else prior.scope
            token.refresh_token = token.refresh_token or prior.refresh_token
        self._set_token(token)
        await self.store.save_token(token)
        return True

    # -- consent -----------------------------------------------------------------

    async def _listen(self) -> str:
        """Start the callback listener: a random port, or the pre-registered client's fixed address."""
        try:
            host, port, fixed = self._client.listener_address() if self._client else (LOOPBACK, 0, "")
        except ValueError as exc:
            raise AuthorizationFailedError(str(exc), server_url=self.server_url) from exc
        self._listener = LoopbackListener(host, port, fixed)
        try:
            return await self._listener.start()
        except OSError as exc:
            self._listener = None
            raise AuthorizationFailedError(
                f"cannot listen on {host}:{port} for the OAuth callback: {exc.strerror or exc}",
                server_url=self.server_url) from exc

    async def aclose(self) -> None:
        """Stop a loopback listener still waiting for a browser."""
        if self._listener is not None:
            await self._listener.aclose()
            self._listener = None

    def _choose_scope(self, challenge: httpx2.Response) -> str | None:
        """The challenge's scope, else the PRM's, else the AS's; plus ``offline_access`` when the AS lists it."""
        prm, metadata = self.discovery.protected_resource, self.discovery.metadata
        scope = www_auth_field(challenge, "scope")
        if scope is None and prm is not None and prm.scopes_supported is not None:
            scope = " ".join(prm.scopes_supported)
        elif scope is None and metadata is not None and metadata.scopes_supported is not None:
            scope = " ".join(metadata.scopes_supported)
        if scope is not None and metadata is not None and "offline_access" in (metadata.scopes_supported or []) \
                and "offline_access" not in scope.split():
            scope = f"{scope} offline_access"
        return scope

    def _registration_request(self) -> httpx2.Request:
        """RFC 7591 registration, as the SDK's client metadata dumps it."""
        metadata = self.discovery.metadata
        url = (metadata.registration_endpoint if metadata and metadata.registration_endpoint
               else urljoin(origin(self.server_url), "/register"))
        body: dict[str, Any] = {"redirect_uris": [self._redirect_uri], "token_endpoint_auth_method": "none",
                                "grant_types": list(GRANT_TYPES), "response_types": ["code"]}
        if self._scope is not None:
            body["scope"] = self._scope
        body.update(client_name=CLIENT_NAME, application_type="native")
        return httpx2.Request("POST", url, json=body, headers={"Content-Type": "application/json"})

    async def _registered(self, response: httpx2.Response) -> ClientInfo:
        if response.status_code not in (200, 201):
            await response.aread()
            raise OAuthFlowError(f"Registration failed: {response.status_code} {response.text}")
        try:
            info = ClientInfo.parse(json_object(await response.aread()))
        except ValueError as exc:
            raise OAuthFlowError(f"Invalid registration response: {exc}") from exc
        method = info.token_endpoint_auth_method
        if method not in USABLE_AUTH_METHODS:
            raise OAuthFlowError("Authorization server registered the client with unsupported "
                                 f"token_endpoint_auth_method {method!r}")
        if method in SECRET_AUTH_METHODS and info.client_secret is None:
            raise OAuthFlowError(f"Authorization server registered the client for {method!r}"
                                 " but issued no client_secret")
        return info

    def _use_preregistered(self, client: PreregisteredClient) -> None:
        """Skip registration: authenticate as the configured app (recorded with the grant, as DCR's is)."""
        assert client.client_id is not None
        self.client_info = ClientInfo(client.client_id, client.client_secret, [self._redirect_uri],
                                      " ".join(client.scopes) or None,
                                      "client_secret_post" if client.client_secret else "none")
        self.store.hold_client(self.client_info)

    async def _consent(self) -> httpx2.Request:
        """PKCE authorization: surface the URL, wait for the browser, check it; the code exchange request."""
        assert self.client_info is not None
        info, metadata = self.client_info, self.discovery.metadata
        if self._client is not None and self._client.scopes:
            self._scope = " ".join(self._client.scopes)
        if self._client is not None and self._client.client_id and info.client_secret and metadata is not None:
            methods = metadata.token_endpoint_auth_methods_supported or ["client_secret_basic"]
            if "client_secret_post" not in methods and "client_secret_basic" in methods:
                info.token_endpoint_auth_method = "client_secret_basic"
        verifier, challenge = _pkce()
        state = secrets.token_urlsafe(32)
        params = {"response_type": "code", "client_id": info.client_id, "redirect_uri": self._redirect_uri,
                  "state": state, "code_challenge": challenge, "code_challenge_method": "S256"}
        if resource := self._resource():
            params["resource"] = resource
        if self._scope:
            params["scope"] = self._scope
            if "offline_access" in self._scope.split():
                params["prompt"] = "consent"  # OIDC asks for it with offline_access
        self.consents += 1
        outcome = self._on_authorization_url(f"{self._endpoint('authorization')}?{urlencode(params)}")
        if inspect.isawaitable(outcome):
            await outcome
        answer = await self._await_callback()
        if answer.get("state") is None or not secrets.compare_digest(answer["state"], state):
            raise OAuthFlowError(f"State parameter mismatch: {answer.get('state')} != {state}")
        iss, expected = answer.get("iss"), metadata.issuer if metadata else None
        if iss is not None and iss != expected:
            raise OAuthFlowError(f"Authorization response iss mismatch: {iss} != {expected}")
        if iss is None and metadata is not None and metadata.authorization_response_iss_parameter_supported:
            raise OAuthFlowError("Authorization response missing iss parameter advertised by the authorization server")
        if not answer.get("code"):
            raise OAuthFlowError("No authorization code received")
        return self._token_request({"grant_type": "authorization_code", "code": answer["code"],
                                    "redirect_uri": self._redirect_uri, "client_id": info.client_id,
                                    "code_verifier": verifier})

    async def _await_callback(self) -> dict[str, str]:
        if self._listener is None:
            raise OAuthFlowError("no loopback listener is running")
        try:
            params = await self._listener.wait(self._consent_timeout)
        except TimeoutError as exc:
            raise AuthorizationFailedError("no consent arrived in time", server_url=self.server_url) from exc
        if "error" in params:
            detail = params.get("error_description") or params["error"]
            raise AuthorizationFailedError(f"authorization refused: {detail}", server_url=self.server_url)
        return params

    async def _exchanged(self, response: httpx2.Response) -> None:
        if response.status_code not in (200, 201):
            body = await response.aread()
            raise OAuthFlowError(f"Token exchange failed ({response.status_code}): {body.decode('utf-8', 'replace')}")
        try:
            token = OAuthToken.parse(json_object(await response.aread()))
        except ValueError as exc:
            raise OAuthFlowError(f"Invalid token response: {exc}") from exc
        if token.scope is None:  # RFC 6749 §5.1: the scope asked for was granted
            token.scope = self._scope
        self._set_token(token)
        await self.store.save_token(token)

    # -- the flow ---------------------------------------------------------------

    def _rejection(self) -> GrantRejectedError:
        return GrantRejectedError(f"the server refused the stored token for {self.server_url}"
                                  " and refreshing it failed", server_url=self.server_url)

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """:meth:`_auth_flow`, with redirects of its own requests followed within their origin."""
        flow = self._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is not request:
                    for _ in range(REDIRECT_LIMIT):
                        follow = _within_origin(response)
                        if follow is None:
                            break
                        response = yield follow
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self._rejected:  # stays rejected: a later request must not slip into a consent flow
            raise self._rejection()
        async with self._lock():
            if not self._initialized:
                await self._initialize()
            self._protocol_version = request.headers.get(VERSION_HEADER)
            if self.token is not None:
                accepted = False
                refreshed = False
                challenge: httpx2.Response | None = None
                while True:
                    # Refresh once: before sending a token known to be expired, or after a 401.
                    if not refreshed and (challenge is not None or not self._token_valid()):
                        refreshed = True
                        outcome: list[bool] = []
                        sub = self._refresh_flow(challenge, outcome)
                        try:
                            outgoing = await sub.__anext__()
                            while True:
                                outgoing = await sub.asend((yield outgoing))
                        except StopAsyncIteration:
                            pass
                        if not outcome[0]:
                            break
                    self._add_auth_header(request)
                    response = yield request
                    if response.status_code != 401:
                        accepted = True
                        break
                    if refreshed:
                        break
                    challenge = response
                if accepted:
                    return
                if not self._reauthorize:
                    self._rejected = True
                    raise self._rejection()
                await asyncio.to_thread(self.store.forget_token)
                self._clear_token()
                self.client_info = None  # kiro-cli registers afresh too
                request.headers.pop("Authorization", None)
            # No grant held: ask, with a fresh loopback listener as redirect_uri.
            await self.aclose()
            try:
                self._redirect_uri = await self._listen()
                if self._client is not None and self._client.client_id:
                    self._use_preregistered(self._client)
                response = yield request
                step_up = response.status_code == 403 and www_auth_field(response, "error") == "insufficient_scope"
                if response.status_code != 401 and not step_up:
                    return
                if response.status_code == 401 or self.discovery.metadata is None:
                    self.discovery = Discovery()
                    flow = discovery_flow(self.server_url, resource_metadata_of(response), self.discovery)
                    try:
                        outgoing = await flow.__anext__()
                        while True:
                            outgoing = await flow.asend((yield outgoing))
                    except StopAsyncIteration:
                        pass
                self._scope = self._choose_scope(response)
                if self.client_info is None:
                    self.client_info = await self._registered((yield self._registration_request()))
                    self.store.hold_client(self.client_info)
                await self._exchanged((yield await self._consent()))
            finally:
                await self.aclose()
            self._add_auth_header(request)
            yield request


# -- what the fake calls -------------------------------------------------------------


async def prepare_auth(
    url: str,
    *,
    on_authorization_url: AuthorizationUrlCallback,
    headers: dict[str, str] | None = None,
    http_client: httpx2.AsyncClient | None = None,
    timeout: float = DEFAULT_HTTP_TIMEOUT,
    consent_timeout: float | None = None,
    reauthorize_on_rejection: bool = False,
    client: PreregisteredClient | None = None,
) -> KiroOAuth | None:
    """Everything kiro-cli does before connecting to ``url``: the auth to connect with, or None.

    None when the probe draws no OAuth challenge. Otherwise the returned auth
    holds a usable token: the stored grant (refreshed if needed) or a new one
    after consent, which may wait indefinitely (``consent_timeout``) for the
    user. ``http_client`` is the connection's own client (it carries ``headers``
    already; ``timeout`` is for the throwaway one made without it). Raises
    :class:`OAuthGrantError` subclasses; the fake turns each into
    ``_kiro.dev/mcp/server_init_failure``.
    """
    auth = KiroOAuth(url, on_authorization_url=on_authorization_url, consent_timeout=consent_timeout,
                     reauthorize_on_rejection=reauthorize_on_rejection, client=client)
    async with contextlib.AsyncExitStack() as stack:
        http = http_client
        if http is None:
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=timeout))
        if await probe(url, http_client=http) is None:  # a connection error propagates as it is
            return None
        try:
            # The same probe through the auth: consent, or the stored token validated/refreshed.
            await http.post(url, headers=PROBE_HEADERS, auth=auth)
        except OAuthGrantError:
            await auth.aclose()
            raise
        except (OAuthFlowError, httpx2.HTTPError) as exc:
            await auth.aclose()
            raise AuthorizationFailedError(f"OAuth for {url} failed: {exc}", server_url=url) from exc
    return auth


@asynccontextmanager
async def open_session(
    url: str,
    *,
    auth: httpx2.Auth | None,
    headers: dict[str, str] | None = None,
    timeout: float = DEFAULT_HTTP_TIMEOUT,
) -> AsyncIterator[Any]:
    """An initialized ``mcp.ClientSession`` over streamable HTTP to ``url`` using ``auth`` (tests only).

    A grant refused mid-session surfaces from the SDK's task groups wrapped in
    an exception group; it is raised here as the :class:`OAuthGrantError` itself.
    """
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    try:
        async with (
            httpx2.AsyncClient(headers=headers, auth=auth, timeout=httpx2.Timeout(timeout, read=300.0)) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
    except BaseExceptionGroup as group:
        grant_error = _first_grant_error(group)
        if grant_error is None:
            raise
        raise grant_error from group


def _first_grant_error(exc: BaseException) -> OAuthGrantError | None:
    if isinstance(exc, OAuthGrantError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_grant_error(inner)
            if found is not None:
                return found
    return None
