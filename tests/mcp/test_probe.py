"""Probing one MCP server against real servers: the fixture servers over pipes and sockets,
and a small scripted HTTP server (a real socket on 127.0.0.1) for the replies the SDK never sends."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import proc
from kirocrew_testing.mcp_fixtures import stdio_server_argv
from kirocrew_mcp import probe
from kirocrew_mcp.probe import probe_server

TIMEOUT = 20.0
STDIO_MODULE = "kirocrew_testing.servers.stdio_server"


@pytest.fixture(autouse=True)
def _fresh_ledger() -> Iterator[None]:
    probe.reset_unresolvable_warnings()
    yield
    probe.reset_unresolvable_warnings()


def stdio_spec(*options: str, **extra: Any) -> dict[str, Any]:
    argv = stdio_server_argv(*options)
    return {"command": argv[0], "args": argv[1:], **extra}


def shell_spec(script: str, **extra: Any) -> dict[str, Any]:
    """A stdio server started by a shell snippet (``$PY`` and ``$MOD`` run the fixture server)."""
    prelude = f'PY="{sys.executable}"; MOD={STDIO_MODULE}; '
    return {"command": "/bin/sh", "args": ["-c", prelude + script], **extra}


# -- stdio ---------------------------------------------------------------------


def test_a_stdio_server_answers_the_handshake_and_lists_its_tools() -> None:
    result = probe_server("fx", stdio_spec("--names", "alpha,beta,gamma", "--label", "labelled"), timeout=TIMEOUT)

    assert result.status == "ok", result.error
    assert result.tools == ("alpha", "beta", "gamma")
    assert result.server_info["name"] == "labelled"
    assert result.protocol_version in probe.HANDSHAKE_PROTOCOL_VERSIONS
    assert result.error == ""


def test_banner_lines_before_the_handshake_are_tolerated() -> None:
    result = probe_server("fx", stdio_spec("--banner", "5"), timeout=TIMEOUT)

    assert result.status == "ok", result.error
    assert result.tools == ("tool_1", "tool_2")


def test_a_flood_of_banner_lines_is_an_error_rather_than_a_wait_for_the_timeout() -> None:
    result = probe_server("fx", stdio_spec("--banner", str(probe.MAX_BANNER_LINES + 10)), timeout=TIMEOUT)

    assert result.status == "error"
    assert "non-JSON stdout lines" in result.error
    assert "fixture banner line 1" in result.error


def test_a_server_that_exits_during_the_handshake_is_an_error_naming_its_exit_and_stderr() -> None:
    result = probe_server("fx", stdio_spec("--exit-during-handshake"), timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error.startswith("initialize: the server exited during the handshake, before answering "
                                   "(exit code 1)")
    assert "fixture: exiting during the handshake" in result.error
    assert "closed its stdin" not in result.error
    assert result.tools == ()


@pytest.mark.parametrize(("script", "how"), [
    ("exit 0", "(exit code 0)"),  # the audit's case: read as "closed its stdin (exit code 0)"
    ("read line; exit 0", "(exit code 0)"),  # it read the request first: stdout closes, not stdin
    ("kill -KILL $$", "(killed by signal 9 (SIGKILL))"),
])
def test_a_server_that_leaves_before_answering_is_reported_as_exited_not_as_a_closed_pipe(script, how) -> None:
    result = probe_server("fx", shell_spec(script), timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error == f"initialize: the server exited during the handshake, before answering {how}"


def test_a_server_that_closes_its_output_but_keeps_running_is_not_said_to_have_exited() -> None:
    result = probe_server("fx", shell_spec("exec 1>&-; read line; read line; sleep 0.2"), timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error.startswith("initialize: the server closed stdout before answering")
    assert "exited during the handshake" not in result.error


def test_a_hanging_server_times_out_and_no_process_of_it_survives() -> None:
    result = probe_server("fx", stdio_spec("--hang"), timeout=0.5)

    assert result.status == "error"
    assert result.error == "initialize: timed out after 0.5s"
    assert proc.live_descendants() == {}


def test_a_server_that_ignores_eof_is_killed_with_its_group_within_the_shrunk_teardown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 0.1)
    monkeypatch.setattr(proc, "TERM_WAIT_SECS", 0.5)
    # The fixture runs under a shell that forks it, so the group has two members to take down.
    spec = shell_spec('"$PY" -m $MOD --hang --ignore-eof; echo after')

    result = probe_server("fx", spec, timeout=0.5)

    assert result.status == "error"
    assert "timed out" in result.error
    assert proc.live_descendants() == {}


def test_the_timeout_comes_from_dashboard_mcp_probe_timeout_secs() -> None:
    from kirocrew_core import home

    home.ensure_crew_home()
    home.config_file().write_text("[dashboard]\nmcp_probe_timeout_secs = 1\n")

    result = probe_server("fx", stdio_spec("--hang"))

    assert result.error == "initialize: timed out after 1s"


def test_a_malformed_config_falls_back_to_the_default_timeout() -> None:
    from kirocrew_core import home

    home.ensure_crew_home()
    home.config_file().write_text("[dashboard\n")

    assert probe.probe_timeout() == probe.DEFAULT_PROBE_TIMEOUT_SECS


def test_a_bare_command_that_does_not_resolve_names_how_many_directories_were_searched() -> None:
    from kirocrew_mcp.resolve import search_dirs

    result = probe_server("fx", {"command": "kirocrew-no-such-server"}, timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error == (
        "command not found: kirocrew-no-such-server — "
        f"not in any of the {len(search_dirs())} directories searched"
    )


def test_a_directory_qualified_command_that_does_not_exist_reports_no_search_path(tmp_path: Path) -> None:
    missing = tmp_path / "bin" / "server"

    result = probe_server("fx", {"command": str(missing)}, timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error == f"command not found: {missing} (not an executable file; no search path applies)"


def test_a_missing_command_warns_once_and_again_after_it_healed_and_broke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    spec = {"command": "fixture-mcp-server"}

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "command not found: fixture-mcp-server" in r.getMessage()]

    caplog.set_level(logging.DEBUG, logger="kirocrew_mcp")
    assert probe_server("fx", spec, timeout=TIMEOUT).status == "error"
    assert probe_server("fx", spec, timeout=TIMEOUT).status == "error"
    assert len(warnings()) == 1

    script = bin_dir / "fixture-mcp-server"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {STDIO_MODULE} "$@"\n')
    script.chmod(0o755)
    assert probe_server("fx", spec, timeout=TIMEOUT).status == "ok"

    script.unlink()
    assert probe_server("fx", spec, timeout=TIMEOUT).status == "error"
    assert len(warnings()) == 2


def test_the_warning_is_per_server_and_command(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kirocrew_mcp")

    probe_server("one", {"command": "kirocrew-missing-a"}, timeout=TIMEOUT)
    probe_server("two", {"command": "kirocrew-missing-a"}, timeout=TIMEOUT)
    probe_server("one", {"command": "kirocrew-missing-b"}, timeout=TIMEOUT)
    probe_server("one", {"command": "kirocrew-missing-a"}, timeout=TIMEOUT)

    assert len([r for r in caplog.records if "command not found" in r.getMessage()]) == 3


@pytest.mark.parametrize("flag", [True, "false", 1, None])
def test_a_muted_stdio_server_is_never_spawned(tmp_path: Path, flag: Any) -> None:
    marker = tmp_path / "started"
    spec = shell_spec(f'touch "{marker}"; exec "$PY" -m $MOD', disabled=flag)

    result = probe_server("fx", spec, timeout=TIMEOUT)

    assert result.status == "disabled"
    assert result.error == ""
    assert not marker.exists()


def test_the_same_server_enabled_does_start_and_leave_its_marker(tmp_path: Path) -> None:
    marker = tmp_path / "started"

    result = probe_server("fx", shell_spec(f'touch "{marker}"; exec "$PY" -m $MOD', disabled=False),
                          timeout=TIMEOUT)

    assert result.status == "ok", result.error
    assert marker.exists()


def test_a_muted_remote_server_is_never_connected_to() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.3)
    port = listener.getsockname()[1]
    try:
        result = probe_server("remote", {"url": f"http://127.0.0.1:{port}/mcp", "disabled": True}, timeout=TIMEOUT)
        assert result.status == "disabled"
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


def test_the_spec_env_reaches_the_server_with_placeholders_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIXTURE_REGION", "eu-west-9")
    spec = shell_spec('[ "$TARGET" = "region-eu-west-9" ] || exit 7; exec "$PY" -m $MOD',
                      env={"TARGET": "region-${FIXTURE_REGION}"})

    assert probe_server("fx", spec, timeout=TIMEOUT).status == "ok"
    spec["env"] = {"TARGET": "region-elsewhere"}
    assert probe_server("fx", spec, timeout=TIMEOUT).status == "error"


def test_a_declared_path_is_searched_first(tmp_path: Path) -> None:
    bin_dir = tmp_path / "private-bin"
    bin_dir.mkdir()
    script = bin_dir / "private-mcp"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {STDIO_MODULE} --names from_private_path\n')
    script.chmod(0o755)

    result = probe_server("fx", {"command": "private-mcp", "env": {"PATH": f"{bin_dir}:$PATH"}}, timeout=TIMEOUT)

    assert result.status == "ok", result.error
    assert result.tools == ("from_private_path",)


def test_a_credential_in_the_spec_env_is_redacted_from_the_stderr_in_the_error() -> None:
    spec = shell_spec('echo "connecting with $SERVICE_API_TOKEN" >&2; exit 3',
                      env={"SERVICE_API_TOKEN": "tok-4f9a8b7c6d5e"})

    result = probe_server("fx", spec, timeout=TIMEOUT)

    assert result.status == "error"
    assert "connecting with [redacted]" in result.error
    assert "tok-4f9a8b7c6d5e" not in result.error


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"command": "ls", "args": "-l"}, "args must be a list of strings"),
        ({"command": "ls", "env": {"A": 1}}, "env must map names to strings"),
        ({"command": ""}, "command must be a non-empty string"),
        ({"type": "registry"}, "no command or url"),
    ],
)
def test_a_malformed_entry_is_an_error_and_nothing_is_started(spec: dict[str, Any], error: str) -> None:
    result = probe_server("fx", spec, timeout=TIMEOUT)

    assert (result.status, result.error) == ("error", error)


def test_a_command_and_a_url_together_probe_the_command() -> None:
    spec = stdio_spec(url="http://127.0.0.1:9/never")

    assert probe_server("fx", spec, timeout=TIMEOUT).status == "ok"


# -- streamable HTTP, fixture servers ------------------------------------------------


def test_a_streamable_http_server_answering_in_sse_is_probed(mcp_http_server: str) -> None:
    result = probe_server("web", {"url": mcp_http_server}, timeout=TIMEOUT)

    assert result.status == "ok", result.error
    assert result.tools == ("tool_1", "tool_2")
    assert result.server_info["name"] == "fixture"


def test_a_server_answering_plain_json_is_probed(start_mcp_http_server: Callable[..., str]) -> None:
    url = start_mcp_http_server("--json-response", "--names", "only")

    result = probe_server("web", {"url": url}, timeout=TIMEOUT)

    assert result.status == "ok", result.error
    assert result.tools == ("only",)


def test_a_stateless_server_without_a_session_id_is_probed(start_mcp_http_server: Callable[..., str]) -> None:
    url = start_mcp_http_server("--stateless", "--tools", "4")

    result = probe_server("web", {"url": url}, timeout=TIMEOUT)

    assert result.status == "ok", result.error
    assert len(result.tools) == 4


def test_an_oauth_protected_server_needs_auth_with_no_error(oauth_mcp_server: Any) -> None:
    result = probe_server("oauth", {"url": oauth_mcp_server.mcp_url}, timeout=TIMEOUT)

    assert result.status == "needs_auth"
    assert result.error == ""
    assert result.auth_challenge is True


@pytest.mark.parametrize("form", ["${FIXTURE_TENANT}", "${env:FIXTURE_TENANT}"])
def test_header_placeholders_expand_from_the_environment(
    start_mcp_http_server: Callable[..., str], monkeypatch: pytest.MonkeyPatch, form: str,
) -> None:
    url = start_mcp_http_server("--require-header", "X-Tenant=acme-corp")
    monkeypatch.setenv("FIXTURE_TENANT", "acme-corp")

    result = probe_server("web", {"url": url, "headers": {"X-Tenant": form}}, timeout=TIMEOUT)

    assert result.status == "ok", result.error


def test_a_plain_401_with_nothing_supplied_needs_auth(start_mcp_http_server: Callable[..., str]) -> None:
    url = start_mcp_http_server("--require-header", "X-Tenant=acme-corp")

    result = probe_server("web", {"url": url, "headers": {"X-Tenant": "${FIXTURE_UNSET_VARIABLE}"}}, timeout=TIMEOUT)

    assert result.status == "needs_auth"


def test_a_credential_named_variable_never_reaches_a_header(
    start_mcp_http_server: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = start_mcp_http_server("--require-header", "X-Key=k-7d1e2f3a4b5c")
    monkeypatch.setenv("FIXTURE_API_TOKEN", "k-7d1e2f3a4b5c")
    monkeypatch.setenv("FIXTURE_PLAIN", "k-7d1e2f3a4b5c")

    filtered = probe_server("web", {"url": url, "headers": {"X-Key": "${FIXTURE_API_TOKEN}"}}, timeout=TIMEOUT)
    plain = probe_server("web", {"url": url, "headers": {"X-Key": "${FIXTURE_PLAIN}"}}, timeout=TIMEOUT)

    assert filtered.status == "needs_auth"  # the literal went out, so the server refused it
    assert plain.status == "ok", plain.error


def test_a_refused_static_header_is_an_error_not_needs_auth(start_mcp_http_server: Callable[..., str]) -> None:
    url = start_mcp_http_server("--require-header", "X-Key=right-value")

    result = probe_server("web", {"url": url, "headers": {"X-Key": "wrong-value-3141"}}, timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error == "initialize: HTTP 401 (the configured credentials were refused)"


def test_an_unreachable_server_is_an_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    result = probe_server("web", {"url": f"http://127.0.0.1:{port}/mcp"}, timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error.startswith("initialize: ConnectError")


# -- streamable HTTP, scripted replies ----------------------------------------------

Reply = tuple[int, dict[str, str], bytes]


class ScriptedMcp:
    """An HTTP server on 127.0.0.1 whose replies a test writes: ``script(request) -> (status, headers, body)``.

    ``requests`` records every request as ``{"method", "headers", "body"}``.
    """

    def __init__(self, script: Callable[[dict[str, Any]], Reply]) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                request = {"method": self.command, "headers": dict(self.headers),
                           "body": json.loads(raw) if raw else None}
                outer.requests.append(request)
                status, headers, body = script(request)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = _serve
            do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def scripted() -> Iterator[Callable[[Callable[[dict[str, Any]], Reply]], ScriptedMcp]]:
    servers: list[ScriptedMcp] = []

    def start(script: Callable[[dict[str, Any]], Reply]) -> ScriptedMcp:
        servers.append(ScriptedMcp(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _json(status: int, payload: Any, **headers: str) -> Reply:
    return status, {"content-type": "application/json", **headers}, json.dumps(payload).encode()


def _init_result(request_id: int, version: str = "2025-11-25") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {
        "protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": {"name": "scripted"}}}


def well_behaved(request: dict[str, Any], *, session: str = "") -> Reply:
    body = request["body"] or {}
    extra = {"mcp-session-id": session} if session else {}
    if body.get("method") == "initialize":
        return _json(200, _init_result(body["id"]), **extra)
    if body.get("method") == "tools/list":
        return _json(200, {"jsonrpc": "2.0", "id": body["id"], "result": {"tools": [{"name": "t"}]}})
    return 202, {}, b""


def test_the_method_order_is_initialize_then_initialized_then_tools_list(scripted: Any) -> None:
    server = scripted(well_behaved)

    assert probe_server("s", {"url": server.url}, timeout=TIMEOUT).status == "ok"

    methods = [(r["method"], (r["body"] or {}).get("method")) for r in server.requests]
    assert methods == [("POST", "initialize"), ("POST", "notifications/initialized"), ("POST", "tools/list")]


def test_the_session_id_and_protocol_version_ride_on_every_later_request(scripted: Any) -> None:
    server = scripted(lambda r: well_behaved(r, session="sess-123"))

    assert probe_server("s", {"url": server.url}, timeout=TIMEOUT).status == "ok"

    later = server.requests[1:]
    assert [r["headers"].get("Mcp-Session-Id") for r in later] == ["sess-123"] * 3
    assert later[-1]["method"] == "DELETE"  # the session is closed politely
    assert all(r["headers"].get("MCP-Protocol-Version") == "2025-11-25" for r in later[:2])


def test_a_refused_protocol_version_is_retried_once_with_the_newest_older_one(scripted: Any) -> None:
    def script(request: dict[str, Any]) -> Reply:
        body = request["body"] or {}
        if body.get("method") == "initialize":
            if body["params"]["protocolVersion"] != "2025-03-26":
                return _json(200, {"jsonrpc": "2.0", "id": body["id"], "error": {
                    "code": -32602, "message": "Unsupported protocol version",
                    "data": {"supported": ["2024-11-05", "2025-03-26"]}}})
            return _json(200, _init_result(body["id"], "2025-03-26"))
        return well_behaved(request)

    server = scripted(script)
    result = probe_server("s", {"url": server.url}, timeout=TIMEOUT)

    assert result.status == "ok", result.error
    assert result.protocol_version == "2025-03-26"
    offers = [r["body"]["params"]["protocolVersion"] for r in server.requests
              if (r["body"] or {}).get("method") == "initialize"]
    assert offers == [probe.PROBE_PROTOCOL_VERSION, "2025-03-26"]


def test_an_sse_reply_is_read_past_notifications_to_the_answer(scripted: Any) -> None:
    def script(request: dict[str, Any]) -> Reply:
        body = request["body"] or {}
        if body.get("method") == "tools/list":
            events = [
                {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "hi"}},
                {"jsonrpc": "2.0", "id": 999, "result": {"tools": [{"name": "wrong"}]}},
                {"jsonrpc": "2.0", "id": body["id"], "result": {"tools": [
                    {"name": "right", "annotations": {"readOnlyHint": True}}]}},
            ]
            stream = "".join(f"event: message\r\ndata: {json.dumps(e)}\r\n\r\n" for e in events)
            return 200, {"content-type": "text/event-stream"}, stream.encode()
        return well_behaved(request)

    result = probe_server("s", {"url": scripted(script).url}, timeout=TIMEOUT)

    assert result.tools == ("right",)
    assert result.tool_annotations == {"right": {"readOnlyHint": True}}


def test_an_event_stream_that_ends_without_the_answer_is_an_error(scripted: Any) -> None:
    def script(request: dict[str, Any]) -> Reply:
        body = request["body"] or {}
        if body.get("method") == "tools/list":
            return 200, {"content-type": "text/event-stream"}, b": keep-alive\r\n\r\n"
        return well_behaved(request)

    result = probe_server("s", {"url": scripted(script).url}, timeout=TIMEOUT)

    assert (result.status, result.error) == ("error", "tools/list: the event stream ended without a reply")


def test_a_tools_list_that_pages_is_followed_to_the_end(scripted: Any) -> None:
    def script(request: dict[str, Any]) -> Reply:
        body = request["body"] or {}
        if body.get("method") == "tools/list":
            cursor = (body.get("params") or {}).get("cursor")
            page = {None: ([{"name": "a"}], "p2"), "p2": ([{"name": "b"}], None)}[cursor]
            result: dict[str, Any] = {"tools": page[0]}
            if page[1]:
                result["nextCursor"] = page[1]
            return _json(200, {"jsonrpc": "2.0", "id": body["id"], "result": result})
        return well_behaved(request)

    assert probe_server("s", {"url": scripted(script).url}, timeout=TIMEOUT).tools == ("a", "b")


def test_a_tools_list_without_a_list_is_an_error(scripted: Any) -> None:
    def script(request: dict[str, Any]) -> Reply:
        body = request["body"] or {}
        if body.get("method") == "tools/list":
            return _json(200, {"jsonrpc": "2.0", "id": body["id"], "result": {}})
        return well_behaved(request)

    result = probe_server("s", {"url": scripted(script).url}, timeout=TIMEOUT)

    assert (result.status, result.error) == ("error", "tools/list: malformed reply (no tools list)")


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (401, {}, "needs_auth"),
        (401, {"www-authenticate": 'Bearer scope="mcp"'}, "needs_auth"),
        (403, {"www-authenticate": 'Bearer error="insufficient_scope"'}, "needs_auth"),
        (403, {}, "error"),
        (500, {}, "error"),
    ],
)
def test_http_refusals_map_to_statuses(scripted: Any, status: int, headers: dict[str, str], expected: str) -> None:
    server = scripted(lambda r: _json(status, {"error": "no"}, **headers))

    result = probe_server("s", {"url": server.url}, timeout=TIMEOUT)

    assert result.status == expected
    assert (result.error == "") is (expected == "needs_auth")
    assert result.auth_challenge is bool(headers)


def test_a_challenge_refusing_a_static_authorization_header_is_an_error(scripted: Any) -> None:
    server = scripted(lambda r: _json(401, {}, **{"www-authenticate": 'Bearer scope="mcp"'}))

    result = probe_server("s", {"url": server.url, "headers": {"Authorization": "Bearer pasted-token-0042"}},
                          timeout=TIMEOUT)

    assert result.status == "error"
    assert "pasted-token-0042" not in result.error


def test_errors_are_redacted_by_every_value_sent_including_expanded_fragments(
    scripted: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FIXTURE_ORG", "org-77aa88bb")

    def echo(request: dict[str, Any]) -> Reply:
        sent = request["headers"]
        body = request["body"] or {}
        # A server that echoes what it got, in pieces, in its error message.
        message = f"rejected {sent.get('X-Api-Key')} for org {sent.get('X-Org', '').split('/')[-1]}"
        return _json(200, {"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": -1, "message": message}})

    server = scripted(echo)
    result = probe_server("s", {"url": server.url, "headers": {
        "X-Api-Key": "key-5f5f5f5f", "X-Org": "orgs/${FIXTURE_ORG}"}}, timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error.startswith("initialize: rejected [redacted] for org [redacted]")
    assert "key-5f5f5f5f" not in result.error
    assert "org-77aa88bb" not in result.error


def test_a_bad_url_is_reported_without_its_userinfo_query_or_fragment() -> None:
    url = "ftp://alice:pa55w0rd-x@host.example/mcp?token=q-123456789#frag-abcdef"

    result = probe_server("s", {"url": url}, timeout=TIMEOUT)

    assert result.status == "error"
    assert result.error.startswith("url is not an http(s) URL: ")
    for secret in ("pa55w0rd-x", "q-123456789", "frag-abcdef", "alice"):
        assert secret not in result.error


def test_a_hanging_http_server_times_out() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepts into the backlog, never answers
    try:
        result = probe_server("s", {"url": f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"}, timeout=0.5)
    finally:
        listener.close()

    assert (result.status, result.error) == ("error", "initialize: timed out after 0.5s")


def test_a_redirect_is_not_followed(scripted: Any) -> None:
    server = scripted(lambda r: (307, {"location": "http://127.0.0.1:9/elsewhere"}, b""))

    result = probe_server("s", {"url": server.url, "headers": {"Authorization": "Bearer t-99887766"}},
                          timeout=TIMEOUT)

    assert (result.status, result.error) == ("error", "initialize: HTTP 307 (redirects are not followed)")
    assert len(server.requests) == 1
