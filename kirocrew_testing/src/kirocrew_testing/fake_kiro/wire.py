"""The fake's JSON-RPC 2.0 wire on stdio, with kiro-cli's frame-level quirks.

A small connection of the fake's own (the ``acp`` SDK's agent side cost more CPU to import
than a session costs to run): newline-delimited JSON, each request and notification handled
in a task of its own, responses to the fake's own requests matched by id. It answers as the
SDK's connection did: a handler's :class:`RpcError` is that error, any other exception is
logged and answered -32603 ``Internal error`` with ``data.details``. What kiro-cli does
differently from a spec-shaped agent lives here too:

* agent → client requests carry **string UUID ids**;
* ``session/new`` without ``mcpServers`` makes the process **exit 0 silently**;
* error objects carry no ``"data": null`` (a refusal is a *bare* -32603);
* ``KIRO_FAKE_SILENT`` reads everything and answers nothing.

With ``KIRO_FAKE_STRICT`` every frame also passes :mod:`.strict`'s checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

#: ``handler(method, params, is_notification)`` → the result of a request.
Handler = Callable[[str, Any, bool], Awaitable[Any]]
#: Called with each frame about to be written (the strict mode's check); raising stops the process.
Check = Callable[[dict[str, Any], str | None], None]


class RpcError(Exception):
    """A JSON-RPC error answer (the SDK's ``RequestError``: same codes, messages and ``data``)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    @classmethod
    def method_not_found(cls, method: Any) -> RpcError:
        return cls(-32601, "Method not found", {"method": method})

    @classmethod
    def invalid_params(cls, data: dict[str, Any] | None = None) -> RpcError:
        return cls(-32602, "Invalid params", data)

    @classmethod
    def internal_error(cls, data: Any = None) -> RpcError:
        return cls(-32603, "Internal error", data)

    def to_error_obj(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": str(self)}
        if self.data is not None:  # kiro sends no "data": null
            error["data"] = self.data
        return error


def _internal_error(exc: Exception) -> RpcError:
    """What the SDK answered for an unexpected exception: its text as ``details`` (or as JSON, when it is JSON)."""
    try:
        data = json.loads(str(exc))
    except ValueError:
        data = {"details": str(exc)}
    return RpcError.internal_error(data)


class Wire:
    """One JSON-RPC connection over stdio byte streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler, *,
                 on_missing_mcp_servers: Callable[[], Awaitable[None]], silent: bool = False,
                 check: Check | None = None) -> None:
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._on_missing_mcp_servers = on_missing_mcp_servers
        self._silent = silent
        self._check = check
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._stopping = asyncio.Event()

    # -- the read loop -----------------------------------------------------------------

    def stop(self) -> None:
        """End the input as if stdin had closed (a signal handler's graceful path)."""
        self._stopping.set()

    async def serve(self) -> None:
        """Handle frames until stdin closes; then fail the fake's open requests and stop its handlers."""
        try:
            while (message := await self._receive()) is not None:
                self._dispatch(message)
        finally:
            self._fail_pending(ConnectionError("Connection closed"))
            await self.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_line(self) -> bytes:
        if self._stopping.is_set():
            return b""
        line = asyncio.ensure_future(self._reader.readline())
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({line, stop}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            line.cancel()
            raise
        finally:
            stop.cancel()
        if line.done():
            return line.result()
        line.cancel()
        return b""

    async def _receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if not line:
                return None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                log.warning("dropping a frame that is not JSON: %r", line[:200])
                continue
            if not isinstance(message, dict) or self._silent:
                continue
            params = message.get("params")
            if message.get("method") == "session/new" and "id" in message and (
                    not isinstance(params, dict) or "mcpServers" not in params):
                await self._on_missing_mcp_servers()
                continue
            return message

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method is None:
            if "id" in message:
                self._answered(message)
            return
        work = self._run_request(message) if "id" in message else self._run_notification(message)
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_request(self, message: dict[str, Any]) -> None:
        method = message["method"]
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            payload["result"] = await self._handler(method, message.get("params"), False)
        except RpcError as exc:
            payload["error"] = exc.to_error_obj()
        except Exception as exc:
            log.exception("Unhandled error while handling request method=%s", method)
            payload["error"] = _internal_error(exc).to_error_obj()
        await self._send(payload, method)

    async def _run_notification(self, message: dict[str, Any]) -> None:
        method = message["method"]
        try:
            await self._handler(method, message.get("params"), True)
        except Exception as exc:  # noqa: BLE001 - a notification has no one to answer
            log.error("Unhandled error while handling notification method=%s: %s", method, exc)

    def _answered(self, message: dict[str, Any]) -> None:
        future = self._pending.pop(str(message["id"]), None)
        if future is None or future.done():
            return
        if "error" in message:
            error = message.get("error") or {}
            future.set_exception(RpcError(error.get("code", -32603), error.get("message", "Error"),
                                          error.get("data")))
        else:
            future.set_result(message.get("result"))

    def _fail_pending(self, error: BaseException) -> None:
        pending = list(self._pending.values())
        self._pending.clear()
        for future in pending:
            if not future.done():
                future.set_exception(error)

    # -- sending -----------------------------------------------------------------------

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Ask the client; its error answer raises :class:`RpcError`, a closed wire ``ConnectionError``."""
        if self._closed:
            raise ConnectionError("Connection closed")
        wire_id = str(uuid.uuid4())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[wire_id] = future
        try:
            await self._send({"jsonrpc": "2.0", "id": wire_id, "method": method, "params": params})
            return await future
        finally:
            self._pending.pop(wire_id, None)

    async def notify(self, method: str, params: Any, *, raw: bool = False) -> None:
        """Send a notification; ``raw`` ones (a script's ``!notify``) skip the strict check on purpose."""
        if self._closed:
            raise ConnectionError("Connection closed")
        await self._send({"jsonrpc": "2.0", "method": method, "params": params}, checked=not raw)

    async def _send(self, message: dict[str, Any], answering: str | None = None, *, checked: bool = True) -> None:
        if self._silent or self._closed:
            return
        if checked and self._check is not None:
            self._check(message, answering)
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        # write() before any await: a response is on the wire before a task woken
        # by the handler can send a notification that must follow it.
        self._writer.write(data.encode("utf-8"))
        await self._writer.drain()

    async def flush(self) -> None:
        """Push out whatever is buffered (before an abrupt exit)."""
        if not self._closed:
            with contextlib.suppress(asyncio.TimeoutError, ConnectionError, RuntimeError):
                await asyncio.wait_for(self._writer.drain(), 2.0)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(asyncio.TimeoutError, ConnectionError, RuntimeError):
            await asyncio.wait_for(self._writer.drain(), 2.0)
        self._writer.close()


async def stdio_streams(limit: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Non-blocking stdin/stdout streams (POSIX pipes), as the SDK's ``stdio_streams`` builds them."""
    import sys

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)
