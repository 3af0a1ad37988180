"""The MCP HTTP API (owner-authenticated by the gateway), for any owner's HTTP client and the
dashboard's MCP servers page (:mod:`kirocrew_mcp.page`).

=========================  ==========================================================
``GET /api/mcp``           every server (discovery rows with cached probe results),
                           the scopes, and the sources that could not be read; starts
                           one background probe of the rows never probed yet
``POST /api/mcp/probe``    probe ``{"name": …}`` or every server (``{}``/``{"all": true}``)
                           now and answer the fresh rows
``GET /api/mcp/probe``     every row with the gateway's cached probe results; starts
                           nothing (what ``kirocrew doctor`` reads from a running host)
``GET /api/mcp/scopes``    the scopes an Apply may name, with each file's state
``POST /api/mcp/apply``    a change list (:mod:`kirocrew_mcp.apply`), then one rebuild
``POST /api/mcp/servers``  declare a new (custom) server (:mod:`kirocrew_mcp.add`),
                           then one rebuild
``POST /api/mcp/cleanup``  remove kirocrew's own servers left in shared globals
                           (:mod:`kirocrew_mcp.cleanup`, what ``kirocrew cli-setup`` does)
``POST /api/sessions/restart``  render the agent file, then ask every ``restart_sessions()``
                           implementation to drain pre-spawned kiro-cli processes
=========================  ==========================================================

Errors are the gateway's JSON ``{"error", "code"}``
(:mod:`kirocrew_core.gateway.errors`); a body that is not a JSON object or larger
than :data:`MAX_BODY_BYTES` is 400 before anything is read or written. File work
and probes never block the event loop (``asyncio.to_thread``, async probes).

Starlette is imported inside functions: ``kirocrew_mcp.plugin`` imports this
module only when the gateway builds its routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.gateway.body import read_json_object
from kirocrew_core.gateway.errors import error_response

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import BaseRoute

    from kirocrew_core.plugins import KirocrewPluginManager

    from kirocrew_mcp.discovery import ServerRow
    from kirocrew_mcp.probe_cache import ProbeCache
    from kirocrew_mcp.sync import SyncOutcome

log = logging.getLogger(__name__)

#: A 200-change Apply with tool overrides is a few tens of KiB; anything this big is not one.
MAX_BODY_BYTES = 1024 * 1024
#: A new server's spec: 64 args and 64 env values of 4 KiB fit; anything bigger is not one.
MAX_ADD_BODY_BYTES = 600 * 1024
_REASON = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
DEFAULT_RESTART_REASON = "owner_request"


# -- the background re-probe ----------------------------------------------------------


class BackgroundProbe:
    """At most one background probe per gateway, so page loads can never pile up probes."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.names: frozenset[str] = frozenset()

    @property
    def in_flight(self) -> bool:
        return self.task is not None and not self.task.done()

    def start(self, rows: Sequence[ServerRow], cache: ProbeCache) -> bool:
        """Probe ``rows`` in the background unless a probe is already running; True if started."""
        if self.in_flight or not rows:
            return False
        self.names = frozenset(row.name for row in rows)
        targets = [(row.name, row.probe_spec()) for row in rows]
        self.task = asyncio.get_running_loop().create_task(self._run(targets, cache), name="mcp-reprobe")
        return True

    @staticmethod
    async def _run(targets: list[tuple[str, dict[str, Any]]], cache: ProbeCache) -> None:
        from kirocrew_mcp.probe_cache import probe_all_async

        try:
            await probe_all_async(targets, cache=cache)
        except Exception:  # a page load started it; nobody awaits it, so say why it stopped
            log.exception("background MCP probe failed")

    async def stop(self) -> None:
        """Cancel a running probe and wait for it (its children are torn down as it unwinds)."""
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def background_probe(app: Starlette) -> BackgroundProbe:
    """The app's :class:`BackgroundProbe` (one per gateway app, made on first use)."""
    probe = getattr(app.state, "mcp_background_probe", None)
    if probe is None:
        probe = app.state.mcp_background_probe = BackgroundProbe()
    return probe


def startup(app: Starlette) -> None:
    """``gateway_startup``: a gateway that is the host probes relays that never start another host."""
    from kirocrew_mcp.probe import never_start_a_host

    if app.state.kirocrew.host is not None:
        never_start_a_host(True)


async def shutdown(app: Starlette) -> None:
    """``gateway_stopping`` and ``gateway_shutdown``: no probe child outlives the gateway.

    The background probe and the probes of ``POST /api/mcp/probe`` requests still open
    end now (each tears its server down), so a stop neither waits out a probe's timeout
    nor leaves a child behind when the gateway's supervisor stops waiting.
    """
    from kirocrew_mcp.probe_cache import stop_probes

    probe = getattr(app.state, "mcp_background_probe", None)
    if probe is not None:
        await probe.stop()
    await stop_probes()


# -- helpers ---------------------------------------------------------------------------


def _pm(request: Request) -> KirocrewPluginManager:
    return request.app.state.kirocrew.pm


def _cache() -> ProbeCache:
    from kirocrew_mcp.probe_cache import default_cache

    return default_cache()


def _row_dicts(rows: Sequence[ServerRow], probing: frozenset[str]) -> list[dict[str, Any]]:
    from kirocrew_mcp.probe import STATUS_PROBING, STATUS_UNKNOWN

    out = []
    for row in rows:
        data = row.as_dict()
        if row.name in probing and data["status"] == STATUS_UNKNOWN:
            data["status"] = STATUS_PROBING
        out.append(data)
    return out


def _scope_dicts(pm: KirocrewPluginManager) -> list[dict[str, Any]]:
    from kirocrew_mcp.scopes import all_scopes, read_scope_servers

    out = []
    for scope in all_scopes(pm):
        read = read_scope_servers(scope)
        out.append({
            "id": scope.id,
            "label": scope.label,
            "kind": scope.kind,
            "path": str(scope.path),
            "state": read.state.value,
            "usable": read.ok,
            "error": read.problem(),
        })
    return out


# -- endpoints -------------------------------------------------------------------------


def _stale_managed(pm: KirocrewPluginManager) -> list[dict[str, Any]]:
    """The shared globals holding kirocrew's own servers: what ``POST /api/mcp/cleanup`` would remove."""
    from kirocrew_mcp.cleanup import clean_stale_managed_mcp

    report = clean_stale_managed_mcp(pm=pm, dry_run=True)
    return [{"scope": s.scope, "label": s.label, "path": str(s.path), "names": list(s.removed)}
            for s in report.scopes if s.state == "cleaned" and s.removed]


async def listing(request: Request) -> dict[str, Any]:
    """What ``GET /api/mcp`` answers (and the MCP servers page shows); rows never probed start one background probe."""
    from kirocrew_mcp.discovery import discover
    from kirocrew_mcp.probe import STATUS_UNKNOWN

    pm, cache = _pm(request), _cache()
    found = await asyncio.to_thread(discover, pm=pm, cache=cache)
    stale = await asyncio.to_thread(_stale_managed, pm)
    probe = background_probe(request.app)
    unprobed = [row for row in found.rows if not row.disabled and row.status == STATUS_UNKNOWN]
    started = probe.start(unprobed, cache)
    probing = probe.names if probe.in_flight else frozenset()
    return {
        "servers": _row_dicts(found.rows, probing),
        "scopes": [{"id": s.id, "label": s.label, "kind": s.kind, "path": str(s.path)} for s in found.scopes],
        "problems": [p.as_dict() for p in found.problems],
        "staleManaged": stale,
        "backgroundProbe": {"started": started, "inFlight": probe.in_flight},
    }


async def list_mcp(request: Request) -> JSONResponse:
    """``GET /api/mcp``: rows, scopes and problems (:func:`listing`)."""
    from starlette.responses import JSONResponse

    return JSONResponse(await listing(request))


async def probe_mcp(request: Request) -> JSONResponse:
    """``POST /api/mcp/probe``: probe one server (``{"name": …}``) or all, and answer the fresh rows."""
    from starlette.responses import JSONResponse

    from kirocrew_mcp.discovery import discover, refresh_probes_async

    name = _probe_target(await read_json_object(request, limit=MAX_BODY_BYTES, default={}))
    pm, cache = _pm(request), _cache()
    found = await asyncio.to_thread(discover, pm=pm, cache=cache)
    if name is None:
        rows = await refresh_probes_async(found.rows, pm=pm, cache=cache)
        return JSONResponse({"servers": _row_dicts(rows, frozenset())})
    row = found.row(name)
    if row is None:
        raise BadInputError(f"no MCP server named {name!r}", code="unknown_server")
    rows = await refresh_probes_async([row], pm=pm, cache=cache)
    fresh = [r for r in rows if r.name == row.name]
    return JSONResponse({"servers": _row_dicts(fresh, frozenset())})


async def probe_results(request: Request) -> JSONResponse:
    """``GET /api/mcp/probe``: every row with its cached probe result, starting no probe and no server."""
    from starlette.responses import JSONResponse

    from kirocrew_mcp.discovery import discover

    found = await asyncio.to_thread(discover, pm=_pm(request), cache=_cache())
    return JSONResponse({"servers": _row_dicts(found.rows, frozenset())})


def _probe_target(body: dict[str, Any]) -> str | None:
    """The one server a probe request names, or None for all of them."""
    if set(body) - {"name", "all"}:
        raise BadInputError('send {"name": "<server>"} or {"all": true}', code="bad_request")
    name, every = body.get("name"), body.get("all", False)
    if not isinstance(every, bool) or (name is not None and not isinstance(name, str)):
        raise BadInputError('send {"name": "<server>"} or {"all": true}', code="bad_request")
    if name is not None and every:
        raise BadInputError("name a server or ask for all, not both", code="bad_request")
    if name is None and not every and body:
        raise BadInputError('send {"name": "<server>"} or {"all": true}', code="bad_request")
    return name


async def list_scopes(request: Request) -> JSONResponse:
    """``GET /api/mcp/scopes``: every scope an Apply may name, highest priority first."""
    from starlette.responses import JSONResponse

    scopes = await asyncio.to_thread(_scope_dicts, _pm(request))
    return JSONResponse({"scopes": scopes})


async def apply_mcp(request: Request) -> JSONResponse:
    """``POST /api/mcp/apply``: the batched change list, then one rebuild (see :mod:`kirocrew_mcp.apply`)."""
    from starlette.responses import JSONResponse

    from kirocrew_mcp.apply import apply_changes

    body = await read_json_object(request, limit=MAX_BODY_BYTES, default={})
    if not body:
        raise BadInputError('send {"changes": [...]}', code="bad_changes")
    outcome = await asyncio.to_thread(apply_changes, body, pm=_pm(request), actor="owner")
    return JSONResponse(outcome.as_dict())


async def add_server(request: Request) -> JSONResponse:
    """``POST /api/mcp/servers``: declare a new server (:mod:`kirocrew_mcp.add`); a refusal names its ``field``."""
    from starlette.responses import JSONResponse

    from kirocrew_mcp import add

    body = await read_json_object(request, limit=MAX_ADD_BODY_BYTES)
    try:
        outcome = await asyncio.to_thread(add.add_server, body, pm=_pm(request), actor="owner")
    except (add.FieldError, add.ServerExistsError, add.ScopeUnusableError) as exc:
        return error_response(exc, extra={"field": exc.field})
    return JSONResponse({"name": body["name"], **outcome.as_dict()})


async def cleanup_stale_managed(request: Request) -> JSONResponse:
    """``POST /api/mcp/cleanup``: delete kirocrew's own server names from the shared globals, nothing else.

    The same narrow repair as ``kirocrew cli-setup`` (:func:`kirocrew_mcp.cleanup.clean_stale_managed_mcp`):
    a file with nothing stale is not written, a malformed or unreadable one is reported and left alone.
    Nothing to render afterwards: the render never takes a managed name from a scope.
    """
    from starlette.responses import JSONResponse

    from kirocrew_mcp.cleanup import clean_stale_managed_mcp

    body = await read_json_object(request, limit=MAX_BODY_BYTES, default={})
    if body:
        raise BadInputError("send an empty body", code="bad_request")
    report = await asyncio.to_thread(clean_stale_managed_mcp, pm=_pm(request))
    if not report.ok:
        failed = [s for s in report.scopes if s.state not in ("clean", "cleaned")]
        detail = "; ".join(f"{s.path}: {s.error}" for s in failed)
        return error_response(KirocrewError(f"a shared MCP file could not be cleaned: {detail}",
                                            code="cleanup_incomplete"), extra=report.as_dict())
    return JSONResponse(report.as_dict())


async def restart_sessions(request: Request) -> JSONResponse:
    """``POST /api/sessions/restart``: render the agent file, then every ``restart_sessions()`` implementation.

    The render comes first so the processes that replace the drained ones load the current
    MCP configuration; a render that fails or overruns its cap is reported
    (``mcpSyncOk`` false) and the restart goes ahead anyway (reference §7.1).
    """
    from starlette.responses import JSONResponse

    from kirocrew_core.plugins import acall_hook

    from kirocrew_mcp.sync import sync_agent_file_async

    reason = _restart_reason(await read_json_object(request, limit=MAX_BODY_BYTES, default={}))
    pm = _pm(request)
    synced = await sync_agent_file_async(pm)
    if not synced.ok:
        log.warning("restart: rendering the agent file failed (%s): %s; restarting anyway", synced.code, synced.error)
    call = await acall_hook(pm, "restart_sessions", on_error="skip", check=_count_problem, reason=reason)
    total = sum(result.value or 0 for result in call.results)
    handled = [result.plugin for result in call.results]
    failed = [{"plugin": failure.plugin, "error": failure.error} for failure in call.failures]
    await asyncio.to_thread(_audit_restart, reason, total, handled, failed, synced)
    answer: dict[str, Any] = {"ok": not failed, "restarted": total, "handledBy": handled, "failed": failed,
                              **synced.as_fields()}
    if failed:
        return error_response(KirocrewError("a plugin could not restart its sessions", code="restart_failed"),
                              extra=answer)
    return JSONResponse(answer)


def _count_problem(value: Any) -> str | None:
    """Why a ``restart_sessions()`` result is not a count (``None`` counts as 0)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return None
    return f"returned {value!r}, not a count"


def _restart_reason(body: dict[str, Any]) -> str:
    reason = body.get("reason", DEFAULT_RESTART_REASON)
    if set(body) - {"reason"} or not isinstance(reason, str) or not _REASON.fullmatch(reason):
        raise BadInputError('send nothing, or {"reason": "<lower_snake_case>"}', code="bad_request")
    return reason


def _audit_restart(reason: str, total: int, handled: list[str], failed: list[dict[str, str]],
                   synced: SyncOutcome) -> None:
    from kirocrew_core import audit

    try:
        audit.record("sessions_restart", actor="owner", outcome="error" if failed else "ok",
                     reason=reason, restarted=total, handled_by=handled, failed=[f["plugin"] for f in failed],
                     mcp_synced=synced.servers, mcp_sync_ok=synced.ok, mcp_sync_code=synced.code)
    except Exception as exc:  # noqa: BLE001 - auditing must not undo the restart
        log.warning("could not record sessions_restart in the security event log: %s", exc)


def routes() -> list[BaseRoute]:
    """The routes ``kirocrew_mcp.plugin.gateway_routes()`` contributes."""
    from starlette.routing import Route

    return [
        Route("/api/mcp", list_mcp, methods=["GET"], name="mcp_list"),
        Route("/api/mcp/probe", probe_mcp, methods=["POST"], name="mcp_probe"),
        Route("/api/mcp/probe", probe_results, methods=["GET"], name="mcp_probe_results"),
        Route("/api/mcp/scopes", list_scopes, methods=["GET"], name="mcp_scopes"),
        Route("/api/mcp/apply", apply_mcp, methods=["POST"], name="mcp_apply"),
        Route("/api/mcp/servers", add_server, methods=["POST"], name="mcp_add_server"),
        Route("/api/mcp/cleanup", cleanup_stale_managed, methods=["POST"], name="mcp_cleanup"),
        Route("/api/sessions/restart", restart_sessions, methods=["POST"], name="sessions_restart"),
    ]
