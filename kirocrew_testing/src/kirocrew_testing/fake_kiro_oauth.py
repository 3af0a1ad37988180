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
``oauthScopes`` replaces the SDK's scope choice in the authorization request.

Steps 1 and 3 are the mcp SDK's ``OAuthClientProvider`` (discovery with the
path-insertion rules and fallbacks, DCR, PKCE, state and RFC 9207 ``iss``
checks, token exchange); this module adds kiro-cli's file layout, the loopback
listener, and the held-grant behaviour of step 2 which the SDK does differently
(on a 401 it goes straight back to consent). Known differences from kiro-cli:
the scope requested is the SDK's choice (challenge, then PRM, then AS
``scopes_supported``) rather than kiro-cli's default ``openid email profile
offline_access``; files are written 0600 (kiro-cli leaves them to the umask);
a stored token's expiry is taken as the token file's mtime plus ``expires_in``,
so an expired token is refreshed before it is even sent. The subclassing below
leans on ``OAuthClientProvider`` internals of mcp 2.3.0 (``context``,
``_initialize``, ``_refresh_token``, ``_handle_refresh_response``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    extract_field_from_www_auth,
    extract_resource_metadata_from_www_auth,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    issuers_match,
    validate_metadata_issuer,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import AnyUrl

from kirocrew_core import grants
from kirocrew_core.jsonfile import ReadState, read_json, write_json_atomic

# kiro-cli registers under this name; its source says servers use it to recognise the client.
CLIENT_NAME = "Q DEV CLI"
LOOPBACK = "127.0.0.1"
# kiro-cli's probe: a bodiless POST with the streamable-HTTP Accept header.
PROBE_HEADERS = {"Accept": "application/json, text/event-stream"}
DEFAULT_HTTP_TIMEOUT = 30.0
CALLBACK_PAGE = b"You can close this page now"
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


# -- probe and discovery ------------------------------------------------------------


@dataclass(frozen=True)
class Challenge:
    """What the probe learned: the server wants OAuth."""

    status: int
    www_authenticate: str
    resource_metadata_url: str | None
    scope: str | None


@dataclass
class Discovery:
    """RFC 9728 + RFC 8414 discovery results (``None`` where the server published nothing)."""

    protected_resource: ProtectedResourceMetadata | None = None
    resource_metadata_url: str | None = None
    authorization_server: str | None = None
    metadata: OAuthMetadata | None = None
    metadata_url: str | None = None


def challenge_of(response: httpx2.Response) -> Challenge | None:
    """The OAuth challenge in a response, as kiro-cli judges it (401/403, or a Bearer challenge)."""
    www = response.headers.get("WWW-Authenticate", "")
    if response.status_code not in (401, 403) and "bearer" not in www.lower():
        return None
    return Challenge(response.status_code, www, extract_resource_metadata_from_www_auth(response),
                     extract_field_from_www_auth(response, "scope"))


async def probe(url: str, *, http_client: httpx2.AsyncClient) -> Challenge | None:
    """POST ``url`` without credentials; the challenge if the server wants OAuth, else None."""
    response = await http_client.post(url, headers=PROBE_HEADERS)
    return challenge_of(response)


def _origin_issuer(server_url: str) -> str:
    parts = urlsplit(server_url)
    return f"{parts.scheme}://{parts.netloc}"


async def discovery_flow(
    server_url: str, resource_metadata_url: str | None, found: Discovery
) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
    """Discovery as a request/response generator, filling ``found``; the SDK's URL rules.

    PRM: the challenge's ``resource_metadata`` URL, then the path-suffixed and
    root well-known locations. AS metadata: for a path issuer the RFC 8414
    insertion (trailing slash dropped), then the OIDC insertion and append forms;
    for a root issuer the root OAuth then OIDC documents. The metadata's
    ``issuer`` must equal the advertised one exactly.
    """
    for url in build_protected_resource_metadata_discovery_urls(resource_metadata_url, server_url):
        response = yield create_oauth_metadata_request(url)
        prm = await handle_protected_resource_response(response)
        if prm is None:
            continue
        resource = str(prm.resource) if prm.resource else None
        wanted = resource_url_from_server_url(server_url)
        if resource and not check_resource_allowed(requested_resource=wanted, configured_resource=resource):
            raise OAuthFlowError(f"protected resource {resource} does not cover {wanted}")
        found.protected_resource, found.resource_metadata_url = prm, url
        found.authorization_server = str(prm.authorization_servers[0])
        break
    expected = found.authorization_server or _origin_issuer(server_url)
    for url in build_oauth_authorization_server_metadata_discovery_urls(found.authorization_server, server_url):
        response = yield create_oauth_metadata_request(url)
        ok, metadata = await handle_auth_metadata_response(response)
        if not ok:
            break
        if metadata is None:
            continue
        if found.authorization_server is None and issuers_match(str(metadata.issuer), expected):
            expected = str(metadata.issuer)  # legacy origin issuer, spelled with its slash
        validate_metadata_issuer(metadata, expected)
        found.metadata, found.metadata_url = metadata, url
        break


async def discover(
    server_url: str, challenge: Challenge | None = None, *, http_client: httpx2.AsyncClient
) -> Discovery:
    """Run :func:`discovery_flow` with ``http_client`` (no redirects followed)."""
    found = Discovery()
    flow = discovery_flow(server_url, challenge.resource_metadata_url if challenge else None, found)
    try:
        request = await flow.__anext__()
        while True:
            response = await http_client.send(request, follow_redirects=False)
            request = await flow.asend(response)
    except StopAsyncIteration:
        pass
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


def _registration_document(info: OAuthClientInformationFull) -> dict[str, Any]:
    """kiro-cli's ``Registration``: client id, secret, scopes and the redirect URI it registered."""
    return {"client_id": info.client_id, "client_secret": info.client_secret,
            "scopes": (info.scope or "").split(),
            "redirect_uri": str(info.redirect_uris[0]) if info.redirect_uris else ""}


@dataclass(frozen=True)
class StoredGrant:
    token: OAuthToken
    client: OAuthClientInformationFull
    expires_at: float | None


class KiroGrantStore:
    """The SDK's ``TokenStorage`` over kiro-cli's grant pair for one MCP URL.

    The registration is held back until the token arrives, so the pair appears
    together after a successful exchange, as kiro-cli writes it (a consent left
    unfinished leaves nothing on disk).
    """

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.token_path, self.registration_path = grants.artifact_paths(server_url)
        self._token: OAuthToken | None = None
        self._client: OAuthClientInformationFull | None = None
        self._unwritten_client: OAuthClientInformationFull | None = None

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
            token = OAuthToken.model_validate(token_read.document)
            reg = registration_read.document
            client = OAuthClientInformationFull(
                client_id=reg["client_id"], client_secret=reg.get("client_secret"),
                redirect_uris=[reg["redirect_uri"]] if reg.get("redirect_uri") else None,
                scope=" ".join(reg.get("scopes") or []) or None,
                token_endpoint_auth_method="client_secret_post" if reg.get("client_secret") else "none",
                grant_types=["authorization_code", "refresh_token"])
        except (KeyError, TypeError, ValueError) as exc:
            raise GrantUnreadableError(f"malformed grant for {self.server_url}: {exc}",
                                       server_url=self.server_url) from exc
        try:
            issued_at = os.stat(self.token_path).st_mtime
        except OSError:
            issued_at = time.time()
        expires_at = issued_at + token.expires_in if token.expires_in else None
        self._token, self._client = token, client
        return StoredGrant(token, client, expires_at)

    def forget_token(self) -> None:
        """Delete the token file, as kiro-cli does before a fresh consent."""
        with suppress(FileNotFoundError):
            os.unlink(self.token_path)
        self._token = None

    # TokenStorage
    async def get_tokens(self) -> OAuthToken | None:
        return self._token

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = self._unwritten_client = client_info

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._token = tokens
        if self._unwritten_client is not None:
            await asyncio.to_thread(write_json_atomic, self.registration_path,
                                    _registration_document(self._unwritten_client), secret=True)
            self._unwritten_client = None
        await asyncio.to_thread(write_json_atomic, self.token_path, _token_document(tokens), secret=True)


# -- the httpx2.Auth ---------------------------------------------------------------


class KiroOAuth(OAuthClientProvider):
    """An ``httpx2.Auth`` holding one MCP server's grant the way kiro-cli does.

    Pass it to ``httpx2.AsyncClient(auth=...)`` and that client to the SDK's
    ``streamable_http_client``. Without a stored grant the first 401 runs the
    SDK's full flow (``on_authorization_url`` receives the URL to open); with
    one, an expired or refused token is refreshed once, and a refusal after that
    raises :class:`GrantRejectedError` (or, with ``reauthorize_on_rejection``,
    deletes the token file and asks for consent again, as kiro-cli does).
    """

    def __init__(self, server_url: str, *, on_authorization_url: AuthorizationUrlCallback,
                 consent_timeout: float | None = None, reauthorize_on_rejection: bool = False,
                 client: PreregisteredClient | None = None) -> None:
        self.store = KiroGrantStore(server_url)
        self._client = client
        self._on_authorization_url = on_authorization_url
        self._consent_timeout = consent_timeout
        self._reauthorize = reauthorize_on_rejection
        self._listener: LoopbackListener | None = None
        self.consents = 0  # how many times this auth asked for consent
        self.refreshes = 0
        self._rejected = False
        metadata = OAuthClientMetadata(
            client_name=CLIENT_NAME, redirect_uris=[AnyUrl(f"http://{LOOPBACK}/")],  # set per consent
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
            token_endpoint_auth_method="none")
        super().__init__(server_url, metadata, self.store, redirect_handler=self._open_browser,
                         callback_handler=self._await_callback)

    @property
    def server_url(self) -> str:
        return self.context.server_url

    @property
    def access_token(self) -> str | None:
        tokens = self.context.current_tokens
        return tokens.access_token if tokens else None

    async def _initialize(self) -> None:
        grant = await asyncio.to_thread(self.store.load)
        if grant is not None:
            self.context.current_tokens = grant.token
            self.context.client_info = grant.client
            self.context.token_expiry_time = grant.expires_at
        self._initialized = True

    async def _open_browser(self, url: str) -> None:
        self.consents += 1
        outcome = self._on_authorization_url(url)
        if inspect.isawaitable(outcome):
            await outcome

    async def _await_callback(self) -> AuthorizationCodeResult:
        if self._listener is None:
            raise OAuthFlowError("no loopback listener is running")
        try:
            params = await self._listener.wait(self._consent_timeout)
        except TimeoutError as exc:
            raise AuthorizationFailedError("no consent arrived in time",
                                           server_url=self.server_url) from exc
        if "error" in params:
            detail = params.get("error_description") or params["error"]
            raise AuthorizationFailedError(f"authorization refused: {detail}", server_url=self.server_url)
        return AuthorizationCodeResult(code=params.get("code", ""), state=params.get("state"),
                                       iss=params.get("iss"))

    async def aclose(self) -> None:
        """Stop a loopback listener still waiting for a browser."""
        if self._listener is not None:
            await self._listener.aclose()
            self._listener = None

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

    async def _use_preregistered(self, client_id: str, secret: str | None, redirect_uri: str) -> None:
        """Skip registration: authenticate as the configured app (recorded with the grant, as DCR's is)."""
        scopes = self._client.scopes if self._client is not None else ()
        info = OAuthClientInformationFull(
            client_id=client_id, client_secret=secret,
            redirect_uris=[AnyUrl(redirect_uri)], grant_types=["authorization_code", "refresh_token"],
            response_types=["code"], scope=" ".join(scopes) or None,
            token_endpoint_auth_method="client_secret_post" if secret else "none")
        self.context.client_info = info
        await self.store.set_client_info(info)

    async def _perform_authorization(self) -> httpx2.Request:
        """The configured scopes, and a confidential client's method as the AS metadata allows it."""
        if self._client is not None and self._client.scopes:
            self.context.client_metadata.scope = " ".join(self._client.scopes)
        info = self.context.client_info
        metadata = self.context.oauth_metadata
        if self._client is not None and self._client.client_id and info is not None and info.client_secret \
                and metadata is not None:
            methods = metadata.token_endpoint_auth_methods_supported or ["client_secret_basic"]
            if "client_secret_post" not in methods and "client_secret_basic" in methods:
                info.token_endpoint_auth_method = "client_secret_basic"
        return await super()._perform_authorization()

    async def _refresh_flow(self, challenge: httpx2.Response | None,
                            outcome: list[bool]) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Discover the token endpoint if needed, then refresh; ``outcome[0]`` says if it worked."""
        outcome.append(False)
        if self.context.oauth_metadata is None:
            found = Discovery()
            www = extract_resource_metadata_from_www_auth(challenge) if challenge is not None else None
            flow = discovery_flow(self.server_url, www, found)
            try:
                request = await flow.__anext__()
                while True:
                    response = yield request
                    request = await flow.asend(response)
            except StopAsyncIteration:
                pass
            self.context.protected_resource_metadata = found.protected_resource
            self.context.auth_server_url = found.authorization_server
            self.context.oauth_metadata = found.metadata
        if not self.context.can_refresh_token():
            return
        response = yield await self._refresh_token()
        outcome[0] = await self._handle_refresh_response(response)
        if outcome[0]:
            self.refreshes += 1

    def _rejection(self) -> GrantRejectedError:
        return GrantRejectedError(f"the server refused the stored token for {self.server_url}"
                                  " and refreshing it failed", server_url=self.server_url)

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self._rejected:  # stays rejected: a later request must not slip into a consent flow
            raise self._rejection()
        if not self._initialized:
            await self._initialize()
        if self.context.current_tokens is not None:
            accepted = False
            async with self.context.lock:
                self.context.protocol_version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
                refreshed = False
                challenge: httpx2.Response | None = None
                while True:
                    # Refresh once: before sending a token known to be expired, or after a 401.
                    if not refreshed and (challenge is not None or not self.context.is_token_valid()):
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
            self.context.clear_tokens()
            self.context.client_info = None  # kiro-cli registers afresh too
            request.headers.pop("Authorization", None)
        # No grant held: the SDK's own flow, with a fresh loopback listener as redirect_uri.
        await self.aclose()
        redirect_uri = await self._listen()
        self.context.client_metadata.redirect_uris = [AnyUrl(redirect_uri)]
        if self._client is not None and self._client.client_id:
            await self._use_preregistered(self._client.client_id, self._client.client_secret, redirect_uri)
        inner = super()._auth_flow(request)
        try:
            outgoing = await inner.__anext__()
            while True:
                outgoing = await inner.asend((yield outgoing))
        except StopAsyncIteration:
            pass
        finally:
            await self.aclose()


# -- what the fake calls -------------------------------------------------------------


async def prepare_auth(
    url: str,
    *,
    on_authorization_url: AuthorizationUrlCallback,
    headers: dict[str, str] | None = None,
    timeout: float = DEFAULT_HTTP_TIMEOUT,
    consent_timeout: float | None = None,
    reauthorize_on_rejection: bool = False,
    client: PreregisteredClient | None = None,
) -> KiroOAuth | None:
    """Everything kiro-cli does before connecting to ``url``: the auth to connect with, or None.

    None when the probe draws no OAuth challenge. Otherwise the returned auth
    holds a usable token: the stored grant (refreshed if needed) or a new one
    after consent, which may wait indefinitely (``consent_timeout``) for the
    user. Raises :class:`OAuthGrantError` subclasses; the fake turns each into
    ``_kiro.dev/mcp/server_init_failure``.
    """
    auth = KiroOAuth(url, on_authorization_url=on_authorization_url, consent_timeout=consent_timeout,
                     reauthorize_on_rejection=reauthorize_on_rejection, client=client)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        if await probe(url, http_client=http) is None:  # a connection error propagates as it is
            return None
        try:
            # The same probe through the auth: consent, or the stored token validated/refreshed.
            await http.post(url, headers=PROBE_HEADERS, auth=auth)
        except OAuthGrantError:
            await auth.aclose()
            raise
        except (OAuthFlowError, OAuthTokenError, OAuthRegistrationError, httpx2.HTTPError) as exc:
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
    """An initialized ``mcp.ClientSession`` over streamable HTTP to ``url`` using ``auth``.

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
