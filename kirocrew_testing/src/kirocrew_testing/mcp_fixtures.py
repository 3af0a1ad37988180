"""pytest fixtures for the MCP fixture servers (:mod:`kirocrew_testing.servers`).

* ``mcp_stdio_server_params(*options, env=None)`` → ``StdioServerParameters``
  (``.command`` + ``.args`` is also the argv for an agent spec's ``mcpServers``).
* ``mcp_http_server`` → the URL of a streamable-HTTP server with two tools;
  ``start_mcp_http_server(*options)`` → the URL of one started with options.
* ``oauth_mcp_server`` → an :class:`OAuthMCPServer` (default options);
  ``start_oauth_mcp_server(*options)`` → one started with options.

Every server started through these fixtures runs in its own process group and
is torn down with :func:`kirocrew_core.proc.terminate` after the test.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kirocrew_testing.servers import (
    HTTP_MODULE,
    OAUTH_MODULE,
    STDIO_MODULE,
    LaunchedServer,
    launch,
    module_argv,
)

__all__ = [
    "OAuthMCPServer",
    "mcp_http_server",
    "mcp_stdio_server_params",
    "oauth_mcp_server",
    "start_mcp_http_server",
    "start_oauth_mcp_server",
    "stdio_server_argv",
]

PENDING_WAIT_SECS = 30.0
_POLL_SECS = 0.05


def stdio_server_argv(*options: str) -> list[str]:
    """argv of the stdio fixture server with ``options`` (e.g. ``"--tools", "3"``)."""
    return module_argv(STDIO_MODULE, *options)


class OAuthMCPServer:
    """A running OAuth fixture server, driven the way a user and a test would.

    ``consent(oauth_url)`` plays the user: it opens the authorization URL (the
    server parks the request and shows a consent page), clicks Allow, and
    follows the 302 to the client's loopback listener, returning that response.
    Use ``aconsent()`` from a coroutine whose event loop also runs the listener
    (the sync form would block the loop it waits on).
    """

    def __init__(self, launched: LaunchedServer) -> None:
        self.launched = launched
        self.urls: dict[str, str] = json.loads(launched.ready)
        self.base_url = self.urls["base_url"]
        self.mcp_url = self.urls["mcp_url"]
        self.issuer = self.urls["issuer"]
        self.control_url = self.urls["control_url"]

    # -- control API --------------------------------------------------------
    def pending_consents(self) -> list[dict[str, Any]]:
        import httpx

        return httpx.get(f"{self.control_url}/pending").raise_for_status().json()

    def state(self) -> dict[str, Any]:
        import httpx

        return httpx.get(f"{self.control_url}/state").raise_for_status().json()

    def revoke_all(self) -> int:
        import httpx

        return httpx.post(f"{self.control_url}/revoke-all").raise_for_status().json()["revoked"]

    def reset(self) -> None:
        """Forget every client, consent request and token: the server then acts as a fresh one."""
        import httpx

        httpx.post(f"{self.control_url}/reset").raise_for_status()

    def expire_access_tokens(self) -> int:
        import httpx

        return httpx.post(f"{self.control_url}/expire-access-tokens").raise_for_status().json()["expired"]

    # -- consent, sync ----------------------------------------------------------
    def wait_for_pending(self, timeout: float = PENDING_WAIT_SECS) -> dict[str, Any]:
        """The oldest pending consent request, waiting until one appears."""
        deadline = time.monotonic() + timeout
        while True:
            rows = self.pending_consents()
            if rows:
                return rows[0]
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no consent request reached {self.base_url} in {timeout:g}s")
            time.sleep(_POLL_SECS)

    def consent(self, oauth_url: str | None = None, *, allow: bool = True,
                timeout: float = PENDING_WAIT_SECS) -> Any:
        """Play the user: open ``oauth_url``, click Allow (or Deny), land on the loopback listener.

        ``oauth_url`` is what the client asked the user to open (the fake's
        ``_kiro.dev/mcp/oauth_request``); without it, the oldest request already
        opened is answered. Returns the loopback listener's response.
        """
        import httpx

        with httpx.Client(follow_redirects=False) as client:
            if oauth_url is not None:
                row = self._pending_row(_request_id(client.get(oauth_url)))
            else:
                row = self.wait_for_pending(timeout)
            answer = client.get(row["allow_url" if allow else "deny_url"])
            return client.get(_redirect_target(answer))

    def _pending_row(self, request_id: str) -> dict[str, Any]:
        for row in self.pending_consents():
            if row["id"] == request_id:
                return row
        raise LookupError(f"no pending consent request {request_id!r}")

    # -- consent, async ---------------------------------------------------------
    async def await_pending(self, timeout: float = PENDING_WAIT_SECS) -> dict[str, Any]:
        import httpx

        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while True:
                rows = (await client.get(f"{self.control_url}/pending")).raise_for_status().json()
                if rows:
                    return rows[0]
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no consent request reached {self.base_url} in {timeout:g}s")
                await asyncio.sleep(_POLL_SECS)

    async def aconsent(self, oauth_url: str | None = None, *, allow: bool = True,
                       timeout: float = PENDING_WAIT_SECS) -> Any:
        """:meth:`consent` without blocking the event loop (which may run the loopback listener)."""
        import httpx

        async with httpx.AsyncClient(follow_redirects=False) as client:
            if oauth_url is not None:
                request_id = _request_id(await client.get(oauth_url))
                rows = (await client.get(f"{self.control_url}/pending")).raise_for_status().json()
                row = next((r for r in rows if r["id"] == request_id), None)
                if row is None:
                    raise LookupError(f"no pending consent request {request_id!r}")
            else:
                row = await self.await_pending(timeout)
            answer = await client.get(row["allow_url" if allow else "deny_url"])
            return await client.get(_redirect_target(answer))

    def stop(self) -> None:
        self.launched.stop()


def _redirect_target(response: Any) -> str:
    if response.status_code != 302:
        raise AssertionError(f"expected a redirect, got {response.status_code}: {response.text}")
    return str(response.headers["location"])


def _request_id(authorize_response: Any) -> str:
    """The consent request id the authorization endpoint redirected the browser to."""
    from urllib.parse import parse_qs, urlsplit

    query = parse_qs(urlsplit(_redirect_target(authorize_response)).query)
    if "request" not in query:
        raise AssertionError(f"authorization did not reach the consent page: {authorize_response.headers}")
    return query["request"][0]


@pytest.fixture
def mcp_stdio_server_params() -> Callable[..., Any]:
    """Factory: ``mcp_stdio_server_params("--tools", "3", env={...})`` → ``StdioServerParameters``."""
    from mcp import StdioServerParameters

    def make(*options: str, env: dict[str, str] | None = None) -> Any:
        argv = stdio_server_argv(*options)
        return StdioServerParameters(command=argv[0], args=argv[1:], env=env)

    return make


@pytest.fixture
def start_mcp_http_server() -> Iterator[Callable[..., str]]:
    """Factory: ``start_mcp_http_server("--require-header", "X-Key=v")`` → its MCP URL."""
    started: list[LaunchedServer] = []

    def start(*options: str) -> str:
        server = launch(HTTP_MODULE, "--port", "0", *options)
        started.append(server)
        return server.ready

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def mcp_http_server(start_mcp_http_server: Callable[..., str]) -> str:
    """URL of a streamable-HTTP fixture server with tools ``tool_1`` and ``tool_2``."""
    return start_mcp_http_server()


@pytest.fixture
def start_oauth_mcp_server() -> Iterator[Callable[..., OAuthMCPServer]]:
    """Factory: ``start_oauth_mcp_server("--issuer-path", "/tenant/a/")`` → :class:`OAuthMCPServer`."""
    started: list[OAuthMCPServer] = []

    def start(*options: str) -> OAuthMCPServer:
        server = OAuthMCPServer(launch(OAUTH_MODULE, "--port", "0", *options))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def oauth_mcp_server(start_oauth_mcp_server: Callable[..., OAuthMCPServer]) -> OAuthMCPServer:
    """An OAuth-protected MCP fixture server with its issuer at the origin."""
    return start_oauth_mcp_server()
