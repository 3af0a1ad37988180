"""What the fixture servers share: their tools, their command-line options, and serving HTTP.

Every tool of every fixture server behaves the same way: it answers with one
JSON text naming the server label, the tool and the arguments it received, so
a test (or the fake kiro-cli's ``/tools`` output) can tell exactly which tool of
which server ran.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

READY_PREFIX = "READY "
LOOPBACK = "127.0.0.1"
# Seconds uvicorn waits for open streams (an SSE GET) before closing them on SIGTERM.
GRACEFUL_SHUTDOWN_SECS = 1


def add_tool_options(parser: argparse.ArgumentParser) -> None:
    """The options every fixture server takes to choose its tools."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--tools", type=int, default=None, metavar="N",
                       help="serve N tools named tool_1..tool_N (default 2)")
    group.add_argument("--names", default=None, metavar="A,B",
                       help="serve tools with exactly these comma-separated names")
    parser.add_argument("--label", default="fixture",
                        help="server name reported by initialize and echoed by every tool")
    parser.add_argument("--expose-env", default="", metavar="VAR,VAR",
                        help="environment variables whose values every tool result includes")


def tool_names(args: argparse.Namespace) -> list[str]:
    """The tool names the options ask for, validated (a usage error exits 2)."""
    if args.names is not None:
        names = [n.strip() for n in args.names.split(",")]
        if not all(names) or len(set(names)) != len(names):
            raise SystemExit(f"--names needs distinct non-empty names, got {args.names!r}")
        return names
    count = 2 if args.tools is None else args.tools
    if count < 0:
        raise SystemExit("--tools must be >= 0")
    return [f"tool_{i}" for i in range(1, count + 1)]


def echo_result(label: str, tool: str, arguments: dict[str, Any], env_names: list[str]) -> str:
    """The text every fixture tool answers with."""
    result: dict[str, Any] = {"server": label, "tool": tool, "arguments": arguments}
    if env_names:
        result["env"] = {name: os.environ.get(name) for name in env_names}
    return json.dumps(result, sort_keys=True)


def _make_tool(label: str, name: str, env_names: list[str]) -> Callable[..., str]:
    def tool(text: str = "", number: int | None = None) -> str:
        arguments: dict[str, Any] = {"text": text}
        if number is not None:
            arguments["number"] = number
        return echo_result(label, name, arguments, env_names)

    tool.__name__ = name
    tool.__doc__ = f"Fixture tool {name} of {label}: echoes its arguments."
    return tool


def build_mcp_server(args: argparse.Namespace, **server_kwargs: Any) -> Any:
    """An ``MCPServer`` named ``args.label`` serving the tools the options ask for."""
    from mcp.server import MCPServer

    server = MCPServer(name=args.label, version="0.1.0", **server_kwargs)
    env_names = [n for n in (s.strip() for s in args.expose_env.split(",")) if n]
    for name in tool_names(args):
        server.add_tool(_make_tool(args.label, name, env_names), name=name, structured_output=False)
    return server


def bind_loopback(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (``port`` 0: the kernel picks a free one).

    Binding here, before the app exists, is what lets a server print its real URL
    and build URLs that contain its own port (an issuer, a resource).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def announce(payload: str) -> None:
    """Print the one READY line a launcher waits for, and flush it."""
    sys.stdout.write(READY_PREFIX + payload + "\n")
    sys.stdout.flush()


def serve_app(app: Any, sock: socket.socket, ready_payload: str) -> None:
    """Serve ``app`` on ``sock`` with uvicorn until SIGTERM/SIGINT; announce READY once listening."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECS)
    server = uvicorn.Server(config)

    async def main() -> None:
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            if serving.done():
                await serving  # startup failed: let its error surface
                raise SystemExit("server stopped before it was listening")
            await asyncio.sleep(0.01)
        announce(ready_payload)
        await serving

    asyncio.run(main())
