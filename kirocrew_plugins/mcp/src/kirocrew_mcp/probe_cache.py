"""Probe results remembered between page loads, and probing many servers at once.

Stable API:

- ``ProbeCache(ttl=PROBE_TTL_SECS, clock=time.monotonic)`` with
  ``get(name, spec) -> ProbeResult | None`` (None: never probed under this
  spec; ``outdated`` once older than ``ttl``, tools kept), ``put(name, spec,
  result) -> ProbeResult`` (what was stored: a failed probe keeps the last
  good tools), ``is_probing(name)``, ``forget(name)``, ``clear()``.
- ``default_cache()``: the process-wide cache the gateway and discovery share.
- ``probe_identity(spec, *, resolver=None) -> str``: the key a result is stored
  under; pass one ``CommandResolver()`` when computing many in one pass.
- ``probe_all(servers, *, concurrency=PROBE_MAX_CONCURRENCY, cache=None,
  timeout=None) -> list[tuple[str, ProbeResult]]`` and ``probe_all_async``:
  ``servers`` is a mapping or pairs of name → ``mcpServers`` entry; results come
  back in input order. A muted entry is answered ``disabled`` and never spawned.
- ``stop_probes(grace=STOP_GRACE_SECS)``: end every probe running on this event
  loop (a stopping gateway): each is cancelled, so its server is torn down; one
  still closing after ``grace`` seconds is cancelled again, which kills its
  process group. The callers of a stopped probe get an ``error`` row, not stored.

In memory, not on disk: the gateway is long-lived and holds it, a CLI run
probes afresh anyway, and a file would make discovery (which must never write)
a writer, while results older than the TTL are worth little after a restart.

Keyed on external signatures only: the launch-relevant part of the spec
(``command``, ``args``, ``env``, ``url``, ``headers``, ``type``) plus where the
command resolves right now. So an edited entry reads as never probed, and a
binary that appears (or moves) invalidates the row without waiting out the TTL;
toggling ``disabled`` or editing ``autoApprove`` keeps the result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kirocrew_mcp.probe import (
    STATUS_DISABLED,
    STATUS_ERROR,
    STATUS_NEEDS_AUTH,
    STATUS_OUTDATED,
    ProbeResult,
    is_muted,
    is_remote,
    probe_server_async,
    probe_timeout,
    prune_unresolvable,
)

log = logging.getLogger(__name__)

PROBE_TTL_SECS = 1800.0
PROBE_MAX_CONCURRENCY = 5
#: How long a stopping gateway lets its probes close their servers before killing them: a
#: gateway stopped by SIGTERM has seconds before its supervisor's SIGKILL, and a child still
#: being closed politely then outlives it.
STOP_GRACE_SECS = 0.5
STOPPED_ERROR = "probe stopped: the gateway is stopping"
_LAUNCH_KEYS = ("command", "args", "env", "url", "headers", "type")

ProbeTargets = Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]]


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def spec_signature(spec: Mapping[str, Any]) -> str:
    """A digest of what launches or reaches the server (never kept in clear: env holds secrets)."""
    return _digest({key: spec.get(key) for key in _LAUNCH_KEYS if key in spec})


class CommandResolver:
    """:func:`kirocrew_mcp.resolve.resolve_command` memoized for one pass over many rows.

    Discovery builds an identity per row; 500 rows share a handful of commands,
    and each fresh resolution stats every search folder.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str | None], str | None] = {}

    def __call__(self, spec: Mapping[str, Any]) -> str | None:
        from kirocrew_mcp.resolve import resolve_command

        command = spec.get("command")
        if not isinstance(command, str):
            return None
        env = spec.get("env")
        env_path = env.get("PATH") if isinstance(env, dict) else None
        key = (command, env_path if isinstance(env_path, str) else None)
        if key not in self._memo:
            self._memo[key] = resolve_command(key[0], key[1])
        return self._memo[key]


def probe_identity(spec: Mapping[str, Any], *, resolver: CommandResolver | None = None) -> str:
    """The cache key for ``spec``: its launch signature and where its command resolves now."""
    resolution = None if is_remote(spec) else (resolver or CommandResolver())(spec)
    return _digest([spec_signature(spec), resolution])


@dataclass(frozen=True)
class _Entry:
    identity: str
    signature: str
    result: ProbeResult
    stored_at: float


class ProbeCache:
    """Probe results by server name, valid while the server's identity is unchanged."""

    def __init__(self, *, ttl: float = PROBE_TTL_SECS, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._entries: dict[str, _Entry] = {}
        self._probing: set[str] = set()
        self._lock = threading.Lock()

    def get(self, name: str, spec: Mapping[str, Any], *,
            resolver: CommandResolver | None = None) -> ProbeResult | None:
        """The result for ``name`` probed under this very ``spec``; ``outdated`` past the TTL."""
        identity = probe_identity(spec, resolver=resolver)
        with self._lock:
            entry = self._entries.get(name)
        if entry is None or entry.identity != identity:
            return None
        if self.clock() - entry.stored_at > self.ttl:
            return dataclasses.replace(entry.result, status=STATUS_OUTDATED)
        return entry.result

    def put(self, name: str, spec: Mapping[str, Any], result: ProbeResult) -> ProbeResult:
        """Remember ``result``; return what is stored. ``disabled`` is never stored.

        A failed probe (``error``/``needs_auth``) of the same spec keeps what the
        last good one learned (tools, annotations, server info) so one bad probe
        does not blank the row; its own status and error are what it says.
        """
        if result.status == STATUS_DISABLED:
            return result
        identity, signature = probe_identity(spec), spec_signature(spec)
        with self._lock:
            previous = self._entries.get(name)
            if (result.status in (STATUS_ERROR, STATUS_NEEDS_AUTH) and previous is not None
                    and previous.signature == signature and previous.result.tools):
                prior = previous.result
                result = dataclasses.replace(
                    result, tools=prior.tools, tool_annotations=prior.tool_annotations,
                    capabilities=prior.capabilities, protocol_version=prior.protocol_version,
                    server_info=prior.server_info, probed_at=prior.probed_at,
                )
            self._entries[name] = _Entry(identity, signature, result, self.clock())
        return result

    def last_tools(self, name: str) -> tuple[str, ...]:
        """The tools last seen for ``name``, whatever its spec now (shown on a disabled row)."""
        with self._lock:
            entry = self._entries.get(name)
        return entry.result.tools if entry is not None else ()

    def is_probing(self, name: str) -> bool:
        with self._lock:
            return name in self._probing

    def _set_probing(self, name: str, on: bool) -> None:
        with self._lock:
            (self._probing.add if on else self._probing.discard)(name)

    def forget(self, name: str) -> None:
        with self._lock:
            self._entries.pop(name, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._probing.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


_default_cache = ProbeCache()
#: Every probe running in this process (each tears its own child down when it ends or is cancelled).
_running: set[asyncio.Task[ProbeResult]] = set()


def default_cache() -> ProbeCache:
    """The process-wide cache (the gateway's; a CLI process starts empty)."""
    return _default_cache


def _pairs(servers: ProbeTargets) -> list[tuple[str, Mapping[str, Any]]]:
    if isinstance(servers, Mapping):
        return list(servers.items())
    return [(name, spec) for name, spec in servers]


async def probe_all_async(servers: ProbeTargets, *, concurrency: int = PROBE_MAX_CONCURRENCY,
                          cache: ProbeCache | None = None,
                          timeout: float | None = None) -> list[tuple[str, ProbeResult]]:
    """Probe every server, at most ``concurrency`` at a time; store each result in ``cache``."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    store = default_cache() if cache is None else cache
    targets = _pairs(servers)
    limit = probe_timeout() if timeout is None else timeout
    prune_unresolvable(
        (name, spec["command"]) for name, spec in targets
        if isinstance(spec, Mapping) and isinstance(spec.get("command"), str)
    )
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str, spec: Mapping[str, Any]) -> ProbeResult:
        if is_muted(spec):
            # Never spawned; the row still shows what the server offered before it was switched off.
            return ProbeResult(STATUS_DISABLED, tools=store.last_tools(name))
        async with gate:
            store._set_probing(name, True)
            probe = asyncio.ensure_future(probe_server_async(name, spec, timeout=limit))
            _running.add(probe)
            probe.add_done_callback(_running.discard)
            try:
                result = await probe
            except asyncio.CancelledError:
                if not probe.cancelled() or _cancelling():
                    raise  # our caller was cancelled (the probe with it), not just the probe
                return ProbeResult(STATUS_ERROR, error=STOPPED_ERROR, probed_at=time.time())
            except Exception as exc:  # one broken probe must not sink the others
                log.exception("MCP probe [%s] crashed", name)
                result = ProbeResult(STATUS_ERROR, error=f"probe crashed: {type(exc).__name__}",
                                     probed_at=time.time())
            finally:
                store._set_probing(name, False)
        return store.put(name, spec, result)

    results = await asyncio.gather(*(one(name, spec) for name, spec in targets))
    return [(name, result) for (name, _), result in zip(targets, results, strict=True)]


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def stop_probes(grace: float = STOP_GRACE_SECS) -> None:
    """End every probe running on this event loop and wait until their children are gone (see module doc)."""
    loop = asyncio.get_running_loop()
    probes = [task for task in _running if task.get_loop() is loop and not task.done()]
    if not probes:
        return
    for task in probes:
        task.cancel()
    _, closing = await asyncio.wait(probes, timeout=grace)
    for task in closing:
        task.cancel()  # proc.terminate_async, cancelled mid-teardown, kills the group
    await asyncio.wait(probes)


def probe_all(servers: ProbeTargets, *, concurrency: int = PROBE_MAX_CONCURRENCY,
              cache: ProbeCache | None = None, timeout: float | None = None) -> list[tuple[str, ProbeResult]]:
    """:func:`probe_all_async` from synchronous code (the CLI)."""
    return asyncio.run(probe_all_async(servers, concurrency=concurrency, cache=cache, timeout=timeout))

