"""The cold mint: a dedicated fake kiro-cli minting against the OAuth fixture server, and the HTTP surface.

The engine tests drive :class:`MintEngine` on their own event loop with the
real fake kiro-cli and the real OAuth-protected fixture server on 127.0.0.1;
"the user" is an HTTP client opening the approval URL and clicking Allow. The
HTTP tests go through the real gateway with a provider registered by a plugin
through ``registry_loaders()``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from kirocrew_core import audit, grants, home, hookimpl
from kirocrew_core.contributions import RegistryLoader

from kirocrew_connections.approval_url import url_origin
from kirocrew_connections import approval_url, mint
from kirocrew_connections.mint import MintEngine
from kirocrew_testing.processes import running as alive

WAIT_SECS = 60.0
TEST_SLUG = "loopback-test"


# -- fixtures and helpers ---------------------------------------------------------------


def _builtin_entry(slug: str) -> dict[str, Any]:
    from kirocrew_connections.registry import builtin_document

    return next(dict(e) for e in builtin_document() if e["slug"] == slug)


class LoopbackProviders:
    """A plugin contributing one test provider whose endpoint is a socket on 127.0.0.1."""

    def __init__(self) -> None:
        self.mcp_url = "https://127.0.0.1:9/mcp"

    @hookimpl
    def registry_loaders(self) -> list[RegistryLoader]:
        def load() -> list[dict[str, Any]]:
            entry = _builtin_entry("notion")
            entry.update(slug=TEST_SLUG, name="Loopback test", mcp_url=self.mcp_url)
            entry.pop("revoke_manual_path", None)
            return [entry]

        return [RegistryLoader("connections.providers", load, "a provider on a loopback socket")]


@pytest.fixture(autouse=True)
def providers(plugin_manager: Any) -> Iterator[LoopbackProviders]:
    import kirocrew_connections.plugin
    from kirocrew_connections.registry import clear_registry_cache

    plugin_manager.register(kirocrew_connections.plugin, name="connections")
    loopback = LoopbackProviders()
    plugin_manager.register(loopback, name="loopback-providers")
    clear_registry_cache()
    yield loopback
    clear_registry_cache()


@pytest.fixture
def client(gateway_client: Any) -> Iterator[Any]:
    """The gateway client; every mint it started is disposed on the gateway's own loop afterwards."""
    yield gateway_client
    gateway_client.portal.call(mint.mint_engine().aclose)


@pytest.fixture
def silent_tls_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers (a TLS handshake that hangs)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def fixture_provider(url: str, slug: str = "fixture") -> Any:
    """A real registry Provider (notion's), pointed at the fixture server."""
    from kirocrew_connections.registry import load_registry

    return dataclasses.replace(load_registry().get("notion"), slug=slug, mcp_url=url,
                               approval_origins=(url_origin(url) or url,))


def engine() -> MintEngine:
    fresh = MintEngine()
    fresh.poll = 0.2
    return fresh


async def wait_state(eng: MintEngine, slug: str, states: set[str], timeout: float = WAIT_SECS) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = eng.view(slug)
        if view["state"] in states:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"mint of {slug} stayed {view}")
        await asyncio.sleep(0.05)


def mint_specs() -> list[Path]:
    """The mint's specs: in its private agents dir, and never one in the global agents dir."""
    legacy = home.kiro_agents_dir()
    assert not (legacy.exists() and list(legacy.glob("kirocrew-mint-*.json"))), "a mint spec in ~/.kiro/agents"
    agents = mint.mint_agents_dir()
    return sorted(agents.glob("kirocrew-mint-*.json")) if agents.exists() else []


def manifest_paths() -> list[str]:
    path = mint.manifest_file()
    return [row["path"] for row in json.loads(path.read_text())["specs"]] if path.exists() else []


def mint_events() -> list[dict[str, Any]]:
    return [r for r in audit.tail(1000) if r.get("event") == mint.AUDIT_EVENT]




# -- the cold path against the fixture server -------------------------------------------


def test_a_cold_mint_serves_the_url_while_waiting_and_turns_granted_once_consent_lands(
        fake_kiro_cli: Any, oauth_mcp_server: Any) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)

    async def scenario() -> dict[str, Any]:
        eng = engine()
        try:
            row = eng.start(provider)
            assert eng.view("fixture")["state"] == "minting"
            waiting = await wait_state(eng, "fixture", {"waiting", "failed", "granted"})
            assert waiting["state"] == "waiting", waiting
            assert waiting["token"] == row.token
            pid = row.runtime.pid if row.runtime else None
            assert pid is not None and alive(pid), "the process holding the verifier must stay up"
            (spec,) = mint_specs()
            body = json.loads(spec.read_text())
            assert spec.name.startswith(f"kirocrew-mint-fixture-{os.getpid()}-")
            assert body["mcpServers"] == {"fixture": {"url": oauth_mcp_server.mcp_url}}
            assert (body["prompt"], body["model"], body["includeMcpJson"]) == ("", "auto", False)
            assert (body["tools"], body["allowedTools"]) == (["@fixture"], [])
            assert manifest_paths() == [str(spec)]
            assert grants.grant_presence(oauth_mcp_server.mcp_url) is False
            assert await card(eng, provider) == "awaiting_consent"

            landing = await oauth_mcp_server.aconsent(waiting["oauth_url"])
            assert landing.status_code == 200
            granted = await wait_state(eng, "fixture", {"granted", "failed", "expired"})
            assert await card(eng, provider) == "connected"
            await wait_for(lambda: row.runtime is None)
            assert not alive(pid)
            return granted
        finally:
            await eng.aclose()

    granted = asyncio.run(scenario())
    assert granted == {"slug": "fixture", "state": "granted", "token": granted["token"]}
    assert "oauth_url" not in granted
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is True
    assert mint_specs() == [] and manifest_paths() == []
    events = mint_events()
    assert [e["fields"]["reason"] for e in events] == ["awaiting_consent", "grant_observed"]
    assert all(e["fields"]["url_minted"] is True for e in events)
    assert not any("oauth_url" in e["fields"] for e in events)


async def card(eng: MintEngine, provider: Any) -> str:
    """The status card's verdict for ``provider`` from the status module, fed this engine's state."""
    from kirocrew_connections import status

    (row,) = await asyncio.to_thread(status.collect_statuses, [provider], {provider.slug: eng.state(provider.slug)})
    return str(row.status)


async def wait_for(predicate: Any, timeout: float = WAIT_SECS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition never held")
        await asyncio.sleep(0.05)


def test_an_existing_grant_that_answers_is_granted_as_validated_without_a_new_consent(
        fake_kiro_cli: Any, oauth_mcp_server: Any) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)

    async def scenario() -> dict[str, Any]:
        eng = engine()
        try:
            eng.start(provider)
            waiting = await wait_state(eng, "fixture", {"waiting", "failed"})
            await oauth_mcp_server.aconsent(waiting["oauth_url"])
            await wait_state(eng, "fixture", {"granted"})
            again = eng.start(provider)
            view = await wait_state(eng, "fixture", {"granted", "failed", "waiting"})
            assert view["token"] == again.token
            return view
        finally:
            await eng.aclose()

    view = asyncio.run(scenario())
    assert view["state"] == "granted"
    assert oauth_mcp_server.pending_consents() == []
    assert mint_events()[-1]["fields"]["reason"] == "validated_grant"
    assert mint_specs() == [] and manifest_paths() == []


@pytest.mark.parametrize("no_reauth", [False, True], ids=["kiro-cli-reconsents", "kiro-cli-fails-the-server"])
def test_a_grant_the_server_no_longer_honours_leads_to_a_real_consent_page(
        fake_kiro_cli: Any, oauth_mcp_server: Any, monkeypatch: pytest.MonkeyPatch, no_reauth: bool) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)
    token_path, _ = grants.artifact_paths(oauth_mcp_server.mcp_url)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        eng = engine()
        try:
            first = eng.start(provider)
            waiting = await wait_state(eng, "fixture", {"waiting", "failed"})
            await oauth_mcp_server.aconsent(waiting["oauth_url"])
            await wait_state(eng, "fixture", {"granted"})
            # The consent's kiro-cli must be gone before the revoke: one still running would meet the
            # refused token itself and, as kiro-cli does, delete it and ask again, racing this test.
            assert first.task is not None
            await first.task  # ends once the attempt's teardown (process and spec) completed
            dead = json.loads(token_path.read_text())["access_token"]
            await asyncio.to_thread(oauth_mcp_server.revoke_all)
            if no_reauth:
                monkeypatch.setenv("KIRO_FAKE_OAUTH_NO_REAUTH", "1")
            eng.start(provider)
            again = await wait_state(eng, "fixture", {"granted", "failed", "waiting"})
            assert again["state"] == "waiting", again
            assert await card(eng, provider) == "awaiting_consent"
            await oauth_mcp_server.aconsent(again["oauth_url"])
            granted = await wait_state(eng, "fixture", {"granted", "failed", "expired"})
            fresh = json.loads(token_path.read_text())["access_token"]
            assert fresh != dead
            return waiting, again, granted
        finally:
            await eng.aclose()

    _first, again, granted = asyncio.run(scenario())
    assert "oauth_url" in again and granted["state"] == "granted"
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is True
    assert mint_specs() == [] and manifest_paths() == []
    reasons = [e["fields"]["reason"] for e in mint_events()]
    # kiro-cli deletes a refused token itself; the no-re-consent form needs the mint to remove the dead pair.
    expected = ["dead_grant_removed"] if no_reauth else []
    assert reasons == ["awaiting_consent", "grant_observed", *expected, "awaiting_consent", "grant_observed"]


def test_a_dead_pair_that_cannot_be_removed_is_not_reported_granted_and_is_not_retried(
        fake_kiro_cli: Any, oauth_mcp_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)
    token_path, _ = grants.artifact_paths(oauth_mcp_server.mcp_url)

    async def scenario() -> dict[str, Any]:
        eng = engine()
        try:
            first = eng.start(provider)
            waiting = await wait_state(eng, "fixture", {"waiting", "failed"})
            await oauth_mcp_server.aconsent(waiting["oauth_url"])
            await wait_state(eng, "fixture", {"granted"})
            # As in the test above: the consent's kiro-cli (started before the switch below, so it still
            # re-consents) must be gone before the revoke. Still running, it can meet the refused token while
            # it finishes starting the server and delete it and ask again, as kiro-cli does; the next mint then
            # finds no pair and waits for a consent (the failure seen once under load).
            assert first.task is not None
            await first.task  # ends once the attempt's teardown (process and spec) completed
            await asyncio.to_thread(oauth_mcp_server.revoke_all)
            monkeypatch.setenv("KIRO_FAKE_OAUTH_NO_REAUTH", "1")
            # The unlink fails (as in a read-only cache directory, which root would still write): the pair
            # survives. Only this process's unlinks of the grant pair fail; kiro-cli runs in its own process.
            real_unlink = os.unlink

            def refusing_unlink(path: Any, *args: Any, **kwargs: Any) -> None:
                if os.path.dirname(os.fspath(path)) == str(token_path.parent):
                    raise PermissionError(13, "Permission denied", os.fspath(path))
                real_unlink(path, *args, **kwargs)

            monkeypatch.setattr(os, "unlink", refusing_unlink)
            try:
                eng.start(provider)
                return await wait_state(eng, "fixture", {"granted", "failed", "waiting"})
            finally:
                monkeypatch.setattr(os, "unlink", real_unlink)
        finally:
            await eng.aclose()

    view = asyncio.run(scenario())
    assert (view["state"], view.get("reason")) == ("failed", "mint_dead_grant_kept")
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is True
    removal = [e["fields"] for e in mint_events() if e["fields"]["reason"] == "dead_grant_removed"]
    assert len(removal) == 1 and removal[0]["grant_surviving"] == ["registration", "token"]
    assert mint_specs() == [] and manifest_paths() == []


def test_a_dead_pair_is_removed_only_while_it_is_the_pair_the_validation_disproved() -> None:
    url = "https://mcp.example.com/mcp"
    token, registration = grants.artifact_paths(url)
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_bytes(b"{}")
    registration.write_bytes(b"{}")
    disproved = mint._fingerprint(url)
    token.write_bytes(b'{"refreshed": true}')  # a consent landed meanwhile: another pair now
    assert mint._unlink_dead_pair(url, disproved) is None
    assert token.exists() and registration.exists()
    assert mint._unlink_dead_pair(url, None) is None  # nothing was disproved
    assert mint._unlink_dead_pair(url, mint._fingerprint(url)) == (True, [])
    assert not token.exists() and not registration.exists()


def test_a_grant_whose_server_exposes_no_tools_is_not_proven_and_not_removed(
        fake_kiro_cli: Any, start_oauth_mcp_server: Any) -> None:
    server = start_oauth_mcp_server("--tools", "0")
    provider = fixture_provider(server.mcp_url)

    async def scenario() -> dict[str, Any]:
        eng = engine()
        try:
            eng.start(provider)
            waiting = await wait_state(eng, "fixture", {"waiting", "failed"})
            await server.aconsent(waiting["oauth_url"])
            await wait_state(eng, "fixture", {"granted"})
            eng.start(provider)
            return await wait_state(eng, "fixture", {"granted", "failed", "waiting"})
        finally:
            await eng.aclose()

    view = asyncio.run(scenario())
    # The Test verdict is no_tools: that proves nothing, so no validated_grant; the server still
    # answers the pair, so it is not dead either and stays on disk.
    assert (view["state"], view.get("reason")) == ("failed", "mint_grant_unproven")
    assert "validated_grant" not in [e["fields"]["reason"] for e in mint_events()]
    assert grants.grant_presence(server.mcp_url) is True
    assert {"usable"} == set(mint.GRANT_PROVEN_VERDICTS)


def test_cancel_is_token_fenced_releases_the_process_and_the_spec_and_is_idempotent(
        fake_kiro_cli: Any, oauth_mcp_server: Any) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)

    async def scenario() -> tuple[bool, bool, bool, dict[str, Any], int]:
        eng = engine()
        try:
            row = eng.start(provider)
            await wait_state(eng, "fixture", {"waiting"})
            pid = row.runtime.pid if row.runtime else None
            assert pid is not None, "a waiting mint holds its kiro-cli"
            assert eng.in_progress() == 1  # a mint waiting for consent keeps an auto-started host up
            stale = await eng.cancel("fixture", "not-this-row")
            still = eng.view("fixture")["state"] == "waiting"
            dropped = await eng.cancel("fixture", row.token)
            again = await eng.cancel("fixture", None)
            assert eng.in_progress() == 0
            return stale or not still, dropped, again, eng.view("fixture"), pid
        finally:
            await eng.aclose()

    stale, dropped, again, view, pid = asyncio.run(scenario())
    assert (stale, dropped, again) == (False, True, False)
    assert view == {"slug": "fixture", "state": "idle"}
    assert not alive(pid)
    assert mint_specs() == [] and manifest_paths() == []
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is False


def test_a_second_mint_supersedes_and_disposes_the_first(fake_kiro_cli: Any, oauth_mcp_server: Any) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)

    async def scenario() -> tuple[int, str, dict[str, Any]]:
        eng = engine()
        try:
            first = eng.start(provider)
            await wait_state(eng, "fixture", {"waiting"})
            first_pid = first.runtime.pid if first.runtime else None
            assert first_pid is not None, "a waiting mint holds its kiro-cli"
            second = eng.start(provider)
            view = await wait_state(eng, "fixture", {"waiting", "failed"})
            await wait_for(lambda: not alive(first_pid))
            assert len(mint_specs()) == 1
            return first_pid, second.token, view
        finally:
            await eng.aclose()

    first_pid, token, view = asyncio.run(scenario())
    assert view["state"] == "waiting" and view["token"] == token
    assert not alive(first_pid)


def test_an_approval_url_outside_the_providers_approval_hosts_is_refused_at_once_and_never_served(
        fake_kiro_cli: Any, oauth_mcp_server: Any) -> None:
    # Notion's consent page is on mcp.notion.com; this server sends the user to its own loopback page instead.
    provider = dataclasses.replace(fixture_provider(oauth_mcp_server.mcp_url),
                                   approval_origins=("https://mcp.notion.com",))

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        eng = engine()
        try:
            row = eng.start(provider)
            seen = []
            while row.state == "minting":
                seen.append(eng.view("fixture"))
                await asyncio.sleep(0.01)
            await wait_for(lambda: row.task is not None and row.task.done())
            return eng.view("fixture"), seen
        finally:
            await eng.aclose()

    view, seen = asyncio.run(scenario())
    assert view == {"slug": "fixture", "state": "failed", "token": view["token"],
                    "reason": "mint_approval_host_refused"}
    assert all("oauth_url" not in v for v in seen)
    (event,) = mint_events()  # one attempt: asking the same server again would name the same page
    assert (event["outcome"], event["fields"]["reason"], event["fields"]["approval_host"]) == (
        "refused", "mint_approval_host_refused", "127.0.0.1")
    assert "/authorize" not in json.dumps(event)
    assert mint_specs() == [] and manifest_paths() == []


@pytest.mark.parametrize(("url", "allowed"), [
    ("https://mcp.notion.com/authorize?client_id=a&state=s", True),
    ("https://MCP.Notion.com:443/authorize", True),
    ("https://mcp.notion.com.attacker.example/authorize", False),
    ("https://attacker.example/mcp.notion.com/authorize", False),
    ("https://evil.mcp.notion.com/authorize", False),
    ("http://mcp.notion.com/authorize", False),
    ("https://mcp.notion.com:8443/authorize", False),
    ("https://attacker.example\\@mcp.notion.com/authorize", False),
    ("https://mcp.notion.com\t/authorize", False),
    ("javascript:alert(1)//mcp.notion.com", False),
    ("not a url", False),
])
def test_the_approval_host_gate_matches_the_exact_origin_only(url: str, allowed: bool) -> None:
    from kirocrew_connections.registry import load_registry

    assert approval_url.host_allowed(url, load_registry().get("notion")) is allowed


# -- the credential gate and spec cleanup -------------------------------------------------


@pytest.mark.parametrize("url", [
    "https://user:pw@auth.example/authorize?client_id=a",
    "https://auth.example/authorize?client_id=a&client_secret=s",
    "https://auth.example/authorize?client_id=a&code_verifier=v",
    "https://auth.example/authorize?client_id=a#access_token=t",
    "https://auth.example/authorize?client_id=a&refresh_token=t",
])
def test_a_credential_bearing_approval_url_is_refused(url: str) -> None:
    assert approval_url.oauth_url_contains_credential(url) is True


def test_an_ordinary_pkce_approval_url_passes_the_credential_gate() -> None:
    url = ("https://auth.example/authorize?response_type=code&client_id=abc&redirect_uri=http%3A%2F%2F127.0.0.1"
           "%3A5000%2F&state=xyz&code_challenge=c&code_challenge_method=S256&scope=mcp%3Atools&resource=r")
    assert approval_url.oauth_url_contains_credential(url) is False


def test_cleanup_never_touches_a_file_it_did_not_record(tmp_path: Path) -> None:
    name, path = mint.write_mint_spec("fixture", "fixture", {"url": "https://a.example/mcp"})
    assert path.parent == mint.mint_agents_dir()
    planted = mint.mint_agents_dir() / "kirocrew-mint-fixture-1-deadbeef.json"
    planted.write_text("{}")
    assert mint.remove_mint_spec(planted) is False and planted.exists()
    assert mint.remove_mint_spec(path) is True and not path.exists()
    assert manifest_paths() == []


def test_specs_live_owner_only_in_the_mint_work_dirs_project_agents_and_legacy_rows_are_still_removed() -> None:
    import stat as stat_module

    name, path = mint.write_mint_spec("fixture", "fixture", {"url": "https://a.example/mcp",
                                                             "oauth": {"clientSecret": "x"}})
    assert path == mint.mint_work_dir() / ".kiro" / "agents" / f"{name}.json"
    assert stat_module.S_IMODE(path.stat().st_mode) == 0o600
    for directory in (mint.mint_work_dir(), mint.mint_work_dir() / ".kiro", mint.mint_agents_dir()):
        assert stat_module.S_IMODE(directory.stat().st_mode) == 0o700
    assert not (home.kiro_agents_dir() / f"{name}.json").exists()
    # A row an older build recorded in the global agents dir is still cleaned up.
    legacy = home.kiro_agents_dir() / "kirocrew-mint-fixture-7-0123abcd.json"
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text("{}")
    rows = json.loads(mint.manifest_file().read_text())["specs"] + [{"path": str(legacy), "created_at": 0}]
    mint.manifest_file().write_text(json.dumps({"schema_version": 1, "specs": rows}))
    assert mint.sweep_orphan_specs(set()) == [str(legacy)] and not legacy.exists()
    assert mint.remove_mint_spec(path) is True and manifest_paths() == []


def test_a_planted_victim_traversal_or_symlink_row_is_never_unlinked(tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    agents = home.kiro_agents_dir()
    agents.mkdir(parents=True, exist_ok=True)
    link = agents / "kirocrew-mint-fixture-2-0badc0de.json"
    link.symlink_to(victim)
    traversal = f"{agents}/../agents/kirocrew-mint-fixture-3-01234567.json"
    (agents / "kirocrew-mint-fixture-3-01234567.json").write_text("{}")
    rendered = home.rendered_agent_file()
    rendered.write_text("{}")
    rows = [str(victim), str(link), traversal, str(rendered)]
    mint.manifest_file().parent.mkdir(parents=True, exist_ok=True)
    mint.manifest_file().write_text(json.dumps({"schema_version": 1, "specs": [{"path": p} for p in rows]}))
    for row in rows:
        assert mint.remove_mint_spec(Path(row)) is False
    assert victim.read_text() == "precious" and link.is_symlink() and rendered.exists()
    assert (agents / "kirocrew-mint-fixture-3-01234567.json").exists()


# -- the HTTP surface, through the gateway ---------------------------------------------


@pytest.mark.parametrize("slug", ["", "../../etc/passwd", "x" * 65, "no-such-provider", 7])
def test_post_refuses_anything_that_is_not_a_registered_provider(client: Any, slug: Any) -> None:
    response = client.post("/api/connections/mint", json={"slug": slug})
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_provider"
    assert mint.mint_engine().state("notion") is None


@pytest.mark.parametrize("slug", ["superhuman", "github", "figma"], ids=["gated", "preregistered-unconfigured",
                                                                         "hidden"])
def test_post_refuses_a_provider_that_is_not_offered_and_starts_nothing(client: Any, slug: str) -> None:
    from kirocrew_connections.registry import routed_registry

    assert routed_registry().get(slug).visibility != "visible"
    response = client.post("/api/connections/mint", json={"slug": slug})
    assert (response.status_code, response.json()["code"]) == (409, "provider_not_offered")
    assert mint.mint_engine().state(slug) is None
    assert mint_specs() == [] and manifest_paths() == []
    # The read side stays open: the card of a provider that stopped being offered still polls and cancels.
    assert client.get("/api/connections/mint", params={"slug": slug}).json() == {"slug": slug, "state": "idle"}
    cancel = client.post("/api/connections/cancel", json={"slug": slug})
    assert cancel.status_code == 200 and cancel.json()["dropped"] is False


@pytest.mark.parametrize("body", [b"not json", b"[1]", b'"notion"', b""])
def test_a_body_that_is_not_a_json_object_is_bad_json(client: Any, body: bytes) -> None:
    for url in ("/api/connections/mint", "/api/connections/cancel"):
        response = client.post(url, content=body, headers={"Content-Type": "application/json"})
        assert (response.status_code, response.json()["code"]) == (400, "bad_json")


def test_get_says_idle_when_no_mint_was_started(client: Any) -> None:
    assert client.get("/api/connections/mint", params={"slug": "notion"}).json() == {
        "slug": "notion", "state": "idle"}


def test_cancel_without_a_mint_is_a_no_op_and_an_empty_token_is_refused(client: Any) -> None:
    assert client.post("/api/connections/cancel", json={"slug": "notion"}).json() == {
        "ok": True, "slug": "notion", "dropped": False}
    for token in ("", 5):
        response = client.post("/api/connections/cancel", json={"slug": "notion", "token": token})
        assert (response.status_code, response.json()["code"]) == (400, "invalid_token")


def test_a_mint_through_the_gateway_is_visible_before_the_post_answers_and_cancels_by_token(
        fake_kiro_cli: Any, providers: LoopbackProviders, silent_tls_port: int, client: Any) -> None:
    fake_kiro_cli.switch(mcp_init_timeout="120")
    providers.mcp_url = f"https://127.0.0.1:{silent_tls_port}/mcp"
    started = client.post("/api/connections/mint", json={"slug": " Loopback-Test "})
    assert started.status_code == 200
    body = started.json()
    assert body == {"ok": True, "slug": TEST_SLUG, "state": "minting", "token": body["token"]}
    view = client.get("/api/connections/mint", params={"slug": TEST_SLUG}).json()
    assert view == {"slug": TEST_SLUG, "state": "minting", "token": body["token"]}
    from kirocrew_connections.plugin import host_services

    (service,) = host_services()
    assert service.busy() == "1 connection mint(s) in progress"  # the host must not idle out now
    status = client.get("/api/connections/status")
    if status.status_code == 200:
        row = next(r for r in status.json()["connections"] if r["slug"] == TEST_SLUG)
        assert row["status"] == "awaiting_consent"
    stale = client.post("/api/connections/cancel", json={"slug": TEST_SLUG, "token": "another-tab"}).json()
    assert stale["dropped"] is False
    dropped = client.post("/api/connections/cancel", json={"slug": TEST_SLUG, "token": body["token"]}).json()
    assert dropped == {"ok": True, "slug": TEST_SLUG, "dropped": True}
    assert client.get("/api/connections/mint", params={"slug": TEST_SLUG}).json()["state"] == "idle"
    assert mint_specs() == [] and manifest_paths() == []
    assert service.busy() is None


def test_a_server_that_cannot_be_reached_fails_with_a_coarse_reason(
        fake_kiro_cli: Any, providers: LoopbackProviders, client: Any, poll_mint: Any) -> None:
    providers.mcp_url = f"https://127.0.0.1:{closed_port()}/mcp"
    token = client.post("/api/connections/mint", json={"slug": TEST_SLUG}).json()["token"]
    view = poll_mint(client, TEST_SLUG, {"failed", "granted", "waiting", "expired"})
    assert view == {"slug": TEST_SLUG, "state": "failed", "token": token, "reason": "mint_server_failed"}
    client.portal.call(mint.mint_engine().aclose)  # waits for the attempt's teardown
    assert mint_specs() == [] and manifest_paths() == []


def test_under_an_override_of_the_mcp_origin_alone_the_consent_page_is_refused_and_the_row_says_why(
        fake_kiro_cli: Any, providers: LoopbackProviders, oauth_mcp_server: Any, client: Any, poll_mint: Any) -> None:
    from kirocrew_core.origin_overrides import OriginOverrides, activate

    providers.mcp_url = "https://127.0.0.1:9/mcp"
    served = urlsplit(oauth_mcp_server.mcp_url)
    activate(OriginOverrides({"https://127.0.0.1:9": f"{served.scheme}://{served.netloc}"}))
    try:
        started = client.post("/api/connections/mint", json={"slug": TEST_SLUG})
        assert started.status_code == 200, started.text
        view = poll_mint(client, TEST_SLUG, {"waiting", "granted", "failed", "expired"})
    finally:
        activate(OriginOverrides())
    assert view == {"slug": TEST_SLUG, "state": "failed", "token": started.json()["token"],
                    "reason": "mint_approval_host_refused"}
    client.portal.call(mint.mint_engine().aclose)


def test_through_the_gateway_a_revoked_grant_reconnects_through_a_real_consent_page(
        fake_kiro_cli: Any, providers: LoopbackProviders, oauth_mcp_server: Any, client: Any, poll_mint: Any) -> None:
    from kirocrew_core.origin_overrides import OriginOverrides, activate

    providers.mcp_url = "https://127.0.0.1:9/mcp"
    served = urlsplit(oauth_mcp_server.mcp_url)
    fixture = f"{served.scheme}://{served.netloc}"  # serves the consent page too: route notion's approval host
    activate(OriginOverrides({"https://127.0.0.1:9": fixture, "https://mcp.notion.com": fixture}))
    try:
        def connect() -> dict[str, Any]:
            started = client.post("/api/connections/mint", json={"slug": TEST_SLUG})
            assert started.status_code == 200, started.text
            waiting = poll_mint(client, TEST_SLUG, {"waiting", "granted", "failed", "expired"})
            assert waiting["state"] == "waiting" and waiting["token"] == started.json()["token"], waiting
            oauth_mcp_server.consent(waiting["oauth_url"])
            return poll_mint(client, TEST_SLUG, {"granted", "failed", "expired"})

        assert connect()["state"] == "granted"
        oauth_mcp_server.revoke_all()  # the provider no longer honours the grant on disk
        assert connect()["state"] == "granted"  # a real consent page again, then a fresh grant
        row = next(r for r in client.get("/api/connections/status").json()["connections"]
                   if r["slug"] == TEST_SLUG)
        assert row["status"] == "connected"
    finally:
        activate(OriginOverrides())
    client.portal.call(mint.mint_engine().aclose)  # waits for the attempts' teardown
    assert mint_specs() == [] and manifest_paths() == []


def test_a_mint_nobody_consents_to_expires_and_releases_its_process(
        fake_kiro_cli: Any, oauth_mcp_server: Any) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)

    async def scenario() -> tuple[dict[str, Any], int]:
        eng = engine()
        eng.ttl = 1.0
        try:
            row = eng.start(provider)
            await wait_state(eng, "fixture", {"waiting"})
            pid = row.runtime.pid if row.runtime else None
            assert pid is not None, "a waiting mint holds its kiro-cli"
            view = await wait_state(eng, "fixture", {"expired", "granted", "failed"})
            await wait_for(lambda: row.runtime is None)
            return view, pid
        finally:
            await eng.aclose()

    view, pid = asyncio.run(scenario())
    assert (view["state"], view["reason"]) == ("expired", "mint_ttl_elapsed")
    assert "oauth_url" not in view
    assert not alive(pid)
    assert mint_specs() == [] and manifest_paths() == []


def test_importing_the_mint_handlers_does_not_load_the_engine() -> None:
    import subprocess
    import sys

    code = ("import sys, kirocrew_connections.api, kirocrew_connections.mint_api; "
            "print('kirocrew_connections.mint' in sys.modules, 'kirocrew_core.acp_runtime' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr


class LeakyAuthServer:
    """A minimal OAuth-protected endpoint whose authorization endpoint carries a client secret.

    Discovery and registration work, so kiro-cli builds and announces an approval
    URL, and that URL holds ``client_secret``: the gate must refuse it.
    """

    def __init__(self) -> None:
        import http.server
        import threading

        outer = self
        self.registrations = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                base = outer.base
                if self.path == "/.well-known/oauth-protected-resource/mcp":
                    self._json(200, {"resource": f"{base}/mcp", "authorization_servers": [base]})
                elif self.path == "/.well-known/oauth-authorization-server":
                    self._json(200, {"issuer": base, "authorization_endpoint": f"{base}/authorize?client_secret=leak",
                                     "token_endpoint": f"{base}/token", "registration_endpoint": f"{base}/register",
                                     "response_types_supported": ["code"],
                                     "code_challenge_methods_supported": ["S256"]})
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/register":
                    outer.registrations += 1
                    self._json(201, {**body, "client_id": f"client-{outer.registrations}"})
                else:
                    self._json(401, {"error": "unauthorized"}, {
                        "WWW-Authenticate": f'Bearer resource_metadata="{outer.base}/.well-known/'
                                            'oauth-protected-resource/mcp"'})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_credential_bearing_url_is_retried_once_then_fails_and_is_never_recorded(fake_kiro_cli: Any) -> None:
    leaky = LeakyAuthServer()
    provider = fixture_provider(f"{leaky.base}/mcp")

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        eng = engine()
        try:
            row = eng.start(provider)
            seen = []
            while row.state == "minting":
                seen.append(eng.view("fixture"))
                await asyncio.sleep(0.01)
            view = eng.view("fixture")
            await wait_for(lambda: row.task is not None and row.task.done())
            return view, seen
        finally:
            await eng.aclose()

    try:
        view, seen = asyncio.run(scenario())
    finally:
        leaky.stop()
    assert leaky.registrations == 2, "one fresh attempt after the first rejection, and no more"
    assert view == {"slug": "fixture", "state": "failed", "token": view["token"], "reason": "mint_url_rejected"}
    assert all("oauth_url" not in v for v in seen)
    events = mint_events()
    assert [e["fields"]["reason"] for e in events] == ["mint_url_rejected"]
    assert "leak" not in json.dumps(events)
    assert mint_specs() == [] and manifest_paths() == []
