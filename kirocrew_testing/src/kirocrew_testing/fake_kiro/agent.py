"""``kiro-cli acp``: a real ACP v1 agent, behaving like kiro-cli 2.x, without the ``acp`` SDK.

:meth:`FakeKiroAgent.handle` routes each request and notification as the SDK's agent
router did (the same methods, the same -32601 for what kiro-cli does not implement);
params are read and results built as plain dicts by :mod:`.acp_shapes`, so kiro's extra
fields (``models`` in ``session/new`` and ``session/load``) go out as they are. The
JSON-RPC connection and kiro's frame-level quirks live in :mod:`.wire`, the optional
SDK checks in :mod:`.strict`; what a prompt does is decided by :mod:`.script` and run
by :mod:`.turn`.
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

from kirocrew_testing.fake_kiro import acp_shapes, catalog, commands, sessions, switches
from kirocrew_testing.fake_kiro.agents_dirs import (
    DEFAULT_AGENT,
    AgentSpec,
    Discovery,
    McpServerSpec,
    discover,
    mcp_json_servers,
)
from kirocrew_testing.fake_kiro.mcp_hub import McpHub
from kirocrew_testing.fake_kiro.wire import Check, RpcError, Wire

log = logging.getLogger(__name__)

AGENT_NAME = "Kiro CLI Agent"
STDIO_LIMIT = 50 * 1024 * 1024

COMMANDS_EXECUTE = "kiro.dev/commands/execute"
COMMANDS_OPTIONS = "kiro.dev/commands/options"
COMMANDS_AVAILABLE = "kiro.dev/commands/available"
SESSION_TERMINATE = "kiro.dev/session/terminate"
AGENT_SWITCHED = "kiro.dev/agent/switched"
STEER = "session/steer"
LEGACY_SET_MODEL = "session/set_model"  # no longer in ACP; kiro-cli still serves it


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


def _client_error(message: str, code: int = -32603) -> RpcError:
    return RpcError(code, message)


def _acp_server_spec(server: dict[str, Any]) -> McpServerSpec:
    """An ACP ``mcpServers`` item (stdio, http or sse, as :func:`.acp_shapes.mcp_server` reads it) as a spec."""
    name = server["name"]
    if "url" in server:
        return McpServerSpec(name=name, url=server["url"], headers=server["headers"],
                             transport="sse" if server["type"] == "sse" else "http", origin="session")
    return McpServerSpec(name=name, command=server["command"], args=tuple(server["args"]), env=server["env"],
                         origin="session")


class FakeKiroAgent:
    """The ACP agent. One instance per process; it may host several sessions."""

    def __init__(self, options: Options, discovery: Discovery, agent: AgentSpec) -> None:
        self.options = options
        self.discovery = discovery
        self.default_agent = agent
        self.sessions: dict[str, LiveSession] = {}
        self.pid = os.getpid()
        self.wire: Wire | None = None
        self.strict = switches.flag(switches.STRICT)
        self._background: set[asyncio.Task[Any]] = set()

    # -- plumbing ------------------------------------------------------------

    async def handle(self, method: str, params: Any, is_notification: bool) -> Any:
        """Route one request or notification as the SDK's agent router did."""
        if not isinstance(method, str):
            raise RpcError.method_not_found(method)
        if method.startswith("_"):
            payload = params if isinstance(params, dict) else {}
            if is_notification:
                return await self.ext_notification(method[1:], payload)
            return await self.ext_method(method[1:], payload)
        if is_notification:
            if method != "session/cancel":
                raise RpcError.method_not_found(method)
            self._check(method, params)
            return await self.cancel(params)
        handler = self._requests.get(method)
        if handler is None or (method == "session/fork" and not switches.flag(switches.ADVERTISE_FORK)):
            # session/fork is unstable ACP: kiro v2 has none (served only when KIRO_FAKE_ADVERTISE_FORK is set)
            raise RpcError.method_not_found(method)
        self._check(method, params)
        return await handler(self, params)

    def _check(self, method: str, params: Any) -> None:
        if self.strict:
            from kirocrew_testing.fake_kiro import strict

            strict.check_incoming(method, params)

    async def send_update(self, session_id: str, update: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
        """A ``session/update`` notification."""
        if self.wire is not None:
            await self.wire.notify("session/update", acp_shapes.session_notification(session_id, update, meta))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a ``_kiro.dev/*`` notification (``method`` without the leading underscore)."""
        if self.wire is not None:
            await self.wire.notify(f"_{method}", params)

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

    async def initialize(self, params: Any) -> dict[str, Any]:
        acp_shapes.initialize_params(params)  # kiro answers 1 to any version, a date string included
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

    def _open(self, session_id: str, cwd: str, mcp_servers: list[dict[str, Any]], agent: AgentSpec,
              model_id: str) -> LiveSession:
        self._check_cwd(cwd)
        files = sessions.files_for(session_id, cwd)
        sessions.acquire_lock(files, self.pid)
        session = LiveSession(session_id, files, Path(cwd), agent, model_id,
                              {s["name"]: _acp_server_spec(s) for s in mcp_servers}, effort=self.options.effort)
        self.sessions[session_id] = session
        return session

    def _persist(self, session: LiveSession, **extra: Any) -> None:
        state = sessions.read_state(session.files)
        state.update({"cwd": str(session.cwd), "agent": session.agent.name, "model": session.model_id, **extra})
        state.setdefault("created_at", sessions.now_iso())
        sessions.write_state(session.files, state)

    async def new_session(self, params: Any) -> dict[str, Any]:
        request = acp_shapes.session_params(params, "NewSessionRequest", session_id=False, servers_required=True)
        agent = self.default_agent
        session = self._open(sessions.new_session_id(self.v3), request["cwd"], request["mcpServers"], agent,
                             self._initial_model(agent))
        self._persist(session)
        await self._start_session_servers(session)
        self._spawn(self._after_start(session))
        return {"sessionId": session.session_id, **self._session_result(session)}

    async def load_session(self, params: Any) -> dict[str, Any]:
        request = acp_shapes.session_params(params, "LoadSessionRequest", session_id=True, servers_required=True)
        cwd, session_id, mcp_servers = request["cwd"], request["sessionId"], request["mcpServers"]
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
        for entry in sessions.read_transcript(session.files):
            kind = "user_message_chunk" if entry.get("role") == "user" else "agent_message_chunk"
            await self.send_update(session.session_id, acp_shapes.message_chunk(kind, entry["text"]))
            session.chars += len(entry["text"])

    async def fork_session(self, params: Any) -> dict[str, Any]:
        """Served only when ``KIRO_FAKE_ADVERTISE_FORK`` is set (kiro v2 has no native fork)."""
        request = acp_shapes.session_params(params, "ForkSessionRequest", session_id=True, servers_required=False)
        cwd, session_id, mcp_servers = request["cwd"], request["sessionId"], request["mcpServers"]
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

    async def set_session_mode(self, params: Any) -> dict[str, Any]:
        session_id, mode_id = acp_shapes.ids_params(params, "SetSessionModeRequest", "sessionId", "modeId")
        session = self.live(session_id)
        await self.switch_agent(session, mode_id)
        return {}

    async def set_model_request(self, params: Any) -> dict[str, Any]:
        """The legacy ``session/set_model`` (kiro-cli still serves it; ACP dropped it)."""
        payload = params if isinstance(params, dict) else {}
        self.set_model(self.live(str(payload.get("sessionId", ""))), str(payload.get("modelId", "")))
        return {}

    async def switch_agent(self, session: LiveSession, name: str) -> None:
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
        await self.send_update(session.session_id, acp_shapes.current_mode(name))
        await self.notify(AGENT_SWITCHED, {"sessionId": session.session_id, "agentName": name,
                                           "previousAgentName": previous})
        self._spawn(self._after_start(session))

    def set_model(self, session: LiveSession, model_id: str) -> None:
        if model_id not in {m.model_id for m in catalog.models()}:
            raise _client_error(f"Model '{model_id}' not found")
        session.model_id = model_id
        self._persist(session)

    # -- ACP: prompt and cancel ------------------------------------------------------

    async def prompt(self, params: Any) -> dict[str, Any]:
        from kirocrew_testing.fake_kiro.turn import Turn

        session_id, prompt = acp_shapes.prompt_params(params)
        session = self.live(session_id)
        if not self.accepts_images() and any(block["type"] == "image" for block in prompt):
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

    async def cancel(self, params: Any) -> None:
        (session_id,) = acp_shapes.ids_params(params, "CancelNotification", "sessionId")
        session = self.sessions.get(session_id)
        if session is not None:
            session.cancel_event.set()

    # -- kiro extensions -------------------------------------------------------------

    _requests = {
        "initialize": initialize,
        "session/new": new_session,
        "session/load": load_session,
        "session/fork": fork_session,
        "session/set_mode": set_session_mode,
        "session/prompt": prompt,
        LEGACY_SET_MODEL: set_model_request,
    }

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
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
        if method == STEER:
            session = self.live(str(params.get("sessionId", "")))
            session.steering.append(str(params.get("message", "")))
            return {"queued": True}
        log.info("ignoring unknown extension request _%s", method)
        raise RpcError.method_not_found(f"_{method}")

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
    from kirocrew_testing.fake_kiro.wire import stdio_streams

    discovery = discover()
    for error in discovery.errors:
        print(f"WARNING: failed to load agent config: {error}", file=sys.stderr)
    agent = FakeKiroAgent(options, discovery, _select_agent(options, discovery))
    check: Check | None = None
    if agent.strict:
        from kirocrew_testing.fake_kiro.strict import check_or_exit as check
    reader, writer = await stdio_streams(limit=STDIO_LIMIT)
    wire = Wire(reader, writer, agent.handle, on_missing_mcp_servers=lambda: agent.exit_quietly(0),
                silent=switches.flag(switches.SILENT), check=check)
    agent.wire = wire
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # A signal ends the session like stdin EOF does, so the graceful path removes our locks.
        loop.add_signal_handler(sig, wire.stop)
    try:
        await wire.serve()
    finally:
        await agent.shutdown()
    return 0
