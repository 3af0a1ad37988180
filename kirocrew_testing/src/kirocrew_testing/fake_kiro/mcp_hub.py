"""A session's MCP servers, connected for real: stdio and streamable HTTP by the fake's own clients.

kiro-cli starts every enabled server of the session's agent when the session
starts, in the background: ``session/new`` answers at once, each server then
reports ``_kiro.dev/mcp/server_initialized`` or ``server_init_failure``
(with ``KIRO_FAKE_EAGER_MCP`` the answer waits for those reports instead:
:meth:`McpHub.wait_reported`). A server that hangs must not hold anything up,
so connecting, initialising and listing tools share one deadline (the entry's ``timeout``, else
``KIRO_FAKE_MCP_INIT_TIMEOUT``); only a pending OAuth consent extends it, because a person is in the loop then.

stdio servers (nearly all the suite starts: kirocrew's relays, fixture servers) go through
:mod:`~kirocrew_testing.fake_kiro.stdio_mcp`, streamable-HTTP and legacy SSE ones (OAuth
included, through :mod:`kirocrew_testing.fake_kiro_oauth`) through
:mod:`~kirocrew_testing.fake_kiro.http_mcp`: all behave as the mcp SDK's client does, without
its import cost (about 0.3 CPU-s for stdio, 0.5 for HTTP and OAuth) in every fake process.

Each connection lives in its own task. A deadline or the hub's close cancels a connection
still starting through ``ServerConn.cancel_init``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_testing.fake_kiro.agents_dirs import McpServerSpec, expand_env
from kirocrew_testing.fake_kiro.http_mcp import HttpClient, SseClient
from kirocrew_testing.fake_kiro.mcp_session import McpSession, Tool
from kirocrew_testing.fake_kiro.stdio_mcp import StdioClient

if TYPE_CHECKING:
    import httpx2

    from kirocrew_testing.fake_kiro_oauth import KiroOAuth

log = logging.getLogger(__name__)

Notify = Callable[[str, dict[str, Any]], Awaitable[None]]

SERVER_INITIALIZED = "kiro.dev/mcp/server_initialized"
SERVER_INIT_FAILURE = "kiro.dev/mcp/server_init_failure"
OAUTH_REQUEST = "kiro.dev/mcp/oauth_request"

LOADING, RUNNING, FAILED, DISABLED = "loading", "running", "failed", "disabled"
DEFAULT_TOOL_TIMEOUT_SECS = 120.0
# How long a consent may take once the OAuth URL has been surfaced.
OAUTH_CONSENT_SECS = 600.0
CLOSE_WAIT_SECS = 5.0


@dataclass
class ServerConn:
    """One server's state, as ``/mcp`` reports it."""

    spec: McpServerSpec
    status: str = LOADING
    error: str = ""
    tools: list[Tool] = field(default_factory=list)  # unfiltered
    session: McpSession | None = None
    task: asyncio.Task[None] | None = None
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    # Set once the client has been told where the server stands: its init notification,
    # or an OAuth request (then a person decides, and the server stays loading).
    reported: asyncio.Event = field(default_factory=asyncio.Event)
    # Set once a consent URL is out: the server stays loading until a person decides.
    consent_pending: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_init: Callable[[], object] | None = None  # stops the connection while it is still starting
    deadline_handle: asyncio.TimerHandle | None = None
    challenge: str = ""  # the WWW-Authenticate of a 401, if one was seen
    presented_token: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    def usable_tools(self) -> list[Tool]:
        return [t for t in self.tools if t.name not in self.spec.disabled_tools]


class McpHub:
    """Connects, tracks and calls one session's MCP servers."""

    def __init__(self, session_id: str, servers: Mapping[str, McpServerSpec], *, cwd: Path,
                 notify: Notify, init_timeout: float,
                 on_change: Callable[[], Awaitable[None]] | None = None) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self._notify = notify
        self._init_timeout = init_timeout
        self._on_change = on_change
        self._closing = asyncio.Event()
        self.conns: dict[str, ServerConn] = {}
        for name, spec in servers.items():
            conn = ServerConn(spec)
            if spec.disabled:
                conn.status = DISABLED
                conn.settled.set()
                conn.reported.set()
            self.conns[name] = conn

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        for conn in self.conns.values():
            if conn.status == LOADING:
                conn.task = asyncio.create_task(self._run(conn), name=f"mcp:{conn.name}")

    async def wait_settled(self, timeout: float | None = None) -> bool:
        """Wait until every server is running, failed or disabled; False on timeout."""
        waits = [c.settled.wait() for c in self.conns.values() if not c.settled.is_set()]
        if not waits:
            return True
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def wait_answerable(self, timeout: float | None = None) -> bool:
        """Wait until every server is settled or waiting on a consent; False on timeout.

        ``/mcp`` and ``/tools`` wait on this rather than :meth:`wait_settled`: a consent may
        take minutes, so a server waiting on one is reported ``loading`` at once instead of
        holding the command until the init deadline.
        """
        async def answerable(conn: ServerConn) -> None:
            waits = {asyncio.ensure_future(conn.settled.wait()), asyncio.ensure_future(conn.consent_pending.wait())}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()

        pending = [answerable(c) for c in self.conns.values()
                   if not c.settled.is_set() and not c.consent_pending.is_set()]
        if not pending:
            return True
        try:
            await asyncio.wait_for(asyncio.gather(*pending), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def wait_reported(self) -> None:
        """Wait until every server's init notification (or OAuth request) has been sent.

        kiro-cli's eager MCP init answers ``session/new`` only after this. It is
        bounded without a timeout of its own: each server has its init deadline,
        and a consent wait counts as reported once the URL is out.
        """
        await asyncio.gather(*(c.reported.wait() for c in self.conns.values()))

    async def close(self) -> None:
        """Stop every connection (bounded); servers get EOF and exit on their own."""
        self._closing.set()
        for conn in self.conns.values():
            conn.reported.set()  # nobody waits on a closing hub
        tasks = [c.task for c in self.conns.values() if c.task is not None and not c.task.done()]
        for conn in self.conns.values():
            if conn.deadline_handle is not None:
                conn.deadline_handle.cancel()
            if not conn.settled.is_set() and conn.cancel_init is not None:
                conn.cancel_init()  # still connecting (or waiting for a consent): give up now
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=CLOSE_WAIT_SECS)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)

    # -- reporting -----------------------------------------------------------

    def server_rows(self) -> list[dict[str, Any]]:
        """The ``/mcp`` rows: ``{name, status, toolCount}``."""
        return [{"name": c.name, "status": c.status,
                 "toolCount": len(c.usable_tools()) if c.status == RUNNING else 0}
                for c in self.conns.values()]

    def running_tools(self) -> list[tuple[str, Tool]]:
        """``(server, Tool)`` for every tool of a running server that is not disabled."""
        return [(c.name, t) for c in self.conns.values() if c.status == RUNNING for t in c.usable_tools()]

    # -- calling -------------------------------------------------------------

    async def call_tool(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        conn = self.conns.get(server)
        if conn is None:
            raise LookupError(f"no MCP server named {server!r}")
        if conn.status != RUNNING or conn.session is None:
            raise LookupError(f"MCP server {server!r} is {conn.status}")
        if tool not in {t.name for t in conn.usable_tools()}:
            raise LookupError(f"tool {tool!r} is not available on MCP server {server!r}")
        timeout = conn.spec.timeout_ms / 1000 if conn.spec.timeout_ms else DEFAULT_TOOL_TIMEOUT_SECS
        return await asyncio.wait_for(conn.session.call_tool(tool, arguments), timeout)

    # -- connecting ----------------------------------------------------------

    async def _run(self, conn: ServerConn) -> None:
        # An entry's own ``timeout`` (ms, kiro's per-request limit) bounds its initialize too.
        deadline = conn.spec.timeout_ms / 1000 if conn.spec.timeout_ms else self._init_timeout
        conn.deadline_handle = asyncio.get_running_loop().call_later(deadline, self._init_timed_out, conn)
        if conn.spec.transport == "stdio":
            await self._run_stdio(conn)
        else:
            await self._run_http(conn)

    async def _run_stdio(self, conn: ServerConn) -> None:
        spec = conn.spec
        env = {**os.environ, **{k: expand_env(v) for k, v in spec.env.items()}}
        client = StdioClient(spec.command or "", list(spec.args), env=env, cwd=self.cwd)
        handshake: asyncio.Future[list[Tool]] | None = None
        try:
            try:
                await client.start()  # not under the deadline's cancel: a spawn cut short could lose the child
            except Exception as exc:  # noqa: BLE001 - a server that cannot start is a failed server
                await self._failed(conn, _describe(exc))
                return
            if conn.settled.is_set() or self._closing.is_set():
                return  # the deadline passed or the hub closed while the server was being spawned
            handshake = asyncio.ensure_future(_handshake(client))
            await self._hold(conn, client, handshake)
        finally:
            await self._release(conn, client, handshake)

    async def _run_http(self, conn: ServerConn) -> None:
        spec = conn.spec
        headers = {k: expand_env(v) for k, v in spec.headers.items()}
        conn.presented_token = any(k.lower() == "authorization" for k in headers)

        async def watch(response: Any) -> None:
            if response.status_code == 401:
                conn.challenge = response.headers.get("www-authenticate", "") or "Bearer"

        transport = SseClient if spec.transport == "sse" else HttpClient
        client = transport(expand_env(spec.url or ""), headers=headers, on_response=watch)

        async def connect() -> list[Tool]:
            await client.start()
            client.authorize(await self._http_auth(conn, client.url, headers, client.http))
            conn.challenge = ""  # the probe's challenge, if any, has been answered
            return await _handshake(client)

        handshake = asyncio.ensure_future(connect())
        try:
            await self._hold(conn, client, handshake)
        finally:
            await self._release(conn, client, handshake)

    async def _hold(self, conn: ServerConn, client: McpSession, handshake: asyncio.Future[list[Tool]]) -> None:
        """Wait for the handshake (a deadline or the hub's close may cancel it), then serve until either side ends."""
        conn.cancel_init = handshake.cancel
        await asyncio.wait([handshake])
        if handshake.cancelled():
            return  # the deadline (already reported) or the hub closing
        failure = handshake.exception()
        if failure is not None:
            await self._failed(conn, _describe(failure))
            return
        if conn.settled.is_set():
            return  # the deadline fired as the handshake ended: it has been reported failed
        if conn.deadline_handle is not None:
            conn.deadline_handle.cancel()
        conn.session, conn.tools = client, list(handshake.result())
        await self._settle(conn, RUNNING)
        await _first_of(self._closing.wait(), client.closed.wait())

    async def _release(self, conn: ServerConn, client: StdioClient | HttpClient,
                       handshake: asyncio.Future[list[Tool]] | None) -> None:
        """The connection's end, however it came: report it, then close the client (even when cancelled)."""
        if handshake is not None and not handshake.done():
            handshake.cancel()  # this task was cancelled: the hub gave up waiting
        conn.session = None
        try:
            await self._ended(conn)
        finally:
            await client.aclose()  # even when cancelled meanwhile: a cancelled close kills the group

    async def _ended(self, conn: ServerConn) -> None:
        """The connection is over: a server that never settled failed; a running one closed under us."""
        if conn.deadline_handle is not None:
            conn.deadline_handle.cancel()
        if not conn.settled.is_set():
            await self._failed(conn, "connection ended")
        elif conn.status == RUNNING and not self._closing.is_set():
            conn.status, conn.error = FAILED, "connection closed"
            await self._changed()

    def _init_timed_out(self, conn: ServerConn) -> None:
        if conn.settled.is_set():
            return
        self._mark_failed(conn, "timed out while initializing")
        asyncio.ensure_future(self._announce(conn))
        if conn.cancel_init is not None:
            conn.cancel_init()

    def _extend_deadline(self, conn: ServerConn, seconds: float) -> None:
        if conn.deadline_handle is not None:
            conn.deadline_handle.cancel()
        conn.deadline_handle = asyncio.get_running_loop().call_later(seconds, self._init_timed_out, conn)

    async def _http_auth(self, conn: ServerConn, url: str, headers: dict[str, str],
                         http: httpx2.AsyncClient) -> KiroOAuth | None:
        """kiro-cli's OAuth step before connecting: an ``httpx2.Auth`` holding a token, or None.

        :mod:`kirocrew_testing.fake_kiro_oauth` probes the server; on a
        challenge it uses the stored grant pair (refreshing it), or runs
        discovery, registration and PKCE consent with a loopback listener,
        handing us the URL to surface. A stored grant the server refuses even
        after a refresh is deleted and consented afresh, as kiro-cli does
        (``KIRO_FAKE_OAUTH_NO_REAUTH=1``: a ``server_init_failure`` instead).
        Its errors become ``server_init_failure``.
        """
        from kirocrew_testing import fake_kiro_oauth
        from kirocrew_testing.fake_kiro import switches

        spec = conn.spec
        client = None
        if spec.oauth_client_id or spec.oauth_redirect or spec.oauth_scopes:
            # A client id turns registration off; a redirectUri fixes the listener; oauthScopes are requested.
            client = fake_kiro_oauth.PreregisteredClient(
                spec.oauth_client_id, spec.oauth_client_secret, spec.oauth_redirect, spec.oauth_scopes)
        return await fake_kiro_oauth.prepare_auth(
            url, headers=headers, http_client=http, consent_timeout=OAUTH_CONSENT_SECS, client=client,
            reauthorize_on_rejection=not switches.flag(switches.OAUTH_NO_REAUTH),
            on_authorization_url=lambda oauth_url: self._oauth_url(conn, oauth_url))

    async def _oauth_url(self, conn: ServerConn, oauth_url: str) -> None:
        """kiro surfaces the consent URL and keeps the server loading while a person decides."""
        self._extend_deadline(conn, OAUTH_CONSENT_SECS)
        try:
            await self._send(OAUTH_REQUEST, {"sessionId": self.session_id, "serverName": conn.name,
                                             "oauthUrl": oauth_url})
        finally:
            conn.reported.set()
            conn.consent_pending.set()

    # -- status --------------------------------------------------------------

    def _mark_failed(self, conn: ServerConn, error: str) -> None:
        if conn.challenge:
            why = "the token was rejected" if conn.presented_token else "authorization required"
            error = f"{why} ({conn.challenge}); {error}"
        conn.status, conn.error = FAILED, error
        conn.settled.set()
        log.warning("mcp server %s failed to initialize: %s", conn.name, error)

    async def _failed(self, conn: ServerConn, error: str) -> None:
        if conn.settled.is_set():
            return
        self._mark_failed(conn, error)
        await self._announce(conn)

    async def _settle(self, conn: ServerConn, status: str) -> None:
        conn.status = status
        conn.settled.set()
        await self._announce(conn)

    async def _announce(self, conn: ServerConn) -> None:
        method = SERVER_INITIALIZED if conn.status == RUNNING else SERVER_INIT_FAILURE
        try:
            await self._send(method, {"sessionId": self.session_id, "serverName": conn.name})
        finally:
            conn.reported.set()
        await self._changed()

    async def _changed(self) -> None:
        if self._on_change is not None and not self._closing.is_set():
            with contextlib.suppress(Exception):
                await self._on_change()

    async def _send(self, method: str, params: dict[str, Any]) -> None:
        if self._closing.is_set():
            return
        try:
            await self._notify(method, params)
        except Exception as exc:  # noqa: BLE001 - the client went away; nothing to tell
            log.debug("could not send %s: %s", method, exc)


async def _handshake(client: McpSession) -> list[Tool]:
    await client.initialize()
    return await client.list_tools()


async def _first_of(*waits: Awaitable[Any]) -> None:
    """Wait until one of ``waits`` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _describe(exc: BaseException) -> str:
    """The innermost useful message of a (possibly grouped) exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__
