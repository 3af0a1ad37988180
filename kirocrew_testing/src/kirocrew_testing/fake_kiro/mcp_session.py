"""The MCP client session the fake kiro-cli speaks over any transport: asyncio and the standard library.

Why not the mcp SDK's ``ClientSession``: importing it (with anyio, pydantic and the protocol
models) cost each fake process about 0.3 CPU-s, and the suite starts the fake hundreds of times.
So :class:`McpSession` speaks the few messages a session needs, the way the SDK's client does
with its default callbacks; a transport subclass moves the messages
(:class:`~kirocrew_testing.fake_kiro.stdio_mcp.StdioClient`,
:class:`~kirocrew_testing.fake_kiro.http_mcp.HttpClient`).

- **Handshake**: ``initialize`` with the SDK's protocol revision, ``clientInfo`` and (no
  callbacks) empty capabilities; a revision the SDK cannot speak fails it; then
  ``notifications/initialized``. ``tools/list`` follows ``nextCursor`` to the last page.
- **Server requests** get the SDK's default answers: ``ping`` ``{}``; ``roots/list``,
  ``sampling/createMessage`` and ``elicitation/create`` -32600 "… not supported"; anything
  else -32601. Notifications are ignored (``notifications/message`` logged at debug). A
  message that is not JSON-RPC is logged and skipped (the SDK hands the session an exception
  value, which its default handler ignores).
- **Results** are checked as the SDK's models would check them (a malformed result fails the
  call), and ``structuredContent`` against the tool's ``outputSchema`` with ``jsonschema``
  (imported only then), with the SDK's messages. A JSON-RPC error raises :class:`McpError`
  whose text is the error's message; a transport gone mid-call raises "Connection closed".
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

log = logging.getLogger(__name__)

#: What the SDK's client offers and accepts (``mcp_types.version``; a test keeps them equal).
PROTOCOL_VERSION = "2025-11-25"
HANDSHAKE_PROTOCOL_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
CLIENT_INFO = {"name": "mcp", "version": "0.1.0"}  # the SDK's DEFAULT_CLIENT_INFO

CONNECTION_CLOSED = -32000
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
# The SDK's default callbacks refuse these server requests with INVALID_REQUEST.
UNSUPPORTED_REQUESTS = {"roots/list": "List roots not supported",
                        "sampling/createMessage": "Sampling not supported",
                        "elicitation/create": "Elicitation not supported"}
# The content block types of a tool result, and the string fields each must carry.
BLOCK_FIELDS: Mapping[str, tuple[str, ...]] = {
    "text": ("text",), "image": ("data", "mimeType"), "audio": ("data", "mimeType"),
    "resource_link": ("name", "uri"), "resource": (),
}


class McpError(Exception):
    """A JSON-RPC error from the server, or the connection closing under a request."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        self.code, self.message, self.data = code, message, data

    def __str__(self) -> str:
        return self.message


class InvalidResult(Exception):
    """A server's answer that does not have the shape the protocol gives it."""


@dataclass(frozen=True)
class Tool:
    """A listed tool: what the fake reads of it (``/tools``, calls) and its schemas."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any] = field(default_factory=dict, compare=False)
    output_schema: dict[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ContentBlock:
    """One block of a tool result's ``content``; ``text`` is set for text blocks."""

    type: str
    text: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """A ``tools/call`` result, read as the SDK's ``CallToolResult`` is (``content``, ``is_error``)."""

    content: tuple[ContentBlock, ...]
    is_error: bool
    structured_content: dict[str, Any] | None
    wire: dict[str, Any] = field(compare=False, repr=False)

    def model_dump(self, *, mode: str = "json", by_alias: bool = True, exclude_none: bool = True) -> dict[str, Any]:
        """The result as JSON, camelCase, no null fields: the SDK model's dump with these arguments.

        The keyword arguments are the SDK model's (the turn passes them as it would to the
        model); the result is always that one form.
        """
        return json.loads(json.dumps(self.wire))


class McpSession(abc.ABC):
    """The client half of an MCP session; a subclass provides the transport (:meth:`_write`, :meth:`_write_nowait`).

    A subclass hands every message it reads to :meth:`_receive_line` (raw JSON) or
    :meth:`_receive_message` (parsed), and calls :meth:`_fail_pending` when its transport ends.
    """

    def __init__(self) -> None:
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._output_schemas: dict[str, dict[str, Any] | None] = {}
        self._validators: dict[str, Validator] = {}
        #: Set once the transport has ended (the server exited, the client closed): every request fails then.
        self.closed = asyncio.Event()
        #: The revision the server answered ``initialize`` with (HTTP names it in a header afterwards).
        self.protocol_version: str | None = None

    # -- the transport -------------------------------------------------------

    def _is_open(self) -> bool:
        return not self.closed.is_set()

    @abc.abstractmethod
    async def _write(self, message: dict[str, Any]) -> None:
        """Send ``message``; raise :class:`McpError` "Connection closed" when the transport is gone."""

    @abc.abstractmethod
    def _write_nowait(self, message: dict[str, Any]) -> None:
        """Send a message that must not wait: an answer to the server, a cancelled caller's courtesy cancel."""

    # -- the session ---------------------------------------------------------

    async def initialize(self) -> dict[str, Any]:
        """The handshake: ``initialize``, a revision check, ``notifications/initialized``."""
        result = await self.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                                   "clientInfo": dict(CLIENT_INFO)}, cancellable=False)
        version = result.get("protocolVersion")
        if not isinstance(version, str) or not isinstance(result.get("capabilities"), dict) \
                or not isinstance(result.get("serverInfo"), dict):
            raise InvalidResult(f"invalid initialize result: {_brief(result)}")
        if version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise RuntimeError(f"Unsupported protocol version from the server: {version}")
        self.protocol_version = version
        await self.notify("notifications/initialized")
        return result

    async def list_tools(self) -> list[Tool]:
        """Every tool, page after page; remembers their output schemas for :meth:`call_tool`."""
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            result = await self.request("tools/list", {"cursor": cursor} if cursor is not None else None)
            page, cursor = _tools_page(result)
            tools.extend(page)
            if cursor is None:
                break
        self._output_schemas = {t.name: t.output_schema for t in tools}
        self._validators.clear()
        return tools

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """``tools/call``; a result that is not an error is checked against the tool's output schema."""
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        answer = await self.request("tools/call", params)
        result = _tool_result(name, answer)
        if not result.is_error:
            await self._validate_structured(name, result, "structuredContent" in answer)
        return result

    async def request(self, method: str, params: dict[str, Any] | None = None, *,
                      cancellable: bool = True) -> dict[str, Any]:
        """Send a request and wait for its result; a caller giving up sends ``notifications/cancelled``.

        ``initialize`` is not cancellable (the spec forbids it), as in the SDK.
        """
        if not self._is_open():
            raise McpError(CONNECTION_CLOSED, "Connection closed")
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        written = False
        try:
            await self._write(message)
            written = True
            return await future
        except asyncio.CancelledError:
            if cancellable and written:
                self._write_nowait({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                    "params": {"requestId": request_id, "reason": "caller cancelled"}})
            raise
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._write(message)

    # -- output schemas ------------------------------------------------------

    async def _validate_structured(self, name: str, result: ToolResult, sent: bool) -> None:
        """The SDK's ``validate_tool_result``: the same checks, the same messages."""
        if name not in self._output_schemas:
            await self.list_tools()
        if name not in self._output_schemas:
            log.warning("Tool %s not listed by server, cannot validate any structured content", name)
            return
        schema = self._output_schemas[name]
        if schema is None:
            return
        from jsonschema import exceptions as jsonschema_exceptions
        from referencing.exceptions import Unresolvable

        if result.structured_content is None and not sent:
            raise RuntimeError(f"Tool {name} has an output schema but did not return structured content")
        validator = self._validator(name, schema)
        try:
            error = jsonschema_exceptions.best_match(validator.iter_errors(result.structured_content))
        except Unresolvable as exc:
            raise RuntimeError(f"Invalid schema for tool {name}: {exc}") from exc
        if error is not None:
            raise RuntimeError(f"Invalid structured content returned by tool {name}: {error}") from error

    def _validator(self, name: str, schema: dict[str, Any]) -> Validator:
        from jsonschema import SchemaError
        from jsonschema.validators import validator_for
        from referencing import Registry

        validator = self._validators.get(name)
        if validator is None:
            cls = validator_for(schema)
            try:
                cls.check_schema(schema)
            except SchemaError as exc:
                raise RuntimeError(f"Invalid schema for tool {name}: {exc}") from exc
            # An empty registry: ``$ref``s resolve within the schema and the bundled metaschemas only.
            validator = self._validators[name] = cls(schema, registry=Registry())
        return validator

    # -- reading ------------------------------------------------------------

    def _fail_pending(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(McpError(CONNECTION_CLOSED, "Connection closed"))

    def _receive_line(self, line: bytes | str) -> None:
        """One JSON-RPC message as the server wrote it (a stdio line, an SSE event's data)."""
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError as exc:  # a bad byte sequence is a ValueError too
            log.warning("Failed to parse JSONRPC message from server: %s: %s", exc, _brief(line))
            return
        self._receive_message(message)

    def _receive_message(self, message: Any) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            log.warning("Failed to parse JSONRPC message from server: not JSON-RPC 2.0: %s", _brief(message))
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                self._answer(message["id"], method)
            elif method == "notifications/message":
                log.debug("server log: %s", message.get("params"))
            return
        self._settle(message)

    def _settle(self, message: dict[str, Any]) -> None:
        future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            log.debug("dropped a response to no pending request: %s", _brief(message))
            return
        error = message.get("error")
        if isinstance(error, dict):
            future.set_exception(McpError(error.get("code", 0), str(error.get("message", "")), error.get("data")))
        elif isinstance(message.get("result"), dict):
            future.set_result(message["result"])
        else:
            future.set_exception(InvalidResult(f"invalid JSON-RPC response: {_brief(message)}"))

    def _answer(self, request_id: Any, method: str) -> None:
        """A server's request, answered as the SDK's ClientSession answers it without callbacks."""
        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "ping":
            answer["result"] = {}
        elif method in UNSUPPORTED_REQUESTS:
            answer["error"] = {"code": INVALID_REQUEST, "message": UNSUPPORTED_REQUESTS[method]}
        else:
            answer["error"] = {"code": METHOD_NOT_FOUND, "message": "Method not found", "data": method}
        self._write_nowait(answer)  # not waiting: a server blocked on its output must not stall our reading


def _tools_page(result: dict[str, Any]) -> tuple[list[Tool], str | None]:
    """One ``tools/list`` page as the SDK's ``ListToolsResult`` would accept it."""
    listed, cursor = result.get("tools"), result.get("nextCursor")
    if not isinstance(listed, list) or not (cursor is None or isinstance(cursor, str)):
        raise InvalidResult(f"invalid tools/list result: {_brief(result)}")
    tools = []
    for entry in listed:
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("inputSchema"), dict)
                and isinstance(entry.get("description"), (str, type(None)))
                and isinstance(entry.get("outputSchema"), (dict, type(None)))):
            raise InvalidResult(f"invalid tool in tools/list result: {_brief(entry)}")
        tools.append(Tool(entry["name"], entry.get("description"), entry["inputSchema"], entry.get("outputSchema")))
    return tools, cursor


def _tool_result(name: str, result: dict[str, Any]) -> ToolResult:
    """A ``tools/call`` result checked as the SDK's ``CallToolResult`` model checks it.

    ``wire`` is what its dump holds: ``_meta``, ``content`` (each block without null fields),
    ``structuredContent`` and ``isError`` (false when absent); other keys are not the model's.
    """
    content, structured, is_error, meta = (result.get("content"), result.get("structuredContent"),
                                           result.get("isError", False), result.get("_meta"))
    problem = ""
    if not isinstance(content, list):
        problem = "content must be a list"
    elif not isinstance(is_error, bool):
        problem = "isError must be a boolean"
    elif not isinstance(structured, (dict, type(None))):
        problem = "structuredContent must be an object"
    elif not isinstance(meta, (dict, type(None))):
        problem = "_meta must be an object"
    else:
        problem = next((p for p in (_block_problem(i, b) for i, b in enumerate(content)) if p), "")
    if problem:
        raise InvalidResult(f"invalid result of tool {name}: {problem}")
    assert isinstance(content, list)
    blocks = [{k: v for k, v in block.items() if v is not None} for block in content]
    wire: dict[str, Any] = {}
    if meta is not None:
        wire["_meta"] = meta
    wire["content"] = blocks
    if structured is not None:
        wire["structuredContent"] = structured
    wire["isError"] = bool(is_error)
    return ToolResult(tuple(ContentBlock(b["type"], b.get("text")) for b in blocks), bool(is_error), structured, wire)


def _block_problem(index: int, block: Any) -> str:
    where = f"content[{index}]"
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return f"{where} must be an object with a string type"
    kind = block["type"]
    if kind not in BLOCK_FIELDS:
        return f"{where} has an unknown type {kind!r}"
    missing = [f for f in BLOCK_FIELDS[kind] if not isinstance(block.get(f), str)]
    if missing:
        return f"{where} ({kind}) needs a string {', '.join(missing)}"
    if kind == "resource":
        resource = block.get("resource")
        if not (isinstance(resource, dict) and isinstance(resource.get("uri"), str)
                and (isinstance(resource.get("text"), str) or isinstance(resource.get("blob"), str))):
            return f"{where} (resource) needs a resource with a uri and a text or blob"
    return ""


def _brief(value: Any, limit: int = 200) -> str:
    """A value for a log line or an error, cut short: a server's line may be megabytes."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
