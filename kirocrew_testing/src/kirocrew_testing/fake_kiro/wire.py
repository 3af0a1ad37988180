"""The fake's JSON-RPC wire: the SDK's agent side, with kiro-cli's quirks applied at the frame level.

The ``acp`` SDK's agent connection is spec-shaped; kiro-cli is not quite. The
differences that live below the typed layer are made here, on raw frames,
through the SDK's public :class:`acp.Transport` seam:

* agent → client requests carry **string UUID ids** (the SDK numbers them 0, 1, ...);
  responses are mapped back so the SDK still correlates them;
* ``session/new`` without ``mcpServers`` makes the process **exit 0 silently**
  (the SDK would answer "invalid params");
* the legacy ``session/set_model`` (no longer routed by the SDK) reaches the
  agent's ``ext_method`` under :data:`LEGACY_SET_MODEL`;
* a date-string ``protocolVersion`` (KiroCrew's v2 harness sends one) is accepted as 1;
* error objects carry no ``"data": null`` (a refusal is a *bare* -32603);
* ``KIRO_FAKE_SILENT`` reads everything and answers nothing.
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

# Where the legacy session/set_model lands (as the SDK strips the leading "_").
LEGACY_SET_MODEL = "fake-kiro/legacy/session/set_model"
_RENAMED_REQUESTS = {"session/set_model": "_" + LEGACY_SET_MODEL}


class KiroWire:
    """An :class:`acp.Transport` over stdio byte streams, newline-delimited JSON."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 on_missing_mcp_servers: Callable[[], Awaitable[None]], silent: bool = False) -> None:
        self._reader = reader
        self._writer = writer
        self._on_missing_mcp_servers = on_missing_mcp_servers
        self._silent = silent
        self._outgoing: dict[str, Any] = {}  # our wire id → the SDK's id
        self._closed = False
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """End the input as if stdin had closed (a signal handler's graceful path)."""
        self._stopping.set()

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

    async def receive(self) -> dict[str, Any] | None:
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
            if not isinstance(message, dict):
                continue
            if self._silent:
                continue
            rewritten = await self._incoming(message)
            if rewritten is not None:
                return rewritten

    async def _incoming(self, message: dict[str, Any]) -> dict[str, Any] | None:
        method = message.get("method")
        if method is None:
            wire_id = message.get("id")
            if isinstance(wire_id, str) and wire_id in self._outgoing:
                message = {**message, "id": self._outgoing.pop(wire_id)}
            return message
        params = message.get("params")
        if method == "session/new" and "id" in message and (
                not isinstance(params, dict) or "mcpServers" not in params):
            await self._on_missing_mcp_servers()
            return None
        if method == "initialize" and isinstance(params, dict) and isinstance(params.get("protocolVersion"), str):
            message = {**message, "params": {**params, "protocolVersion": 1}}
        if method in _RENAMED_REQUESTS and "id" in message:
            message = {**message, "method": _RENAMED_REQUESTS[method]}
        return message

    async def send(self, message: dict[str, Any]) -> None:
        if self._silent or self._closed:
            return
        if "method" in message and "id" in message:
            wire_id = str(uuid.uuid4())
            self._outgoing[wire_id] = message["id"]
            message = {**message, "id": wire_id}
        error = message.get("error")
        if isinstance(error, dict) and error.get("data") is None:
            message = {**message, "error": {k: v for k, v in error.items() if k != "data"}}
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
