"""Probing one MCP server: does it start, finish the handshake and list its tools?

Stable API:

- ``probe_server(name, spec, *, timeout=None) -> ProbeResult`` and its
  coroutine twin ``probe_server_async``. ``spec`` is an ``mcpServers`` entry.
  A muted entry (``disabled`` present and not ``false``) is answered
  ``disabled`` without spawning or connecting anything; an entry with a
  ``command`` is probed over stdio, one with only a ``url`` over streamable
  HTTP (:mod:`kirocrew_mcp.probe_http`).
- ``ProbeResult``: ``status`` (one of :data:`STATUSES`), ``tools`` (names),
  ``error`` (redacted, never a header or credential value), and what the
  handshake told us (``protocol_version``, ``server_info``, ``capabilities``,
  ``tool_annotations``, ``auth_challenge``), ``probed_at`` (wall clock).
- ``probe_timeout()``: ``dashboard.mcp_probe_timeout_secs`` from config.
- ``reset_unresolvable_warnings()`` / ``prune_unresolvable(live)``: the
  warn-once ledger for commands that do not resolve.
- ``never_start_a_host(on)``: while on, every stdio probe's child gets
  ``KIROCREW_NO_HOST_START=1``, so a kirocrew relay it runs uses the running host
  and never starts one (a gateway that is the host turns it on: a probe outliving
  it must not start a new host).
- Re-exported from :mod:`kirocrew_mcp.handshake`, which both transports
  share: the result and failure types, the handshake, redaction and
  placeholder expansion.

Why our own wire and not the mcp SDK's client: the SDK's stdio client spawns
the child itself (not in its own process group, not with our explicit
environment, not torn down by :mod:`kirocrew_core.proc`), and reports banner
lines as errors; its HTTP client runs on httpx2 and turns a 401 into an
exception we would have to pattern-match back into ``needs_auth``, with the
URL and headers in its messages. Three JSON-RPC calls are little code, and
owning them gives exact control of the spawn, the status mapping and what an
error may contain.

A stdio probe runs the server as a session would: kiro-cli hands its MCP
servers our whole environment plus the spec's ``env`` (``${VAR}`` expanded),
with ``PATH`` as :func:`kirocrew_mcp.resolve.search_dirs` orders it, so the
probe gives the child nothing a session would not. Commands resolve with
:func:`kirocrew_mcp.resolve.resolve_command`, the one the rebuild uses, so a
server never probes healthy while the rebuild drops it. Teardown is
:func:`kirocrew_core.proc.terminate_async`; tests shrink its constants.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kirocrew_core import proc

from kirocrew_mcp.handshake import (
    CLIENT_INFO,
    HANDSHAKE_PROTOCOL_VERSIONS,
    MAX_ERROR_CHARS,
    MAX_TOOL_PAGES,
    MIN_REDACTED_CHARS,
    PROBE_PROTOCOL_VERSION,
    REDACTED,
    STATUS_DISABLED,
    STATUS_ERROR,
    STATUS_NEEDS_AUTH,
    STATUS_OK,
    STATUS_OUTDATED,
    STATUS_PROBING,
    STATUS_UNKNOWN,
    STATUSES,
    Handshake,
    ProbeFailure,
    ProbeResult,
    expand_placeholders,
    failed,
    fallback_protocol_version,
    finish_error,
    has_placeholder,
    initialize_request,
    is_credential_name,
    is_muted,
    is_remote,
    redact,
    rpc_error_text,
    run_handshake,
)
from kirocrew_mcp.probe_http import probe_remote

log = logging.getLogger(__name__)

# Used when config.toml cannot be read: a broken config is doctor's finding, not a reason to hang.
DEFAULT_PROBE_TIMEOUT_SECS = 15.0
# Non-JSON stdout lines (npm wrappers, dotenv notices) skipped before giving up on a server.
MAX_BANNER_LINES = 50
# What an error may carry of the child's stderr.
STDERR_TAIL_CHARS = 500

# -- timeout ------------------------------------------------------------------


def probe_timeout() -> float:
    """``dashboard.mcp_probe_timeout_secs``, or the default when config.toml cannot be used."""
    from kirocrew_core.config import load_config
    from kirocrew_core.errors import KirocrewError

    try:
        return float(load_config().get("dashboard.mcp_probe_timeout_secs"))
    except KirocrewError as exc:
        log.warning("MCP probe: config unusable (%s); using a %gs timeout", exc, DEFAULT_PROBE_TIMEOUT_SECS)
        return DEFAULT_PROBE_TIMEOUT_SECS


# -- the warn-once ledger for commands that do not resolve ----------------------

# A missing binary is a stable fact: warning about it on every probe cycle would bury the
# failures that are news (a server that newly times out). So warn once per (server, command),
# forget the key when the command resolves (a later outage warns again), and prune keys the
# config no longer names so the ledger stays bounded by the config's size.
_unresolvable_warned: set[tuple[str, str]] = set()
_ledger_lock = threading.Lock()


def _warn_unresolvable(name: str, command: str, searched: list[str] | None) -> None:
    key = (name, command)
    with _ledger_lock:
        first = key not in _unresolvable_warned
        _unresolvable_warned.add(key)
    if not first:
        log.debug("MCP probe [%s]: command still not found: %s", name, command)
        return
    where = f" in {os.pathsep.join(searched)}" if searched else ""
    log.warning("MCP probe [%s]: command not found: %s%s", name, command, where)


def _clear_unresolvable(name: str, command: str) -> None:
    with _ledger_lock:
        _unresolvable_warned.discard((name, command))


def prune_unresolvable(live: Iterable[tuple[str, str]]) -> None:
    """Forget ledger keys the current config no longer names."""
    keep = set(live)
    with _ledger_lock:
        _unresolvable_warned.intersection_update(keep)


def reset_unresolvable_warnings() -> None:
    """Forget every warned command (tests; production relies on clear and prune)."""
    with _ledger_lock:
        _unresolvable_warned.clear()


# -- entry points ----------------------------------------------------------------


def probe_server(name: str, spec: Mapping[str, Any], *, timeout: float | None = None) -> ProbeResult:
    """Probe one server from synchronous code (the CLI). Not for use inside a running event loop."""
    return asyncio.run(probe_server_async(name, spec, timeout=timeout))


async def probe_server_async(name: str, spec: Mapping[str, Any], *,
                             timeout: float | None = None) -> ProbeResult:
    """Probe one server: ``disabled`` without touching it, else stdio or streamable HTTP."""
    if not isinstance(spec, Mapping):
        return failed("the entry is not a JSON object")
    if is_muted(spec):
        # Consent first: a server the user switched off is never spawned or connected to.
        return ProbeResult(STATUS_DISABLED)
    limit = probe_timeout() if timeout is None else float(timeout)
    if is_remote(spec):
        return await probe_remote(name, spec, timeout=limit)
    if "command" not in spec:
        return failed("no command or url")
    return await _probe_stdio(name, spec, limit)


# -- stdio ---------------------------------------------------------------------


def _spec_args(spec: Mapping[str, Any]) -> list[str]:
    args = spec.get("args", [])
    if args is None:
        return []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ProbeFailure("args must be a list of strings")
    return list(args)


def _spec_env(spec: Mapping[str, Any]) -> dict[str, str]:
    env = spec.get("env", {})
    if env is None:
        return {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ProbeFailure("env must map names to strings")
    return dict(env)


def _child_env(declared: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment a session would give the server; and the declared values that are secrets.

    Expansion reads our whole environment: the child inherits all of it anyway,
    so a reference reveals nothing to it that it does not already have.
    """
    from kirocrew_mcp.resolve import search_dirs

    env = dict(os.environ)
    secrets: list[str] = []
    for key, value in declared.items():
        expanded, substituted = expand_placeholders(value, os.environ)
        env[key] = expanded
        if is_credential_name(key):
            secrets.append(expanded)
            secrets.extend(substituted)
    env["PATH"] = os.pathsep.join(search_dirs(declared.get("PATH")))
    if _no_host_start:
        from kirocrew_core.host.client import NO_HOST_START_ENV

        env[NO_HOST_START_ENV] = "1"
    return env, secrets


_no_host_start = False


def never_start_a_host(on: bool) -> None:
    """Whether stdio probes' children run with ``KIROCREW_NO_HOST_START=1`` (see the module doc)."""
    global _no_host_start
    _no_host_start = on


#: How long a server whose pipe closed mid-handshake gets to finish exiting, so its exit can be told apart
#: from a server that only closed a stream (the wait ends as soon as it exits; it bounds a live one).
PIPE_CLOSED_EXIT_WAIT_SECS = 0.5


def exit_words(returncode: int) -> str:
    """``exit code N``, or ``killed by signal N (SIGNAME)`` for a negative return code."""
    import signal

    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = f" ({signal.Signals(-returncode).name})"
    except ValueError:
        name = ""
    return f"killed by signal {-returncode}{name}"


async def _exited_on_its_own(process: asyncio.subprocess.Process) -> bool:
    """Whether ``process`` has exited, waiting at most :data:`PIPE_CLOSED_EXIT_WAIT_SECS` for it."""
    if process.returncode is None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(process.wait()), PIPE_CLOSED_EXIT_WAIT_SECS)
    return process.returncode is not None


def _unresolved_message(command: str, searched: list[str] | None) -> str:
    if searched is None:
        return f"command not found: {command} (not an executable file; no search path applies)"
    return f"command not found: {command} — not in any of the {len(searched)} directories searched"


class _StdioChannel:
    """Newline-delimited JSON-RPC over a child's pipes, tolerant of what real servers print."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.banner: list[str] = []
        self._next_id = 0

    async def send(self, message: Mapping[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        try:
            await self.process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ProbeFailure(f"{message.get('method', 'write')}: the server closed its stdin",
                               pipe_closed=True) from exc

    async def request(self, method: str, params: Mapping[str, Any], *,
                      message: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        request_id = self._next_id
        body: dict[str, Any] = dict(message) if message is not None else {"jsonrpc": "2.0", "method": method,
                                                                          "params": dict(params)}
        body["id"] = request_id
        await self.send(body)
        return await self._reply(method, request_id)

    async def _reply(self, method: str, request_id: int) -> dict[str, Any]:
        assert self.process.stdout is not None
        while True:
            try:
                line = await self.process.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError) as exc:
                raise ProbeFailure(f"{method}: a stdout line longer than {proc.STREAM_LIMIT} bytes") from exc
            if not line:
                raise ProbeFailure(f"{method}: the server closed stdout before answering", pipe_closed=True)
            text = line.decode("utf-8", "replace").strip()
            if not text:
                continue
            try:
                message = json.loads(text)
            except json.JSONDecodeError:
                # A banner (npm notice, dotenv line): skipped, but a flood of them is not a server.
                self.banner.append(text[:200])
                if len(self.banner) > MAX_BANNER_LINES:
                    raise ProbeFailure(
                        f"{method}: no JSON-RPC reply after {MAX_BANNER_LINES} non-JSON stdout lines "
                        f"(first: {self.banner[0]!r})"
                    ) from None
                continue
            if not isinstance(message, dict):
                continue
            if "method" in message:
                if "id" in message:  # a request from the server (ping, roots/list): answer it
                    await self._answer(message)
                continue  # a notification (logging, progress)
            if message.get("id") == request_id:
                return message

    async def _answer(self, request: Mapping[str, Any]) -> None:
        if request.get("method") == "ping":
            await self.send({"jsonrpc": "2.0", "id": request["id"], "result": {}})
        else:
            await self.send({"jsonrpc": "2.0", "id": request["id"],
                             "error": {"code": -32601, "message": "method not found"}})


async def _probe_stdio(name: str, spec: Mapping[str, Any], timeout: float) -> ProbeResult:
    from kirocrew_core import home
    from kirocrew_core.errors import KirocrewError
    from kirocrew_mcp.resolve import is_directory_qualified, resolve_command, search_dirs

    command = spec.get("command")
    if not isinstance(command, str) or not command.strip():
        return failed("command must be a non-empty string")
    try:
        args = _spec_args(spec)
        declared = _spec_env(spec)
    except ProbeFailure as exc:
        return failed(str(exc))
    env_path = declared.get("PATH")
    resolved = resolve_command(command, env_path)
    if resolved is None:
        searched = None if is_directory_qualified(command.strip()) else search_dirs(env_path)
        _warn_unresolvable(name, command, searched)
        return failed(_unresolved_message(command, searched))
    _clear_unresolvable(name, command)

    env, secrets = _child_env(declared)
    cwd = home.user_home()
    tail: collections.deque[str] = collections.deque(maxlen=50)
    try:
        process = await proc.spawn_async([resolved, *args], env=env,
                                         cwd=cwd if cwd.is_dir() else None)
    except KirocrewError as exc:
        return failed(finish_error(exc.message, secrets))
    proc.drain_stderr_async(process, tail.append)
    channel = _StdioChannel(process)
    stage = {"method": "initialize"}

    async def request(method: str, params: Mapping[str, Any], *,
                      message: Mapping[str, Any] | None = None) -> dict[str, Any]:
        stage["method"] = method
        return await channel.request(method, params, message=message)

    async def notify(method: str, _version: str) -> None:
        await channel.send({"jsonrpc": "2.0", "method": method})

    failure: ProbeFailure | None = None
    shake: Handshake | None = None
    exited = False
    try:
        async with asyncio.timeout(timeout):
            shake = await run_handshake(request, notify)
    except TimeoutError:
        failure = ProbeFailure(f"{stage['method']}: timed out after {timeout:g}s")
    except ProbeFailure as exc:
        failure = exc
        # A closed pipe is how an exit looks from here; tell the two apart before teardown ends it anyway.
        exited = exc.pipe_closed and await _exited_on_its_own(process)
    finally:
        # Also on cancellation: the whole group goes, within proc's bounded budget.
        teardown = await proc.terminate_async(process, reason=f"mcp probe {name}")
    if shake is not None and failure is None:
        return shake.result()
    assert failure is not None
    message = str(failure)
    if exited and process.returncode is not None:
        # Not "closed its stdin": the server left on its own, and how is the news.
        message = (f"{stage['method']}: the server exited during the handshake, before answering "
                   f"({exit_words(process.returncode)})")
    elif failure.pipe_closed and teardown.step is proc.Step.EXITED_ON_EOF and teardown.returncode is not None:
        message += f" (then exited when its stdin closed: {exit_words(teardown.returncode)})"
    stderr = "\n".join(tail).strip()
    if stderr:
        message += f"; stderr: {stderr[-STDERR_TAIL_CHARS:]}"
    message = finish_error(message, secrets)
    log.warning("MCP probe failed [%s]: %s", name, message)
    return failed(message)


__all__ = [
    "CLIENT_INFO", "DEFAULT_PROBE_TIMEOUT_SECS", "HANDSHAKE_PROTOCOL_VERSIONS", "MAX_BANNER_LINES",
    "MAX_ERROR_CHARS", "MAX_TOOL_PAGES", "MIN_REDACTED_CHARS", "PROBE_PROTOCOL_VERSION", "REDACTED",
    "STATUSES", "STATUS_DISABLED", "STATUS_ERROR", "STATUS_NEEDS_AUTH", "STATUS_OK", "STATUS_OUTDATED",
    "STATUS_PROBING", "STATUS_UNKNOWN", "STDERR_TAIL_CHARS", "Handshake", "ProbeFailure", "ProbeResult",
    "expand_placeholders", "failed", "fallback_protocol_version", "finish_error", "has_placeholder",
    "initialize_request", "is_credential_name", "is_muted", "is_remote", "never_start_a_host", "probe_server",
    "probe_server_async",
    "probe_timeout", "prune_unresolvable", "redact", "reset_unresolvable_warnings", "rpc_error_text",
    "run_handshake",
]
