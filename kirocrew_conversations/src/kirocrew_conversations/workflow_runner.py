"""The workflow process: runs one checked script with restricted builtins and talks to the host over one socket.

The host starts this file (``python -I -S workflow_runner.py SOCKET``) under the ``read_only``
authority's launcher, so the standard library is all it may import, and this module imports
nothing of kirocrew. It connects to the per-run socket the host listens on, proves it is the
process the host started with the token the host put in its environment (then drops it), and
receives the script and its arguments. Every ``ctx`` call is one JSON line to the host and one
back; the host decides everything (ceilings, which agent runs, what it returns), so nothing this
process says can widen what the run may do.

Wire (one JSON object per line): to the host ``hello {token}``, ``agent {id, prompt, ...}``,
``nudge {id, message, idle_secs, max_cycles}``, ``log {message}``, ``done {result}``, ``raised
{error, line}``; from the host ``start {source, args, memory_bytes, cpu_secs}`` and ``reply {id,
value}`` (``reply {id, error}`` for a call the host refused: it raises ``ValueError`` in the script).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

TOKEN_ENV = "KIROCREW_WORKFLOW_TOKEN"
SCRIPT_NAME = "<workflow>"
LINE_LIMIT = 16 * 1024 * 1024
SAFE_BUILTIN_NAMES = (
    "abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter", "float", "frozenset",
    "int", "isinstance", "iter", "len", "list", "map", "max", "min", "next", "ord", "pow", "range", "repr",
    "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip", "True", "False", "None",
    "Exception", "ArithmeticError", "AssertionError", "IndexError", "KeyError", "LookupError",
    "NotImplementedError", "RuntimeError", "StopIteration", "TypeError", "ValueError", "ZeroDivisionError",
)
SAFE_BUILTINS = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES}


class Channel:
    """The socket to the host: requests with ids, replies matched back to them."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._next = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}

    def send(self, message: dict[str, Any]) -> None:
        self.writer.write(json.dumps(message, default=str).encode("utf-8") + b"\n")

    async def receive(self) -> dict[str, Any]:
        line = await self.reader.readline()
        if not line:
            raise SystemExit(3)  # the host went away: nothing left to do
        message: dict[str, Any] = json.loads(line)
        return message

    async def request(self, op: str, **fields: Any) -> Any:
        self._next += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = future
        self.send({"op": op, "id": self._next, **fields})
        await self.writer.drain()
        return await future

    async def dispatch(self) -> None:
        while True:
            message = await self.receive()
            future = self._waiting.pop(int(message.get("id", 0)), None)
            if future is None or future.done():
                continue
            if "error" in message:
                future.set_exception(ValueError(str(message["error"])))
            else:
                future.set_result(message.get("value"))


class Context:
    """What a workflow sees as ``ctx``: its arguments and the calls the host serves."""

    def __init__(self, channel: Channel, args: dict[str, Any]) -> None:
        self._channel = channel
        self.args = args

    async def agent(self, prompt: str, label: str | None = None, phase: str | None = None,
                    schema: dict[str, Any] | None = None, agent: str | None = None,
                    model: str | None = None) -> Any:
        """A child conversation's reply: its text, its JSON when ``schema`` is given, or None when it failed."""
        return await self._channel.request("agent", prompt=prompt, label=label, phase=phase, schema=schema,
                                           agent=agent, model=model)

    async def parallel(self, calls: list[Awaitable[Any]]) -> list[Any]:
        """Every call at once; returns when all have (a barrier), results in order."""
        return list(await asyncio.gather(*calls))

    async def pipeline(self, items: list[Any], *stages: Callable[[Any], Awaitable[Any]]) -> list[Any]:
        """Each item through every stage in turn, items independently (no barrier between stages)."""
        async def through(item: Any) -> Any:
            for stage in stages:
                item = await stage(item)
            return item

        return list(await asyncio.gather(*(through(item) for item in items)))

    async def nudge(self, message: str, idle_secs: int | None = None, max_cycles: int | None = None) -> bool:
        """Arm the owning session's monitor loop (``monitor_start``'s bounds and defaults, which the host keeps):
        ``message`` is queued to it each time it has stayed idle ``idle_secs``, at most ``max_cycles`` times.
        True when armed; False when there is no session to nudge (the person's run) or loops are off; arguments
        out of bounds raise ValueError."""
        return bool(await self._channel.request("nudge", message=message, idle_secs=idle_secs,
                                                max_cycles=max_cycles))

    def log(self, message: Any) -> None:
        self._channel.send({"op": "log", "message": str(message)})

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(float(seconds))


def _limit(start: dict[str, Any]) -> None:
    """The host's bounds on this process, set before the script runs (hard limits: it cannot raise them):
    memory (a ``"a" * 10**10`` is a MemoryError, not the machine's memory) and CPU time (a spinning loop
    is killed by the kernel even if the host's wall clock were late)."""
    import resource

    memory, cpu = int(start.get("memory_bytes") or 0), int(start.get("cpu_secs") or 0)
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if cpu:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))


def _script_line(exc: BaseException) -> int:
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == SCRIPT_NAME]
    return (lines[-1] or 0) if lines else 0


async def _main(path: str, token: str) -> None:
    reader, writer = await asyncio.open_unix_connection(path, limit=LINE_LIMIT)
    channel = Channel(reader, writer)
    channel.send({"op": "hello", "token": token})
    start = await channel.receive()
    _limit(start)
    namespace: dict[str, Any] = {"__builtins__": SAFE_BUILTINS}
    dispatcher = asyncio.ensure_future(channel.dispatch())
    try:
        exec(compile(start["source"], SCRIPT_NAME, "exec"), namespace)  # the point of this process
        result = await namespace["workflow"](Context(channel, dict(start.get("args") or {})))
        try:
            json.dumps(result)
        except (TypeError, ValueError):
            result = repr(result)
        channel.send({"op": "done", "result": result})
    except Exception as exc:  # noqa: BLE001 - the script raised: the host records it as the run's failure
        channel.send({"op": "raised", "error": f"{type(exc).__name__}: {exc}"[:2000], "line": _script_line(exc)})
    dispatcher.cancel()
    await writer.drain()
    writer.close()


def main() -> None:
    token = os.environ.pop(TOKEN_ENV, "")
    sys.stdout = sys.stderr  # nothing the script prints could pass for a message
    asyncio.run(_main(sys.argv[1], token))


if __name__ == "__main__":
    main()
