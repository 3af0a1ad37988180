"""The gateway app: owner authentication, the guards around it, plugin routes, pages and lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from kirocrew_core import __version__, home
from kirocrew_core.contributions import DashboardPage, DoctorCheck, DoctorResult
from kirocrew_core.errors import BadInputError, ConflictError, KirocrewError, MalformedFileError
from kirocrew_core.gateway.app import create_app
from kirocrew_core.gateway.auth import SESSION_COOKIE, TokenFileWarning, load_or_create_token
from kirocrew_core.gateway.errors import error_response, status_for
from kirocrew_core.plugins import PluginLoadError, PluginRecord, PluginWarning, make_plugin_manager
from kirocrew_testing.plugins import register_plugin

BASE = "http://127.0.0.1"
WS_URL = "ws://127.0.0.1/api/live/ws"


_register = register_plugin


class OwnerClient(TestClient):
    """A test client that knows the owner token, for bearer headers and ``?token=`` links."""

    owner_token: str


@contextlib.contextmanager
def _client(pm: Any, *, signed_in: bool = True, **app_kwargs: Any) -> Iterator[OwnerClient]:
    """A client on a freshly built app (plugins must be registered before it is built)."""
    token = load_or_create_token()
    with OwnerClient(create_app(pm, **app_kwargs), base_url=BASE, follow_redirects=False) as client:
        if signed_in:
            client.cookies.set(SESSION_COOKIE, token)
        client.owner_token = token
        yield client


async def _echo(request: Request) -> JSONResponse:
    return JSONResponse({"echo": (await request.body()).decode()})


def _register_echo_plugin(pm: Any) -> None:
    _register(pm, "echo-plugin", gateway_routes=lambda: [Route("/api/echo-plugin/echo", _echo, methods=["POST"])])


# --- the owner token file -----------------------------------------------------------


def test_the_owner_token_is_created_owner_only_and_reused_on_restart():
    first = load_or_create_token()
    path = home.gateway_token_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.crew_home().stat().st_mode) == 0o700
    assert path.read_text().strip() == first
    assert load_or_create_token() == first
    assert len(first) >= 43


def test_a_token_file_others_could_read_is_replaced_by_a_new_owner_only_token():
    leaked = load_or_create_token()
    path = home.gateway_token_file()
    os.chmod(path, 0o644)
    with pytest.warns(TokenFileWarning, match="may have leaked"):
        fresh = load_or_create_token()
    assert fresh != leaked
    assert path.read_text().strip() == fresh
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_token_file_that_holds_no_token_is_reported_and_left_byte_identical():
    home.ensure_crew_home()
    path = home.gateway_token_file()
    path.write_bytes(b"not a token\n")
    os.chmod(path, 0o600)
    with pytest.raises(MalformedFileError) as caught:
        load_or_create_token()
    assert caught.value.code == "malformed_token_file"
    assert path.read_bytes() == b"not a token\n"


def test_the_app_uses_the_token_from_the_file_when_none_is_given(plugin_manager):
    token = load_or_create_token()
    with TestClient(create_app(plugin_manager), base_url=BASE) as client:
        assert client.get("/api/health", headers={"Authorization": f"Bearer {token}"}).status_code == 200


# --- authentication -------------------------------------------------------------------


def test_an_api_request_without_a_token_is_refused_with_a_json_401(plugin_manager):
    with _client(plugin_manager, signed_in=False) as client:
        for path in ("/api/health", "/api/plugins", "/api/no-such-route"):
            response = client.get(path)
            assert response.status_code == 401, path
            assert response.headers["content-type"].startswith("application/json")
            assert response.json()["code"] == "unauthenticated"
            assert "kirocrew serve" in response.json()["error"]


def test_a_wrong_token_is_refused_whether_bearer_or_cookie(plugin_manager):
    with _client(plugin_manager, signed_in=False) as client:
        response = client.get("/api/health", headers={"Authorization": "Bearer " + "x" * 43})
        assert (response.status_code, response.json()["code"]) == (401, "bad_token")
        client.cookies.set(SESSION_COOKIE, "y" * 43)
        response = client.get("/api/health")
        assert (response.status_code, response.json()["code"]) == (401, "bad_token")
        # A token with non-ASCII bytes is just wrong, not a server error.
        response = client.get("/api/health", headers=[(b"Authorization", "Bearer café".encode())])
        assert (response.status_code, response.json()["code"]) == (401, "bad_token")


def test_a_bearer_token_opens_the_api_without_a_cookie(plugin_manager):
    with _client(plugin_manager, signed_in=False) as client:
        response = client.get("/api/health", headers={"Authorization": f"bearer {client.owner_token}"})
    assert response.status_code == 200
    assert response.json() == {"ok": True, "version": __version__}


def test_the_sign_in_url_sets_a_strict_httponly_cookie_and_redirects_without_the_token(plugin_manager):
    with _client(plugin_manager, signed_in=False) as client:
        token = client.owner_token
        response = client.get(f"/?token={token}")
        assert response.status_code == 303
        assert response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        attributes = {part.strip().lower() for part in cookie.split(";")}
        assert cookie.startswith(f"{SESSION_COOKIE}={token};")
        assert {"httponly", "samesite=strict", "path=/"} <= attributes
        assert response.headers["cache-control"] == "no-store"

        home_page = client.get("/")  # the client kept the cookie, as a browser would
        assert home_page.status_code == 200
        assert token not in home_page.text


def test_signing_in_keeps_other_query_parameters_and_never_leaves_the_gateway(plugin_manager):
    with _client(plugin_manager, signed_in=False) as client:
        token = client.owner_token
        response = client.get(f"/?tab=mcp&token={token}")
        assert response.headers["location"] == "/?tab=mcp"
        # "//evil.example" as a Location would send the browser to evil.example.
        url = client.base_url.copy_with(raw_path=f"//evil.example/?token={token}".encode())
        response = client.get(url)
        assert response.status_code == 303
        assert response.headers["location"] == "/evil.example/"


def test_a_wrong_sign_in_token_gets_the_html_sign_in_page_and_no_cookie(plugin_manager):
    with _client(plugin_manager, signed_in=False) as client:
        response = client.get("/?token=" + "z" * 43)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    assert "set-cookie" not in response.headers
    assert "kirocrew serve" in response.text
    assert "bad_token" in response.text


def test_a_page_without_a_session_explains_how_to_sign_in_in_html(plugin_manager):
    with _client(plugin_manager, signed_in=False) as client:
        response = client.get("/")
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    assert "kirocrew serve" in response.text and "?token=" in response.text
    assert "unauthenticated" in response.text


def test_a_token_in_the_query_string_does_not_open_the_api(plugin_manager):
    # Query strings end up in logs and history; the API takes the cookie or the Bearer header.
    with _client(plugin_manager, signed_in=False) as client:
        response = client.get(f"/api/health?token={client.owner_token}")
    assert (response.status_code, response.json()["code"]) == (401, "unauthenticated")


# --- Origin on mutating requests --------------------------------------------------------


def test_a_post_from_a_foreign_origin_is_refused_even_with_the_session_cookie(plugin_manager):
    _register_echo_plugin(plugin_manager)
    with _client(plugin_manager) as client:
        for origin in ("http://evil.example", "http://127.0.0.1:8080", "https://127.0.0.1", "null"):
            response = client.post("/api/echo-plugin/echo", content="hi", headers={"Origin": origin})
            assert response.status_code == 403, origin
            assert response.json()["code"] == "foreign_origin"
        response = client.post("/api/echo-plugin/echo", content="hi", headers={"Origin": BASE})
        assert (response.status_code, response.json()) == (200, {"echo": "hi"})


def test_a_post_without_origin_needs_the_bearer_header(plugin_manager):
    _register_echo_plugin(plugin_manager)
    with _client(plugin_manager) as client:
        response = client.post("/api/echo-plugin/echo", content="hi")
        assert (response.status_code, response.json()["code"]) == (403, "foreign_origin")
        bearer = {"Authorization": f"Bearer {client.owner_token}"}
        response = client.post("/api/echo-plugin/echo", content="hi", headers=bearer)
        assert (response.status_code, response.json()) == (200, {"echo": "hi"})
        response = client.post(
            "/api/echo-plugin/echo", content="hi", headers={**bearer, "Origin": "http://evil.example"}
        )
        assert response.status_code == 403


def test_a_read_from_another_origin_is_not_an_origin_problem(plugin_manager):
    with _client(plugin_manager) as client:
        response = client.get("/api/health", headers={"Origin": "http://evil.example"})
    assert response.status_code == 200


# --- Host (DNS rebinding) -----------------------------------------------------------------


def test_a_foreign_host_header_is_refused_even_with_a_valid_token(plugin_manager):
    with _client(plugin_manager) as client:
        bearer = {"Authorization": f"Bearer {client.owner_token}"}
        for host in ("evil.example", "evil.example:7317", "127.0.0.1.evil.example", "localhost:x", ""):
            for path in ("/api/health", "/"):
                response = client.get(path, headers={**bearer, "Host": host})
                assert response.status_code == 421, (host, path)
                assert response.json()["code"] == "bad_host"
        for host in ("127.0.0.1:7317", "localhost:7317", "[::1]:7317", "LOCALHOST"):
            assert client.get("/api/health", headers={**bearer, "Host": host}).status_code == 200, host


def test_the_host_guard_is_off_only_when_asked(plugin_manager):
    with _client(plugin_manager, allowed_hosts=None) as client:
        response = client.get("/api/health", headers={"Host": "gateway.lan:7317"})
    assert response.status_code == 200


# --- core routes --------------------------------------------------------------------


def test_api_plugins_lists_the_same_rows_as_kirocrew_plugins_all(kirocrew):
    env = dict(os.environ, KIROCREW_LOAD_PLUGINS="")
    cli = kirocrew("plugins", "--all", env=env)
    assert cli.returncode == 0, cli.stderr
    pm = make_plugin_manager(env={"KIROCREW_LOAD_PLUGINS": ""})
    with _client(pm) as client:
        response = client.get("/api/plugins")
    assert response.status_code == 200
    assert response.json() == json.loads(cli.stdout)
    assert any(row["name"] == "kirocrew_core.builtin.api" for row in response.json())


def test_an_unknown_api_path_answers_json_404_once_signed_in(gateway_client):
    response = gateway_client.get("/api/nothing-here")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_a_route_raising_a_kirocrew_error_answers_with_its_code(plugin_manager):
    async def refuse(request: Request) -> JSONResponse:
        raise BadInputError("no such widget", code="unknown_widget")

    _register(plugin_manager, "widgets", gateway_routes=lambda: [Route("/api/widgets/x", refuse)])
    with _client(plugin_manager) as client:
        response = client.get("/api/widgets/x")
    assert response.status_code == 400
    assert response.json() == {"error": "no such widget", "code": "unknown_widget"}


@pytest.mark.parametrize(("error", "status"), [
    (BadInputError("no such widget", code="unknown_widget"), 400),
    (MalformedFileError("widgets.json", "not JSON"), 400),
    (ConflictError("a widget is being built", code="widget_in_flight"), 409),
    (KirocrewError("the widget store is down", code="widget_store_down"), 500),
])
def test_every_kind_of_kirocrew_error_answers_its_one_status_in_the_same_json_shape(plugin_manager, error, status):
    async def refuse(request: Request) -> JSONResponse:
        raise error

    _register(plugin_manager, "widgets", gateway_routes=lambda: [Route("/api/widgets/x", refuse, methods=["POST"])])
    with _client(plugin_manager) as client:
        response = client.post("/api/widgets/x", headers={"Authorization": f"Bearer {client.owner_token}"})
    assert (response.status_code, response.json()) == (status, {"error": error.message, "code": error.code})
    assert status_for(error) == status


def test_an_error_answer_may_add_fields_but_never_replace_the_code():
    answer = error_response(ConflictError("busy", code="test_in_flight"), extra={"slug": "notion", "code": "x"})
    assert answer.status_code == 409
    assert json.loads(bytes(answer.body)) == {"slug": "notion", "error": "busy", "code": "test_in_flight"}


def test_responses_forbid_framing(gateway_client):
    response = gateway_client.get("/api/health")
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "no-referrer"


# --- plugin routes and pages ------------------------------------------------------------


async def _widget_page(request: Request) -> HTMLResponse:
    return HTMLResponse("<p>the widget page</p>")


def test_the_home_page_links_plugin_pages_and_shows_doctor_results(plugin_manager):
    _register(
        plugin_manager,
        "widgets",
        dashboard_pages=lambda: [DashboardPage("/widgets", "Widgets <&> more", _widget_page, "All widgets")],
        doctor_checks=lambda: [
            DoctorCheck("widgets.ready", lambda: DoctorResult("warn", "needs <care>", "line one"))
        ],
    )
    with _client(plugin_manager) as client:
        response = client.get("/")
        assert response.status_code == 200
        page = response.text
        assert '<a href="/widgets">Widgets &lt;&amp;&gt; more</a>' in page
        assert "widgets.ready" in page and "needs &lt;care&gt;" in page and "needs <care>" not in page
        assert 'class="status warn"' in page
        assert "core.homes" in page and "core.kiro-cli" in page  # the built-in checks ran too
        assert "kirocrew_core.builtin.api" in page  # the installed-plugins table
        widget = client.get("/widgets")
        assert (widget.status_code, widget.text) == (200, "<p>the widget page</p>")
        client.cookies.clear()
        assert client.get("/widgets").status_code == 401


def test_plugin_routes_are_mounted_and_a_taken_path_is_refused_with_a_warning(plugin_manager):
    def route(text: str, path: str = "/api/shared") -> Route:
        async def endpoint(request: Request) -> JSONResponse:
            return JSONResponse({"from": text})

        return Route(path, endpoint)

    # "aaa" sorts before the core built-in, yet cannot take a core path.
    _register(plugin_manager, "aaa", gateway_routes=lambda: [route("aaa"), route("aaa", "/api/health")])
    _register(plugin_manager, "bbb", gateway_routes=lambda: [route("bbb"), route("bbb", "/api/bbb/own")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        app = create_app(plugin_manager)
    messages = [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]
    assert any("'bbb'" in m and "'/api/shared'" in m and "'aaa'" in m for m in messages)
    assert any("'aaa'" in m and "'/api/health'" in m and "kirocrew_core.builtin.api" in m for m in messages)
    token = load_or_create_token()
    with TestClient(app, base_url=BASE, headers={"Authorization": f"Bearer {token}"}) as client:
        assert client.get("/api/shared").json() == {"from": "aaa"}
        assert client.get("/api/bbb/own").json() == {"from": "bbb"}
        assert client.get("/api/health").json()["ok"] is True


def test_a_third_party_page_under_api_is_skipped_with_a_warning(plugin_manager):
    plugin_manager.records["odd-pages"] = PluginRecord("odd-pages", "odd-pages", "1.0", "odd:plugin", "loaded")
    _register(plugin_manager, "odd-pages", dashboard_pages=lambda: [DashboardPage("/api/odd", "Odd", _widget_page)])
    with pytest.warns(PluginWarning, match="odd-pages"):
        app = create_app(plugin_manager)
    assert [c for c in app.state.kirocrew.pages if c.plugin == "odd-pages"] == []


def test_no_plugin_but_core_may_route_under_the_webhook_prefix_which_skips_the_owner_check(plugin_manager):
    """A POST under /webhooks/ passes the owner check (the route checks a hook's token): a third party's route
    there would be open to anyone, so it is refused."""
    async def open_door(request: Request) -> JSONResponse:
        return JSONResponse({"door": "open"})

    plugin_manager.records["sneaky"] = PluginRecord("sneaky", "sneaky", "1.0", "sneaky:plugin", "loaded")
    _register(plugin_manager, "sneaky", gateway_routes=lambda: [Route("/webhooks/x/door", open_door,
                                                                      methods=["POST"])])
    with pytest.warns(PluginWarning, match="inbound webhook prefix"):
        app = create_app(plugin_manager)
    assert "/webhooks/x/door" not in [getattr(r, "path", "") for r in app.routes]
    assert "/webhooks/{hook_id}" in [getattr(r, "path", "") for r in app.routes]
    with TestClient(app, base_url=BASE) as client:
        assert client.post("/webhooks/x/door", json={}).status_code == 404
        refused = client.post("/webhooks/x", json={"message": "hi"})
        assert (refused.status_code, refused.json()["code"]) == (401, "unauthorized")


def test_a_websocket_route_is_guarded_like_a_mutating_request(plugin_manager):
    async def ws_echo(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(await websocket.receive_text())
        await websocket.close()

    _register(plugin_manager, "live", gateway_routes=lambda: [WebSocketRoute("/api/live/ws", ws_echo)])
    with _client(plugin_manager) as client:
        with client.websocket_connect(WS_URL, headers={"Origin": BASE}) as ws:
            ws.send_text("ping")
            assert ws.receive_text() == "ping"
        with (
            pytest.raises(WebSocketDisconnect) as refused,
            client.websocket_connect(WS_URL, headers={"Origin": "http://evil.example"}),
        ):
            pass
        assert refused.value.code == 1008
        client.cookies.clear()
        with pytest.raises(WebSocketDisconnect), client.websocket_connect(WS_URL, headers={"Origin": BASE}):
            pass


# --- lifecycle ---------------------------------------------------------------------------


def test_startup_and_shutdown_hooks_run_and_awaitables_are_awaited(plugin_manager):
    events: list[str] = []

    def startup(app: Any) -> None:
        assert app.state.kirocrew.pm is plugin_manager
        events.append("sync startup")

    async def async_startup(app: Any) -> None:
        await asyncio.sleep(0)
        events.append("async startup")

    async def async_shutdown(app: Any) -> None:
        await asyncio.sleep(0)
        events.append("async shutdown")

    _register(plugin_manager, "a-sync", gateway_startup=startup,
              gateway_shutdown=lambda app: events.append("sync shutdown"))
    _register(plugin_manager, "b-async", gateway_startup=async_startup, gateway_shutdown=async_shutdown)
    with _client(plugin_manager) as client:
        assert events == ["sync startup", "async startup"]
        assert client.get("/api/health").status_code == 200
    assert events == ["sync startup", "async startup", "sync shutdown", "async shutdown"]


def test_a_failing_shutdown_hook_does_not_stop_the_others(plugin_manager):
    events: list[str] = []

    def broken(app: Any) -> None:
        raise RuntimeError("boom")

    _register(plugin_manager, "a-broken", gateway_shutdown=broken)
    _register(plugin_manager, "b-fine", gateway_shutdown=lambda app: events.append("b-fine stopped"))
    with _client(plugin_manager):
        pass
    assert events == ["b-fine stopped"]


def test_a_failing_startup_hook_aborts_startup_and_still_runs_shutdown_hooks(plugin_manager):
    events: list[str] = []

    def fails(app: Any) -> None:
        raise RuntimeError("cannot warm tables")

    _register(plugin_manager, "a-starter", gateway_startup=lambda app: events.append("a started"))
    _register(plugin_manager, "b-failing", gateway_startup=fails)
    _register(plugin_manager, "c-stopper", gateway_shutdown=lambda app: events.append("c stopped"))
    with pytest.raises(PluginLoadError, match="cannot warm tables"), _client(plugin_manager):
        pass
    assert events == ["a started", "c stopped"]


def test_sign_ins_are_recorded_in_the_security_event_log_without_the_token(plugin_manager):
    from kirocrew_core import audit

    with _client(plugin_manager, signed_in=False) as client:
        client.get("/?token=" + "x" * 43)
        client.get(f"/?token={client.owner_token}")
    events = [(r["event"], r["outcome"]) for r in audit.tail(10)]
    assert events == [("gateway.sign_in", "denied"), ("gateway.sign_in", "ok")]
    assert client.owner_token not in home.audit_log_file().read_text()
    assert audit.verify().ok
