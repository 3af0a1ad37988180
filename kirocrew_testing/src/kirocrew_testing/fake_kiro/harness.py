"""A recording ACP client for driving the fake (or any kiro-cli) from a test, on the SDK's client side.

The process is started with :mod:`kirocrew_core.proc` (own process group,
explicit environment, stderr drained into :attr:`FakeKiroProcess.stderr`) and
torn down the same way the production seam does it; the connection is the
SDK's ``connect_to_agent`` with an observer that keeps every raw frame, so a
test can see what the typed layer drops (kiro's ``models``, string ids).

    async with start_fake_kiro(path, "acp", env=env, cwd=tmp) as kiro:
        await kiro.initialize()
        session = await kiro.new_session(str(tmp))
        response = await kiro.prompt(session["sessionId"], "!say hi")
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kirocrew_core import proc

DEFAULT_TIMEOUT = 20.0

# How the client answers session/request_permission: an option id, "cancelled",
# "never" (leave it unanswered), or a callable(tool_call, options) returning one of those.
PermissionPolicy = str | Callable[[Any, list[Any]], str]


class RecordingClient:
    """The ACP ``Client``: records updates, ``_kiro.dev/*`` notifications and permission requests."""

    def __init__(self, permission: PermissionPolicy = "allow_once") -> None:
        self.permission = permission
        self.updates: list[tuple[str, Any]] = []
        self.notifications: list[tuple[str, dict[str, Any]]] = []
        self.permission_requests: list[dict[str, Any]] = []
        self._changed = asyncio.Event()

    def _bump(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **meta: Any) -> Any:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        self.permission_requests.append({"session_id": session_id, "tool_call": tool_call, "options": options,
                                         "meta": meta})
        self._bump()
        answer = self.permission(tool_call, options) if callable(self.permission) else self.permission
        if answer == "never":
            await asyncio.Event().wait()
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=answer))

    async def session_update(self, session_id: str, update: Any, **meta: Any) -> None:
        self.updates.append((session_id, update))
        self._bump()

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.notifications.append((method, params))
        self._bump()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    # -- reading what was recorded ------------------------------------------------

    def texts(self, kind: str = "agent_message_chunk", session_id: str | None = None) -> list[str]:
        return [u.content.text for sid, u in self.updates
                if u.session_update == kind and (session_id is None or sid == session_id)
                and getattr(u.content, "type", "") == "text"]

    def of_kind(self, kind: str) -> list[Any]:
        return [u for _, u in self.updates if u.session_update == kind]

    def notified(self, method: str) -> list[dict[str, Any]]:
        """Params of every ``_kiro.dev`` notification named ``method`` (e.g. ``"kiro.dev/metadata"``)."""
        return [params for name, params in self.notifications if name == method]

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT) -> Any:
        """Wait until ``predicate()`` is truthy (re-checked on every recorded event); return its value."""
        async def poll() -> Any:
            while True:
                waiter = self._changed
                value = predicate()
                if value:
                    return value
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(waiter.wait(), 0.1)

        return await asyncio.wait_for(poll(), timeout)


@dataclass
class FakeKiroProcess:
    conn: Any
    process: asyncio.subprocess.Process
    client: RecordingClient
    frames: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """A raw request: the whole result dict, fields the SDK's types would drop included."""
        return await asyncio.wait_for(self.conn._conn.send_request(method, params), self.timeout)

    async def initialize(self, protocol_version: Any = 1) -> dict[str, Any]:
        return await self.request("initialize", {
            "protocolVersion": protocol_version,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
        })

    async def new_session(self, cwd: str, mcp_servers: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        return await self.request("session/new", {"cwd": cwd, "mcpServers": list(mcp_servers)})

    async def load_session(self, session_id: str, cwd: str,
                           mcp_servers: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
        return await self.request("session/load", {"sessionId": session_id, "cwd": cwd,
                                                   "mcpServers": list(mcp_servers)})

    async def prompt(self, session_id: str, text: str, timeout: float | None = None) -> Any:
        from acp import text_block

        return await asyncio.wait_for(self.conn.prompt(session_id=session_id, prompt=[text_block(text)]),
                                      timeout or self.timeout)

    async def execute(self, session_id: str, command: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        return await asyncio.wait_for(self.conn.ext_method("kiro.dev/commands/execute", {
            "sessionId": session_id, "command": {"command": command, "args": args or {}}}), self.timeout)

    async def wait_exit(self, timeout: float | None = None) -> int:
        """The exit code once the process has gone (polling: a pipe held open must not matter)."""
        async def poll() -> int:
            while self.process.returncode is None:
                await asyncio.sleep(0.02)
            return self.process.returncode

        return await asyncio.wait_for(poll(), timeout or self.timeout)

    def sent(self, method: str) -> list[dict[str, Any]]:
        """Raw frames the fake sent with ``method`` (requests and notifications)."""
        return [m for d, m in self.frames if d == "incoming" and m.get("method") == method]


@contextlib.asynccontextmanager
async def start_fake_kiro(program: str | os.PathLike[str], *args: str, env: dict[str, str], cwd: Any = None,
                          client: RecordingClient | None = None,
                          timeout: float = DEFAULT_TIMEOUT) -> AsyncIterator[FakeKiroProcess]:
    """Spawn ``program *args`` and connect an ACP client to it; tear it down on exit."""
    from acp import connect_to_agent

    client = client or RecordingClient()
    process = await proc.spawn_async([os.fspath(program), *args], env=env, cwd=cwd)
    fake = FakeKiroProcess(conn=None, process=process, client=client, timeout=timeout)
    proc.drain_stderr_async(process, fake.stderr.append)

    def observe(event: Any) -> None:
        fake.frames.append((event.direction.value, event.message))

    # Like the runtime's client, a subset of the Client protocol: the SDK answers the rest with method-not-found.
    fake.conn = connect_to_agent(client, process.stdin, process.stdout, observers=[observe])  # type: ignore[arg-type]
    try:
        yield fake
    finally:
        with contextlib.suppress(Exception):
            await fake.conn.close()
        await proc.terminate_async(process, reason="test done")
