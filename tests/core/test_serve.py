"""``kirocrew serve`` for real: a subprocess, a real socket on 127.0.0.1, real HTTP requests."""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kirocrew_core import home
from kirocrew_core.gateway.auth import SESSION_COOKIE, load_or_create_token
from kirocrew_core.testing.distributions import make_plugin_distribution

READY_LINE = re.compile(r"kirocrew gateway: (http://127\.0\.0\.1:(\d+))/\?token=([A-Za-z0-9_-]+)\n")
READY_TIMEOUT_SECS = 60


def _kirocrew_command() -> list[str]:
    exe = Path(sys.executable).with_name("kirocrew")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core.cli"]


def _env(**extra: str) -> dict[str, str]:
    # Core only by default: these tests are about serving, not about whichever plugins are installed.
    return {**os.environ, "KIROCREW_LOAD_PLUGINS": "", **extra}


PROBE_PLUGIN = """
import asyncio
import os

from kirocrew_core import hookimpl


def _mark(event):
    with open(os.environ["PROBE_LOG"], "a") as fh:
        fh.write(event + "\\n")


@hookimpl
def gateway_startup(app):
    _mark("startup")


@hookimpl
async def gateway_shutdown(app):
    await asyncio.sleep(0.05)
    _mark("shutdown")


@hookimpl
def gateway_routes():
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def ping(request):
        _mark("ping")
        return JSONResponse({"pong": True})

    return [Route("/api/probe/ping", ping)]
"""


class Gateway:
    """A running ``kirocrew serve`` child and what it printed."""

    def __init__(self, proc: subprocess.Popen[str], stderr_path: Path, line: str) -> None:
        self.proc = proc
        self.stderr_path = stderr_path
        self.line = line
        match = READY_LINE.fullmatch(line)
        assert match, f"unexpected ready line {line!r}; stderr:\n{self.stderr()}"
        self.base, self.port, self.token = match.group(1), int(match.group(2)), match.group(3)

    @property
    def url(self) -> str:
        return self.line.removeprefix("kirocrew gateway: ").strip()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """Send ``sig``; return the exit code and whatever else reached stdout."""
        self.proc.send_signal(sig)
        rest, _ = self.proc.communicate(timeout=60)
        return self.proc.returncode, rest


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Gateway:
        stderr_path = tmp_path / f"serve-{len(started)}.stderr"
        with open(stderr_path, "w") as stderr:
            proc = subprocess.Popen(
                [*_kirocrew_command(), "serve", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env or _env(),
            )
        started.append(proc)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_SECS)
        line = proc.stdout.readline() if ready else ""
        if not line:
            proc.kill()
            proc.wait()
            pytest.fail(f"serve printed no URL (exit {proc.returncode}); stderr:\n{stderr_path.read_text()}")
        return Gateway(proc, stderr_path, line)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_serve_prints_one_sign_in_url_that_works_over_real_loopback_and_stops_cleanly(start_gateway):
    known_token = load_or_create_token()  # a token from an earlier run is reused
    gateway = start_gateway("--port", "0")
    assert gateway.token == known_token
    assert gateway.port != 0

    with httpx.Client(follow_redirects=False, timeout=30) as browser:
        signed_in = browser.get(gateway.url)
        assert signed_in.status_code == 303
        assert signed_in.headers["location"] == "/"
        assert browser.cookies.get(SESSION_COOKIE) == known_token
        page = browser.get(gateway.base + "/")
        assert page.status_code == 200
        assert "core.homes" in page.text and "kirocrew_core.builtin.api" in page.text

    bearer = {"Authorization": f"Bearer {gateway.token}"}
    health = httpx.get(gateway.base + "/api/health", headers=bearer, timeout=30)
    assert health.status_code == 200 and health.json()["ok"] is True
    assert httpx.get(gateway.base + "/api/health", timeout=30).json()["code"] == "unauthenticated"
    rebound = httpx.get(gateway.base + "/api/health", headers={**bearer, "Host": "evil.example"}, timeout=30)
    assert (rebound.status_code, rebound.json()["code"]) == (421, "bad_host")

    code, rest_of_stdout = gateway.stop(signal.SIGTERM)
    assert code == 0, gateway.stderr()
    assert rest_of_stdout == ""  # exactly one line, ever
    assert "Traceback" not in gateway.stderr()
    assert gateway.token not in gateway.stderr()  # no access log echoing ?token=
    with pytest.raises(httpx.ConnectError):
        httpx.get(gateway.base + "/api/health", timeout=5)


def test_ctrl_c_stops_serve_cleanly(start_gateway):
    gateway = start_gateway("--port", "0")
    code, _ = gateway.stop(signal.SIGINT)
    assert code == 0, gateway.stderr()
    assert "Traceback" not in gateway.stderr() and "Aborted" not in gateway.stderr()


def test_sigterm_runs_the_plugins_shutdown_hooks_before_serve_exits(start_gateway, tmp_path):
    site = make_plugin_distribution(
        tmp_path / "site", distribution="kirocrew-probe", module="kirocrew_probe", source=PROBE_PLUGIN
    )
    log = tmp_path / "probe.log"
    pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    gateway = start_gateway(
        "--port", "0", env=_env(KIROCREW_LOAD_PLUGINS="probe", PYTHONPATH=pythonpath, PROBE_LOG=str(log))
    )
    assert log.read_text() == "startup\n"  # before the URL was printed
    bearer = {"Authorization": f"Bearer {gateway.token}"}
    assert httpx.get(gateway.base + "/api/probe/ping", headers=bearer, timeout=30).json() == {"pong": True}
    assert gateway.stop(signal.SIGTERM)[0] == 0, gateway.stderr()
    assert log.read_text() == "startup\nping\nshutdown\n"


def test_serve_takes_its_port_from_the_config_file(start_gateway):
    port = _free_port()
    home.ensure_crew_home()
    home.config_file().write_text(f"[gateway]\nport = {port}\n")
    gateway = start_gateway()
    assert gateway.port == port
    assert gateway.stop()[0] == 0


def test_a_non_loopback_host_without_allow_remote_exits_2_and_binds_nothing(kirocrew):
    result = kirocrew("serve", "--host", "0.0.0.0", "--port", "0", env=_env())
    assert result.returncode == 2
    assert "error[non_loopback_bind]" in result.stderr
    assert "--allow-remote" in result.stderr
    assert result.stdout == ""
    assert not home.gateway_token_file().exists()  # refused before anything was set up


def test_a_port_already_in_use_is_a_clear_error(kirocrew):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = kirocrew("serve", "--port", str(port), env=_env())
    assert result.returncode == 1
    assert "error[bind_failed]" in result.stderr
    assert result.stdout == ""


def _json_routes(pm: object) -> list[tuple[str, str]]:
    """Every (method, path) of the gateway that takes a request body, read from the app itself."""
    from starlette.routing import Route

    from kirocrew_core.gateway.app import create_app

    app = create_app(pm, token="t" * 43)
    found = set()
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/api/"):
            path = re.sub(r"\{[^}]+\}", "x", route.path)
            found |= {(method, path) for method in (route.methods or ()) if method in {"POST", "PUT", "PATCH"}}
    return sorted(found)


def test_every_json_route_answers_bad_json_to_a_body_nested_too_deeply_or_malformed(
    start_gateway, installed_plugin_manager
):
    routes = _json_routes(installed_plugin_manager)
    # The installed editions' body-taking routes are all found, so a new one is covered too.
    assert {("PUT", "/api/computer-use/config"), ("POST", "/api/mcp/apply"),
            ("POST", "/api/connections/mint")} <= set(routes)
    env = {k: v for k, v in os.environ.items() if k != "KIROCREW_LOAD_PLUGINS"}
    gateway = start_gateway("--port", "0", env=env)
    # One connection per request: a 500 from an unhandled error closes the connection it came on.
    bearer = {"Authorization": f"Bearer {gateway.token}", "Content-Type": "application/json", "Connection": "close"}
    deep = b"[" * 20_000 + b"]" * 20_000  # 40 KB, under every route's size limit
    answers = {}
    with httpx.Client(base_url=gateway.base, headers=bearer, timeout=60) as client:
        for method, path in routes:
            for name, body in (("deep", deep), ("malformed", b'{"changes": [')):
                response = client.request(method, path, content=body)
                is_json = response.headers.get("content-type", "").startswith("application/json")
                code = response.json().get("code") if is_json else response.text[:80]
                answers[(method, path, name)] = (response.status_code, code)
    wrong = {key: answer for key, answer in answers.items() if answer != (400, "bad_json")}
    assert not wrong, wrong
    assert gateway.stop()[0] == 0, gateway.stderr()
    assert "RecursionError" not in gateway.stderr()
