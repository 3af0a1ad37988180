"""The fake kiro-cli's clients for remote MCP servers: :class:`~.mcp_session.McpSession` over httpx2.

Why not the mcp SDK's ``streamable_http_client`` / ``sse_client`` + ``ClientSession``:
importing them cost each fake process about 0.5 CPU-s, httpx2 alone well under a tenth of
that, and the connections tests start the fake against HTTP servers dozens of times. The
wire is the SDK's:

- :class:`HttpClient` (streamable HTTP): every message is a POST to the URL with ``Accept:
  application/json, text/event-stream``, ``Content-Type: application/json``, the entry's
  headers, the ``Mcp-Session-Id`` the ``initialize`` answer set, and ``MCP-Protocol-Version``
  once negotiated. ``on_response`` (the hub watching for a 401) rides on the httpx2 client,
  and so does the OAuth grant once :meth:`HttpClient.authorize` hands it over.
- A request's answer is the POST's body: ``application/json`` (one message) or a
  ``text/event-stream`` whose ``message`` events carry the answer and any server requests or
  notifications before it (an event's data is capped at the SDK's 1 MiB). Server requests are
  answered by a POST of their own.
- Failures resolve the request as the SDK resolves it: a JSON-RPC error body at any status is
  that error; otherwise 404 is "Session terminated" (or "Not Found" before a session), another
  4xx/5xx "Server returned an error response", 202 to a request, a redirect (not followed), an
  unexpected content type or an unparsable body an error naming it, and a stream that ends
  without the answer "SSE stream ended without a response" (the SDK would resume a stream
  whose events carried ids; no fixture server sends them). A transport error (refused
  connection, timeout) raises as httpx2 raised it.
- :meth:`HttpClient.aclose` ends the session with a DELETE, as the SDK does. The SDK's
  optional GET stream for server-initiated messages is not opened: nothing the fake does
  waits on one.
- :class:`SseClient` (legacy HTTP+SSE, ``type: "sse"``): one GET event stream, POSTs to the
  endpoint it names.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from urllib.parse import urljoin, urlsplit
from typing import TYPE_CHECKING, Any

from kirocrew_testing.fake_kiro.mcp_session import CONNECTION_CLOSED, INVALID_REQUEST, McpError, McpSession

if TYPE_CHECKING:
    import httpx2

log = logging.getLogger(__name__)

ACCEPT = "application/json, text/event-stream"
SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
CONNECT_TIMEOUT_SECS = 30.0
READ_TIMEOUT_SECS = 300.0  # a server may hold an event stream open while a tool runs
MAX_EVENT_BYTES = 1024 * 1024
PARSE_ERROR = -32700
INTERNAL_ERROR = -32603
METHOD_NOT_FOUND = -32601


class HttpClient(McpSession):
    """One streamable-HTTP MCP server; :meth:`start` opens the HTTP client, :meth:`aclose` ends the session."""

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None,
                 on_response: Callable[[httpx2.Response], Awaitable[None]] | None = None) -> None:
        super().__init__()
        self.url = url
        self._headers = dict(headers or {})
        self._auth: httpx2.Auth | None = None
        self._on_response = on_response
        self._http: httpx2.AsyncClient | None = None
        self._answers: set[asyncio.Task[None]] = set()
        self.session_id: str | None = None

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Open the HTTP client (nothing is sent yet): the OAuth probe may use it first, see :attr:`http`."""
        import httpx2

        hooks = {"request": [], "response": [self._on_response]} if self._on_response else None
        self._http = httpx2.AsyncClient(headers=self._headers, event_hooks=hooks,
                                        timeout=httpx2.Timeout(CONNECT_TIMEOUT_SECS, read=READ_TIMEOUT_SECS))

    @property
    def http(self) -> httpx2.AsyncClient:
        """The open HTTP client: one per server, so a fake process builds one TLS context for it."""
        if self._http is None:
            raise McpError(CONNECTION_CLOSED, "Connection closed")
        return self._http

    def authorize(self, auth: httpx2.Auth | None) -> None:
        """Sign every request from now on with ``auth`` (an OAuth grant); :meth:`aclose` closes it too."""
        self._auth = auth
        if auth is not None:
            self.http.auth = auth

    async def aclose(self) -> None:
        """End the session (DELETE, best effort), close the HTTP client and the auth; pending requests fail."""
        http, self._http = self._http, None
        self.closed.set()
        self._fail_pending()
        for task in self._answers:
            task.cancel()
        try:
            if http is not None and self.session_id is not None:
                with contextlib.suppress(Exception):  # the server may be gone already: nothing to end
                    await http.delete(self.url, headers=self._message_headers())
        finally:
            if http is not None:
                await http.aclose()
            closer = getattr(self._auth, "aclose", None)  # an OAuth auth may hold a consent listener
            if closer is not None:
                await closer()

    def _is_open(self) -> bool:
        return self._http is not None and not self.closed.is_set()

    # -- the wire ------------------------------------------------------------

    def _message_headers(self) -> dict[str, str]:
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        if self.session_id:
            headers[SESSION_HEADER] = self.session_id
        if self.protocol_version:
            headers[VERSION_HEADER] = self.protocol_version
        return headers

    async def _write(self, message: dict[str, Any]) -> None:
        http = self._http
        if http is None:
            raise McpError(CONNECTION_CLOSED, "Connection closed")
        request_id = message.get("id") if "method" in message else None
        if message.get("method") == "initialize":
            self.protocol_version = None  # the negotiation itself carries no version
        body = json.dumps(message, separators=(",", ":")).encode()
        async with http.stream("POST", self.url, content=body, headers=self._message_headers()) as response:
            failure = await self._read_answer(response, message, request_id)
        if failure is not None and request_id is not None:
            self._resolve(request_id, failure)

    def _write_nowait(self, message: dict[str, Any]) -> None:
        if not self._is_open():
            return
        task = asyncio.ensure_future(self._post_quietly(message))
        self._answers.add(task)
        task.add_done_callback(self._answers.discard)

    async def _post_quietly(self, message: dict[str, Any]) -> None:
        try:
            await self._write(message)
        except Exception as exc:  # noqa: BLE001 - an answer or a courtesy cancel nobody waits on
            log.debug("could not send %s: %s", message.get("method") or "an answer", exc)

    async def _read_answer(self, response: httpx2.Response, message: dict[str, Any],
                           request_id: Any) -> McpError | None:
        """Dispatch what ``response`` carries; the error to resolve the request with, if it got no answer."""
        status = response.status_code
        content_type = response.headers.get("content-type", "").lower()
        if status >= 400:
            if content_type.startswith("application/json"):
                error = _rpc_error(await response.aread())
                if error is not None:
                    return error
            if status == 404:
                return (McpError(INVALID_REQUEST, "Session terminated") if self.session_id
                        else McpError(METHOD_NOT_FOUND, "Not Found"))
            return McpError(INTERNAL_ERROR, "Server returned an error response")
        if request_id is None:
            return None  # the server must not answer a notification or a response
        if status == 202:
            return McpError(INVALID_REQUEST, "server answered a request with 202 Accepted")
        if 300 <= status < 400:
            where = response.headers.get("location", "")
            return McpError(INVALID_REQUEST, f"server redirected to {where!r}; the redirect was not followed")
        if message.get("method") == "initialize" and response.headers.get(SESSION_HEADER):
            self.session_id = response.headers[SESSION_HEADER]
        if content_type.startswith("application/json"):
            body = await response.aread()
            try:
                self._receive_message(json.loads(body))
            except ValueError as exc:
                return McpError(PARSE_ERROR, f"Failed to parse JSON response: {exc}")
        elif content_type.startswith("text/event-stream"):
            await self._read_events(response, request_id)
        else:
            return McpError(INVALID_REQUEST, f"Unexpected content type: {content_type}")
        if self._answered(request_id):
            return None
        return McpError(CONNECTION_CLOSED, "SSE stream ended without a response")

    async def _read_events(self, response: httpx2.Response, request_id: Any) -> None:
        """Hand each ``message`` event's data to the session until the request is answered or the stream ends."""
        async with contextlib.aclosing(_events(response)) as stream:
            async for event, data in stream:
                if event in ("", "message"):
                    self._receive_line(data)
                    if self._answered(request_id):
                        return

    def _answered(self, request_id: Any) -> bool:
        future = self._pending.get(request_id)
        return future is None or future.done()

    def _resolve(self, request_id: Any, error: McpError) -> None:
        future = self._pending.get(request_id)
        if future is not None and not future.done():
            future.set_exception(error)


def _rpc_error(body: bytes) -> McpError | None:
    """The JSON-RPC error a non-2xx body carries, if it is one."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    error = message.get("error") if isinstance(message, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return None
    code = error.get("code")
    return McpError(code if isinstance(code, int) else INTERNAL_ERROR, error["message"], error.get("data"))


async def _events(response: httpx2.Response) -> AsyncGenerator[tuple[str, str], None]:
    """``(event, data)`` of each event of a ``text/event-stream`` with data (comments and ids skipped).

    Data lines join with newlines; an event's data over :data:`MAX_EVENT_BYTES` raises
    :class:`McpError` (the SDK's cap). A last event not closed by a blank line still counts.
    """
    event, size = "", 0
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data)
            event, size, data = "", 0, []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            size += len(value) + 1
            if size > MAX_EVENT_BYTES:
                raise McpError(CONNECTION_CLOSED, f"SSE event larger than {MAX_EVENT_BYTES} bytes")
            data.append(value)
    if data:
        yield event, "\n".join(data)


class SseClient(HttpClient):
    """A legacy HTTP+SSE server (``type: "sse"``), as the SDK's ``sse_client`` speaks to it.

    :meth:`initialize` first opens the GET event stream at the URL; its ``endpoint`` event names
    where messages are POSTed (on the same origin, or the connection fails), and its ``message``
    events carry every answer, server request and notification. A POST the server refuses fails
    the request at once (the SDK logs it and the request waits out its deadline). The stream
    ending closes the session.
    """

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None,
                 on_response: Callable[[httpx2.Response], Awaitable[None]] | None = None) -> None:
        super().__init__(url, headers=headers, on_response=on_response)
        self._endpoint: str | None = None
        self._reader: asyncio.Task[None] | None = None

    async def initialize(self) -> dict[str, Any]:
        endpoint: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read_stream(self.http, endpoint), name=f"mcp-sse:{self.url}")
        self._endpoint = await endpoint
        return await super().initialize()

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.wait([self._reader], timeout=1.0)
        await super().aclose()

    async def _write(self, message: dict[str, Any]) -> None:
        http = self._http
        if http is None or self._endpoint is None or self.closed.is_set():
            raise McpError(CONNECTION_CLOSED, "Connection closed")
        response = await http.post(self._endpoint, content=json.dumps(message, separators=(",", ":")).encode(),
                                   headers={"content-type": "application/json"})
        response.raise_for_status()

    async def _read_stream(self, http: httpx2.AsyncClient, endpoint: asyncio.Future[str]) -> None:
        try:
            async with http.stream("GET", self.url, headers={"accept": "text/event-stream",
                                                             "cache-control": "no-store"}) as response:
                response.raise_for_status()
                async with contextlib.aclosing(_events(response)) as stream:
                    async for event, data in stream:
                        if event == "endpoint" and not endpoint.done():
                            endpoint.set_result(self._endpoint_url(data))
                        elif event == "message":
                            self._receive_line(data)
                        else:
                            log.debug("ignored SSE event %r", event)
            if not endpoint.done():
                endpoint.set_exception(McpError(CONNECTION_CLOSED, "SSE stream ended before naming its endpoint"))
        except Exception as exc:  # noqa: BLE001 - the stream failing: the start fails with it, or the session ends
            if not endpoint.done():
                endpoint.set_exception(exc)
            else:
                log.debug("the SSE stream of %s failed: %s", self.url, exc)
        finally:
            self.closed.set()
            self._fail_pending()

    def _endpoint_url(self, data: str) -> str:
        """The POST endpoint an ``endpoint`` event names, refused off the stream's origin."""
        url = urljoin(self.url, data)
        if (urlsplit(url).scheme, urlsplit(url).netloc) != (urlsplit(self.url).scheme, urlsplit(self.url).netloc):
            raise ValueError(f"Endpoint origin does not match connection origin: {url}")
        return url
