"""``kiro-cli acp``: a real ACP v1 agent on the SDK's agent side, behaving like kiro-cli 2.x.

Results that carry kiro's extra fields (``models`` in ``session/new`` and
``session/load``) are returned as plain dicts: the SDK sends a dict result as
is, while a typed response would drop the field. Frame-level quirks live in
:mod:`.wire`; what a prompt does is decided by :mod:`.script` and run by
:mod:`.turn`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_testing.fake_kiro import catalog, commands, sessions, switches
from kirocrew_testing.fake_kiro.agents_dirs import (
    DEFAULT_AGENT,
    AgentSpec,
    Discovery,
    McpServerSpec,
    discover,
    mcp_json_servers,
)
from kirocrew_testing.fake_kiro.mcp_hub import McpHub

log = logging.getLogger(__name__)

AGENT_NAME = "Kiro CLI Agent"
STDIO_LIMIT = 50 * 1024 * 1024

COMMANDS_EXECUTE = "kiro.dev/commands/execute"
COMMANDS_OPTIONS = "kiro.dev/commands/options"
COMMANDS_AVAILABLE = "kiro.dev/commands/available"
SESSION_TERMINATE = "kiro.dev/session/terminate"
AGENT_SWITCHED = "kiro.dev/agent/switched"
STEER = "session/steer"


@dataclass(frozen=True)
class Options:
    """The ``acp`` flags."""

    agent: str | None = None
    model: str | None = None
    trust_all_tools: bool = False
    trust_tools: tuple[str, ...] = ()
    effort: str | None = None
    v3: bool = False  # --agent-engine v3 (or KIRO_FAKE_V3): new sessions use kiro's V3 layout


@dataclass
class LiveSession:
    """A session this process hosts (and holds the lock of)."""

    session_id: str
    files: sessions.SessionFiles
    cwd: Path
    agent: AgentSpec
    model_id: str
    acp_servers: dict[str, McpServerSpec]
    effort: str | None = None  # the process's --effort, or what the effort command set for this session
    hub: McpHub | None = None
    turn: asyncio.Task[Any] | None = None
    cancel_event: asyncio.Event = field(default_factory=asyncio.Event)
    always_allowed: set[str] = field(default_factory=set)
    steering: list[str] = field(default_factory=list)
    chars: int = 0
    #: What the session was told at start (its agent's resources and agentSpawn hooks), for ``!context``.
    context: str = ""


async def _until_exists(path: Path, bound: float | None) -> None:
    """Wait (after the response frame) until ``path`` exists or ``bound`` seconds passed."""
    loop = asyncio.get_running_loop()
    end = None if bound is None else loop.time() + bound
    await asyncio.sleep(0)
    while not path.exists() and (end is None or loop.time() < end):
        await asyncio.sleep(0.05)


def _client_error(message: str, code: int = -32603) -> Exception:
    from acp import RequestError

    return RequestError(code, message)


def _acp_server_spec(server: Any) -> McpServerSpec:
    """An ACP ``mcpServers`` item (stdio, http or sse) as a server spec."""
    name = server.name
    if getattr(server, "url", None):
        headers = {h.name: h.value for h in getattr(server, "headers", []) or []}
        kind = getattr(server, "type", "http")
        return McpServerSpec(name=name, url=server.url, headers=headers,
                             transport="sse" if kind == "sse" else "http", origin="session")
    env = {e.name: e.value for e in getattr(server, "env", []) or []}
    return McpServerSpec(name=name, command=server.command, args=tuple(server.args or ()), env=env,
                         origin="session")


class FakeKiroAgent:
    """The ACP agent. One instance per process; it may host several sessions."""

    def __init__(self, options: Options, discovery: Discovery, agent: AgentSpec) -> None:
        self.options = options
        self.discovery = discovery
        self.default_agent = agent
        self.sessions: dict[str, LiveSession] = {}
        self.pid = os.getpid()
        self.conn: Any = None
        self.wire: Any = None
        self._background: set[asyncio.Task[Any]] = set()

    # -- plumbing ------------------------------------------------------------

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a ``_kiro.dev/*`` notification (``method`` without the leading underscore)."""
        if self.conn is not None:
            await self.conn.ext_notification(method, params)

    def live(self, session_id: str) -> LiveSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise _client_error(f"Session not found: {session_id}")
        return session

    @property
    def v3(self) -> bool:
        return self.options.v3 or switches.flag(switches.V3)

    def init_timeout(self) -> float:
        return switches.number(switches.MCP_INIT_TIMEOUT, switches.DEFAULT_MCP_INIT_TIMEOUT)

    # -- lifecycle -------------------------------------------------------------

    async def shutdown(self) -> None:
        """Graceful exit: stop turns and MCP servers, remove our session locks."""
        for session in list(self.sessions.values()):
            session.cancel_event.set()
        await asyncio.gather(*(self._close_session(s) for s in list(self.sessions.values())),
                             return_exceptions=True)

    async def _close_session(self, session: LiveSession) -> None:
        self.sessions.pop(session.session_id, None)
        session.cancel_event.set()
        try:
            if session.hub is not None:
                await session.hub.close()
        finally:
            sessions.release_lock(session.files, self.pid)

    async def exit_quietly(self, code: int = 0) -> None:
        """kiro's silent exits (missing mcpServers, unknown session on load): clean, then go."""
        with contextlib.suppress(Exception):
            await self.shutdown()
        await self.crash(code)

    async def crash(self, code: int) -> None:
        """Exit now, leaving locks behind, as a crashed kiro-cli does."""
        if self.wire is not None:
            await self.wire.flush()
        sys.stderr.flush()
        os._exit(code)

    # -- ACP: initialize ---------------------------------------------------------

    @staticmethod
    def accepts_images() -> bool:
        """kiro v2 takes image blocks; ``KIRO_FAKE_NO_IMAGES`` imitates an agent that does not."""
        return not switches.flag(switches.NO_IMAGES)

    async def initialize(self, protocol_version: int, client_capabilities: Any = None,
                         client_info: Any = None, **kwargs: Any) -> dict[str, Any]:
        delay = switches.number(switches.INIT_DELAY, 0.0)
        if delay:
            await asyncio.sleep(delay)
        session_capabilities: dict[str, Any] = {}
        if switches.flag(switches.ADVERTISE_FORK):
            session_capabilities["fork"] = {}
        return {
            "protocolVersion": 1,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": self.accepts_images(), "audio": False, "embeddedContext": False},
                "mcpCapabilities": {"http": True, "sse": False},
                "sessionCapabilities": session_capabilities,
                "auth": {},
            },
            "authMethods": [],
            "agentInfo": {"name": AGENT_NAME, "title": AGENT_NAME, "version": switches.version()},
        }

    # -- ACP: sessions -------------------------------------------------------------

    def _modes(self, session: LiveSession) -> dict[str, Any]:
        return {
            "currentModeId": session.agent.name,
            "availableModes": [{"id": spec.name, "name": spec.name, "description": spec.description or spec.name}
                               for spec in self.discovery.agents.values()],
        }

    @staticmethod
    def _models(session: LiveSession) -> dict[str, Any]:
        return {"currentModelId": session.model_id,
                "availableModels": [m.session_row() for m in catalog.models()]}

    def _session_result(self, session: LiveSession) -> dict[str, Any]:
        return {"modes": self._modes(session), "models": self._models(session)}

    def _initial_model(self, agent: AgentSpec) -> str:
        known = {m.model_id for m in catalog.models()}
        for candidate in (self.options.model, agent.model):
            if candidate and candidate in known:
                return candidate
        return catalog.default_model_id()

    def _servers_for(self, session: LiveSession) -> dict[str, McpServerSpec]:
        servers: dict[str, McpServerSpec] = {}
        if session.agent.include_mcp_json:
            found, errors = mcp_json_servers(session.cwd)
            for error in errors:
                log.warning("%s", error)
            servers.update(found)
        servers.update(session.agent.mcp_servers)
        servers.update(session.acp_servers)  # session/new entries override same-named spec entries
        return servers

    def _start_servers(self, session: LiveSession) -> None:
        session.hub = McpHub(
            session.session_id, self._servers_for(session), cwd=session.cwd, notify=self.notify,
            init_timeout=self.init_timeout(),
            on_change=lambda: self.send_commands_available(session),
        )
        session.hub.start()

    async def _start_session_servers(self, session: LiveSession) -> None:
        """Start the servers of a new, loaded or forked session, after gathering its context.

        With ``KIRO_FAKE_EAGER_MCP`` the answer waits until every server has
        reported (initialized, failed, or an OAuth request is out), so those
        notifications reach the client before it knows the session id, as with
        kiro-cli's eager MCP init.
        """
        from kirocrew_testing.fake_kiro.context import session_context

        session.context = await session_context(session.agent, session.cwd)
        self._start_servers(session)
        if switches.flag(switches.EAGER_MCP) and session.hub is not None:
            await session.hub.wait_reported()

    async def send_commands_available(self, session: LiveSession) -> None:
        if self.sessions.get(session.session_id) is not session:
            return
        await self.notify(COMMANDS_AVAILABLE, {
            "sessionId": session.session_id,
            "commands": commands.available_commands(),
            "prompts": [],
            "tools": commands.tool_rows(session.agent.tools, session.hub, session.agent.tool_aliases),
            "mcpServers": session.hub.server_rows() if session.hub is not None else [],
        })

    async def _after_start(self, session: LiveSession) -> None:
        delay = switches.number(switches.COMMANDS_DELAY, 0.0)
        until = switches.path(switches.COMMANDS_UNTIL)
        if until is None:
            await asyncio.sleep(delay)  # after the response frame
        else:
            await _until_exists(Path(until), delay or None)
        await self.send_commands_available(session)

    @staticmethod
    def _check_cwd(cwd: str) -> None:
        if not os.path.isabs(cwd):
            raise _client_error(f"cwd must be an absolute path: {cwd}", -32602)

    def _open(self, session_id: str, cwd: str, mcp_servers: list[Any] | None, agent: AgentSpec,
              model_id: str) -> LiveSession:
        self._check_cwd(cwd)
        files = sessions.files_for(session_id, cwd)
        sessions.acquire_lock(files, self.pid)
        session = LiveSession(session_id, files, Path(cwd), agent, model_id,
                              {s.name: _acp_server_spec(s) for s in mcp_servers or []}, effort=self.options.effort)
        self.sessions[session_id] = session
        return session

    def _persist(self, session: LiveSession, **extra: Any) -> None:
        state = sessions.read_state(session.files)
        state.update({"cwd": str(session.cwd), "agent": session.agent.name, "model": session.model_id, **extra})
        state.setdefault("created_at", sessions.now_iso())
        sessions.write_state(session.files, state)

    async def new_session(self, cwd: str, additional_directories: list[str] | None = None,
                          mcp_servers: list[Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        agent = self.default_agent
        session = self._open(sessions.new_session_id(self.v3), cwd, mcp_servers, agent,
                             self._initial_model(agent))
        self._persist(session)
        await self._start_session_servers(session)
        self._spawn(self._after_start(session))
        return {"sessionId": session.session_id, **self._session_result(session)}

    async def load_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           additional_directories: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
        self._check_cwd(cwd)
        crash = switches.crash_on_load()
        if crash is not None:
            print("thread 'main' panicked: fake crash on session/load", file=sys.stderr)
            await self.crash(crash)
        existing = self.sessions.get(session_id)
        if existing is not None:
            await self._replay(existing)
            return self._session_result(existing)
        if not sessions.is_safe_id(session_id) or not sessions.exists(sessions.files_for(session_id)):
            return await self._unknown_session(session_id)
        files = sessions.files_for(session_id)
        try:
            sessions.acquire_lock(files, self.pid)
        except sessions.LockHeld as exc:
            raise _client_error(str(exc)) from None
        except sessions.LockUnreadable as exc:
            raise _client_error(str(exc)) from None
        state = sessions.read_state(files)
        agent = self.discovery.get(str(state.get("agent", ""))) or self.default_agent
        model = state.get("model") if state.get("model") in {m.model_id for m in catalog.models()} else None
        session = self._open(session_id, cwd, mcp_servers, agent, model or self._initial_model(agent))
        await self._replay(session)
        self._persist(session)
        await self._start_session_servers(session)
        self._spawn(self._after_start(session))
        return self._session_result(session)

    async def _unknown_session(self, session_id: str) -> dict[str, Any]:
        behaviour = switches.unknown_load()
        if behaviour == "error":
            raise _client_error(f"Session not found: {session_id}")
        if behaviour == "hang":  # kiro-cli 1.28.1
            await asyncio.Event().wait()
        await self.exit_quietly(0)  # kiro-cli 2.4.0
        raise AssertionError("unreachable")

    async def _replay(self, session: LiveSession) -> None:
        from acp import update_agent_message_text, update_user_message_text

        for entry in sessions.read_transcript(session.files):
            update = (update_user_message_text if entry.get("role") == "user" else update_agent_message_text)
            await self.conn.session_update(session.session_id, update(entry["text"]))
            session.chars += len(entry["text"])

    async def fork_session(self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None,
                           additional_directories: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
        """Served only when ``KIRO_FAKE_ADVERTISE_FORK`` is set (kiro v2 has no native fork)."""
        if not switches.flag(switches.ADVERTISE_FORK):
            from acp import RequestError

            raise RequestError.method_not_found("session/fork")
        if not sessions.is_safe_id(session_id) or not sessions.exists(sessions.files_for(session_id)):
            raise _client_error(f"Session not found: {session_id}")
        source = sessions.files_for(session_id)
        new_id = sessions.new_session_id(source.v3)
        sessions.copy_session(source, sessions.files_for(new_id, cwd))
        state = sessions.read_state(source)
        agent = self.discovery.get(str(state.get("agent", ""))) or self.default_agent
        session = self._open(new_id, cwd, mcp_servers, agent, str(state.get("model") or self._initial_model(agent)))
        self._persist(session, forked_from=session_id)
        await self._start_session_servers(session)
        self._spawn(self._after_start(session))
        return {"sessionId": new_id, **self._session_result(session)}

    async def set_session_mode(self, mode_id: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        session = self.live(session_id)
        await self.switch_agent(session, mode_id)
        return {}

    async def switch_agent(self, session: LiveSession, name: str) -> None:
        from acp.schema import CurrentModeUpdate

        spec = self.discovery.get(name)
        if spec is None:
            raise _client_error(f"Mode '{name}' not found")
        previous = session.agent.name
        session.agent = spec
        self._persist(session)
        old_hub, session.hub = session.hub, None
        if old_hub is not None:
            self._spawn(old_hub.close())
        self._start_servers(session)
        await self.conn.session_update(session.session_id,
                                       CurrentModeUpdate(session_update="current_mode_update", current_mode_id=name))
        await self.notify(AGENT_SWITCHED, {"sessionId": session.session_id, "agentName": name,
                                           "previousAgentName": previous})
        self._spawn(self._after_start(session))

    def set_model(self, session: LiveSession, model_id: str) -> None:
        if model_id not in {m.model_id for m in catalog.models()}:
            raise _client_error(f"Model '{model_id}' not found")
        session.model_id = model_id
        self._persist(session)

    # -- ACP: prompt and cancel ------------------------------------------------------

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> Any:
        from kirocrew_testing.fake_kiro.turn import Turn

        session = self.live(session_id)
        if not self.accepts_images() and any(getattr(block, "type", None) == "image" for block in prompt):
            # What an agent that did not advertise promptCapabilities.image answers: nothing runs.
            raise _client_error("Invalid params: this agent does not accept image content "
                                "(promptCapabilities.image is false)", -32602)
        if session.turn is not None and not session.turn.done():
            raise _client_error("A prompt is already in progress for this session")
        session.turn = asyncio.current_task()
        session.cancel_event = asyncio.Event()
        try:
            return await Turn(self, session).run(prompt)
        finally:
            session.turn = None

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel_event.set()

    # -- kiro extensions -------------------------------------------------------------

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        from kirocrew_testing.fake_kiro.wire import LEGACY_SET_MODEL

        if method == COMMANDS_EXECUTE:
            session = self.live(str(params.get("sessionId", "")))
            name, args = commands.command_name_and_args(params.get("command"))
            return (await self.execute_command(session, name, args)).as_dict()
        if method == COMMANDS_OPTIONS:
            session = self.live(str(params.get("sessionId", "")))
            return {"options": self._command_options(session, str(params.get("command", "")).lstrip("/"),
                                                     str(params.get("partial") or ""))}
        if method == SESSION_TERMINATE:
            session = self.live(str(params.get("sessionId", "")))
            await self._close_session(session)
            return {}
        if method == LEGACY_SET_MODEL:
            self.set_model(self.live(str(params.get("sessionId", ""))), str(params.get("modelId", "")))
            return {}
        if method == STEER:
            session = self.live(str(params.get("sessionId", "")))
            session.steering.append(str(params.get("message", "")))
            return {"queued": True}
        from acp import RequestError

        log.info("ignoring unknown extension request _%s", method)
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.info("ignoring extension notification _%s", method)

    def _command_options(self, session: LiveSession, command: str, partial: str) -> list[dict[str, Any]]:
        if command == "model":
            values = [(m.model_id, m.description) for m in catalog.models()]
        elif command == "agent":
            values = [(s.name, s.description) for s in self.discovery.agents.values()]
        else:
            values = []
        return [{"value": v, "label": v, "description": d} for v, d in values if v.startswith(partial)]

    async def execute_command(self, session: LiveSession, name: str, args: str) -> commands.CommandResult:
        """A slash command, from ``_kiro.dev/commands/execute`` or from prompt text."""
        if name in ("mcp", "tools") and session.hub is not None:
            await session.hub.wait_answerable(self.init_timeout())
        if name == "mcp":
            data = commands.mcp_data(session.hub)
            return commands.CommandResult(True, commands.mcp_message(data), data)
        if name == "tools":
            rows = commands.tool_rows(session.agent.tools, session.hub, session.agent.tool_aliases)
            return commands.CommandResult(True, commands.tools_message(rows), {"tools": rows})
        if name == "model":
            if not args:
                return commands.CommandResult(True, f"Current model: {session.model_id}", {
                    "currentModelId": session.model_id, "models": [m.model_id for m in catalog.models()]})
            try:
                self.set_model(session, args)
            except Exception as exc:  # noqa: BLE001 - any refusal is the command's answer
                return commands.CommandResult(False, str(exc))
            return commands.CommandResult(True, f"Model changed to {args}")
        if name == "effort":
            if not args:
                return commands.CommandResult(True, f"Current effort: {session.effort or 'default'}",
                                              {"effort": session.effort, "efforts": list(catalog.EFFORTS)})
            if args not in catalog.EFFORTS:
                return commands.CommandResult(False, f"Invalid effort '{args}', expected one of "
                                                     f"{', '.join(catalog.EFFORTS)}")
            session.effort = args
            return commands.CommandResult(True, f"Effort changed to {args}")
        if name == "agent":
            if not args:
                return commands.CommandResult(True, f"Current agent: {session.agent.name}", {
                    "currentAgent": session.agent.name, "agents": list(self.discovery.agents)})
            try:
                await self.switch_agent(session, args)
            except Exception as exc:  # noqa: BLE001 - any refusal is the command's answer
                return commands.CommandResult(False, str(exc))
            return commands.CommandResult(True, f"Agent changed to {args}")
        if name == "clear":
            sessions.clear_transcript(session.files)
            session.chars = 0
            return commands.CommandResult(True, "Conversation history cleared")
        if name == "help":
            return commands.CommandResult(True, "\n".join(c["name"] for c in commands.available_commands()))
        if name in catalog.COMMANDS:
            return commands.CommandResult(True, f"/{name} done")
        return commands.CommandResult(False, f"Unknown command: /{name}")


def _select_agent(options: Options, discovery: Discovery) -> AgentSpec:
    if not options.agent:
        return discovery.agents[DEFAULT_AGENT]
    spec = discovery.get(options.agent)
    if spec is None:
        print(f"Error: no agent with name {options.agent} found. Falling back to user specified default",
              file=sys.stderr)
        return discovery.agents[DEFAULT_AGENT]
    return spec


async def serve(options: Options) -> int:
    """Run the ACP agent on stdio until stdin closes or SIGTERM/SIGINT arrives."""
    from acp import run_agent
    from acp.stdio import stdio_streams

    from kirocrew_testing.fake_kiro.wire import KiroWire

    discovery = discover()
    for error in discovery.errors:
        print(f"WARNING: failed to load agent config: {error}", file=sys.stderr)
    agent = FakeKiroAgent(options, discovery, _select_agent(options, discovery))
    reader, writer = await stdio_streams(limit=STDIO_LIMIT)
    wire = KiroWire(reader, writer, on_missing_mcp_servers=lambda: agent.exit_quietly(0),
                    silent=switches.flag(switches.SILENT))
    agent.wire = wire
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # A signal ends the session like stdin EOF does, so the graceful path removes our locks.
        loop.add_signal_handler(sig, wire.stop)
    try:
        # The fake implements the methods kiro-cli does; the SDK answers the rest with method-not-found.
        await run_agent(agent, wire,  # type: ignore[arg-type]
                        use_unstable_protocol=switches.flag(switches.ADVERTISE_FORK))
    finally:
        await agent.shutdown()
    return 0
