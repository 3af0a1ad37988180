"""The OAuth documents an MCP client reads, and discovery of the metadata ones, on httpx2 alone.

The mcp SDK's rules (``mcp.client.auth``, mcp 2.3.0) without importing the SDK, which cost every
fake kiro-cli process about 0.5 CPU-s: :mod:`kirocrew_testing.fake_kiro_oauth` builds kiro-cli's
flow on these. Documents are checked as the SDK's models check them (a document they would refuse
raises ValueError) and URLs kept as written (the SDK's models keep an empty path too).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx2

from kirocrew_testing.fake_kiro.mcp_session import PROTOCOL_VERSION

VERSION_HEADER = "mcp-protocol-version"


class OAuthFlowError(Exception):
    """A step of the flow got an answer it cannot use (``fake_kiro_oauth.prepare_auth``: a failed authorization)."""


# -- the documents ------------------------------------------------------------------


def _http_url(value: Any, what: str) -> str:
    if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc:
        raise ValueError(f"{what} must be an http(s) URL, got {value!r}")
    return value


def _optional_url(document: dict[str, Any], key: str) -> str | None:
    value = document.get(key)
    return None if value is None else _http_url(value, key)


def _string_list(document: dict[str, Any], key: str) -> list[str] | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of strings")
    return list(value)


def json_object(body: bytes | Any) -> dict[str, Any]:
    """A response body (or an already parsed value) that must be a JSON object; ValueError otherwise."""
    document = json.loads(body) if isinstance(body, (bytes, str)) else body
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


@dataclass(frozen=True)
class ProtectedResourceMetadata:
    """RFC 9728 metadata: the resource and the authorization servers that guard it."""

    resource: str
    authorization_servers: list[str]
    scopes_supported: list[str] | None = None

    @classmethod
    def parse(cls, body: bytes) -> ProtectedResourceMetadata:
        """Raises ValueError for a document the SDK's model would refuse."""
        document = json_object(body)
        servers = document.get("authorization_servers")
        if not isinstance(servers, list) or not servers:
            raise ValueError("authorization_servers must list at least one server")
        return cls(_http_url(document.get("resource"), "resource"),
                   [_http_url(s, "authorization_servers") for s in servers],
                   _string_list(document, "scopes_supported"))


@dataclass(frozen=True)
class OAuthMetadata:
    """RFC 8414 authorization server metadata: the fields this flow reads."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None = None
    scopes_supported: list[str] | None = None
    token_endpoint_auth_methods_supported: list[str] | None = None
    authorization_response_iss_parameter_supported: bool | None = None

    @classmethod
    def parse(cls, body: bytes) -> OAuthMetadata:
        """Raises ValueError for a document the SDK's model would refuse."""
        document = json_object(body)
        iss_supported = document.get("authorization_response_iss_parameter_supported")
        if iss_supported is not None and not isinstance(iss_supported, bool):
            raise ValueError("authorization_response_iss_parameter_supported must be a boolean")
        return cls(_http_url(document.get("issuer"), "issuer"),
                   _http_url(document.get("authorization_endpoint"), "authorization_endpoint"),
                   _http_url(document.get("token_endpoint"), "token_endpoint"),
                   _optional_url(document, "registration_endpoint"),
                   _string_list(document, "scopes_supported"),
                   _string_list(document, "token_endpoint_auth_methods_supported"),
                   iss_supported)


@dataclass
class OAuthToken:
    """A token response (RFC 6749 §5.1); ``token_type`` is normalised to ``Bearer`` as the SDK does."""

    access_token: str
    token_type: str = "Bearer"
    expires_in: int | None = None
    scope: str | None = None
    refresh_token: str | None = None

    @classmethod
    def parse(cls, document: dict[str, Any]) -> OAuthToken:
        """Raises ValueError for a token the SDK's model would refuse."""
        access, kind = document.get("access_token"), document.get("token_type", "Bearer")
        if not isinstance(access, str):
            raise ValueError("access_token must be a string")
        if not isinstance(kind, str) or kind.title() != "Bearer":
            raise ValueError(f"token_type must be Bearer, got {kind!r}")
        expires = document.get("expires_in")
        if expires is not None:
            if isinstance(expires, bool) or not isinstance(expires, (int, str)) or not str(expires).isdigit():
                raise ValueError(f"expires_in must be a whole number, got {expires!r}")
            expires = int(expires)
        for key in ("scope", "refresh_token"):
            if not isinstance(document.get(key), (str, type(None))):
                raise ValueError(f"{key} must be a string")
        return cls(access, "Bearer", expires, document.get("scope"), document.get("refresh_token"))


@dataclass
class ClientInfo:
    """A registered client: the registration response (RFC 7591 §3.2.1), a stored one, or a pre-registered app."""

    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    redirect_uris: list[str] = field(default_factory=list)
    scope: str | None = None
    token_endpoint_auth_method: str | None = None

    @classmethod
    def parse(cls, document: dict[str, Any]) -> ClientInfo:
        """A registration response; empty placeholders read as absent, as the SDK reads them."""
        members = {k: v for k, v in document.items() if v is not None and v != ""}
        client_id = members.get("client_id")
        if not isinstance(client_id, str):
            raise ValueError("client_id is required")
        for key in ("client_secret", "scope", "token_endpoint_auth_method"):
            if not isinstance(members.get(key), (str, type(None))):
                raise ValueError(f"{key} must be a string")
        return cls(client_id, members.get("client_secret"), _string_list(members, "redirect_uris") or [],
                   members.get("scope"), members.get("token_endpoint_auth_method"))


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


def www_auth_field(response: httpx2.Response, name: str) -> str | None:
    """A parameter of the response's ``WWW-Authenticate`` (quoted or not), as the SDK extracts it."""
    match = re.search(rf'{name}=(?:"([^"]+)"|([^\s,]+))', response.headers.get("WWW-Authenticate", ""))
    return (match.group(1) or match.group(2)) if match else None


def resource_metadata_of(response: httpx2.Response | None) -> str | None:
    if response is None or response.status_code not in (401, 403):
        return None
    return www_auth_field(response, "resource_metadata")


def challenge_of(response: httpx2.Response) -> Challenge | None:
    """The OAuth challenge in a response, as kiro-cli judges it (401/403, or a Bearer challenge)."""
    www = response.headers.get("WWW-Authenticate", "")
    if response.status_code not in (401, 403) and "bearer" not in www.lower():
        return None
    return Challenge(response.status_code, www, resource_metadata_of(response), www_auth_field(response, "scope"))


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def resource_url(server_url: str) -> str:
    """The canonical RFC 8707 resource of ``server_url``: lower-case scheme and host, no fragment."""
    parts = urlsplit(server_url)
    return urlunsplit(parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower(), fragment=""))


def resource_allowed(requested: str, configured: str) -> bool:
    """Whether ``configured`` covers ``requested``: the same origin, and a path at or above it."""
    want, have = urlsplit(requested), urlsplit(configured)
    if (want.scheme.lower(), want.netloc.lower()) != (have.scheme.lower(), have.netloc.lower()):
        return False
    return (want.path.rstrip("/") + "/").startswith(have.path.rstrip("/") + "/")


def issuers_match(a: str, b: str) -> bool:
    """Equal issuers, where a root issuer with and without its trailing slash are the same server."""
    if a == b:
        return True
    shorter, longer = sorted((a, b), key=len)
    return longer == f"{shorter}/" and shorter == origin(shorter)


def prm_urls(resource_metadata_url: str | None, server_url: str) -> list[str]:
    """Where the PRM is looked for: the challenge's URL, the path-suffixed well-known one, the root one."""
    urls = [resource_metadata_url] if resource_metadata_url else []
    base, path = origin(server_url), urlsplit(server_url).path
    if path and path != "/":
        urls.append(urljoin(base, f"/.well-known/oauth-protected-resource{path}"))
    urls.append(urljoin(base, "/.well-known/oauth-protected-resource"))
    return urls


def metadata_urls(authorization_server: str | None, server_url: str) -> list[str]:
    """Where the AS metadata is looked for: RFC 8414 insertion, then the OIDC forms; the legacy root without a PRM."""
    if not authorization_server:
        return [f"{origin(server_url)}/.well-known/oauth-authorization-server"]
    base, path = origin(authorization_server), urlsplit(authorization_server).path.rstrip("/")
    if path:
        return [urljoin(base, f"/.well-known/oauth-authorization-server{path}"),
                urljoin(base, f"/.well-known/openid-configuration{path}"),
                urljoin(base, f"{path}/.well-known/openid-configuration")]
    return [urljoin(base, "/.well-known/oauth-authorization-server"),
            urljoin(base, "/.well-known/openid-configuration")]


def _metadata_request(url: str) -> httpx2.Request:
    return httpx2.Request("GET", url, headers={VERSION_HEADER: PROTOCOL_VERSION})


async def discovery_flow(
    server_url: str, resource_metadata_url: str | None, found: Discovery
) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
    """Discovery as a request/response generator, filling ``found``.

    PRM: the challenge's ``resource_metadata`` URL, then the path-suffixed and
    root well-known locations (a 5xx or 429 from all of them fails discovery).
    AS metadata: for a path issuer the RFC 8414 insertion (trailing slash
    dropped), then the OIDC insertion and append forms; for a root issuer the
    root OAuth then OIDC documents; a 5xx stops the search. The metadata's
    ``issuer`` must equal the advertised one exactly.
    """
    server_failure: int | None = None
    for url in prm_urls(resource_metadata_url, server_url):
        response = yield _metadata_request(url)
        if response.status_code >= 500 or response.status_code == 429:
            server_failure = response.status_code
        if response.status_code != 200:
            continue
        try:
            prm = ProtectedResourceMetadata.parse(await response.aread())
        except ValueError:
            continue
        wanted = resource_url(server_url)
        if not resource_allowed(wanted, prm.resource):
            raise OAuthFlowError(f"protected resource {prm.resource} does not cover {wanted}")
        found.protected_resource, found.resource_metadata_url = prm, url
        found.authorization_server = prm.authorization_servers[0]
        break
    else:
        if server_failure is not None:
            raise OAuthFlowError(f"Protected resource metadata request failed: HTTP {server_failure}")
    expected = found.authorization_server or origin(server_url)
    for url in metadata_urls(found.authorization_server, server_url):
        response = yield _metadata_request(url)
        if 300 <= response.status_code < 500:
            continue  # not served here (a redirect is not followed): try the next location
        if response.status_code != 200:
            break  # a server error: stop looking
        try:
            metadata = OAuthMetadata.parse(await response.aread())
        except ValueError:
            continue
        if found.authorization_server is None and issuers_match(metadata.issuer, expected):
            expected = metadata.issuer  # legacy origin issuer, spelled with its slash
        if metadata.issuer != expected:
            raise OAuthFlowError(f"Authorization server metadata issuer mismatch: {metadata.issuer} != {expected}")
        found.metadata, found.metadata_url = metadata, url
        break
