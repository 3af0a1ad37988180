"""A streamable-HTTP (or legacy HTTP+SSE) MCP fixture server on the mcp SDK, on 127.0.0.1.

``python -m kirocrew_testing.servers.http_server --port 0 [--tools N | --names a,b]
[--path /mcp] [--require-header NAME=VALUE ...] [--json-response] [--stateless] [--sse]``

Prints exactly one line, ``READY http://127.0.0.1:PORT/mcp``, once it accepts
connections, then serves until SIGTERM. With ``--sse`` it speaks the legacy
HTTP+SSE transport instead: the URL is the event stream's (GET), which names
the endpoint messages are POSTed to. With ``--require-header`` every request
to the MCP endpoint lacking that header value gets a plain 401 (no OAuth
challenge), so ``${VAR}`` header expansion in a client can be tested.
"""

from __future__ import annotations

import argparse
from typing import Any

from kirocrew_core.sdk_models import prepare as prepare_sdk_models
from kirocrew_testing.servers._common import (
    LOOPBACK,
    add_tool_options,
    bind_loopback,
    build_mcp_server,
    serve_app,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="http_server", description=__doc__.splitlines()[0])
    add_tool_options(parser)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--path", default="/mcp", help="the MCP endpoint path (default /mcp)")
    parser.add_argument("--require-header", action="append", default=[], metavar="NAME=VALUE",
                        help="answer 401 unless the request carries this header value (repeatable)")
    parser.add_argument("--json-response", action="store_true", help="answer JSON instead of SSE")
    parser.add_argument("--stateless", action="store_true", help="no Mcp-Session-Id sessions")
    parser.add_argument("--sse", action="store_true",
                        help="the legacy HTTP+SSE transport: --path is the event stream's")
    args = parser.parse_args(argv)
    if not args.path.startswith("/"):
        parser.error("--path must start with /")
    required: dict[str, str] = {}
    for item in args.require_header:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            parser.error(f"--require-header needs NAME=VALUE, got {item!r}")
        required[name.strip().lower()] = value
    args.required_headers = required
    return args


class RequireHeaders:
    """ASGI middleware: 401 for a request missing any required header value."""

    def __init__(self, app: Any, required: dict[str, str]) -> None:
        self.app = app
        self.required = {k.encode("latin-1"): v.encode("latin-1") for k, v in required.items()}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.required:
            headers = dict(scope.get("headers") or [])
            missing = [k for k, v in self.required.items() if headers.get(k) != v]
            if missing:
                body = b'{"error": "missing or wrong required header"}'
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def build_app(args: argparse.Namespace) -> Any:
    server = build_mcp_server(args)
    if args.sse:
        app = server.sse_app(sse_path=args.path)
    else:
        app = server.streamable_http_app(streamable_http_path=args.path, json_response=args.json_response,
                                         stateless_http=args.stateless)
    return RequireHeaders(app, args.required_headers) if args.required_headers else app


def main(argv: list[str] | None = None) -> None:
    prepare_sdk_models()
    args = parse_args(argv)
    app = build_app(args)
    sock = bind_loopback(args.port)
    port = sock.getsockname()[1]
    serve_app(app, sock, f"http://{LOOPBACK}:{port}{args.path}")


if __name__ == "__main__":
    main()
