"""The Conversations MCP over stdio: the 17 tools of :mod:`tool_schemas`, answered by the service.

The mcp SDK's low-level ``Server`` is used, not ``MCPServer``, because our schemas are
hand-written JSON Schemas (strict, bounded, documented from one place) rather than derived
from Python signatures; this module only translates between MCP and
:class:`~kirocrew_conversations.service.ConversationsService`:

* results take the shapes of :mod:`kirocrew_core.tool_results`: a success carries
  ``structuredContent`` and the same JSON as a text block, for clients without structured output;
* a :class:`KirocrewError` becomes ``isError`` with the one text block ``error[code]: message`` and
  no ``structuredContent`` (the output schemas describe successes, and TypeScript-SDK clients reject
  any structured content that does not match them); anything else is ``internal_error``, its
  traceback on stderr only;
* each request acts for the viewer its verified caller resolves to (:mod:`scope`): in the host a
  crew session sees only its own conversations' tree; a standalone server's callers are the person;
* a request with a ``progressToken`` gets a sink sending ``notifications/progress``;
* a cancelled request (``notifications/cancelled``, or a client gone) cancels only the awaiting
  task, which detaches from the run; it never cancels Kiro.

Ownership of the state directory is taken before stdio is served, so a second server on the same
directory fails at once (``error[state_dir_in_use]``, exit 1) instead of after a handshake.
Stdin EOF and SIGTERM/SIGINT/SIGHUP end the server the same way: in-flight calls detach, then
the service closes (running runs become ``interrupted``) and the process exits 0. While it runs,
the same tools are also served on the state directory's owner-only control socket
(:mod:`control_socket`) for the ``kirocrew conversations`` twins.

The mcp SDK is imported inside functions: ``kirocrew --help`` must not pay for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import logging
import os
import re
import selectors
import signal
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import tool_results
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations import __version__, scope
from kirocrew_conversations.tool_schemas import TOOLS, TOOLS_BY_NAME

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from kirocrew_conversations.service import ConversationsService, ProgressSink, ServiceConfig

log = logging.getLogger(__name__)

SERVER_NAME = "kirocrew-conversations"

INSTRUCTIONS = """\
Runs Kiro agents in durable conversations; a run keeps going when your request is aborted or times out.
- One task: call kiro_delegate; it starts the run and waits for it in one call.
- Parallel tasks: call kiro_spawn once per independent task (each its own conversation), then make \
ONE kiro_wait over all returned conversationId/runId pairs (mode "any" or "all").
- Do not poll kiro_result or kiro_status in a loop. A wait that returns waitExpired: true cancelled \
nothing: call kiro_wait again. Aborting a call only detaches; stop a run deliberately with kiro_cancel.
- IDs are opaque: pass back exactly what a tool returned; never construct, shorten or parse one.
- A kirocrew crew session sees only the conversations it created and their descendants (any other id is \
conversation_not_found); other clients see every conversation.
- Status needs_attention: a permission request is the owner's, answered with kiro_permission_decide by the \
person (a crew session is refused owner_decision_required: tell the user); a question card is answered with \
kiro_question_answer.
- A failed call is isError with the text error[<code>]: <message>; branch on the code.
- New conversations default to unrestricted authority: a technical capability, not permission to do \
more than the user asked (no commits, pushes or deployments unless asked)."""

# Signals that end the server like stdin EOF: MCP clients send SIGTERM, a terminal SIGINT/SIGHUP.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# One JSON-RPC frame; our largest legal request (a 200k-char message, escaped) is far below this.
MAX_FRAME_BYTES = 16 * 1024 * 1024
_READ_CHUNK = 64 * 1024
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


# -- progress --------------------------------------------------------------------------------------
def _progress_sink(ctx: Any) -> ProgressSink | None:
    """A sink for this request's ``progressToken``, or ``None`` when the client sent none.

    The service chooses how long a call may block by this: without a token it returns within a
    bound most hosts tolerate. A failed send (the client is going away) is not the call's failure.
    """
    token = (ctx.meta or {}).get("progress_token")
    if token is None:
        return None
    counter = itertools.count(1)
    session = ctx.session

    async def send(message: str) -> None:
        try:
            await session.report_progress(float(next(counter)), None, message)
        except Exception as exc:  # noqa: BLE001 - progress is best-effort; CancelledError still propagates
            log.debug("progress notification not sent: %s", exc)

    return send


# -- the server ------------------------------------------------------------------------------------
def build_server(service: ConversationsService) -> Server[Any]:
    """The MCP server for ``service``: ``tools/list`` lists the 17 tools, ``tools/call`` runs them."""
    from mcp import types
    from mcp.server.lowlevel import Server

    listed = types.ListToolsResult(tools=[
        types.Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema,
                   output_schema=tool.output_schema)
        for tool in TOOLS
    ])

    async def list_tools(ctx: Any, params: Any) -> Any:
        return listed

    async def call_tool(ctx: Any, params: Any) -> Any:
        name = params.name
        if name not in TOOLS_BY_NAME:
            shown = f" {name}" if _SAFE_NAME.match(name) else ""
            return tool_results.error_result("unknown_tool", f"no tool is named{shown}; tools/list names the 17 tools")
        try:
            # Who this request acts for, per call: resolving a session reads process facts, off the event loop.
            viewer = await asyncio.to_thread(scope.current_viewer)
            payload = await service.call(name, params.arguments, progress=_progress_sink(ctx), viewer=viewer)
        except KirocrewError as exc:
            return tool_results.error_result(exc.code, exc.message)
        except Exception:  # the client gets a code, stderr gets the traceback
            log.exception("tool %s failed unexpectedly", name)
            return tool_results.error_result("internal_error",
                                             f"{name} failed unexpectedly; the server's log has the details")
        return tool_results.structured_result(payload)

    return Server(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(config: ServiceConfig) -> None:
    """Own the state directory, then serve MCP on stdin/stdout until EOF or a stop signal.

    The same tools are served on the state directory's control socket meanwhile, so the
    ``kirocrew conversations`` twins reach the server that supervises the runs.
    A :class:`KirocrewError` from startup (``state_dir_in_use``, ``state_dir_unusable`` ...)
    propagates before anything is read from stdin; the CLI prints it and exits non-zero.
    """
    from kirocrew_conversations.service import ConversationsService

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        service = await ConversationsService.start(config)
        try:
            if not stop.is_set():
                server = build_server(service)
                control = loop.create_task(_serve_control(server, service.state.ownership.directory),
                                           name="control-socket")
                try:
                    await _serve(server, stop)
                finally:
                    control.cancel()  # its sessions detach like the stdio one did
                    with contextlib.suppress(asyncio.CancelledError):
                        await control
        finally:
            await _close(service)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


async def _close(service: ConversationsService) -> None:
    """Close the service completely even if this task is being cancelled (never half-closed)."""
    closing = asyncio.ensure_future(service.aclose())
    try:
        await asyncio.shield(closing)
    except asyncio.CancelledError:
        await closing
        raise


async def _serve(server: Server[Any], stop: asyncio.Event) -> None:
    from mcp.server.stdio import stdio_server

    try:
        async with _claimed_stdin(stop) as lines, stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
            await server.run(read, write, server.create_initialization_options())
    except* (BrokenPipeError, ConnectionResetError):
        log.info("the client closed the connection")


async def _serve_control(server: Server[Any], state_dir: Path) -> None:
    """Serve MCP sessions on ``<state dir>/control.sock`` until cancelled.

    Without it the stdio server still works; only the CLI twins cannot reach it, so a socket
    that cannot be created (a path too long for AF_UNIX, say) is a warning, not a failure.
    """
    from kirocrew_conversations import control_socket

    async def session(read: Any, write: Any) -> None:
        try:
            await server.run(read, write, server.create_initialization_options())
        except Exception:  # one broken session must not close the socket for the others
            log.exception("a control socket session failed")

    path = control_socket.socket_path(state_dir)
    try:
        await control_socket.serve(path, session)
    except OSError as exc:
        log.warning("no control socket at %s (kirocrew conversations commands cannot reach this server): %s",
                    path, exc.strerror or exc)


# -- stdin -----------------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def _claimed_stdin(stop: asyncio.Event) -> AsyncIterator[AsyncIterator[str]]:
    """Stdin's lines, read without a thread, ending at EOF or once ``stop`` is set.

    The SDK reads stdin in a worker thread that nothing can interrupt, so a stop signal could
    never end the server gracefully; here a stop looks like EOF to the protocol loop. Like the
    SDK, fd 0 points at the null device meanwhile, so no child process can read our wire.
    """
    wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    closer: Callable[[], None] = lambda: None  # noqa: E731
    try:
        read_chunk, closer = await _chunk_reader(wire)
        yield _lines(read_chunk, stop)
    finally:
        closer()
        with contextlib.suppress(OSError):
            os.set_blocking(wire, True)
            os.dup2(wire, 0)
        os.close(wire)


def _pollable(fd: int) -> bool:
    """Whether the event loop can wait on ``fd`` (a pipe, socket or terminal; not a file or /dev/null)."""
    if not stat.S_ISFIFO(mode := os.fstat(fd).st_mode) and not stat.S_ISSOCK(mode) and not stat.S_ISCHR(mode):
        return False
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ)
        except (OSError, ValueError):  # epoll refuses /dev/null with EPERM
            return False
    return True


async def _chunk_reader(fd: int) -> tuple[Callable[[], Awaitable[bytes]], Callable[[], None]]:
    """``read()`` for ``fd``: non-blocking where it can be polled, else in a thread.

    What cannot be polled (a regular file, ``< /dev/null``) never blocks a read either.
    """
    if not _pollable(fd):
        return (lambda: asyncio.to_thread(os.read, fd, _READ_CHUNK)), (lambda: None)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_CHUNK, loop=loop)
    pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return (lambda: reader.read(_READ_CHUNK)), transport.close


async def _lines(read_chunk: Callable[[], Awaitable[bytes]], stop: asyncio.Event) -> AsyncIterator[str]:
    stopping = asyncio.ensure_future(stop.wait())
    buffer = bytearray()
    searched = 0  # bytes of buffer already known to hold no newline
    discarding = False  # inside an oversized frame: drop up to its newline
    try:
        while True:
            reading = asyncio.ensure_future(read_chunk())
            try:
                await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                reading.cancel()
                raise
            if not reading.done():
                reading.cancel()
                return
            chunk = reading.result()
            if not chunk:
                if buffer.strip() and not discarding:
                    yield buffer.decode("utf-8", errors="replace")
                return
            buffer += chunk
            while (end := buffer.find(b"\n", searched)) >= 0:
                frame = bytes(buffer[: end + 1])
                del buffer[: end + 1]
                searched = 0
                if discarding:
                    discarding = False
                elif frame.strip():
                    yield frame.decode("utf-8", errors="replace")
            searched = len(buffer)
            if len(buffer) > MAX_FRAME_BYTES:
                if not discarding:
                    log.warning("dropping an incoming frame larger than %d bytes", MAX_FRAME_BYTES)
                discarding = True
                buffer.clear()
                searched = 0
    finally:
        stopping.cancel()
