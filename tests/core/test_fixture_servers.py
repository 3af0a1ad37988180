"""The MCP fixture servers, driven by the mcp SDK's own clients over real pipes and sockets."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import sys
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from kirocrew_core import proc
from kirocrew_testing.servers import HTTP_MODULE, launch

HANDSHAKE_TIMEOUT = 20.0


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _stdio_session(params: Any, action: Any, *, timeout: float = HANDSHAKE_TIMEOUT) -> Any:
    import anyio
    from mcp import ClientSession, stdio_client

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(timeout):
            await session.initialize()
        return await action(session)


async def _http_session(url: str, action: Any, headers: dict[str, str] | None = None) -> Any:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=headers) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        return await action(session)


async def _tool_names(session: Any) -> list[str]:
    return [tool.name for tool in (await session.list_tools()).tools]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


# -- stdio ----------------------------------------------------------------------------


def test_a_stdio_server_serves_as_many_numbered_tools_as_asked(mcp_stdio_server_params: Any) -> None:
    names = run(_stdio_session(mcp_stdio_server_params("--tools", "3"), _tool_names))
    assert names == ["tool_1", "tool_2", "tool_3"]


def test_a_stdio_server_serves_tools_under_the_names_given(mcp_stdio_server_params: Any) -> None:
    names = run(_stdio_session(mcp_stdio_server_params("--names", "echo,add"), _tool_names))
    assert names == ["echo", "add"]


def test_a_stdio_tool_answers_with_its_server_its_name_and_its_arguments(
        mcp_stdio_server_params: Any) -> None:
    async def call(session: Any) -> Any:
        return await session.call_tool("add", {"text": "hi", "number": 7})

    params = mcp_stdio_server_params("--names", "echo,add", "--label", "alpha", "--expose-env", "FIXTURE_X",
                                     env={"FIXTURE_X": "42"})
    result = run(_stdio_session(params, call))
    assert not result.is_error
    assert json.loads(result.content[0].text) == {
        "server": "alpha", "tool": "add", "arguments": {"text": "hi", "number": 7},
        "env": {"FIXTURE_X": "42"}}


def test_a_stdio_server_with_zero_tools_lists_none(mcp_stdio_server_params: Any) -> None:
    assert run(_stdio_session(mcp_stdio_server_params("--tools", "0"), _tool_names)) == []


def test_a_hanging_stdio_server_never_answers_initialize(mcp_stdio_server_params: Any) -> None:
    with pytest.raises(BaseException) as caught:
        run(_stdio_session(mcp_stdio_server_params("--hang"), _tool_names, timeout=1.0))
    assert any(isinstance(leaf, TimeoutError) for leaf in _leaves(caught.value))


def test_a_hang_until_a_file_exists_answers_nothing_then_exits_1_when_the_file_appears(tmp_path: Any) -> None:
    import subprocess
    import time

    from kirocrew_testing.mcp_fixtures import stdio_server_argv

    release = tmp_path / "release"
    server = subprocess.Popen(stdio_server_argv("--hang", "--until", str(release)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert server.stdin is not None
        server.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n')
        server.stdin.flush()
        time.sleep(0.5)
        assert server.poll() is None, "it hangs while the file is absent"
        release.touch()
        assert server.wait(10) == 1
        assert server.stdout is not None and server.stdout.read() == b"", "it answered nothing"
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for stream in (server.stdin, server.stdout):
            if stream is not None:
                stream.close()


def test_a_hang_that_ignores_eof_is_still_stopped_by_the_client_teardown(
        mcp_stdio_server_params: Any) -> None:
    before = set(proc.live_descendants())
    with pytest.raises(BaseException) as caught:
        run(_stdio_session(mcp_stdio_server_params("--hang", "--ignore-eof"), _tool_names, timeout=0.5))
    assert any(isinstance(leaf, TimeoutError) for leaf in _leaves(caught.value))
    assert set(proc.live_descendants()) <= before


def test_a_server_exiting_during_the_handshake_fails_initialize_with_a_closed_connection(
        mcp_stdio_server_params: Any) -> None:
    from mcp.shared.exceptions import MCPError

    with pytest.raises(BaseException) as caught:
        run(_stdio_session(mcp_stdio_server_params("--exit-during-handshake"), _tool_names))
    errors = [leaf for leaf in _leaves(caught.value) if isinstance(leaf, MCPError)]
    assert errors and "Connection closed" in str(errors[0])


def test_banner_lines_before_json_are_logged_as_parse_errors_and_the_handshake_still_completes(
        mcp_stdio_server_params: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="mcp.client.stdio")
    names = run(_stdio_session(mcp_stdio_server_params("--banner", "3", "--tools", "1"), _tool_names))
    assert names == ["tool_1"]
    parse_errors = [r for r in caplog.records if "Failed to parse JSONRPC message" in r.getMessage()]
    assert len(parse_errors) == 3


def test_a_bad_tool_option_is_a_usage_error_before_anything_is_served() -> None:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "kirocrew_testing.servers.stdio_server",
                           "--names", "a,a"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and done.stdout == ""
    assert "distinct" in done.stderr


# -- streamable HTTP ------------------------------------------------------------------


def test_the_http_server_announces_an_ephemeral_loopback_url(mcp_http_server: str) -> None:
    parts = urlsplit(mcp_http_server)
    assert (parts.scheme, parts.hostname, parts.path) == ("http", "127.0.0.1", "/mcp")
    assert parts.port and parts.port > 0


def test_an_http_server_lists_and_calls_its_tools(mcp_http_server: str) -> None:
    async def action(session: Any) -> Any:
        return await _tool_names(session), await session.call_tool("tool_2", {"text": "x"})

    names, result = run(_http_session(mcp_http_server, action))
    assert names == ["tool_1", "tool_2"]
    assert json.loads(result.content[0].text)["tool"] == "tool_2"


def test_an_http_server_requiring_a_header_refuses_requests_without_it(
        start_mcp_http_server: Any) -> None:
    url = start_mcp_http_server("--require-header", "X-Api-Key=s3cret", "--names", "only")
    bare = httpx.post(url, json={}, headers={"Accept": "application/json, text/event-stream"})
    wrong = httpx.post(url, json={}, headers={"X-Api-Key": "nope"})
    assert (bare.status_code, wrong.status_code) == (401, 401)
    assert "www-authenticate" not in bare.headers  # a plain refusal, not an OAuth challenge
    names = run(_http_session(url, _tool_names, headers={"X-Api-Key": "s3cret"}))
    assert names == ["only"]


def test_stopping_a_launched_server_leaves_no_process_behind() -> None:
    before = set(proc.live_descendants())
    server = launch(HTTP_MODULE, "--port", "0")
    pid = server.process.pid
    assert pid in proc.live_descendants()
    server.stop()
    assert pid not in proc.live_descendants()
    assert set(proc.live_descendants()) <= before


def test_a_server_that_cannot_start_is_reported_with_its_stderr() -> None:
    with pytest.raises(RuntimeError, match="must start with /"):
        launch(HTTP_MODULE, "--port", "0", "--path", "mcp")


# -- the OAuth-protected server, as a protocol peer -----------------------------------


def _pkce() -> tuple[str, str]:
    verifier = base64.urlsafe_b64encode(os.urandom(40)).decode().rstrip("=")
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def _register(metadata: dict[str, Any], redirect_uri: str) -> dict[str, Any]:
    response = httpx.post(metadata["registration_endpoint"], json={
        "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "client_name": "test"})
    assert response.status_code == 201, response.text
    return response.json()


def _authorize(metadata: dict[str, Any], client: dict[str, Any], redirect_uri: str,
               state: str) -> tuple[str, httpx.Response]:
    """Open the authorization endpoint with an S256 challenge: the verifier and the response."""
    verifier, challenge = _pkce()
    query = urlencode({"response_type": "code", "client_id": client["client_id"], "redirect_uri": redirect_uri,
                       "state": state, "code_challenge": challenge, "code_challenge_method": "S256"})
    return verifier, httpx.get(f"{metadata['authorization_endpoint']}?{query}")


def test_the_mcp_endpoint_answers_401_with_a_resource_metadata_challenge(oauth_mcp_server: Any) -> None:
    response = httpx.post(oauth_mcp_server.mcp_url, headers={"Accept": "application/json, text/event-stream"})
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{oauth_mcp_server.urls["resource_metadata_url"]}"' in challenge


def test_a_path_issuer_publishes_its_metadata_at_the_rfc8414_insertion_location(
        start_oauth_mcp_server: Any) -> None:
    server = start_oauth_mcp_server("--issuer-path", "/tenant/a/")
    base = server.base_url
    prm = httpx.get(f"{base}/.well-known/oauth-protected-resource/mcp").json()
    assert prm["resource"] == server.mcp_url
    assert prm["authorization_servers"] == [f"{base}/tenant/a/"]
    metadata = httpx.get(f"{base}/.well-known/oauth-authorization-server/tenant/a").json()
    assert metadata["issuer"] == f"{base}/tenant/a/"
    assert metadata["token_endpoint"] == f"{base}/tenant/a/token"
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert httpx.get(f"{base}/.well-known/oauth-authorization-server").status_code == 404


def test_metadata_can_be_served_only_at_the_openid_append_location(start_oauth_mcp_server: Any) -> None:
    server = start_oauth_mcp_server("--issuer-path", "/tenant/a", "--as-metadata", "openid-append")
    base = server.base_url
    assert httpx.get(f"{base}/.well-known/oauth-authorization-server/tenant/a").status_code == 404
    assert httpx.get(f"{base}/tenant/a/.well-known/openid-configuration").json()["issuer"] == \
        f"{base}/tenant/a"


def test_authorization_waits_on_a_consent_page_until_the_user_allows(oauth_mcp_server: Any) -> None:
    metadata = httpx.get(oauth_mcp_server.urls["authorization_server_metadata_url"]).json()
    redirect_uri = "http://127.0.0.1:9/cb"
    client = _register(metadata, redirect_uri)
    verifier, authorize = _authorize(metadata, client, redirect_uri, "st4te")
    assert authorize.status_code == 302
    assert "/consent?request=" in authorize.headers["location"]  # not back to the client yet
    assert httpx.get(authorize.headers["location"]).status_code == 200  # the page a user sees
    [pending] = oauth_mcp_server.pending_consents()
    assert (pending["client_id"], pending["state"]) == (client["client_id"], "st4te")
    allowed = httpx.get(pending["allow_url"])
    assert allowed.status_code == 302
    location = urlsplit(allowed.headers["location"])
    params = {k: v[0] for k, v in parse_qs(location.query).items()}
    assert f"{location.scheme}://{location.netloc}{location.path}" == redirect_uri
    assert params["state"] == "st4te" and params["iss"] == oauth_mcp_server.issuer
    assert oauth_mcp_server.pending_consents() == []

    bad = httpx.post(metadata["token_endpoint"], data={
        "grant_type": "authorization_code", "code": params["code"], "redirect_uri": redirect_uri,
        "client_id": client["client_id"], "code_verifier": _pkce()[0]})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_grant"
    good = httpx.post(metadata["token_endpoint"], data={
        "grant_type": "authorization_code", "code": params["code"], "redirect_uri": redirect_uri,
        "client_id": client["client_id"], "code_verifier": verifier})
    assert good.status_code == 200, good.text
    tokens = good.json()
    assert tokens["refresh_token"] and tokens["expires_in"] == 3600

    refreshed = httpx.post(metadata["token_endpoint"], data={
        "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
        "client_id": client["client_id"]})
    assert refreshed.status_code == 200
    assert refreshed.json()["refresh_token"] != tokens["refresh_token"]
    reused = httpx.post(metadata["token_endpoint"], data={
        "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
        "client_id": client["client_id"]})
    assert reused.status_code == 400  # rotation: the old refresh token is dead

    # The SDK's RevocationRequest declares client_secret without a default, so a public
    # client sends it empty.
    revoke = httpx.post(metadata["revocation_endpoint"], data={
        "token": refreshed.json()["access_token"], "client_id": client["client_id"], "client_secret": ""})
    assert revoke.status_code == 200
    assert oauth_mcp_server.state()["access_tokens"] == 0


def test_a_reset_forgets_registrations_consents_and_tokens_but_keeps_the_preregistered_client(
        start_oauth_mcp_server: Any) -> None:
    server = start_oauth_mcp_server("--client-id", "kept-app")
    metadata = httpx.get(server.urls["authorization_server_metadata_url"]).json()
    redirect_uri = "http://127.0.0.1:9/cb"
    client = _register(metadata, redirect_uri)
    verifier, _ = _authorize(metadata, client, redirect_uri, "one")
    params = parse_qs(urlsplit(httpx.get(server.pending_consents()[0]["allow_url"]).headers["location"]).query)
    tokens = httpx.post(metadata["token_endpoint"], data={
        "grant_type": "authorization_code", "code": params["code"][0], "redirect_uri": redirect_uri,
        "client_id": client["client_id"], "code_verifier": verifier}).json()
    _authorize(metadata, client, redirect_uri, "two")  # a request left pending
    before = server.state()
    assert before["clients"] == sorted(["kept-app", client["client_id"]])
    assert (before["pending"], before["access_tokens"]) == (1, 1)

    server.reset()

    assert server.state() == {"clients": ["kept-app"], "pending": 0, "access_tokens": 0,
                              "live_access_tokens": 0, "refresh_tokens": 0, "counters": {}}
    assert server.pending_consents() == []
    bearer = {"Authorization": f"Bearer {tokens['access_token']}", "Accept": "application/json, text/event-stream"}
    assert httpx.post(server.mcp_url, headers=bearer).status_code == 401  # the old token is unknown now
    refused = httpx.post(metadata["token_endpoint"], data={
        "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": client["client_id"]})
    assert (refused.status_code, refused.json()["error"]) == (401, "invalid_client")  # the client is forgotten too


@pytest.mark.parametrize("method", ["plain", None])
def test_authorization_without_an_s256_challenge_is_refused(oauth_mcp_server: Any, method: str | None) -> None:
    metadata = httpx.get(oauth_mcp_server.urls["authorization_server_metadata_url"]).json()
    redirect_uri = "http://127.0.0.1:9/cb"
    client = _register(metadata, redirect_uri)
    params = {"response_type": "code", "client_id": client["client_id"], "redirect_uri": redirect_uri,
              "state": "s"}
    if method is not None:  # plain PKCE; None: no code_challenge at all
        params |= {"code_challenge": "a" * 43, "code_challenge_method": method}
    response = httpx.get(f"{metadata['authorization_endpoint']}?{urlencode(params)}")
    assert response.status_code == 302
    assert parse_qs(urlsplit(response.headers["location"]).query)["error"] == ["invalid_request"]
    assert oauth_mcp_server.pending_consents() == []
