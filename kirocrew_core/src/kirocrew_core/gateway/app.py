"""The gateway app factory: plugin routes and pages behind owner authentication, plus lifecycle hooks.

Core routes come from the built-in plugin ``kirocrew_core.builtin.api`` through
the same ``gateway_routes()`` hook third parties use; only the Overview ``/`` and
the static files ``/static/{package}/...`` (:mod:`kirocrew_core.gateway.shell`)
are the factory's own. Plugins are read in hook call order (``tryfirst``, plain,
``trylast``, each by plugin name) but core built-ins first whatever their tier,
so a third-party plugin can never take a core path; a path another
plugin already holds is refused with a :class:`~kirocrew_core.plugins.PluginWarning`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kirocrew_core.contributions import Contribution, DashboardPage, flatten
from kirocrew_core.errors import KirocrewError
from kirocrew_core.gateway.auth import (
    LOOPBACK_HOSTS,
    OwnerAuthMiddleware,
    is_api_path,
    is_webhook_path,
    load_or_create_token,
)
from kirocrew_core.gateway.shell import Shell, package_dir, static_file
from kirocrew_core.home import Homes
from kirocrew_core.plugins import (
    KirocrewPluginManager,
    PluginWarning,
    acall_hook,
    collect,
    get_plugin_manager,
)

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Receive, Scope, Send

    from kirocrew_core.host.server import Host
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

CORE = "kirocrew-core"
#: The one plugin that may route under the webhook prefix, which the owner check lets through unauthenticated.
WEBHOOK_PLUGIN = "kirocrew_core.builtin.webhooks"

# Stable codes for the HTTP errors routing itself raises under /api/.
_HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed"}


@dataclass
class GatewayState:
    """What ``app.state.kirocrew`` holds for routes, pages and lifecycle hooks."""

    pm: KirocrewPluginManager
    token: str
    homes: Homes
    pages: list[Contribution] = field(default_factory=list)
    shell: Shell = field(default_factory=lambda: Shell({}, ()))  # templates, static folders, navigation
    host: Host | None = None  # the long-lived host when ``kirocrew serve`` runs this app


class _RouteTable:
    """Routes in the order they were accepted, and which plugin holds each path."""

    def __init__(self, pm: KirocrewPluginManager) -> None:
        self.pm = pm
        self.routes: list[BaseRoute] = []
        self.owners: dict[str, str] = {}

    def claim(self, path: str, plugin: str, route: BaseRoute) -> bool:
        owner = self.owners.setdefault(path, plugin)
        if owner != plugin:
            warnings.warn(
                f"plugin {plugin!r} tried to add gateway path {path!r}, already provided by {owner!r}; ignored",
                PluginWarning,
                stacklevel=2,
            )
            return False
        self.routes.append(route)
        return True

    def add_route(self, contribution: Contribution) -> None:
        from starlette.routing import BaseRoute

        route = contribution.value
        if not isinstance(route, BaseRoute):
            problem = TypeError(f"expected a starlette route, got {type(route).__name__}")
            self.pm.plugin_failed(contribution.plugin, "returned a bad item from gateway_routes()", problem)
            return
        path = getattr(route, "path", "")
        if is_webhook_path(path) and contribution.plugin != WEBHOOK_PLUGIN:
            refused = ValueError(f"path {path!r} is under the inbound webhook prefix, which only core routes")
            self.pm.plugin_failed(contribution.plugin, "returned a bad item from gateway_routes()", refused)
            return
        self.claim(path, contribution.plugin, route)

    def add_page(self, contribution: Contribution) -> bool:
        from starlette.routing import Route

        page = contribution.value
        problem: Exception | None = None
        if not isinstance(page, DashboardPage):
            problem = TypeError(f"expected a DashboardPage, got {type(page).__name__}")
        elif not page.path.startswith("/") or is_api_path(page.path):
            # /api/ answers in JSON; a page there would get JSON refusals, not the sign-in page.
            problem = ValueError(f"page path {page.path!r} must start with '/' and not be under /api/")
        elif page.package:
            try:
                package_dir(page.package)
            except ValueError as exc:
                problem = exc
        if problem is not None:
            self.pm.plugin_failed(contribution.plugin, "returned a bad item from dashboard_pages()", problem)
            return False
        return self.claim(page.path, contribution.plugin, Route(page.path, page.endpoint))


def _core_first(pm: KirocrewPluginManager, contributions: Sequence[Contribution]) -> list[Contribution]:
    """Core built-ins first, then the rest in the (hook call) order given; the sort is stable."""

    def is_third_party(contribution: Contribution) -> bool:
        record = pm.records.get(contribution.plugin)
        return not (record is not None and record.builtin)

    return sorted(contributions, key=is_third_party)


def create_app(
    pm: KirocrewPluginManager | None = None,
    *,
    token: str | None = None,
    allowed_hosts: Collection[str] | None = LOOPBACK_HOSTS,
    host: Host | None = None,
) -> Starlette:
    """Build the gateway app from every plugin's routes and pages.

    :param pm: the plugin manager (default: the process-wide one).
    :param token: the owner token (default: :func:`~kirocrew_core.gateway.auth.load_or_create_token`).
    :param allowed_hosts: ``Host`` names accepted (DNS-rebinding guard); ``None``
        disables the guard, for a gateway deliberately bound to a non-loopback address.
    :param host: the host this app runs in (``kirocrew serve``): started before the
        startup hooks, stopped after the shutdown hooks, and told about dashboard use.
    """
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.routing import Route

    from kirocrew_core.gateway.pages import home

    pm = pm if pm is not None else get_plugin_manager()
    token = token if token is not None else load_or_create_token()
    if not token:
        raise ValueError("the owner token must not be empty")

    table = _RouteTable(pm)
    table.claim("/", CORE, Route("/", home, methods=["GET"], name="home"))
    table.claim("/static/{package}/{path:path}", CORE, Route("/static/{package}/{path:path}", static_file,
                                                             methods=["GET"], name="static"))
    for contribution in _core_first(pm, flatten(collect(pm, "gateway_routes"))):
        table.add_route(contribution)
    pages = [c for c in _core_first(pm, flatten(collect(pm, "dashboard_pages"))) if table.add_page(c)]

    middleware = [Middleware(OwnerAuthMiddleware, token=token, allowed_hosts=allowed_hosts)]
    if host is not None:
        middleware.insert(0, Middleware(_HostActivity, host=host))
    app = Starlette(
        routes=table.routes,
        middleware=middleware,
        exception_handlers={HTTPException: _http_error, KirocrewError: _kirocrew_error},
        lifespan=_lifespan,
    )
    app.state.kirocrew = GatewayState(pm=pm, token=token, homes=Homes.current(), pages=pages, host=host,
                                      shell=Shell.for_pages(pages))
    return app


# --- lifecycle --------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    """Startup hooks, then serve, then shutdown hooks.

    The host (when there is one) starts first and stops last: its services are what
    the routes and hooks use. If a startup hook aborts startup, the shutdown hooks still run (for every
    plugin, so they must tolerate never having started): plugins that started
    before the failure may already hold child processes.
    """
    state: GatewayState = app.state.kirocrew
    if state.host is not None:
        await state.host.start()
    try:
        try:
            await acall_hook(state.pm, "gateway_startup", app=app)
        except BaseException:
            await _run_shutdown_hooks(app)
            raise
        try:
            yield
        finally:
            await _run_shutdown_hooks(app)
    finally:
        if state.host is not None:
            await state.host.stop()


async def run_stopping_hooks(app: Starlette) -> None:
    """Every plugin's ``gateway_stopping`` (a stop began); a failure is logged and never stops the others."""
    await acall_hook(app.state.kirocrew.pm, "gateway_stopping", on_error="skip", app=app)


async def _run_shutdown_hooks(app: Starlette) -> None:
    """Every plugin's ``gateway_shutdown``; a failure is logged and never stops the others."""
    await acall_hook(app.state.kirocrew.pm, "gateway_shutdown", on_error="skip", app=app)


class _HostActivity:
    """Tells the host an HTTP request is open (dashboard use keeps an auto-started host alive)."""

    def __init__(self, app: ASGIApp, host: Host) -> None:
        self.app = app
        self.host = host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.host.http_started()
        try:
            await self.app(scope, receive, send)
        finally:
            self.host.http_finished()


# --- errors under /api/ are JSON ---------------------------------------------------


async def _http_error(request: Request, exc: Exception) -> Response:
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, PlainTextResponse, Response

    assert isinstance(exc, HTTPException)
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    if not is_api_path(request.url.path):
        return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
    code = _HTTP_ERROR_CODES.get(exc.status_code, f"http_{exc.status_code}")
    return JSONResponse({"error": exc.detail, "code": code}, status_code=exc.status_code, headers=exc.headers)


async def _kirocrew_error(request: Request, exc: Exception) -> Response:
    """A route that raises a :class:`KirocrewError` answers through
    :func:`~kirocrew_core.gateway.errors.error_response`."""
    from starlette.responses import PlainTextResponse

    from kirocrew_core.gateway.errors import error_response, status_for

    assert isinstance(exc, KirocrewError)
    if not is_api_path(request.url.path):
        return PlainTextResponse(f"{exc.message} [{exc.code}]", status_code=status_for(exc))
    return error_response(exc)
