"""One ``kiro-cli acp`` process, driven over ACP, hosting any number of sessions.

Usage (conversations and connections plugins)::

    options = AcpOptions(agent="kirocrew", trust_all_tools=True)
    async with AcpRuntime.start(options) as rt:
        session = await rt.new_session(cwd, mcp_servers=[], on_update=sink)
        await session.apply_settings(model="claude-sonnet-4.5", mode="kiro_default", effort="high")
        result = await session.prompt("hello")          # PromptResult(stop_reason=..., metadata=...)
        if rt.supports_fork:
            branch = await rt.fork_session(session.session_id, cwd)  # same history, new id
        inventory = await session.execute_command("mcp")  # CommandResult(data={"servers": [...]})
        oauth = await session.oauth_requests.get()         # OAuthRequest(server_name, url)

Why it is not the SDK's ``spawn_agent_process``: that helper trims the child's
environment to six variables (kiro then loses ``KIRO_HOME``, ``KIRO_API_KEY``,
proxies) and signals only its direct child, but ``kiro-cli`` is a launcher that
forks ``kiro-cli-chat``, so the real agent would be orphaned. We spawn through
:mod:`kirocrew_core.proc` (own process group, the full environment passed
explicitly, stderr drained into a bounded tail, a 16 MiB line limit) and speak
ACP over those pipes with the SDK's client connection.

kiro-cli's quirks handled here (see the kiro-cli reference, §1):

- every request except ``session/prompt`` has a timeout: kiro has hung forever
  on, or silently exited for, an unknown session id;
- the child exiting fails every pending call with :class:`AcpConnectionLost`,
  carrying the tail of its stderr;
- ``session/new``, ``session/load`` and ``session/fork`` always send
  ``mcpServers`` (kiro exits rc=0 without it) and are sent raw, because the
  typed SDK response drops kiro's ``models`` field;
- ``session/fork`` is sent only when ``initialize`` advertised it (kiro v2 does
  not); otherwise :class:`UnsupportedCapabilityError` is raised up front;
- ``session/load`` survives a stale session lock left by a hard-killed owner
  (the lock is removed only if its pid is dead) with bounded retries;
- shutdown closes stdin first and waits, so kiro-cli removes its own lock;
- ``session/load`` restores the model and agent the session was saved with,
  whatever ``--model``/``--agent`` the process got, so a caller that needs
  particular settings calls :meth:`AcpRuntime.apply_settings`, which sets what
  differs and checks kiro's answer before anything is prompted;
- kiro's notifications may arrive before the ``session/new`` answer (eager MCP
  start): they are held and applied to the session once its id is known; a
  tracked notification without a ``sessionId`` concerns every open session.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home, kiro_ext, kiro_sessions
from kirocrew_core.acp_session import (
    AcpSession,
    AppliedSettings,
    PermissionHandler,
    PermissionRequest,
    PromptResult,
    UpdateSink,
    reject_permission,
)
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.kiro import KiroBinary, require_kiro_cli
from kirocrew_core.kiro_ext import CommandResult

if TYPE_CHECKING:
    from acp.schema import InitializeResponse

__all__ = [
    "AcpConnectionLost", "AcpError", "AcpOptions", "AcpRequestError", "AcpRuntime", "AcpSession",
    "AcpTimeoutError", "AppliedSettings", "PermissionHandler", "PermissionRequest", "PromptResult",
    "SessionLockedError", "SettingsNotAppliedError", "UnsupportedCapabilityError", "UpdateSink",
    "reject_permission",
]

log = logging.getLogger(__name__)

# Every request but session/prompt gets one of these (seconds); AcpOptions overrides them.
INITIALIZE_TIMEOUT_SECS = 60.0
# session/new and session/load start the agent's MCP servers eagerly, which can take a while.
SESSION_TIMEOUT_SECS = 120.0
REQUEST_TIMEOUT_SECS = 60.0
# session/load refused because of a lock: wait this long before each retry (4 attempts in all).
LOAD_RETRY_BACKOFF_SECS: tuple[float, ...] = (1.0, 2.0, 4.0)
# How long a connection-lost error waits for the child's last stderr lines.
EXIT_DETAIL_WAIT_SECS = 1.0
STDERR_TAIL_LINES = 40
# Events for a session id not registered yet (session/new in flight) are held, at most this many.
MAX_EARLY_EVENTS = 1000

CLIENT_NAME = "kirocrew"


# -- errors -------------------------------------------------------------------


class AcpError(KirocrewError):
    """A failure talking ACP to kiro-cli."""

    code = "acp_error"


class AcpRequestError(AcpError):
    """kiro-cli answered a request with a JSON-RPC error (``rpc_code``, ``rpc_message``, ``data``)."""

    code = "acp_request_failed"

    def __init__(self, method: str, rpc_code: int, rpc_message: str, data: Any = None):
        detail = "" if data is None else f" {json.dumps(data, default=str)[:500]}"
        super().__init__(f"kiro-cli refused {method}: [{rpc_code}] {rpc_message}{detail}")
        self.method = method
        self.rpc_code = rpc_code
        self.rpc_message = rpc_message
        self.data = data

    @property
    def text(self) -> str:
        """Message and data as one string, for matching kiro's free-text error markers."""
        return f"{self.rpc_message} {json.dumps(self.data, default=str) if self.data is not None else ''}"


class AcpTimeoutError(AcpError):
    """kiro-cli did not answer a request in time (the process is left running)."""

    code = "acp_timeout"

    def __init__(self, method: str, timeout: float):
        super().__init__(f"kiro-cli did not answer {method} within {timeout:g}s")
        self.method = method
        self.timeout = timeout


class AcpConnectionLost(AcpError):
    """kiro-cli exited or closed its output, or the runtime was closed, while a call was pending."""

    code = "kiro_exited"

    def __init__(self, message: str, *, returncode: int | None = None, stderr_tail: Sequence[str] = ()):
        super().__init__(message)
        self.returncode = returncode
        self.stderr_tail = list(stderr_tail)


class SessionLockedError(AcpError):
    """``session/load`` stayed refused because another live process holds the session."""

    code = "session_locked"


class UnsupportedCapabilityError(AcpError):
    """The agent did not advertise what the call needs (``capability``), so nothing was sent."""

    code = "unsupported_capability"

    def __init__(self, capability: str, message: str):
        super().__init__(message)
        self.capability = capability


class SettingsNotAppliedError(AcpError):
    """kiro-cli refused, or did not confirm, a model, mode (agent) or effort for a session.

    ``setting`` is ``model``, ``mode`` or ``effort``; ``wanted`` the value asked
    for; ``reported`` what the session is on by kiro's account (None if unknown);
    ``available`` the choices the session advertised (empty if it listed none).
    """

    code = "settings_not_applied"

    def __init__(self, setting: str, wanted: str, reason: str, *, reported: str | None = None,
                 available: Sequence[str] = ()) -> None:
        text = f"kiro-cli did not apply {setting} {wanted!r}: {reason}"
        if available:
            text += f"; the session offers: {', '.join(available)}"
        super().__init__(text)
        self.setting = setting
        self.wanted = wanted
        self.reported = reported
        self.available = tuple(available)


@dataclass(frozen=True)
class AcpOptions:
    """How to start ``kiro-cli acp``.

    - ``agent``/``model``/``effort``: ``--agent``, ``--model`` (the only reliable way to
      pick a model of another provider), ``--effort``.
    - ``trust_all_tools``: ``--trust-all-tools``; ``trust_tools``: ``--trust-tools=a,b``
      (an empty sequence trusts nothing; None omits the flag). Not both.
    - ``env``: the child's whole environment; None means a copy of ours at start, with ``PATH``
      augmented (:func:`kirocrew_core.search_path.with_search_path`).
    - ``cwd``: the child's working directory (sessions get their own ``cwd``).
    - ``binary``: which kiro-cli; None resolves it (``KIRO_CLI_PATH``, ...).
    - ``launcher``: a command that wraps kiro-cli, ending where kiro-cli's own argv begins
      (a sandbox: ``("bwrap", ..., "--")``); kiro-cli and everything it starts run inside it.
    - ``sessions_dir``: where kiro keeps session locks; None means ``home.kiro_sessions_dir()``.
    - ``on_update``/``on_permission``: defaults for sessions that do not pass their own
      (without a permission handler every request is rejected: :func:`reject_permission`).
    - ``permission_timeout``: answer "cancelled" to a permission request unanswered this long.
    """

    agent: str | None = None
    model: str | None = None
    effort: str | None = None
    trust_all_tools: bool = False
    trust_tools: Sequence[str] | None = None
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | os.PathLike[str] | None = None
    binary: KiroBinary | None = None
    launcher: Sequence[str] = ()
    sessions_dir: Path | None = None
    initialize_timeout: float = INITIALIZE_TIMEOUT_SECS
    session_timeout: float = SESSION_TIMEOUT_SECS
    request_timeout: float = REQUEST_TIMEOUT_SECS
    on_update: UpdateSink | None = None
    on_permission: PermissionHandler | None = None
    permission_timeout: float | None = None

    def argv(self, program: str | os.PathLike[str]) -> list[str]:
        """The command line: ``[launcher...] kiro-cli acp [--agent A] [--model M] [--effort E] [trust flags] ...``."""
        if self.trust_all_tools and self.trust_tools is not None:
            raise BadInputError("trust_all_tools and trust_tools exclude each other")
        args = [*(str(part) for part in self.launcher), os.fspath(program), "acp"]
        for flag, value in (("--agent", self.agent), ("--model", self.model), ("--effort", self.effort)):
            if value is not None:
                if not value or value.startswith("-"):
                    raise BadInputError(f"{flag} needs a name, got {value!r}")
                args += [flag, value]
        if self.trust_all_tools:
            args.append("--trust-all-tools")
        elif self.trust_tools is not None:
            names = [str(name) for name in self.trust_tools]
            if any(not name or "," in name for name in names):
                raise BadInputError(f"not a list of tool names: {names!r}")
            args.append("--trust-tools=" + ",".join(names))
        args += [str(a) for a in self.extra_args]
        return args


# -- the SDK client side ----------------------------------------------------------


class _Client:
    """What kiro-cli calls on us; everything is routed to the runtime's sessions."""

    def __init__(self, runtime: AcpRuntime) -> None:
        self._rt = runtime

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **meta: Any) -> Any:
        return await self._rt._answer_permission(session_id, tool_call, options, meta)

    async def session_update(self, session_id: str, update: Any, **meta: Any) -> None:
        self._rt._route_update(session_id, update)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self._rt._route_ext_notification(method, params)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        from acp import RequestError

        log.warning("kiro-cli called unknown extension method _%s; answered method-not-found", method)
        raise RequestError.method_not_found(f"_{method}")


# -- the runtime ----------------------------------------------------------------------


class AcpRuntime:
    """A running ``kiro-cli acp`` and the ACP connection to it.

    Use ``async with AcpRuntime.start(options) as rt`` (or ``await rt.open()`` /
    ``await rt.aclose()``). After the child exits every call raises
    :class:`AcpConnectionLost`; start a new runtime then.
    """

    def __init__(self, options: AcpOptions | None = None) -> None:
        self.options = options or AcpOptions()
        self.initialize_result: dict[str, Any] = {}
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._process: asyncio.subprocess.Process | None = None
        self._conn: Any = None
        self._drain: asyncio.Task[None] | None = None
        self._sessions: dict[str, AcpSession] = {}
        self._creating = 0  # session/new calls in flight: their session ids are not known yet
        self._early: dict[str, list[tuple[str, Any]]] = {}
        self._unrouted: list[tuple[str, dict[str, Any]]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self._teardown: Any = None

    @classmethod
    def start(cls, options: AcpOptions | None = None) -> AcpRuntime:
        """A runtime to use as ``async with AcpRuntime.start(options) as rt`` (it opens on entry)."""
        return cls(options)

    async def __aenter__(self) -> AcpRuntime:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- state --

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None and not self._closing

    async def wait_exit(self) -> int | None:
        """Return once kiro-cli has exited (its exit status; None when it never started).

        For a holder that must act the moment the process dies rather than on its
        next poll: asyncio lets several tasks wait on one child at once.
        """
        if self._process is None:
            return None
        return await self._process.wait()

    @property
    def agent_info(self) -> dict[str, Any]:
        """``initialize``'s ``agentInfo`` (``{"name", "title", "version"}``), empty if not sent."""
        info = self.initialize_result.get("agentInfo")
        return dict(info) if isinstance(info, dict) else {}

    def _agent_capability(self, *path: str) -> Any:
        """The raw value at ``agentCapabilities.<path>`` of ``initialize``, None where absent."""
        value: Any = self.initialize_result.get("agentCapabilities")
        for key in path:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value

    @property
    def supports_fork(self) -> bool:
        """Whether ``initialize`` advertised ``sessionCapabilities.fork`` (kiro v2 does not).

        ACP spells support as an object (``{}``); absent or ``null`` means no.
        """
        return isinstance(self._agent_capability("sessionCapabilities", "fork"), dict)

    @property
    def supports_images(self) -> bool:
        """Whether ``initialize`` advertised ``promptCapabilities.image`` (ACP's default is no)."""
        return self._agent_capability("promptCapabilities", "image") is True

    @property
    def initialize_response(self) -> InitializeResponse:
        """The typed ``initialize`` result (``.agent_capabilities.load_session`` ...)."""
        from acp.schema import InitializeResponse

        return InitializeResponse.model_validate(self.initialize_result)

    @property
    def sessions(self) -> dict[str, AcpSession]:
        return dict(self._sessions)

    def session(self, session_id: str) -> AcpSession:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise BadInputError(f"no open session {session_id!r} in this kiro-cli process",
                                code="unknown_session") from None

    # -- start and stop --

    async def open(self) -> None:
        """Spawn kiro-cli and run ``initialize``; on any failure the child is torn down first."""
        if self._process is not None:
            raise RuntimeError("runtime already opened")
        from kirocrew_core.sdk_models import prepare as prepare_sdk_models

        prepare_sdk_models()  # a CLI twin's first ACP import may be this one
        from acp import connect_to_agent

        from kirocrew_core import proc

        from kirocrew_core.search_path import with_search_path

        opts = self.options
        argv = opts.argv(require_kiro_cli(opts.binary))
        # The rendered agent keeps MCP commands bare, as the user wrote them: kiro-cli (and the servers it
        # starts) must search the path the render and the probe resolved them on. A given env is the
        # caller's on purpose (a sandbox narrows it) and is passed as it is.
        env = with_search_path(os.environ) if opts.env is None else dict(opts.env)
        self._process = await proc.spawn_async(argv, env=env, cwd=opts.cwd)
        try:
            self._drain = proc.drain_stderr_async(self._process, self.stderr_tail.append)
            assert self._process.stdin is not None and self._process.stdout is not None
            # _Client implements only the callbacks kiro-cli makes; the SDK looks handlers up by name and
            # answers method-not-found for the rest, so the full Client protocol is not needed.
            client = _Client(self)
            self._conn = connect_to_agent(client, self._process.stdin, self._process.stdout)  # type: ignore[arg-type]
            await self._initialize()
        except BaseException:
            await self._shutdown(reason="start failed")
            raise

    async def _initialize(self) -> None:
        from acp import PROTOCOL_VERSION

        from kirocrew_core import __version__

        params = {
            "protocolVersion": PROTOCOL_VERSION,  # an int: kiro's KAS engine rejects date strings
            # We serve neither files nor terminals, so kiro uses its own tools.
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
            "clientInfo": {"name": CLIENT_NAME, "version": __version__},
        }
        raw = await self.request("initialize", params, timeout=self.options.initialize_timeout)
        if not isinstance(raw, dict):
            raise AcpError(f"kiro-cli answered initialize with {type(raw).__name__}", code="acp_bad_response")
        self.initialize_result = raw
        version = raw.get("protocolVersion")
        if version != PROTOCOL_VERSION:
            raise AcpError(f"kiro-cli speaks ACP protocol {version!r}, kirocrew speaks {PROTOCOL_VERSION}",
                           code="acp_protocol_mismatch")

    async def aclose(self) -> None:
        """End every session and stop kiro-cli: close stdin, wait, then the group teardown.

        kiro-cli removes its session locks only when it exits on its own, so the
        stdin-EOF grace comes first. Idempotent.
        """
        await self._shutdown(reason="runtime closed")

    async def _shutdown(self, *, reason: str) -> None:
        if self._closing:
            return
        self._closing = True
        from kirocrew_core import proc

        for session in list(self._sessions.values()):
            session._cancel_permissions()
        try:
            if self._process is not None:
                self._teardown = await proc.terminate_async(self._process, reason=reason)
        finally:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    await self._conn.close()
            for session in list(self._sessions.values()):
                await session._close()
            for task in list(self._background):
                task.cancel()

    # -- raw requests --

    async def request(self, method: str, params: Any, *, timeout: float | None) -> Any:
        """Send one JSON-RPC request and return its raw result.

        ``timeout`` None means wait for ever (only ``session/prompt`` should).
        Raises :class:`AcpRequestError`, :class:`AcpTimeoutError` or
        :class:`AcpConnectionLost`.
        """
        if self._conn is None:
            raise AcpConnectionLost("kiro-cli is not running (runtime not opened)")
        from acp import RequestError

        try:
            send = self._conn._conn.send_request(method, params)  # raw: keeps kiro's extra fields
            return await (send if timeout is None else asyncio.wait_for(send, timeout))
        except RequestError as exc:
            raise AcpRequestError(method, exc.code, str(exc), exc.data) from None
        except TimeoutError:
            raise AcpTimeoutError(method, timeout or 0.0) from None
        except ConnectionError as exc:
            raise await self._connection_lost(method) from exc

    async def ext_request(self, method: str, params: Mapping[str, Any], *, timeout: float | None = None) -> Any:
        """A ``_kiro.dev/...`` (or other ``_``-prefixed) request; ``method`` given without the underscore."""
        return await self.request(f"_{method}", dict(params),
                                  timeout=self.options.request_timeout if timeout is None else timeout)

    async def _connection_lost(self, method: str) -> AcpConnectionLost:
        if self._closing:
            return AcpConnectionLost(f"{method} was abandoned: the kiro-cli runtime was closed",
                                     returncode=self.returncode, stderr_tail=self.stderr_tail)
        # Give the child a moment to finish exiting, so the error can say how and why.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + EXIT_DETAIL_WAIT_SECS
        while loop.time() < deadline and (self.returncode is None or (self._drain and not self._drain.done())):
            await asyncio.sleep(0.02)
        status = "is still running" if self.returncode is None else f"exited with status {self.returncode}"
        tail = " | ".join(list(self.stderr_tail)[-8:]) or "(no stderr)"
        return AcpConnectionLost(f"kiro-cli closed the connection during {method} (it {status}): {tail}",
                                 returncode=self.returncode, stderr_tail=self.stderr_tail)

    # -- sessions --

    @staticmethod
    def _mcp_servers(mcp_servers: Sequence[Any]) -> list[Any]:
        servers = []
        for server in mcp_servers:
            dump = getattr(server, "model_dump", None)
            servers.append(dump(mode="json", by_alias=True, exclude_none=True) if dump else dict(server))
        return servers

    @staticmethod
    def _absolute_cwd(cwd: str | os.PathLike[str]) -> str:
        path = os.fspath(cwd)
        if not os.path.isabs(path):
            raise BadInputError(f"a session cwd must be absolute: {path!r}", code="bad_cwd")
        return path

    def _register(self, session: AcpSession) -> None:
        self._sessions[session.session_id] = session
        session._start_pump()
        for kind, payload in self._early.pop(session.session_id, []):
            self._apply_event(session, kind, payload)
        for method, params in self._unrouted:
            session.record(method, params)

    def _unregister(self, session_id: str) -> AcpSession | None:
        return self._sessions.pop(session_id, None)

    def _session_settled(self) -> None:
        if self._creating == 0:
            self._early.clear()
            self._unrouted.clear()

    async def new_session(self, cwd: str | os.PathLike[str], *, mcp_servers: Sequence[Any] = (),
                          on_update: UpdateSink | None = None,
                          on_permission: PermissionHandler | None = None) -> AcpSession:
        """``session/new`` with ``mcpServers`` always present (``[]`` by default).

        ``cwd`` must be absolute (point it at the worktree). ``mcp_servers`` are
        ACP server entries (dicts or SDK models) that override same-named servers
        of the agent spec. Notifications kiro sends while the session starts
        (MCP init, OAuth requests) are kept and land on the returned session.
        """
        params = {"cwd": self._absolute_cwd(cwd), "mcpServers": self._mcp_servers(mcp_servers)}
        return await self._create_session("session/new", params, on_update, on_permission)

    async def fork_session(self, session_id: str, cwd: str | os.PathLike[str], *,
                           on_update: UpdateSink | None = None, on_permission: PermissionHandler | None = None,
                           mcp_servers: Sequence[Any] = ()) -> AcpSession:
        """``session/fork``: a new session (new id) that starts with ``session_id``'s history.

        The source need not be open in this process; it stays as it was. Unlike
        a load, a fork replays nothing: the agent already knows the history. Only
        when :attr:`supports_fork`; otherwise :class:`UnsupportedCapabilityError`
        (code ``unsupported_capability``) is raised before anything is sent.
        ``cwd``, ``mcp_servers`` and the notifications kept while it starts are
        as for :meth:`new_session`.
        """
        kiro_sessions.check_session_id(session_id)
        params: dict[str, Any] = {"sessionId": session_id, "cwd": self._absolute_cwd(cwd),
                  "mcpServers": self._mcp_servers(mcp_servers)}
        if not self.supports_fork:
            raise UnsupportedCapabilityError(
                "session_fork", "this kiro-cli does not advertise session/fork (agentCapabilities."
                                "sessionCapabilities.fork); start a new session or load this one instead")
        return await self._create_session("session/fork", params, on_update, on_permission)

    async def _create_session(self, method: str, params: dict[str, Any], on_update: UpdateSink | None,
                              on_permission: PermissionHandler | None) -> AcpSession:
        """Send a request answered by a new session id (new, fork) and register that session."""
        self._creating += 1
        try:
            raw = await self.request(method, params, timeout=self.options.session_timeout)
            session_id = raw.get("sessionId") if isinstance(raw, dict) else None
            if not isinstance(session_id, str) or not session_id:
                raise AcpError(f"kiro-cli answered {method} without a sessionId", code="acp_bad_response")
            session = AcpSession(self, session_id, params["cwd"], on_update=on_update or self.options.on_update,
                                 on_permission=on_permission or self.options.on_permission)
            session._apply_result(raw)
            # A session born in this process starts on its --effort; a loaded one may carry a saved one.
            session.current_effort = self.options.effort
            self._register(session)
            return session
        finally:
            self._creating -= 1
            self._session_settled()

    async def load_session(self, session_id: str, cwd: str | os.PathLike[str], *,
                           mcp_servers: Sequence[Any] = (), on_update: UpdateSink | None = None,
                           on_permission: PermissionHandler | None = None) -> AcpSession:
        """``session/load``: reopen a persisted session (history is replayed to ``on_update``).

        The replay may still be queued for the sink when this returns; to keep it
        apart from what follows, load with ``on_update=None``, await
        :meth:`settle_updates`, then set ``session.on_update``.

        A refusal because of a session lock ("Session is active in another
        process", "failed to re-read lock file") removes the lock if its pid is
        dead and retries, waiting :data:`LOAD_RETRY_BACKOFF_SECS` between
        attempts; a lock whose owner lives is never touched, and the last
        refusal becomes a :class:`SessionLockedError`.
        """
        kiro_sessions.check_session_id(session_id)
        if session_id in self._sessions:
            raise BadInputError(f"session {session_id} is already open in this kiro-cli process",
                                code="session_already_open")
        params: dict[str, Any] = {"sessionId": session_id, "cwd": self._absolute_cwd(cwd),
                  "mcpServers": self._mcp_servers(mcp_servers)}
        sessions_dir = self.options.sessions_dir or home.kiro_sessions_dir()
        attempts = len(LOAD_RETRY_BACKOFF_SECS) + 1
        for attempt in range(attempts):
            # Registered before the request: kiro replays the history as session/update first.
            session = AcpSession(self, session_id, params["cwd"], on_update=on_update or self.options.on_update,
                                 on_permission=on_permission or self.options.on_permission)
            self._register(session)
            try:
                raw = await self.request("session/load", params, timeout=self.options.session_timeout)
            except AcpRequestError as exc:
                self._unregister(session_id)
                await session._close()
                if not kiro_ext.is_lock_refusal(exc.text):
                    raise
                result = await asyncio.to_thread(kiro_sessions.remove_stale_lock, session_id, sessions_dir)
                log.info("session/load %s refused by a lock (attempt %d/%d): %s", session_id, attempt + 1,
                         attempts, result.describe())
                if attempt + 1 == attempts:
                    raise SessionLockedError(
                        f"kiro session {session_id} stays locked after {attempts} attempts: {result.describe()} "
                        f"({exc.rpc_message})") from exc
                if result.outcome is not kiro_sessions.StaleLockOutcome.REMOVED:
                    await asyncio.sleep(LOAD_RETRY_BACKOFF_SECS[attempt])
                continue
            except BaseException:
                self._unregister(session_id)
                await session._close()
                raise
            session._apply_result(raw if isinstance(raw, dict) else {})
            return session
        raise AssertionError("unreachable")  # the loop returns or raises

    # -- session calls --

    async def prompt(self, session_id: str, prompt: str | Sequence[Any]) -> PromptResult:
        """``session/prompt`` (no timeout: a turn takes as long as it takes; use :meth:`cancel`).

        ``prompt`` is text or a list of ACP content blocks. Returns once every
        update of the turn has been delivered to the session's sink. Cancelling
        the awaiting task also sends ``session/cancel``.
        """
        from acp import text_block
        from acp.schema import PromptResponse

        session = self.session(session_id)
        metadata_before = session.metadata_count
        blocks = [text_block(prompt)] if isinstance(prompt, str) else list(prompt)
        payload = [b.model_dump(mode="json", by_alias=True, exclude_none=True) if hasattr(b, "model_dump") else b
                   for b in blocks]
        try:
            raw = await self.request("session/prompt", {"sessionId": session_id, "prompt": payload}, timeout=None)
        except asyncio.CancelledError:
            self._spawn_background(self._cancel_quietly(session_id))
            raise
        except BaseException:
            await self.settle_updates(session)
            raise
        await self.settle_updates(session)
        response = PromptResponse.model_validate(raw)
        metadata = session.metadata if session.metadata_count > metadata_before else None
        return PromptResult(str(getattr(response.stop_reason, "value", response.stop_reason)), response, metadata)

    async def settle_updates(self, session: AcpSession) -> None:
        """Wait until every update kiro has sent for ``session`` so far has passed its sink.

        :meth:`prompt` does this itself. Call it after :meth:`load_session`, so the
        replayed history has drained before you attach a sink (load with
        ``on_update=None``, settle, then set ``session.on_update``), and in a
        permission handler, so the updates kiro sent before the request (the
        ``tool_call`` naming the tool) have been delivered. It waits for the sink,
        so a sink must never wait on the caller.
        """
        tracker = getattr(self._conn, "_session_updates", None)  # the SDK's in-flight handler set
        if tracker is not None:
            await tracker.wait(session.session_id)
        await session.flush_updates()

    async def cancel(self, session_id: str) -> None:
        """``session/cancel`` (a notification), and answer its open permission requests "cancelled"."""
        session = self.session(session_id)
        session._cancel_permissions()
        try:
            await self._conn._conn.send_notification("session/cancel", {"sessionId": session_id})
        except ConnectionError as exc:
            raise await self._connection_lost("session/cancel") from exc

    async def _cancel_quietly(self, session_id: str) -> None:
        with contextlib.suppress(AcpError, BadInputError):
            await self.cancel(session_id)

    async def set_mode(self, session_id: str, mode_id: str) -> dict[str, Any]:
        """``session/set_mode``: on kiro v2 this switches the agent ("Mode 'x' not found" if unknown)."""
        self.session(session_id)
        raw = await self.request("session/set_mode", {"sessionId": session_id, "modeId": mode_id},
                                 timeout=self.options.request_timeout)
        self._sessions[session_id].current_mode_id = mode_id
        return raw if isinstance(raw, dict) else {}

    async def set_model(self, session_id: str, model_id: str) -> dict[str, Any]:
        """kiro's legacy ``session/set_model`` (gone from ACP, still served by v2).

        Only ids in the session's ``models.availableModels`` are accepted, and it
        cannot cross providers: pin ``AcpOptions.model`` at spawn for that.
        """
        self.session(session_id)
        raw = await self.request(kiro_ext.LEGACY_SET_MODEL, {"sessionId": session_id, "modelId": model_id},
                                 timeout=self.options.request_timeout)
        self._sessions[session_id].current_model_id = model_id
        return raw if isinstance(raw, dict) else {}

    async def apply_settings(self, session_id: str, *, model: str | None = None, mode: str | None = None,
                             effort: str | None = None) -> AppliedSettings:
        """Put a session on ``mode`` (agent), ``model`` and ``effort``, confirmed by kiro; None leaves one alone.

        Call it after every new, load or fork and before prompting. ``--agent``/
        ``--model``/``--effort`` at spawn pin a *new* session (the only reliable
        way across model providers), but ``session/load`` restores the agent and
        model the session was saved with, and an unknown ``--agent`` silently
        falls back to the default. So each setting kiro reports differently is
        set: the agent first (switching agents may switch the model), through
        ``session/set_mode``; the model through the legacy ``session/set_model``;
        the effort, which kiro never reports, through the ``effort`` command
        unless this process started the session with it. A refusal, an effort
        command not answered ``success: true``, or a report still differing
        afterwards raises :class:`SettingsNotAppliedError`, so nothing is
        prompted on settings nobody asked for.
        """
        session = self.session(session_id)
        changed: list[str] = []
        if mode is not None and session.current_mode_id != mode:
            try:
                await self.set_mode(session_id, mode)
            except AcpRequestError as exc:
                raise SettingsNotAppliedError("mode", mode, exc.rpc_message, reported=session.current_mode_id,
                                              available=session.modes.ids() if session.modes else ()) from exc
            changed.append("mode")
        if model is not None and session.current_model_id != model:
            try:
                await self.set_model(session_id, model)
            except AcpRequestError as exc:
                raise SettingsNotAppliedError("model", model, exc.rpc_message, reported=session.current_model_id,
                                              available=session.models.ids() if session.models else ()) from exc
            changed.append("model")
        if effort is not None and session.current_effort != effort:
            try:
                result = await self.execute_command(session_id, kiro_ext.EFFORT_COMMAND, {"value": effort})
            except AcpRequestError as exc:
                raise SettingsNotAppliedError("effort", effort, exc.rpc_message,
                                              reported=session.current_effort) from exc
            if result.success is not True:
                raise SettingsNotAppliedError("effort", effort, result.message[:200] or "the command did not succeed",
                                              reported=session.current_effort)
            session.current_effort = effort
            changed.append("effort")
        await self.settle_updates(session)  # a current_mode_update kiro sent meanwhile has been applied
        for setting, wanted, reported in (("mode", mode, session.current_mode_id),
                                          ("model", model, session.current_model_id)):
            if wanted is not None and reported != wanted:
                raise SettingsNotAppliedError(setting, wanted, f"kiro-cli reports {reported!r} instead",
                                              reported=reported)
        return AppliedSettings(session.current_model_id, session.current_mode_id, session.current_effort,
                               tuple(changed))

    async def execute_command(self, session_id: str, command: str,
                              args: Mapping[str, Any] | None = None) -> CommandResult:
        """A slash command through ``_kiro.dev/commands/execute`` (``"mcp"``, ``"/tools"``, ...)."""
        self.session(session_id)
        raw = await self.ext_request(kiro_ext.COMMANDS_EXECUTE, kiro_ext.command_request(session_id, command, args))
        return kiro_ext.parse_command_result(raw)

    async def command_options(self, session_id: str, command: str, partial: str = "") -> dict[str, Any]:
        """``_kiro.dev/commands/options``: completions for a command's argument."""
        self.session(session_id)
        name = command[1:] if command.startswith("/") else command
        raw = await self.ext_request(kiro_ext.COMMANDS_OPTIONS,
                                     {"sessionId": session_id, "command": name, "partial": partial})
        return raw if isinstance(raw, dict) else {}

    async def steer(self, session_id: str, message: str) -> bool:
        """``_session/steer``: tell the running turn ``message`` at kiro's next generation boundary.

        True when kiro queued it; False when it refused (an older kiro-cli without the extension).
        """
        self.session(session_id)
        try:
            raw = await self.ext_request(kiro_ext.SESSION_STEER, {"sessionId": session_id, "message": message})
        except AcpRequestError:
            return False
        return bool(isinstance(raw, dict) and raw.get("queued"))

    async def terminate_session(self, session_id: str) -> None:
        """``_kiro.dev/session/terminate``: evict the session (its MCP children are reaped, the
        transcript kept for a later load) and forget it here."""
        session = self.session(session_id)
        try:
            await self.ext_request(kiro_ext.SESSION_TERMINATE, {"sessionId": session_id})
        finally:
            self._unregister(session_id)
            await session._close()

    # -- routing what kiro sends --

    def _spawn_background(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _hold_early(self, session_id: str, kind: str, payload: Any) -> None:
        if self._creating <= 0:
            log.debug("dropping %s for unknown session %s", kind, session_id)
            return
        held = self._early.setdefault(session_id, [])
        if len(held) < MAX_EARLY_EVENTS:
            held.append((kind, payload))

    def _apply_event(self, session: AcpSession, kind: str, payload: Any) -> None:
        if kind == "update":
            session._deliver(payload)
        else:
            session.record(kind, payload)

    def _route_update(self, session_id: str, update: Any) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            self._hold_early(session_id, "update", update)
        else:
            session._deliver(update)

    def _route_ext_notification(self, method: str, params: dict[str, Any]) -> None:
        if method in kiro_ext.QUIET_NOTIFICATIONS:
            log.debug("dropping notification _%s", method)
            return
        if method not in kiro_ext.RECORDED_NOTIFICATIONS:
            log.info("dropping unknown notification _%s from kiro-cli", method)
            return
        if not isinstance(params, dict):
            log.warning("dropping notification _%s without an object of params", method)
            return
        session_id = params.get("sessionId")
        if isinstance(session_id, str) and session_id:
            session = self._sessions.get(session_id)
            if session is None:
                self._hold_early(session_id, method, params)
            else:
                session.record(method, params)
            return
        # No sessionId: it concerns every session of this process, including those being created.
        for session in self._sessions.values():
            session.record(method, params)
        if self._creating > 0:
            self._unrouted.append((method, params))

    async def _answer_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 meta: Mapping[str, Any]) -> Any:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        cancelled = RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        session = self._sessions.get(session_id)
        if session is None or session.closed:
            return cancelled
        request = PermissionRequest(session_id, tool_call, tuple(options), dict(meta))
        handler = session.on_permission or reject_permission
        task = asyncio.ensure_future(handler(request))
        session._permission_tasks.add(task)
        try:
            choice = await asyncio.wait_for(asyncio.shield(task), self.options.permission_timeout)
        except asyncio.CancelledError:
            if task.cancelled():
                return cancelled  # by rt.cancel(): kiro must hear "cancelled", not silence
            task.cancel()  # we are being cancelled ourselves (the connection is closing)
            raise
        except TimeoutError:
            task.cancel()
            log.warning("permission request in session %s unanswered after %ss: cancelled", session_id,
                        self.options.permission_timeout)
            return cancelled
        except Exception:
            log.exception("permission handler of session %s failed: answered cancelled", session_id)
            return cancelled
        finally:
            session._permission_tasks.discard(task)
        if choice is None:
            return cancelled
        if choice not in {o.option_id for o in options}:
            log.warning("permission handler chose %r, not one of the offered options: cancelled", choice)
            return cancelled
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice))
