"""kiro-cli's OAuth client side (the fake's module) against the OAuth fixture server, for real.

Every test runs a real authorization server subprocess on 127.0.0.1; the client
runs in this process with its loopback listener on the test's event loop, and
"the user" is an httpx client opening the authorization URL and clicking Allow.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Coroutine
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from kirocrew_core import grants
from kirocrew_testing import fake_kiro_oauth as fko


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


class User:
    """The person at the browser: opens each authorization URL and answers the consent page."""

    def __init__(self, server: Any, *, allow: bool = True) -> None:
        self.server = server
        self.allow = allow
        self.urls: list[str] = []
        self._answers: list[asyncio.Task[Any]] = []

    def __call__(self, url: str) -> None:
        self.urls.append(url)
        self._answers.append(asyncio.get_running_loop().create_task(self.server.aconsent(url, allow=self.allow)))

    async def landings(self) -> list[Any]:
        """What the loopback listener answered the browser, once per consent."""
        return list(await asyncio.gather(*self._answers))


def nobody(url: str) -> None:
    raise AssertionError(f"consent was asked for, but the stored grant should have served: {url}")


async def _tool_names(url: str, auth: Any) -> list[str]:
    async with fko.open_session(url, auth=auth) as session:
        return [tool.name for tool in (await session.list_tools()).tools]


async def _first_grant(server: Any) -> Any:
    user = User(server)
    auth = await fko.prepare_auth(server.mcp_url, on_authorization_url=user)
    await user.landings()
    return auth


def _read(path: Any) -> dict[str, Any]:
    return json.loads(path.read_text())


def _mode(path: Any) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_first_connection_asks_consent_and_writes_the_grant_pair_then_lists_tools(
        oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server

    async def scenario() -> Any:
        user = User(server)
        auth = await fko.prepare_auth(server.mcp_url, on_authorization_url=user)
        landings = await user.landings()
        return user, auth, landings, await _tool_names(server.mcp_url, auth)

    user, auth, landings, names = run(scenario())

    [oauth_url] = user.urls
    parts = urlsplit(oauth_url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{server.issuer}/authorize"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert query["resource"] == server.mcp_url and query["state"]
    assert urlsplit(query["redirect_uri"]).hostname == "127.0.0.1"
    [landing] = landings
    assert landing.status_code == 200 and "close this page" in landing.text

    key = grants.grant_key(server.mcp_url)
    token_path, registration_path = grants.artifact_paths(server.mcp_url)
    assert (token_path.name, registration_path.name) == (f"{key}.token.json", f"{key}.registration.json")
    assert (_mode(token_path), _mode(registration_path)) == (0o600, 0o600)
    token, registration = _read(token_path), _read(registration_path)
    assert token["access_token"] == auth.access_token and token["refresh_token"]
    assert token["token_type"] == "bearer" and token["expires_in"] == 3600
    assert registration["client_id"] in server.state()["clients"]
    assert registration["redirect_uri"] == query["redirect_uri"] and registration["client_secret"] is None

    assert names == ["tool_1", "tool_2"]
    counters = server.state()["counters"]
    assert (counters["registrations"], counters["code_exchanges"]) == (1, 1)


def test_a_second_connection_reuses_the_stored_grant_without_consent(oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server

    async def scenario() -> Any:
        first = await _first_grant(server)
        second = await fko.prepare_auth(server.mcp_url, on_authorization_url=nobody)
        return first, second, await _tool_names(server.mcp_url, second)

    first, second, names = run(scenario())
    assert second is not first and second.access_token == first.access_token
    assert (second.consents, second.refreshes) == (0, 0)
    assert names == ["tool_1", "tool_2"]
    counters = server.state()["counters"]
    assert (counters["registrations"], counters["code_exchanges"]) == (1, 1)


def test_a_token_the_server_expired_is_refreshed_and_the_rotated_token_persisted(
        oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server
    token_path, _ = grants.artifact_paths(server.mcp_url)

    run(_first_grant(server))
    before = _read(token_path)
    assert server.expire_access_tokens() == 1

    async def scenario() -> Any:
        auth = await fko.prepare_auth(server.mcp_url, on_authorization_url=nobody)
        return auth, await _tool_names(server.mcp_url, auth)

    auth, names = run(scenario())
    after = _read(token_path)
    assert auth.refreshes == 1 and names == ["tool_1", "tool_2"]
    assert after["access_token"] == auth.access_token != before["access_token"]
    assert after["refresh_token"] != before["refresh_token"]
    assert _mode(token_path) == 0o600
    stale = httpx.post(server.mcp_url, headers={"Authorization": f"Bearer {before['access_token']}"})
    assert stale.status_code == 401


def test_a_stored_token_past_its_lifetime_is_refreshed_before_it_is_sent(oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server
    token_path, _ = grants.artifact_paths(server.mcp_url)
    run(_first_grant(server))
    written = os.stat(token_path).st_mtime
    os.utime(token_path, (written - 7200, written - 7200))  # issued two hours ago, expires_in 3600

    auth = run(fko.prepare_auth(server.mcp_url, on_authorization_url=nobody))
    # The server still accepted the old token, so only the client's own clock caused this refresh.
    assert auth.refreshes == 1
    assert server.state()["counters"]["refreshes"] == 1


def test_a_revoked_grant_is_rejected_clearly_without_asking_consent(oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server
    run(_first_grant(server))
    assert server.revoke_all() == 2

    with pytest.raises(fko.GrantRejectedError) as caught:
        run(fko.prepare_auth(server.mcp_url, on_authorization_url=nobody))
    assert caught.value.server_url == server.mcp_url
    assert "refused the stored token" in str(caught.value)
    assert all(path.exists() for path in grants.artifact_paths(server.mcp_url))


def test_a_grant_revoked_mid_session_ends_the_session_with_a_rejection(oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server

    async def scenario() -> None:
        auth = await _first_grant(server)
        async with fko.open_session(server.mcp_url, auth=auth) as session:
            await session.list_tools()
            await asyncio.to_thread(server.revoke_all)
            await session.list_tools()

    with pytest.raises(fko.GrantRejectedError):
        run(scenario())


def test_reauthorization_mode_deletes_the_refused_token_and_asks_consent_again(
        oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server
    token_path, _ = grants.artifact_paths(server.mcp_url)
    run(_first_grant(server))
    before = _read(token_path)
    server.revoke_all()

    async def scenario() -> Any:
        user = User(server)
        auth = await fko.prepare_auth(server.mcp_url, on_authorization_url=user,
                                      reauthorize_on_rejection=True)
        await user.landings()
        return user, auth, await _tool_names(server.mcp_url, auth)

    user, auth, names = run(scenario())
    assert len(user.urls) == 1 and auth.consents == 1
    assert _read(token_path)["access_token"] == auth.access_token != before["access_token"]
    assert server.state()["counters"]["registrations"] == 2  # kiro-cli registers afresh
    assert names == ["tool_1", "tool_2"]


def test_a_denied_consent_fails_authorization_and_leaves_no_grant(oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server

    async def scenario() -> Any:
        user = User(server, allow=False)
        with pytest.raises(fko.AuthorizationFailedError) as caught:
            await fko.prepare_auth(server.mcp_url, on_authorization_url=user)
        return caught.value, await user.landings()

    error, [landing] = run(scenario())
    assert "access_denied" in landing.text or "denied" in str(error)
    assert "authorization refused" in str(error)
    assert not any(path.exists() for path in grants.artifact_paths(server.mcp_url))


def test_a_server_without_a_challenge_needs_no_auth(mcp_http_server: str) -> None:
    assert run(fko.prepare_auth(mcp_http_server, on_authorization_url=nobody)) is None


def test_a_malformed_token_file_is_reported_and_left_byte_identical(oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server
    run(_first_grant(server))
    token_path, _ = grants.artifact_paths(server.mcp_url)
    token_path.write_bytes(b"{not json")

    with pytest.raises(fko.GrantUnreadableError):
        run(fko.prepare_auth(server.mcp_url, on_authorization_url=nobody))
    assert token_path.read_bytes() == b"{not json"


def test_a_lone_registration_file_is_no_grant_and_consent_writes_a_fresh_pair(oauth_mcp_server: Any) -> None:
    server = oauth_mcp_server
    run(_first_grant(server))
    token_path, registration_path = grants.artifact_paths(server.mcp_url)
    old_client = _read(registration_path)["client_id"]
    token_path.unlink()

    async def scenario() -> Any:
        user = User(server)
        await fko.prepare_auth(server.mcp_url, on_authorization_url=user)
        await user.landings()
        return user

    assert len(run(scenario()).urls) == 1
    assert token_path.exists() and _read(registration_path)["client_id"] != old_client


def test_a_trailing_slash_in_the_mcp_url_names_a_different_grant(start_oauth_mcp_server: Any) -> None:
    server = start_oauth_mcp_server("--mcp-path", "/mcp/")
    assert server.mcp_url.endswith("/mcp/")
    run(_first_grant(server))
    with_slash = grants.artifact_paths(server.mcp_url)
    without_slash = grants.artifact_paths(server.mcp_url.rstrip("/"))
    assert all(path.exists() for path in with_slash)
    assert not any(path.exists() for path in without_slash)


@pytest.mark.parametrize(("options", "prm_path", "metadata_path"), [
    (("--issuer-path", "/tenant/a/"),
     "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server/tenant/a"),
    (("--issuer-path", "/tenant/a", "--as-metadata", "openid-insert"),
     "/.well-known/oauth-protected-resource/mcp", "/.well-known/openid-configuration/tenant/a"),
    (("--issuer-path", "/tenant/a/", "--as-metadata", "openid-append"),
     "/.well-known/oauth-protected-resource/mcp", "/tenant/a/.well-known/openid-configuration"),
    (("--no-challenge-metadata",),
     "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"),
    (("--no-challenge-metadata", "--prm-location", "root"),
     "/.well-known/oauth-protected-resource", "/.well-known/oauth-authorization-server"),
], ids=["path-issuer-trailing-slash", "openid-insertion", "openid-append", "no-challenge-url",
        "root-prm-only"])
def test_discovery_finds_the_documents_where_they_are_published_and_the_grant_works(
        start_oauth_mcp_server: Any, options: tuple[str, ...], prm_path: str, metadata_path: str) -> None:
    server = start_oauth_mcp_server(*options)

    async def scenario() -> Any:
        import httpx2

        async with httpx2.AsyncClient() as http:
            challenge = await fko.probe(server.mcp_url, http_client=http)
            assert challenge is not None and challenge.status == 401
            found = await fko.discover(server.mcp_url, challenge, http_client=http)
        auth = await _first_grant(server)
        await asyncio.to_thread(server.expire_access_tokens)
        refreshed = await fko.prepare_auth(server.mcp_url, on_authorization_url=nobody)
        return found, auth, refreshed, await _tool_names(server.mcp_url, refreshed)

    found, auth, refreshed, names = run(scenario())
    assert found.resource_metadata_url == server.base_url + prm_path
    assert found.metadata_url == server.base_url + metadata_path
    assert found.authorization_server == server.issuer
    assert str(found.metadata.issuer) == server.issuer
    assert auth.consents == 1 and refreshed.refreshes == 1  # the token endpoint under the issuer path
    assert names == ["tool_1", "tool_2"]


def test_the_loopback_listener_ignores_stray_requests_and_closes_after_the_callback() -> None:
    async def scenario() -> Any:
        listener = fko.LoopbackListener()
        redirect_uri = await listener.start()
        async with httpx.AsyncClient() as browser:
            stray = await browser.get(redirect_uri + "favicon.ico")
            landing = await browser.get(redirect_uri, params={"code": "c0de", "state": "st"})
            params = await listener.wait(timeout=10)
            with pytest.raises(httpx.ConnectError):
                await browser.get(redirect_uri, params={"code": "again"})
        return redirect_uri, stray, landing, params

    redirect_uri, stray, landing, params = run(scenario())
    assert urlsplit(redirect_uri).hostname == "127.0.0.1" and urlsplit(redirect_uri).port
    assert stray.status_code == 404
    assert landing.status_code == 200 and landing.text == "You can close this page now"
    assert params == {"code": "c0de", "state": "st"}
