"""``kirocrew serve`` for real: a subprocess, a real socket on 127.0.0.1, real HTTP requests."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from kirocrew_core import home
from kirocrew_core.gateway.auth import SESSION_COOKIE, load_or_create_token
from kirocrew_testing.distributions import make_plugin_distribution

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

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


def _json_routes(pm: KirocrewPluginManager) -> list[tuple[str, str]]:
    """Every (method, path) of the gateway that takes a request body, read from the app itself."""
    from starlette.routing import Route

    from kirocrew_core.gateway.app import create_app

    app = create_app(pm, token="t" * 43)
    found = set()
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/api/"):
            # A path parameter is "x", or "1" where its converter takes only digits (an id no row has).
            path = re.sub(r"\{[^}]+\}", "x", re.sub(r"\{[^}:]+:int\}", "1", route.path))
            found |= {(method, path) for method in (route.methods or ()) if method in {"POST", "PUT", "PATCH"}}
    return sorted(found)


JSON_ROUTES_OF_THE_EDITIONS = {
    ("PUT", "/api/computer-use/config"), ("POST", "/api/mcp/apply"), ("POST", "/api/mcp/probe"),
    ("POST", "/api/sessions/restart"), ("POST", "/api/connections/mint"), ("POST", "/api/connections/cancel"),
    ("POST", "/api/connections/test"), ("POST", "/api/connections/disconnect"),
    ("POST", "/api/connections/premint"), ("POST", "/api/connections/install"),
    ("POST", "/api/notifications/x/read"), ("POST", "/api/notifications/x/dismiss"),
    ("POST", "/api/notifications/x/actions/x"),
}
#: Over every route's body limit (the largest is 1 MiB).
OVERSIZE_BYTES = 2 * 1024 * 1024


def _serve_every_edition(start_gateway: Any, installed_plugin_manager: Any) -> tuple[Gateway, list[tuple[str, str]]]:
    routes = _json_routes(installed_plugin_manager)
    # The installed editions' body-taking routes are all found, so a new one is covered too.
    assert set(routes) >= JSON_ROUTES_OF_THE_EDITIONS
    env = {k: v for k, v in os.environ.items() if k != "KIROCREW_LOAD_PLUGINS"}
    return start_gateway("--port", "0", env=env), routes


def _error_answer(response: httpx.Response) -> tuple[int, object, object]:
    """(status, code, the JSON keys) of an error answer; the text in place of a code when it is not JSON."""
    if not response.headers.get("content-type", "").startswith("application/json"):
        return response.status_code, response.text[:80], None
    answer = response.json()
    shape = sorted(answer) if isinstance(answer, dict) and all(isinstance(v, str) for v in answer.values()) else answer
    return response.status_code, answer.get("code") if isinstance(answer, dict) else None, shape


def test_every_json_route_answers_bad_json_to_a_body_that_is_not_a_json_object(
    start_gateway, installed_plugin_manager
):
    gateway, routes = _serve_every_edition(start_gateway, installed_plugin_manager)
    # One connection per request: a 500 from an unhandled error closes the connection it came on.
    bearer = {"Authorization": f"Bearer {gateway.token}", "Content-Type": "application/json", "Connection": "close"}
    bodies = {
        "deep": b"[" * 20_000 + b"]" * 20_000,  # 40 KB, under every route's size limit
        "malformed": b'{"changes": [',
        "bad utf-8": b"\xff\xfe",
        "a list": b"[1]",
        "a string": b'"notion"',
    }
    answers = {}
    with httpx.Client(base_url=gateway.base, headers=bearer, timeout=60) as client:
        for method, path in routes:
            for name, body in bodies.items():
                answers[(method, path, name)] = _error_answer(client.request(method, path, content=body))
    wrong = {key: answer for key, answer in answers.items() if answer != (400, "bad_json", ["code", "error"])}
    assert not wrong, wrong
    assert gateway.stop()[0] == 0, gateway.stderr()
    assert "RecursionError" not in gateway.stderr()


def test_every_json_route_answers_body_too_large_in_the_same_shape_to_a_declared_oversize_body(
    start_gateway, installed_plugin_manager
):
    gateway, routes = _serve_every_edition(start_gateway, installed_plugin_manager)
    bearer = {"Authorization": f"Bearer {gateway.token}", "Content-Type": "application/json", "Connection": "close"}
    body = b'{"pad": "' + b"x" * OVERSIZE_BYTES + b'"}'
    with httpx.Client(base_url=gateway.base, headers=bearer, timeout=60) as client:
        answers = {(method, path): _error_answer(client.request(method, path, content=body)) for method, path in routes}
    wrong = {key: answer for key, answer in answers.items() if answer != (400, "body_too_large", ["code", "error"])}
    assert not wrong, wrong
    assert gateway.stop()[0] == 0, gateway.stderr()


def _chunked_upload(port: int, method: str, path: str, token: str, total: int) -> tuple[int, bytes, int]:
    """Stream ``total`` bytes as a chunked body while watching for an answer: (status, raw answer, bytes sent).

    The upload stops as soon as the gateway answers, so ``sent < total`` means
    the gateway answered before the client finished sending.
    """
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    chunk = 64 * 1024
    frame = f"{chunk:x}\r\n".encode() + b'{"pad": "' + b"x" * (chunk - 9) + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(head.encode())
        conn.setblocking(False)
        pending = b""
        while True:
            if not pending and sent < total:
                pending, sent = frame, sent + chunk
            readable, writable, _ = select.select([conn], [conn] if pending else [], [], 60)
            if readable:
                break
            assert writable, "the gateway neither read the body nor answered within a minute"
            try:
                pending = pending[conn.send(pending):]
            except (ConnectionResetError, BrokenPipeError):
                # The answer landed between the select and the send, and the gateway closed with the
                # body unread: what it sent before the reset is read below.
                break
        # The gateway closes with the rest of the body unread, which resets the connection:
        # keep what arrived before the reset.
        conn.setblocking(True)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while data := conn.recv(65536):
                answer += data
    assert answer.startswith(b"HTTP/1.1 "), f"no answer before the connection ended: {answer[:200]!r}"
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2], sent


def _chunked_upload_answered(port: int, method: str, path: str, token: str,
                             total: int) -> tuple[int, bytes, int]:
    """:func:`_chunked_upload`, once more when the reset outran the answer (up to three tries).

    The gateway answers and closes while the client is still sending; if the
    client's next chunk reaches it first, the kernel's reset can discard the
    answer before the client reads it. That race is TCP's, not the gateway's, so
    it is retried; a gateway that never answers still fails every try.
    """
    for attempt in range(3):
        try:
            return _chunked_upload(port, method, path, token, total)
        except AssertionError as exc:
            if "no answer before the connection ended" not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def test_every_json_route_stops_reading_a_chunked_body_at_its_limit(start_gateway, installed_plugin_manager):
    gateway, routes = _serve_every_edition(start_gateway, installed_plugin_manager)
    total = 200 * 1024 * 1024
    resident_before = _memory_kib(gateway.proc.pid, "VmRSS")
    answers = {}
    for method, path in routes:
        answers[(method, path)] = _chunked_upload_answered(gateway.port, method, path, gateway.token, total)
    # Answered while the client was still sending: the gateway stopped reading at the limit...
    wrong = {key: (status, body[-200:]) for key, (status, body, sent) in answers.items()
             if status != 400 or b'"body_too_large"' not in body or sent >= total}
    assert not wrong, wrong
    # ...and never held the body: its peak resident set grew by far less than one 200 MiB upload.
    grown_mib = (_memory_kib(gateway.proc.pid, "VmHWM") - resident_before) / 1024
    assert grown_mib < 64, f"the gateway's peak resident set grew by {grown_mib:.0f} MiB"
    assert gateway.stop()[0] == 0, gateway.stderr()
