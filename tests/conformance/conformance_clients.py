"""Drive our stdio MCP servers with third-party clients, each validating results its own way.

A runner, ``runner(server, calls)``, starts the server (a :class:`StdioServer`), lists its tools,
makes each call and returns one report, the same shape for every client::

    {"tools": [...], "schemaProblems": [{"tool", "schema", "error"}],
     "calls": [{"name", "result": CallToolResult as JSON} | {"name", "thrown": {"code", "message"}}]}

* ``typescript``: the official TypeScript SDK's ``Client`` (``ts_client.mjs`` under node), the
  client most MCP hosts are built on. Its ``callTool`` validates ``structuredContent`` against the
  tool's ``outputSchema`` whenever it is present, error results included, and throws on a mismatch.
  The SDK is pinned by ``package-lock.json`` and installed once by ``node_sdk.py``.
* ``python``: the ``mcp`` SDK's ``ClientSession``, which validates successful results only.

A thrown call is reported, never raised: that is exactly what these tests look for.

An argument may be taken from an earlier call's result: ``{"$ref": [index, "key", ...]}`` is
replaced, in both clients, by that call's result at that path (``[0, "structuredContent", "run",
"runId"]``), so a plan can decide a permission request the first call ran into.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kirocrew_testing.core_sessions import CrewHarness, McpClient

TS_CLIENT = Path(__file__).with_name("ts_client.mjs")
# Generous bounds: they only stop a hung test, they never measure anything.
RUN_TIMEOUT_SECS = 120.0
HANDSHAKE_TIMEOUT_SECS = 30.0
# The SDK's stdio client kills a server still running 2 s after it closed stdin; closing kiro
# workers can take longer on a loaded machine (see tests/conversations/conftest.py).
CLIENT_CLOSE_GRACE_SECS = 15.0

Runner = Callable[["StdioServer", list[dict[str, Any]]], dict[str, Any]]


@dataclass(frozen=True)
class StdioServer:
    """How to start one server: its argv, its whole environment, and where its stderr goes."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    stderr: Path


def run_typescript_client(server: StdioServer, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The report of ``ts_client.mjs``: the TypeScript SDK's ``Client`` over ``StdioClientTransport``."""
    node = shutil.which("node")
    assert node, "node_sdk checked that node is installed"
    plan = {"command": server.argv[0], "args": server.argv[1:], "env": server.env, "cwd": str(server.cwd),
            "stderr": str(server.stderr), "calls": calls}
    done = subprocess.run([node, str(TS_CLIENT)], input=json.dumps(plan), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_SECS, cwd=server.cwd, env=server.env)
    assert done.returncode == 0, f"ts_client.mjs failed:\n{done.stderr}\nserver stderr:\n{_tail(server.stderr)}"
    return json.loads(done.stdout)


async def run_typescript_client_in_a_session(crew: CrewHarness, conv: McpClient, argv: list[str],
                                            calls: list[dict[str, Any]], *, name: str) -> dict[str, Any]:
    """The report of ``ts_client.mjs`` run by a crew session: the fake kiro-cli of a new conversation ``name``
    runs it with ``!shell``, so the server it starts (``argv``, a relay) descends from that kiro-cli and
    carries its environment: the host sees that session, as for any tool the session calls itself."""
    import shlex

    node = shutil.which("node")
    assert node, "node_sdk checked that node is installed"
    folder = crew.root / f"ts-{name}"
    folder.mkdir()
    plan, report, errors = folder / "plan.json", folder / "report.json", folder / "client.stderr"
    plan.write_text(json.dumps({"command": argv[0], "args": argv[1:], "cwd": str(crew.workspace),
                                "stderr": str(folder / "server.stderr"), "calls": calls}))
    quoted = [shlex.quote(str(part)) for part in (node, TS_CLIENT, plan, report, errors)]
    line = "!shell {} {} < {} > {} 2> {}".format(*quoted)
    run = await crew.delegate(conv, f"{line}\n!say ran", name=name)
    assert run["status"] == "completed" and report.exists(), (run, _tail(errors), _tail(folder / "server.stderr"))
    return dict(json.loads(report.read_text()))


def run_python_client(server: StdioServer, calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The same report from the ``mcp`` SDK's ``ClientSession`` over ``stdio_client``."""
    import asyncio

    import anyio
    import mcp.client.stdio
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for
    from mcp import ClientSession, StdioServerParameters, stdio_client

    def as_json(model: Any) -> dict[str, Any]:
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def main() -> dict[str, Any]:
        params = StdioServerParameters(command=server.argv[0], args=server.argv[1:], env=server.env,
                                       cwd=str(server.cwd))
        report: dict[str, Any] = {"tools": [], "schemaProblems": [], "calls": []}
        with server.stderr.open("a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                with anyio.fail_after(HANDSHAKE_TIMEOUT_SECS):
                    await session.initialize()
                tools = (await session.list_tools()).tools
                report["tools"] = [as_json(tool) for tool in tools]
                for tool in tools:  # the check ClientSession runs before it validates an output
                    for which, schema in (("inputSchema", tool.input_schema), ("outputSchema", tool.output_schema)):
                        if schema is None:
                            continue
                        try:
                            validator_for(schema).check_schema(schema)
                        except SchemaError as exc:
                            report["schemaProblems"].append({"tool": tool.name, "schema": which, "error": str(exc)})
                for call in calls:
                    try:
                        result = await session.call_tool(call["name"], resolve_refs(call["arguments"], report))
                    except Exception as exc:  # noqa: BLE001 - a rejected result is what the test looks for
                        report["calls"].append({"name": call["name"], "thrown": {"code": getattr(
                            getattr(exc, "error", None), "code", None), "message": str(exc)}})
                    else:
                        report["calls"].append({"name": call["name"], "result": as_json(result)})
        return report

    previous = mcp.client.stdio.PROCESS_TERMINATION_TIMEOUT
    mcp.client.stdio.PROCESS_TERMINATION_TIMEOUT = CLIENT_CLOSE_GRACE_SECS
    try:
        return asyncio.run(asyncio.wait_for(main(), RUN_TIMEOUT_SECS))
    finally:
        mcp.client.stdio.PROCESS_TERMINATION_TIMEOUT = previous


def resolve_refs(value: Any, report: dict[str, Any]) -> Any:
    """``value`` with every ``{"$ref": [index, *path]}`` replaced by that earlier call's result at ``path``."""
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            index, *path = value["$ref"]
            found: Any = report["calls"][index].get("result", {})
            for key in path:
                found = found[key]
            return found
        return {key: resolve_refs(item, report) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_refs(item, report) for item in value]
    return value


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


# -- reading a report ------------------------------------------------------------------------------
def call_result(report: dict[str, Any], index: int) -> dict[str, Any]:
    """The ``index``-th call's result; fails with the client's own words if the client rejected it."""
    call = report["calls"][index]
    assert "thrown" not in call, f"the client rejected the result of {call['name']}: {call['thrown']['message']}"
    return call["result"]


def text_of(result: dict[str, Any]) -> str:
    return "".join(block["text"] for block in result["content"] if block["type"] == "text")


def assert_refused(report: dict[str, Any], index: int, code: str) -> str:
    """The ``index``-th call was refused as a tool error with ``code`` (``error[<code>]: …``, no structured
    content), read as such by the client; its text."""
    result = call_result(report, index)
    text = text_of(result)
    assert result["isError"] is True and "structuredContent" not in result, result
    assert text.startswith(f"error[{code}]: ") and len(text) > len(f"error[{code}]: "), text
    return text
