"""A loopback HTTP server playing a provider for the L0 and L1 tests.

``python -m probe_fixture_server --config JSON`` (this directory on PYTHONPATH) prints
``READY http://127.0.0.1:PORT`` and serves until SIGTERM. ``{base}`` in any string
of the config is replaced by that base URL. The config:

* ``"documents"``: ``{path: {"status": 200, "json": ..., "headers": {...}, "body": "raw"}}``
  answered to GET (RFC 9728 / RFC 8414 metadata, or anything else);
* ``"mcp"``: ``{path: {"mode": ..., "tools": [names], "token": "..."}}`` answered to POST,
  where ``mode`` is ``open`` (a JSON-RPC MCP server: initialize with an
  ``Mcp-Session-Id``, notifications, tools/list, tools/call), ``challenge`` (401 with a
  Bearer challenge; a request carrying Authorization gets ``error="invalid_token"``),
  ``token`` (``open`` for ``Authorization: Bearer <token>``, else ``challenge``),
  ``forbidden`` (403, no challenge), ``plain401`` (401, no challenge), ``redirect``
  (307 elsewhere), ``rpc_error`` (initialize answers a JSON-RPC ``invalid_token`` error),
  ``sse`` (``open``, but answering as an event stream), ``slow`` (sleeps ``delay`` seconds).

``GET /_requests`` returns ``{"requests": [...], "max_in_flight": N}``: every request seen
(method, path, JSON-RPC method, whether an Authorization header came with it, its
Accept-Encoding) and the most requests it ever had in flight at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from kirocrew_testing.servers._common import LOOPBACK, bind_loopback, serve_app


def _substitute(value: Any, base: str) -> Any:
    if isinstance(value, str):
        return value.replace("{base}", base)
    if isinstance(value, list):
        return [_substitute(v, base) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, base) for k, v in value.items()}
    return value


def build_app(config: dict[str, Any], base: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    config = _substitute(config, base)
    documents: dict[str, Any] = config.get("documents", {})
    endpoints: dict[str, Any] = config.get("mcp", {})
    seen: list[dict[str, Any]] = []
    load = {"in_flight": 0, "max_in_flight": 0}

    def challenge(refused: bool) -> Response:
        value = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
        if refused:
            value += ', error="invalid_token"'
        return JSONResponse({"error": "unauthorized"}, 401, headers={"WWW-Authenticate": value})

    def rpc(message: dict[str, Any], result: Any, sse: bool, headers: dict[str, str] | None = None) -> Response:
        reply = {"jsonrpc": "2.0", "id": message.get("id"), "result": result}
        if sse:
            return Response(f"event: message\ndata: {json.dumps(reply)}\n\n", 200, headers=headers,
                            media_type="text/event-stream")
        return JSONResponse(reply, 200, headers=headers)

    async def mcp(request: Request, spec: dict[str, Any]) -> Response:
        try:
            message = json.loads(await request.body())
        except json.JSONDecodeError:
            return JSONResponse({"error": "not JSON"}, 400)
        authorization = request.headers.get("authorization")
        seen[-1]["rpc"] = message.get("method")
        mode = spec.get("mode", "open")
        if mode == "slow":
            await asyncio.sleep(float(spec.get("delay", 5)))
            mode = "open"
        if mode == "token":
            if authorization != f"Bearer {spec['token']}":
                return challenge(refused=authorization is not None)
            mode = "open"
        if mode == "challenge":
            return challenge(refused=authorization is not None)
        if mode == "forbidden":
            return JSONResponse({"error": "forbidden"}, 403)
        if mode == "plain401":
            return JSONResponse({"error": "unauthorized"}, 401)
        if mode == "redirect":
            return Response(status_code=307, headers={"Location": f"{base}/elsewhere"})
        method = message.get("method")
        if mode == "rpc_error" and method == "initialize":
            return JSONResponse({"jsonrpc": "2.0", "id": message.get("id"),
                                 "error": {"code": -32001, "message": "invalid_token: grant revoked"}})
        sse = mode == "sse"
        if method == "initialize":
            return rpc(message, {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                                 "serverInfo": {"name": "fixture", "version": "1"}},
                       sse, {"Mcp-Session-Id": "session-1"})
        if "id" not in message:
            return Response(status_code=202)
        if request.headers.get("mcp-session-id") != "session-1":
            return JSONResponse({"error": "missing session"}, 400)
        if method == "tools/list":
            tools = [{"name": n, "inputSchema": {"type": "object"}} for n in spec.get("tools", [])]
            return rpc(message, {"tools": tools}, sse)
        if method == "tools/call":
            return rpc(message, {"content": [{"type": "text", "text": "called"}]}, sse)
        return JSONResponse({"jsonrpc": "2.0", "id": message.get("id"),
                             "error": {"code": -32601, "message": "method not found"}})

    async def handle(request: Request) -> Response:
        path = request.url.path
        if path == "/_requests":
            return JSONResponse({"requests": seen, "max_in_flight": load["max_in_flight"]})
        load["in_flight"] += 1
        load["max_in_flight"] = max(load["max_in_flight"], load["in_flight"])
        try:
            return await answer(request, path)
        finally:
            load["in_flight"] -= 1

    async def answer(request: Request, path: str) -> Response:
        seen.append({"method": request.method, "path": path,
                     "authorization": "authorization" in request.headers,
                     "accept_encoding": request.headers.get("accept-encoding")})
        if request.method == "POST" and path in endpoints:
            return await mcp(request, endpoints[path])
        if request.method == "GET" and path in documents:
            doc = documents[path]
            headers = doc.get("headers", {})
            if "body" in doc:
                return Response(doc["body"], doc.get("status", 200), headers=headers,
                                media_type="application/json")
            return JSONResponse(doc.get("json"), doc.get("status", 200), headers=headers)
        return JSONResponse({"error": "not found"}, 404)

    return Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "POST", "DELETE"])])


def main() -> None:
    parser = argparse.ArgumentParser(prog="probe_fixture_server")
    parser.add_argument("--config", required=True, help="the server's behaviour, as JSON")
    args = parser.parse_args()
    sock = bind_loopback(0)
    base = f"http://{LOOPBACK}:{sock.getsockname()[1]}"
    serve_app(build_app(json.loads(args.config), base), sock, base)


if __name__ == "__main__":
    main()
