"""The kirocrew-core end-to-end harness: conversations whose fake kiro-cli calls kirocrew-core tools.

:class:`CrewHarness` holds one isolated crew home whose rendered agent file ``kirocrew``
mounts ``kirocrew-core`` and ``kirocrew-conversations``, and the environment a host started
from it runs in: the fake kiro-cli, a conversations state directory, the test-only probe
tools (:mod:`kirocrew_testing.servers.core_probe`) on ``PYTHONPATH``, and eager MCP start in
the fake (a session answers once its servers are up, so a script's first ``!mcp`` finds them).
The host is the real ``kirocrew serve --background`` the first relay starts; the suite's
isolation stops it when the test ends.

* ``async with harness.conversations() as conv`` — an MCP client on ``kirocrew mcp-conversations``;
  ``await harness.delegate(conv, script)`` runs ``script`` (fake kiro-cli lines such as
  ``!mcp kirocrew-core probe_whoami {}``) as a new conversation on the ``kirocrew`` agent and
  returns ``kiro_delegate``'s result once the run ended.
* ``async with harness.core(session_key=...) as core`` — a plain MCP client on ``kirocrew mcp-core``
  (a relay, not started by a kiro-cli kirocrew started); ``await core.call(tool, **args)`` gives
  ``(text, code)``, code None on success. ``harness.relay("mcp-cron")`` is the same on another
  hosted server's relay.
* ``harness.probe_records()`` — what the probe tools saw, one dict per handler run.
* ``with harness.owner_http() as owner`` — an owner-authenticated HTTP client on the running host's
  dashboard (``owner.get("/api/conversations")``).

Used by tests/coretools; the other parts of issue 17 reuse it for their own tools.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_core.home import RENDERED_AGENT

from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.servers.core_probe import LOG_ENV, core_probe_distribution

AGENT = RENDERED_AGENT
HANDSHAKE_TIMEOUT_SECS = 30.0
# The SDK's stdio client kills a server still running this long after closing its stdin.
CLIENT_CLOSE_GRACE_SECS = 15.0


@dataclass(frozen=True)
class StdioSession:
    """An initialized MCP client session on a stdio server, with the notifications it has received."""

    session: Any  # mcp.ClientSession
    initialize_result: Any
    notifications: list[Any]


@contextlib.asynccontextmanager
async def stdio_session(argv: list[str], env: dict[str, str], cwd: Path,
                        stderr_path: Path) -> AsyncIterator[StdioSession]:
    """The mcp SDK's client on ``argv`` over stdio, initialized within :data:`HANDSHAKE_TIMEOUT_SECS`.

    The server's stderr goes to ``stderr_path``; notifications are collected in arrival order.
    """
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(cwd))
    notifications: list[Any] = []

    async def on_message(message: Any) -> None:
        if not isinstance(message, Exception):
            notifications.append(getattr(message, "root", message))

    with stderr_path.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write, message_handler=on_message) as session:
            with anyio.fail_after(HANDSHAKE_TIMEOUT_SECS):
                initialized = await session.initialize()
            yield StdioSession(session, initialized, notifications)


@dataclass
class McpClient:
    """One initialized MCP session over a relay's stdio."""

    raw: Any  # mcp.ClientSession
    initialize_result: Any
    stderr_path: Path
    notifications: list[Any] = field(default_factory=list)

    async def call(self, tool: str, /, **arguments: Any) -> tuple[str, str | None]:
        """``(text, None)`` on success, ``(message, code)`` for an ``isError`` result."""
        from kirocrew_core.tool_results import read_error

        result = await self.raw.call_tool(tool, arguments)
        if result.is_error:
            code, message = read_error(result)
            return message, code
        return "".join(getattr(block, "text", "") for block in result.content), None

    async def structured(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        """A conversations tool's structured result; AssertionError naming the code on an error."""
        from kirocrew_core.tool_results import read_error

        result = await self.raw.call_tool(tool, arguments)
        assert not result.is_error, f"{tool} failed: {read_error(result)}"
        return dict(result.structured_content)

    async def tool_names(self) -> list[str]:
        return [tool.name for tool in (await self.raw.list_tools()).tools]

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""


@dataclass
class ProcessTree:
    """A process a session key can be bound to (``sh``) and its child (``sleep``), standing for a relay it started."""

    parent: int
    child: int


def verified_caller(pid: int, key: str = "", session_type: str = "relay") -> Any:
    """The caller block the host would verify and pin for a relay running as ``pid`` (a ``CallerContext``).

    ``key`` is what the block claims (``KIROCREW_SESSION_KEY``); the resolver goes by ``pid``'s ancestry.
    """
    from kirocrew_core import processes
    from kirocrew_core.host.caller import CallerContext

    return CallerContext(key, session_type, pid, None, {}, peer_verified=True,
                         relay_started=processes.start_time(pid))


@contextlib.contextmanager
def process_tree() -> Iterator[ProcessTree]:
    """A live :class:`ProcessTree` (``sh`` leads its own kernel session, as a kiro-cli does), torn down on exit."""
    from kirocrew_core import proc

    shell = proc.spawn(["/bin/sh", "-c", "sleep 60 & echo $!; wait"], env=dict(os.environ),
                       stdin=proc.DEVNULL, text=True)
    try:
        assert shell.stdout is not None
        yield ProcessTree(shell.pid, int(shell.stdout.readline()))
    finally:
        proc.terminate(shell, reason="test process tree")


class CrewHarness:
    """See the module docstring. ``root`` is the test's tmp dir; the crew home is the test's isolated one."""

    def __init__(self, root: Path, base_env: dict[str, str], render: Callable[[], object]) -> None:
        self.root = root
        self._render = render  # the agent-file render (kirocrew-mcp's, which this package does not depend on)
        self.workspace = root / "project"
        self.workspace.mkdir(exist_ok=True)
        self.probe_log = root / "probe.jsonl"
        plugin = core_probe_distribution(root / "core-probe-plugin")
        env = {key: value for key, value in base_env.items()
               if not key.startswith("KIRO_CONVERSATIONS_") and key not in ("KIROCREW_NO_HOST",
                                                                              "KIROCREW_SESSION_KEY",
                                                                              "KIROCREW_HOST_PID")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin), env.get("PYTHONPATH", "")) if p)
        env["KIRO_CONVERSATIONS_STATE_DIR"] = str(root / "conversations-state")
        env["KIRO_FAKE_EAGER_MCP"] = "1"
        env[LOG_ENV] = str(self.probe_log)
        self.env = env
        self._counter = iter(range(1, 10_000))

    def render_agent(self) -> dict[str, Any]:
        """Render ``kirocrew.json`` (the managed servers included) into the isolated Kiro home; its document."""
        from kirocrew_core import home

        self._render()
        document: dict[str, Any] = json.loads(home.rendered_agent_file().read_text())
        return document

    def write_agent(self, name: str, document: dict[str, Any], *, workspace: Path | None = None) -> Path:
        """Write an agent file ``name`` (global, or in ``workspace``'s ``.kiro/agents``); its path."""
        from kirocrew_core import home

        directory = (workspace / ".kiro" / "agents") if workspace is not None else home.kiro_agents_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.json"
        path.write_text(json.dumps(document))
        return path

    @contextlib.contextmanager
    def owner_http(self) -> Iterator[Any]:
        """An owner-authenticated ``httpx.Client`` on the running host's gateway (``kirocrew dashboard --no-start``)."""
        import subprocess
        from urllib.parse import parse_qs, urlsplit

        import httpx

        shown = subprocess.run(kirocrew_argv("dashboard", "--no-start"), env=self.env, capture_output=True,
                               text=True, timeout=60, check=True).stdout.strip()
        token = parse_qs(urlsplit(shown).query)["token"][0]
        with httpx.Client(base_url=shown.split("/?", 1)[0], headers={"Authorization": f"Bearer {token}"},
                          timeout=60) as client:
            yield client

    def probe_records(self) -> list[dict[str, Any]]:
        if not self.probe_log.exists():
            return []
        return [json.loads(line) for line in self.probe_log.read_text().splitlines() if line.strip()]

    @contextlib.asynccontextmanager
    async def _client(self, command: str, env: dict[str, str], cwd: Path | None = None) -> AsyncIterator[McpClient]:
        import mcp.client.stdio

        mcp.client.stdio.PROCESS_TERMINATION_TIMEOUT = CLIENT_CLOSE_GRACE_SECS
        stderr_path = self.root / f"{command}-{next(self._counter)}.stderr"
        async with stdio_session(kirocrew_argv(command), env, cwd or self.root, stderr_path) as opened:
            yield McpClient(opened.session, opened.initialize_result, stderr_path, opened.notifications)

    def conversations(self, **extra_env: str) -> contextlib.AbstractAsyncContextManager[McpClient]:
        """An MCP client on ``kirocrew mcp-conversations`` (through the host)."""
        return self._client("mcp-conversations", {**self.env, **extra_env})

    def core(self, session_key: str | None = None,
             **extra_env: str) -> contextlib.AbstractAsyncContextManager[McpClient]:
        """A plain MCP client on ``kirocrew mcp-core``; ``session_key`` goes into its env as given."""
        return self.relay("mcp-core", session_key, **extra_env)

    def relay(self, command: str, session_key: str | None = None,
              **extra_env: str) -> contextlib.AbstractAsyncContextManager[McpClient]:
        """A plain MCP client on the relay ``kirocrew <command>``; ``session_key`` as in :meth:`core`."""
        env = {**self.env, **extra_env}
        if session_key is not None:
            env["KIROCREW_SESSION_KEY"] = session_key
        return self._client(command, env)

    async def spawn(self, conv: McpClient, script: str, *, name: str | None = None, mode: str | None = AGENT,
                    workspace: Path | None = None, **settings: Any) -> dict[str, Any]:
        """Start ``script`` as a new conversation on agent ``mode`` (None: none named, the default agent)
        and ``settings`` (``model``, ``effort``...); ``kiro_spawn``'s result."""
        if mode is not None:
            settings["mode"] = mode
        return await conv.structured("kiro_spawn", conversation="new", name=name or f"c{next(self._counter)}",
                                     workspace=str(workspace or self.workspace), message=script, **settings)

    async def delegate(self, conv: McpClient, script: str, *, name: str | None = None, mode: str | None = AGENT,
                       workspace: Path | None = None, **settings: Any) -> dict[str, Any]:
        """Run ``script`` as a new conversation to its end (see :meth:`spawn`); the run (``kiro_wait``'s entry)."""
        started = await self.spawn(conv, script, name=name, mode=mode, workspace=workspace, **settings)
        return await self.wait(conv, started)

    async def wait(self, conv: McpClient, started: dict[str, Any]) -> dict[str, Any]:
        """Wait until the run ``started`` names has ended (not merely needs attention); its entry."""
        target = {"conversationId": started["conversationId"], "runId": started["runId"]}
        while True:
            waited = await conv.structured("kiro_wait", targets=[target], mode="all")
            [run] = waited["runs"]
            if run["status"] not in ("queued", "running", "needs_attention"):
                return dict(run)
            assert run["status"] != "needs_attention", f"the run needs attention: {run}"
