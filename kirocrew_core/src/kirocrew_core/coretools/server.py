"""The ``kirocrew-core`` MCP server: every plugin's ``core_mcp_tools()``, served by the host.

Reached through the relay ``kirocrew mcp-core``; one server object serves every connection,
and nothing in it is per caller. Each request reads the connection's verified caller
(:func:`kirocrew_core.host.caller.current_caller`) and resolves it by its process ancestry
(:mod:`.identity`). Per ``tools/call``, in order:

0. the connection's process still runs (``caller_gone``: it exited, and whoever holds the
   connection now has no identity);
1. the tool exists (``unknown_tool``; who owns a name two plugins contribute:
   :mod:`.tool_names`);
2. the arguments match its JSON Schema, unknown fields refused (``invalid_arguments``, the
   first error as ``<field>: <message>``);
3. identity per the tool: ``strict`` refuses an unresolved caller (``caller_unverified``)
   before the handler runs; ``lenient`` passes the session or None; ``none`` never looks;
4. the session's tool policy (:mod:`.policy`) does not exclude it (``tool_excluded``);
5. the handler runs (sync in a thread, async awaited); a :class:`ToolRefused` or any
   :class:`KirocrewError` becomes an error result naming its code, anything else
   ``internal_error`` with the traceback in the host log only.

Results are sanitised (Unicode controls, format characters other than ZWJ/ZWNJ/LRM/RLM, and
surrogates removed; capped at :data:`MAX_RESULT_CHARS`) and every call is audited to the SEL
with the tool, the outcome and the fingerprint of the session the call resolved to, never the key
or the arguments.
Descriptors are rebuilt on every ``tools/list``: a description may quote live values.

The mcp SDK and jsonschema are imported when the server is built (the host builds it on the
first connection), never at plugin load.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import traceback
import unicodedata
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kirocrew_core.coretools.contract import CrewSession, Origin, ToolCall, tool_args
from kirocrew_core.coretools.directives import CORE_MCP_SERVER
from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from kirocrew_core.contributions import CoreMcpTool
    from kirocrew_core.coretools.identity import Resolution, SessionRegistry
    from kirocrew_core.coretools.policy import ExclusionCache
    from kirocrew_core.host.caller import CallerContext
    from kirocrew_core.plugins import KirocrewPluginManager

log = logging.getLogger(__name__)

SERVER_NAME = CORE_MCP_SERVER
SERVER_COMMAND = "mcp-core"
CALLER_CAPABILITY = "kirocrew.caller-identity"
MAX_RESULT_CHARS = 100_000
CALLER_GONE_TEXT = ("the process that opened this connection has exited, so the connection keeps no identity and "
                    "nothing was done; connect again from the process that means to call")
TRUNCATED = "\n…[response truncated]"
# Format characters kept in results: joiners and direction marks carry meaning in real text.
_KEPT_FORMAT = frozenset({"\u200c", "\u200d", "\u200e", "\u200f"})

INSTRUCTIONS = """\
The model-facing tools of a kirocrew session (a conversation kirocrew started). Tools that act on \
your session know which session you are from the host, never from arguments: do not pass session ids. \
A failed call is isError with the text error[<code>]: <message>; branch on the code."""


def sanitise(text: str) -> str:
    """``text`` without control (except tab, newline, return), format (except ZWJ/ZWNJ/LRM/RLM) or surrogate
    characters, cut at :data:`MAX_RESULT_CHARS` with a note. The directive marker is ASCII, so it survives."""
    kept = "".join(ch for ch in text if _keep(ch))
    if len(kept) > MAX_RESULT_CHARS:
        kept = kept[:MAX_RESULT_CHARS] + TRUNCATED
    return kept


def _keep(ch: str) -> bool:
    if ch.isascii():
        return ch.isprintable() or ch in "\n\r\t"
    category = unicodedata.category(ch)
    if category in ("Cc", "Cs"):
        return False
    return category != "Cf" or ch in _KEPT_FORMAT


class CoreToolsServer:
    """What the SDK server calls: listing and calling tools for the caller of each request.

    ``tool_source`` replaces the ``core_mcp_tools()`` collection for a server with a tool set
    of its own (``kirocrew-cron``), served with the same validation, identity, tool policy,
    sanitising and audit; ``server_name`` is what its messages and audit records call it.
    """

    def __init__(self, pm: KirocrewPluginManager | Callable[[], KirocrewPluginManager] | None = None,
                 registry: SessionRegistry | None = None, exclusions: ExclusionCache | None = None, *,
                 tool_source: Callable[[], dict[str, CoreMcpTool]] | None = None,
                 server_name: str = SERVER_NAME) -> None:
        from kirocrew_core.coretools.identity import registry as default_registry
        from kirocrew_core.coretools.policy import ExclusionCache

        self._pm = pm
        self._tool_source = tool_source
        self.server_name = server_name
        self.registry = registry or default_registry()
        self.exclusions = exclusions or ExclusionCache(server=server_name)

    def plugin_manager(self) -> KirocrewPluginManager:
        from kirocrew_core.plugins import KirocrewPluginManager, get_plugin_manager

        if self._pm is None:
            return get_plugin_manager()
        return self._pm if isinstance(self._pm, KirocrewPluginManager) else self._pm()

    def tools(self) -> dict[str, CoreMcpTool]:
        if self._tool_source is not None:
            return self._tool_source()
        from kirocrew_core.coretools.tool_names import collect_tools

        return collect_tools(self.plugin_manager())

    def session_of(self, caller: CallerContext | None) -> CrewSession | None:
        return self.registry.resolve(caller).session

    def listed(self, caller: CallerContext | None) -> list[CoreMcpTool]:
        """The tools this caller may see: every tool, less what its session's policy excludes."""
        policy = self.exclusions.policy(self.session_of(caller))
        return [tool for tool in self.tools().values() if policy is None or not policy.excludes(tool.name)]

    def _admit(self, name: str, raw_args: Any,
               resolved: Resolution) -> tuple[CoreMcpTool, CrewSession | None] | _Refusal:
        """The tool and the caller's session, or why the call is refused before its handler (steps 0-4)."""
        if resolved.origin == "gone":
            return _Refusal(CALLER_GONE_TEXT, "caller_gone")
        tool = self.tools().get(name)
        if tool is None:
            shown = name if name.isidentifier() and len(name) <= 64 else "that name"
            return _Refusal(f"no {self.server_name} tool is named {shown}; tools/list names them", "unknown_tool")
        try:
            problem = validate_arguments(tool, raw_args)
        except Exception:  # noqa: BLE001 - a plugin's broken schema is its bug, reported like one
            log.error("%s tool %s has an unusable input schema:\n%s", self.server_name, name, traceback.format_exc())
            return _Refusal(f"{name} failed unexpectedly; the kirocrew host's log has the details", "internal_error")
        if problem is not None:
            return _Refusal(problem, "invalid_arguments")
        session = None if tool.identity == "none" else resolved.session
        if tool.identity == "strict" and session is None:
            return _Refusal(f"{name} acts on the calling kirocrew session, and this caller could not be verified "
                            "as one: it does not descend from a live kiro-cli the host started. Call it from a "
                            "session kirocrew started.", "caller_unverified")
        policy = self.exclusions.policy(resolved.session)
        if policy is not None and policy.excludes(name):
            return _Refusal(f"tool '{name}' is not available for this agent", "tool_excluded")
        return tool, session

    async def call(self, name: str, raw_args: Any, caller: CallerContext | None, *,
                   as_person: bool = False) -> tuple[str, str | None]:
        """``(text, error code or None)`` of one call; never raises except for cancellation.

        ``as_person``: the call is the person's own command running the tools in its own process
        (``KIROCREW_NO_HOST``: no host runs, so no session exists and no connection to resolve).
        """
        text, code, _ = await self.call_resolved(name, raw_args, caller, as_person=as_person)
        return text, code

    async def call_resolved(self, name: str, raw_args: Any, caller: CallerContext | None, *,
                            as_person: bool = False) -> tuple[str, str | None, Resolution]:
        """:meth:`call`, and who the caller resolved to (what the audit record names)."""
        from kirocrew_core.coretools.identity import Resolution

        def decide() -> tuple[Resolution, tuple[CoreMcpTool, CrewSession | None] | _Refusal]:
            resolved = Resolution("person") if as_person else self.registry.resolve(caller)
            return resolved, self._admit(name, raw_args, resolved)

        # Resolving the caller reads the process table, its policy a file: off the event loop.
        resolved, admitted = await asyncio.to_thread(decide)
        if isinstance(admitted, _Refusal):
            return admitted.text, admitted.code, resolved
        text, code = await self._run(name, admitted, caller, resolved.origin, raw_args)
        return text, code, resolved

    async def _run(self, name: str, admitted: tuple[CoreMcpTool, CrewSession | None], caller: CallerContext | None,
                   origin: Origin, raw_args: Any) -> tuple[str, str | None]:
        tool, session = admitted
        call = ToolCall(tool=name, session=session, caller=caller, identity=tool.identity, origin=origin)
        try:
            result = await _run_handler(tool.handler, tool_args(raw_args), call)
        except KirocrewError as exc:
            return exc.message, exc.code
        except Exception:  # noqa: BLE001 - the client gets a code; the host log gets the traceback
            log.error("%s tool %s failed unexpectedly:\n%s", self.server_name, name, traceback.format_exc())
            return f"{name} failed unexpectedly; the kirocrew host's log has the details", "internal_error"
        if not isinstance(result, str):
            log.error("%s tool %s returned %s, not a string", self.server_name, name, type(result).__name__)
            return f"{name} failed unexpectedly; the kirocrew host's log has the details", "internal_error"
        return result, None


class _Refusal:
    def __init__(self, text: str, code: str) -> None:
        self.text, self.code = text, code


async def _run_handler(handler: Callable[..., Any], args: dict[str, Any], call: ToolCall) -> Any:
    if inspect.iscoroutinefunction(handler):
        return await handler(args, call)
    result = await asyncio.to_thread(handler, args, call)
    return await result if inspect.isawaitable(result) else result


def validate_arguments(tool: CoreMcpTool, raw_args: Any) -> str | None:
    """The first schema violation as ``<field>: <message>``, or None; unknown fields are refused.

    Public so a twin of a tool outside MCP (a dashboard route) checks its input exactly as the tool does.
    """
    import jsonschema

    schema = dict(tool.input_schema)
    if schema.get("type") == "object" and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors({} if raw_args is None else raw_args),
                    key=lambda e: (len(e.path), list(map(str, e.path))))
    if not errors:
        return None
    first = errors[0]
    field = ".".join(str(part) for part in first.absolute_path) or _unknown_field(first) or "arguments"
    return f"{field}: {_short(first.message)}"


def _unknown_field(error: Any) -> str | None:
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(str(key) for key in error.instance if key not in allowed)
        return extra[0][:64] if extra else None
    if error.validator == "required":
        missing = str(error.message).split("'")
        return missing[1][:64] if len(missing) > 2 else None
    return None


def _short(message: str) -> str:
    return message if len(message) <= 300 else message[:297] + "..."


class LazyToolServer:
    """A host-served SDK server over a tool set of its own, built on first use (the host's ``make_server``).

    A plugin that serves tools the core way (``kirocrew-cron``, core's artifact admin) hands this to
    :class:`~kirocrew_core.contributions.HostedMcpServer`, so the mcp SDK is not imported when the
    plugin loads, only when a client first connects.
    """

    def __init__(self, tool_source: Callable[[], dict[str, CoreMcpTool]], server_name: str, instructions: str) -> None:
        self._tool_source = tool_source
        self._server_name = server_name
        self._instructions = instructions
        self._server: Any = None

    def __call__(self) -> Any:
        if self._server is None:
            core = CoreToolsServer(tool_source=self._tool_source, server_name=self._server_name)
            self._server = build_server(core, instructions=self._instructions)
        return self._server


def build_server(core: CoreToolsServer | None = None, *, instructions: str = INSTRUCTIONS) -> Server[Any]:
    """The SDK server for ``core`` (the host's one :class:`CoreToolsServer` by default), named ``core.server_name``."""
    from mcp import types

    from kirocrew_core import __version__, tool_results
    from kirocrew_core.host.caller import current_caller

    core = core or CoreToolsServer()

    async def list_tools(ctx: Any, params: Any) -> Any:
        tools = await asyncio.to_thread(core.listed, current_caller())
        return types.ListToolsResult(tools=[_descriptor(types, tool) for tool in tools])

    async def call_tool(ctx: Any, params: Any) -> Any:
        caller = current_caller()
        text, code, resolved = await core.call_resolved(params.name, params.arguments, caller)
        await _audit(params.name, code, resolved, core)
        if code is not None:
            return tool_results.error_result(code, sanitise(text))
        return tool_results.text_result(sanitise(text))

    server_class = _server_class()
    server: Server[Any] = server_class(core.server_name, version=__version__, instructions=instructions,
                                       on_list_tools=list_tools, on_call_tool=call_tool)
    return server


def _descriptor(types: Any, tool: CoreMcpTool) -> Any:
    return types.Tool(name=tool.name, description=tool.description, input_schema=dict(tool.input_schema),
                      annotations=types.ToolAnnotations(read_only_hint=tool.read_only))


def _server_class() -> type:
    from mcp.server.lowlevel import Server

    class CoreServer(Server):
        """Advertises that it consumes the caller block (``capabilities.experimental``)."""

        def create_initialization_options(self, notification_options: Any = None,
                                          experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                                          extensions: dict[str, dict[str, Any]] | None = None) -> Any:
            experimental = {**(experimental_capabilities or {}), CALLER_CAPABILITY: {"schemaVersion": 1}}
            return super().create_initialization_options(notification_options, experimental, extensions)

    return CoreServer


async def _audit(tool: str, code: str | None, resolved: Resolution, core: CoreToolsServer) -> None:
    """One SEL record per call: tool, outcome, code, the resolved session's fingerprint and the caller's origin
    (never a key, never an argument; a key the caller merely claimed is not what it is named by)."""
    from kirocrew_core import audit
    from kirocrew_core.coretools.identity import fingerprint

    key = resolved.session.key if resolved.session is not None else ""
    outcome = "ok" if code is None else ("denied" if code in _DENIALS else "failed")
    fields: dict[str, Any] = {"tool": tool if tool.isidentifier() and len(tool) <= 64 else "?",
                              "session": fingerprint(key), "origin": resolved.origin}
    if core.server_name != SERVER_NAME:
        fields["server"] = core.server_name
    if code is not None:
        fields["code"] = code
    try:
        await asyncio.to_thread(audit.record, "coretools.call", actor=fingerprint(key), outcome=outcome, **fields)
    except KirocrewError as exc:  # an unusable log must not turn every tool call into a failure
        log.warning("could not audit a %s call: %s", core.server_name, exc)


_DENIALS = frozenset({"caller_unverified", "caller_gone", "tool_excluded", "unknown_tool", "invalid_arguments",
                      "governance_denied"})
