"""The fake kiro-cli's client for stdio MCP servers: :class:`~.mcp_session.McpSession` over a child's pipes.

Why not the mcp SDK's ``stdio_client`` + ``ClientSession``: importing them (with anyio and
the protocol models) cost each fake process about 0.3 CPU-s, and the suite starts the fake
hundreds of times, nearly always with stdio servers (kirocrew's relays, fixture servers). The
session's messages, answers and checks are :mod:`~kirocrew_testing.fake_kiro.mcp_session`'s;
this module spawns the server and moves lines.

- **Spawn** through :mod:`kirocrew_core.proc` (the one owner of children and signals): the
  command with ``args`` and exactly the ``env`` given (the hub passes ``os.environ`` plus the
  entry's), in ``cwd``, stderr inherited, leading a new session as the SDK's does.
  :meth:`StdioClient.aclose` is proc's teardown: close stdin, wait for the server (and its
  group) to go, SIGTERM the group, wait, SIGKILL; bounded, and a cancelled close kills.
- **Wire**: newline-delimited JSON-RPC 2.0, no cap on a line (the SDK has none); the server's
  stdout ending closes the session (every pending request fails "Connection closed").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kirocrew_testing.fake_kiro.mcp_session import CONNECTION_CLOSED, McpError, McpSession

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024


class StdioClient(McpSession):
    """One stdio MCP server, spawned and spoken to; :meth:`aclose` always ends it."""

    def __init__(self, command: str, args: Sequence[str], *, env: Mapping[str, str], cwd: Path | str) -> None:
        super().__init__()
        self._argv = [command, *args]
        self._env = dict(env)
        self._cwd = cwd
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Spawn the server and start reading its stdout."""
        from kirocrew_core import proc

        self._process = await proc.spawn_async(self._argv, env=self._env, cwd=self._cwd, stderr=None)
        self._reader = asyncio.create_task(self._read_loop(), name=f"mcp-stdio:{self._process.pid}")

    async def aclose(self) -> None:
        """Stop the server and its process group (bounded; cancelled half-way, the group is killed)."""
        from kirocrew_core import proc

        process, self._process = self._process, None
        try:
            if process is not None:
                await proc.terminate_async(process, reason="MCP server closed")
        finally:
            if self._reader is not None:
                self._reader.cancel()  # a process outside the group may still hold stdout open
                await asyncio.wait([self._reader], timeout=1.0)
            self._fail_pending()

    # -- the wire ------------------------------------------------------------

    def _is_open(self) -> bool:
        return self._process is not None and not self.closed.is_set()

    async def _write(self, message: dict[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise McpError(CONNECTION_CLOSED, "Connection closed")
        async with self._write_lock:
            try:
                process.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
                await process.stdin.drain()
            except (ConnectionError, RuntimeError, OSError) as exc:
                raise McpError(CONNECTION_CLOSED, "Connection closed") from exc

    def _write_nowait(self, message: dict[str, Any]) -> None:
        """A message that must not wait: an answer from the read loop, a cancelled caller's courtesy cancel."""
        process = self._process
        if process is None or process.stdin is None or process.stdin.is_closing():
            return
        with contextlib.suppress(ConnectionError, RuntimeError, OSError):
            process.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def _read_loop(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        stdout = self._process.stdout
        partial = bytearray()  # a line's start, however long (only new chunks are searched for its end)
        try:
            while chunk := await stdout.read(READ_CHUNK):
                if b"\n" not in chunk:
                    partial += chunk
                    continue
                first, *lines, rest = chunk.split(b"\n")
                partial += first
                self._receive_line(bytes(partial))
                for line in lines:
                    self._receive_line(line)
                partial = bytearray(rest)
        except (ConnectionError, OSError) as exc:
            log.debug("reading the MCP server's stdout failed: %s", exc)
        finally:
            self.closed.set()
            self._fail_pending()
