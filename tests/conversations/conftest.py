"""Fixtures for driving the real ``kirocrew mcp-conversations`` server over stdio.

``fake_kiro_env`` is the environment such a server runs in (the fake kiro-cli, a state directory
under the test's tmp dir, the isolated homes, and ``KIROCREW_NO_HOST=1`` so a CLI twin run with it
works in process instead of starting a host). ``conversations_client(*args, env=...)`` opens a real
MCP client session on a fresh ``kirocrew mcp-conversations --standalone`` process::

    def test_something(conversations_client, tmp_path):
        async def main():
            async with conversations_client("--run-deadline-secs", "5") as client:
                out = await client.call("kiro_delegate", conversation="new", name="t",
                                        workspace=str(tmp_path), message="!say hi")
        run_async(main())          # the ``run_async`` fixture: asyncio.run with a hang bound

Servers opened one after another in a test share the state directory, as a restart would.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kirocrew_testing.aio import run_bounded
from kirocrew_testing.fixtures import kirocrew_argv

T = TypeVar("T")

STATE_DIR_ENV = "KIRO_CONVERSATIONS_STATE_DIR"
NO_HOST_ENV = "KIROCREW_NO_HOST"
# Generous bounds: they only stop a hung test, they never measure anything.
TEST_TIMEOUT_SECS = 90.0


def run_async(coro: Awaitable[T], timeout: float = TEST_TIMEOUT_SECS) -> T:
    """Run ``coro`` to completion on a fresh event loop, failing after ``timeout`` seconds."""
    return run_bounded(coro, timeout)


class ToolCallError(Exception):
    """A ``tools/call`` answered with ``isError``; ``code`` is the stable error code."""

    def __init__(self, code: str, message: str, result: Any) -> None:
        super().__init__(f"error[{code}]: {message}")
        self.code = code
        self.message = message
        self.result = result


@dataclass
class ConversationsClient:
    """One initialized MCP session on one server process."""

    ToolCallError = ToolCallError  # so test modules can catch it without importing this conftest

    raw: Any  # mcp.ClientSession
    initialize_result: Any
    stderr_path: Path
    notifications: list[Any] = field(default_factory=list)  # every server notification, in order

    async def call(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        """Call ``tool``; its structured content, or :class:`ToolCallError` carrying ``.code``."""
        return structured(await self.call_result(tool, arguments))

    async def call_result(self, tool: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """The raw ``CallToolResult`` (``kwargs`` go to ``ClientSession.call_tool``, e.g. ``progress_callback``)."""
        return await self.raw.call_tool(tool, arguments or {}, **kwargs)

    def progress_notifications(self) -> list[Any]:
        return [n for n in self.notifications if getattr(n, "method", None) == "notifications/progress"]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""


def structured(result: Any) -> dict[str, Any]:
    """``result.structured_content``, or :class:`ToolCallError` (code read from the text) when ``result.is_error``."""
    from kirocrew_core.tool_results import read_error

    if result.is_error:
        raise ToolCallError(*read_error(result), result)
    return result.structured_content


@pytest.fixture(name="run_async")
def _run_async() -> Callable[..., Any]:
    """:func:`run_async`: ``run_async(main())`` runs a coroutine with a hang bound."""
    return run_async


@pytest.fixture
def conversations_state_dir(tmp_path: Path) -> Path:
    """Where the test's servers keep their state (created by the server, owner-only)."""
    return tmp_path / "conversations-state"


@pytest.fixture
def fake_kiro_env(fake_kiro_cli: Any, conversations_state_dir: Path, lean_kirocrew_agent: Path) -> dict[str, str]:
    """Environment for a server process: the fake kiro-cli, the test's state dir and homes, the lean
    rendered ``kirocrew`` agent (runs without a mode run as it; a host renders its managed servers in).

    No ``KIRO_CONVERSATIONS_*`` setting leaks in from outside; copy and extend it per test.
    ``KIROCREW_NO_HOST=1``: a twin run with this environment and no standalone server works in
    process, as before the host; tests of the host drop it (:func:`hosted_env`).
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("KIRO_CONVERSATIONS_")}
    env["KIRO_CLI_PATH"] = str(fake_kiro_cli.sandboxable_path)
    env[STATE_DIR_ENV] = str(conversations_state_dir)
    env[NO_HOST_ENV] = "1"
    return env


# The SDK's stdio client kills a server still running 2 s after it closed stdin. Closing kiro
# workers can take longer on a loaded machine, and that kill would orphan them (they live in
# their own process groups). How the server ends is tested on its own in test_server.py.
CLIENT_CLOSE_GRACE_SECS = 15.0


@pytest.fixture
def conversations_client(fake_kiro_env: dict[str, str], tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``conversations_client(*args, env=None, extra_env=None)``: an async context manager.

    It starts ``kirocrew mcp-conversations --standalone *args`` (the in-process server; the
    options need ``--standalone``) through the mcp SDK's ``stdio_client``,
    initializes a ``ClientSession`` and yields a :class:`ConversationsClient`. ``env`` replaces
    :func:`fake_kiro_env`; ``extra_env`` adds to it. The server's stderr is kept in
    ``client.stderr()``. Leaving the block closes stdin, as an MCP client does.
    """
    return _client_opener(("--standalone",), fake_kiro_env, tmp_path, monkeypatch, "mcp-conversations")


@pytest.fixture
def hosted_env(fake_kiro_env: dict[str, str]) -> dict[str, str]:
    """:func:`fake_kiro_env` without ``KIROCREW_NO_HOST``: relays and twins run with it reach the host.

    The host a relay starts inherits this environment, so its conversations use the fake
    kiro-cli and the test's state directory; ``KIRO_CONVERSATIONS_*`` set here are its settings.
    """
    return {key: value for key, value in fake_kiro_env.items() if key != NO_HOST_ENV}


@pytest.fixture
def hosted_conversations_client(hosted_env: dict[str, str], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``hosted_conversations_client(env=None, extra_env=None)``: like :func:`conversations_client`, through the host.

    It starts bare ``kirocrew mcp-conversations``: a relay to this test's host, which the
    first relay starts in the background with its environment (:func:`hosted_env`, or
    ``env``/``extra_env``); settings are ``KIRO_CONVERSATIONS_*`` variables there. Clients
    opened one after another, or at once, share that host and its orchestrator. The host is
    stopped when the test ends.
    """
    return _client_opener((), hosted_env, tmp_path, monkeypatch, "relay")


def _client_opener(prefix: tuple[str, ...], default_env: dict[str, str], tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch, label: str) -> Callable[..., Any]:
    import mcp.client.stdio

    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", CLIENT_CLOSE_GRACE_SECS)
    counter = iter(range(1, 1000))

    @contextlib.asynccontextmanager
    async def open_client(*args: str, env: dict[str, str] | None = None,
                          extra_env: dict[str, str] | None = None) -> AsyncIterator[ConversationsClient]:
        from kirocrew_testing.core_sessions import stdio_session

        server_env = {**(default_env if env is None else env), **(extra_env or {})}
        stderr_path = tmp_path / f"{label}-{next(counter)}.stderr"
        argv = kirocrew_argv("mcp-conversations", *prefix, *args)
        async with stdio_session(argv, server_env, tmp_path, stderr_path) as opened:
            yield ConversationsClient(opened.session, opened.initialize_result, stderr_path, opened.notifications)

    return open_client
