"""Pre-registered providers end to end: the operator's client, the mint's entry, the fake kiro-cli and the AS.

The OAuth fixture server runs in pre-registered mode (a known client id and
secret, one exact redirect URI, dynamic registration refused), and the real
fake kiro-cli mints against it through the gateway's routes, with GitHub
routed to the fixture the way ``kirocrew serve --override-origin`` does.
GitHub's callback port (48101) is registered, not chosen, so the tests that
let kiro-cli listen on it hold it alone (:func:`kirocrew_testing.ports.exclusive_port`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from kirocrew_core import audit, grants, home
from kirocrew_core.origin_overrides import OriginOverrides, activate
from kirocrew_testing.fixtures import run_kirocrew
from kirocrew_testing.ports import exclusive_port

from kirocrew_connections.approval_url import url_origin
from kirocrew_connections import clients, mint
from kirocrew_connections.registry import routed_registry

CLIENT_ID = "Iv1.kirocrew-test-app"
SECRET = "s3cret-VALUE-that-must-never-leak-0123456789"
GITHUB_PORT = 48101
GITHUB_ORIGIN = "https://api.githubcopilot.com"
GITHUB_APPROVAL_ORIGIN = "https://github.com"


def routed_to(server: Any) -> Any:
    """GitHub's MCP origin and its consent page's origin both on the fixture (it serves both)."""
    from kirocrew_core.origin_overrides import OriginOverrides

    base = server.mcp_url.rsplit("/mcp/", 1)[0]
    return OriginOverrides({GITHUB_ORIGIN: base, GITHUB_APPROVAL_ORIGIN: base})
WAIT_SECS = 60.0


@pytest.fixture
def plugin_manager(connections_plugins: Any) -> Any:
    return connections_plugins


@pytest.fixture
def configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIROCREW_CONNECTIONS_GITHUB_CLIENT_ID", CLIENT_ID)
    monkeypatch.setenv("KIROCREW_CONNECTIONS_GITHUB_CLIENT_SECRET", SECRET)


@pytest.fixture
def github_port() -> Iterator[int]:
    with exclusive_port(GITHUB_PORT) as port:
        yield port


def preregistered_server(start_oauth_mcp_server: Any, *, port: int, secret: str = SECRET,
                         method: str = "post", mcp_path: str = "/mcp") -> Any:
    return start_oauth_mcp_server(
        "--mcp-path", mcp_path, "--scopes", "read:user,read:org,public_repo", "--client-id", CLIENT_ID,
        "--client-secret", secret, "--token-auth-method", method,
        "--redirect-uri", f"http://127.0.0.1:{port}/callback", "--no-dcr")


@pytest.fixture
def routed_github(github_port: int, start_oauth_mcp_server: Any) -> Iterator[Any]:
    """The fixture AS in pre-registered mode at GitHub's MCP path, with GitHub's origin routed to it."""
    server = preregistered_server(start_oauth_mcp_server, port=github_port, mcp_path="/mcp/")
    activate(routed_to(server))
    yield server
    activate(OriginOverrides())


@pytest.fixture
def client(gateway_client: Any) -> Iterator[Any]:
    yield gateway_client
    gateway_client.portal.call(mint.mint_engine().aclose)




def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def crew_servers() -> dict[str, Any]:
    path = home.crew_mcp_file()
    return json.loads(path.read_text()).get("mcpServers", {}) if path.exists() else {}


def files_holding(text: str, *roots: Path) -> list[Path]:
    found: set[Path] = set()
    for root in roots:
        if not root.exists():
            continue
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                try:
                    if text.encode() in path.read_bytes():
                        found.add(path)
                except OSError:
                    continue
    return sorted(found)


def private(path: Path) -> bool:
    """0600 in a 0700 directory, both owned by this user."""
    st, parent = path.stat(), path.parent.stat()
    return (stat.S_IMODE(st.st_mode) == 0o600 and stat.S_IMODE(parent.st_mode) == 0o700
            and st.st_uid == parent.st_uid == os.getuid())


# -- where the client comes from --------------------------------------------------------------


def test_the_environment_config_key_and_secret_file_each_configure_the_client(
        monkeypatch: pytest.MonkeyPatch) -> None:
    github = routed_registry().get("github")
    assert (github.visibility, github.client_id, github.client_secret_set) == ("gated", None, False)
    run = run_kirocrew("connections", "client", "set", "github", "--client-id", CLIENT_ID, input=SECRET + "\n")
    assert run.returncode == 0, run.stderr
    assert "http://127.0.0.1:48101/callback" in run.stdout and SECRET not in run.stdout + run.stderr
    github = routed_registry().get("github")
    assert (github.visibility, github.client_id, github.client_secret_set) == ("visible", CLIENT_ID, True)
    assert private(clients.secret_file("github"))
    monkeypatch.setenv("KIROCREW_CONNECTIONS_GITHUB_CLIENT_ID", "Iv1.from-env")
    found = clients.operator_client(routed_registry().get("github"))
    assert found is not None and (found.client_id, found.id_source, found.secret_source) == (
        "Iv1.from-env", "environment", "file")
    assert SECRET not in repr(found)


def test_the_secret_never_reaches_config_output_or_show(monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_kirocrew("connections", "client", "set", "github", "--client-id", CLIENT_ID,
                        input=SECRET).returncode == 0
    outputs = [run_kirocrew(*argv) for argv in (
        ("config", "list"), ("config", "get", "connections.github.client_id"),
        ("connections", "client", "show", "github"), ("connections", "client", "show", "github", "--json"),
        ("connections", "providers", "--json"))]
    assert all(out.returncode == 0 for out in outputs), [out.stderr for out in outputs]
    assert all(SECRET not in out.stdout + out.stderr for out in outputs)
    assert CLIENT_ID in outputs[1].stdout
    shown = json.loads(outputs[3].stdout)
    assert (shown["secretSet"], shown["secretSource"], shown["ready"]) == (True, "file", True)
    assert SECRET not in home.config_file().read_text()
    assert next(p for p in json.loads(outputs[4].stdout) if p["slug"] == "github")["visibility"] == "visible"
    removed = run_kirocrew("connections", "client", "remove", "github")
    assert removed.returncode == 0 and not clients.secret_file("github").exists()
    assert routed_registry().get("github").visibility == "gated"


def test_a_client_secret_set_is_redacted_from_every_result_and_a_removed_one_no_longer(
        installed_plugin_manager: Any) -> None:
    from kirocrew_core.redaction import redact_secrets

    assert redact_secrets(f"the app said {SECRET}") == f"the app said {SECRET}"
    assert run_kirocrew("connections", "client", "set", "github", "--client-id", CLIENT_ID,
                        input=SECRET).returncode == 0
    # Known through kirocrew-connections' secret_files(): as printed, in hex, in a part of it.
    shown = f"a: {SECRET}; hex: {SECRET.encode().hex()}; cut: {SECRET[4:30]}"
    assert redact_secrets(shown) == "a: <redacted>; hex: <redacted>; cut: <redacted>"
    assert run_kirocrew("connections", "client", "remove", "github").returncode == 0
    assert redact_secrets(SECRET) == SECRET  # the file is read again: no secret of ours any more


@pytest.mark.parametrize(("argv", "stdin", "code"), [
    (("../../etc", "--client-id", CLIENT_ID), SECRET, "unknown_provider"),
    (("notion", "--client-id", CLIENT_ID), SECRET, "not_preregistered"),
    (("github", "--client-id", "  "), SECRET, "client_id_empty"),
    (("github", "--client-id", "has space"), SECRET, "client_id_invalid"),
    (("github", "--client-id", CLIENT_ID), "", "client_secret_empty"),
])
def test_bad_client_input_is_refused_with_a_stable_code_and_changes_nothing(
        argv: tuple[str, ...], stdin: str, code: str) -> None:
    run = run_kirocrew("connections", "client", "set", *argv, input=stdin)
    assert run.returncode == 2 and f"error[{code}]" in run.stderr, run.stderr
    assert not home.config_file().exists() and not clients.clients_dir().exists()


def test_a_symlinked_or_loose_secret_file_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    directory = clients.clients_dir()
    directory.mkdir(parents=True, mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    clients.secret_file("github").symlink_to(victim)
    run = run_kirocrew("connections", "client", "set", "github", "--client-id", CLIENT_ID, input=SECRET)
    assert run.returncode == 2 and "error[client_secret_symlink]" in run.stderr
    assert victim.read_text() == "precious" and not home.config_file().exists()
    with pytest.raises(clients.ClientConfigError) as refused:
        clients.read_secret_file("github")
    assert refused.value.code == "client_secret_symlink"

    clients.secret_file("github").unlink()
    clients.secret_file("github").write_text(SECRET)
    os.chmod(clients.secret_file("github"), 0o644)
    with pytest.raises(clients.ClientConfigError) as loose:
        clients.read_secret_file("github")
    assert loose.value.code == "client_secret_file_mode"
    os.environ.pop("KIROCREW_CONNECTIONS_GITHUB_CLIENT_SECRET", None)
    github = routed_registry().get("github")
    assert github.client_secret_set is False  # a loose file is not a configured secret
    shown = json.loads(run_kirocrew("connections", "client", "show", "github", "--json").stdout)
    assert (shown["secretProblem"], shown["secretSet"]) == ("client_secret_file_mode", False)


# -- what kirocrew writes where ------------------------------------------------------------------


def test_install_writes_the_client_id_and_callback_but_never_the_secret(client: Any, configured: None) -> None:
    answer = client.post("/api/connections/install", json={"slug": "github"})
    assert answer.status_code == 200, answer.text
    entry = crew_servers()["github"]
    assert entry == {"url": "https://api.githubcopilot.com/mcp/",
                     "oauth": {"clientId": CLIENT_ID, "redirectUri": "http://127.0.0.1:48101/callback"},
                     "oauthScopes": ["read:user", "read:org", "public_repo"]}
    rendered = json.loads(home.rendered_agent_file().read_text())["mcpServers"]["github"]
    assert rendered["oauth"] == {"clientId": CLIENT_ID, "redirectUri": "http://127.0.0.1:48101/callback"}
    assert files_holding(SECRET, home.kiro_home(), home.crew_home()) == []


def test_the_mint_entry_carries_the_whole_client_and_lives_only_in_a_private_spec(configured: None) -> None:
    github = routed_registry().get("github")
    entry = mint.mint_entry(github, "github")
    assert entry["oauth"] == {"clientId": CLIENT_ID, "redirectUri": "http://127.0.0.1:48101/callback",
                              "clientSecret": SECRET}
    assert entry["oauthScopes"] == ["read:user", "read:org", "public_repo"]
    _name, path = mint.write_mint_spec("github", "github", entry)
    assert path.parent == mint.mint_agents_dir() and private(path)
    assert files_holding(SECRET, home.kiro_home(), home.crew_home()) == [path]
    assert mint.remove_mint_spec(path)
    notion = routed_registry().get("notion")
    assert "oauth" not in mint.mint_entry(notion, "notion")  # a DCR provider's entry is untouched


# -- end to end through the gateway ----------------------------------------------------------------


def test_a_configured_github_connects_through_the_gateway_with_our_client_and_port_and_tests_usable(
        fake_kiro_cli: Any, routed_github: Any, client: Any, configured: None,
        caplog: pytest.LogCaptureFixture, poll_mint: Any) -> None:
    caplog.set_level("DEBUG")
    assert client.post("/api/connections/install", json={"slug": "github"}).status_code == 200
    started = client.post("/api/connections/mint", json={"slug": "github"}).json()
    waiting = poll_mint(client, "github", {"waiting", "failed", "granted"})
    assert waiting["state"] == "waiting", waiting
    query = parse_qs(urlsplit(waiting["oauth_url"]).query)
    assert query["client_id"] == [CLIENT_ID]
    assert query["redirect_uri"] == ["http://127.0.0.1:48101/callback"]
    assert query["scope"] == ["read:user read:org public_repo"]
    (spec,) = mint.mint_agents_dir().glob("kirocrew-mint-*.json")
    assert private(spec) and SECRET in spec.read_text()
    views = [json.dumps(waiting), client.get("/api/connections/status").text, client.get("/connections").text]

    routed_github.consent(waiting["oauth_url"])
    granted = poll_mint(client, "github", {"granted", "failed", "expired"})
    assert granted == {"slug": "github", "state": "granted", "token": started["token"]}
    state = routed_github.state()
    assert state["clients"] == [CLIENT_ID] and "registrations" not in state["counters"]
    url = routed_registry().get("github").mcp_url
    assert grants.grant_presence(url) is True
    tested = client.post("/api/connections/test", json={"slug": "github"}).json()
    assert tested["verdict"] == "usable", tested
    status = next(r for r in client.get("/api/connections/status").json()["connections"] if r["slug"] == "github")
    assert (status["status"], status["needsClientConfig"]) == ("connected", False)

    # The secret: nowhere but the owner-only files that must hold it.
    assert list(mint.mint_agents_dir().glob("kirocrew-mint-*.json")) == []
    assert SECRET not in caplog.text
    assert all(SECRET not in view for view in views)
    assert SECRET not in json.dumps(audit.tail(1000))
    holders = files_holding(SECRET, home.kiro_home(), home.crew_home())
    assert holders == [], holders
    # kiro-cli keeps it with the grant's registration (its custody, as for a DCR secret), owner-only.
    _token, registration = grants.artifact_paths(url)
    assert files_holding(SECRET, home.oauth_cache_dir()) == [registration]
    assert stat.S_IMODE(registration.stat().st_mode) == 0o600


def test_a_wrong_secret_fails_the_mint_with_a_clear_reason(
        fake_kiro_cli: Any, github_port: int, start_oauth_mcp_server: Any, client: Any, configured: None,
        poll_mint: Any) -> None:
    server = preregistered_server(start_oauth_mcp_server, port=github_port, secret="the-real-one",
                                  mcp_path="/mcp/")
    activate(routed_to(server))
    try:
        client.post("/api/connections/mint", json={"slug": "github"})
        waiting = poll_mint(client, "github", {"waiting", "failed"})
        assert waiting["state"] == "waiting", waiting
        server.consent(waiting["oauth_url"])
        failed = poll_mint(client, "github", {"failed", "granted", "expired"})
    finally:
        activate(OriginOverrides())
    assert (failed["state"], failed["reason"]) == ("failed", "mint_consent_failed")
    assert grants.grant_presence(routed_registry().get("github").mcp_url) is False
    # The row settles first (the fence), then the engine audits it: wait for the record.
    assert _audited_within(10, "mint_consent_failed"), audit.tail(20)


def _audited_within(seconds: float, reason: str) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        events = [e for e in audit.tail(100) if e.get("event") == mint.AUDIT_EVENT]
        if events and events[-1]["fields"]["reason"] == reason:
            return True
        time.sleep(0.05)
    return False


def test_an_unconfigured_preregistered_provider_is_not_minted(client: Any) -> None:
    answer = client.post("/api/connections/mint", json={"slug": "github"})
    assert answer.status_code == 409 and answer.json()["code"] == "provider_not_offered"
    assert mint.mint_engine().state("github") is None
    row = next(r for r in client.get("/api/connections/status").json()["connections"] if r["slug"] == "github")
    assert (row["reason"], row["needsClientConfig"]) == ("client_not_configured", True)


# -- the engine: the fixed callback port --------------------------------------------------------------


def github_at(url: str, port: int) -> Any:
    github = routed_registry().get("github")
    assert github.auth is not None
    return dataclasses.replace(github, mcp_url=url, auth=dataclasses.replace(github.auth, redirect_port=port),
                               approval_origins=(url_origin(url) or url,))


async def wait_state(eng: mint.MintEngine, states: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_SECS
    while (view := eng.view("github"))["state"] not in states:
        if time.monotonic() > deadline:
            raise AssertionError(f"the mint stayed {view}")
        await asyncio.sleep(0.05)
    return view


def test_a_second_connect_waits_for_the_first_listener_then_takes_the_port(
        fake_kiro_cli: Any, start_oauth_mcp_server: Any, configured: None) -> None:
    port = free_port()
    server = preregistered_server(start_oauth_mcp_server, port=port, method="basic")
    provider = github_at(server.mcp_url, port)

    async def scenario() -> tuple[dict[str, Any], str]:
        eng = mint.MintEngine()
        eng.poll = 0.2
        try:
            eng.start(provider)
            first = await wait_state(eng, {"waiting", "failed"})
            assert first["state"] == "waiting", first
            second = eng.start(provider)
            view = await wait_state(eng, {"waiting", "failed"})
            assert view["token"] == second.token
            await asyncio.to_thread(server.consent, view["oauth_url"])
            return await wait_state(eng, {"granted", "failed", "expired"}), first["oauth_url"]
        finally:
            await eng.aclose()

    granted, first_url = asyncio.run(scenario())
    assert granted["state"] == "granted", granted  # client_secret_basic, as the AS allows
    assert f"127.0.0.1%3A{port}%2Fcallback" in first_url


def test_a_callback_port_held_by_another_program_fails_with_a_clear_reason(
        fake_kiro_cli: Any, start_oauth_mcp_server: Any, configured: None) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = int(squatter.getsockname()[1])
        server = preregistered_server(start_oauth_mcp_server, port=port)

        async def scenario() -> dict[str, Any]:
            eng = mint.MintEngine()
            try:
                eng.start(github_at(server.mcp_url, port))
                return await wait_state(eng, {"failed", "waiting"})
            finally:
                await eng.aclose()

        view = asyncio.run(scenario())
    assert (view["state"], view["reason"]) == ("failed", "mint_redirect_port_busy")
    assert not mint.mint_agents_dir().exists() or list(mint.mint_agents_dir().glob("*.json")) == []


def test_the_fake_fails_the_server_when_its_fixed_port_is_taken(
        fake_kiro_cli: Any, start_oauth_mcp_server: Any, tmp_path: Path) -> None:
    """Without kirocrew's own check: kiro-cli (the fake) cannot listen, and says so instead of hanging."""
    from kirocrew_testing.fake_kiro_oauth import AuthorizationFailedError, PreregisteredClient, prepare_auth

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen(1)
        port = int(squatter.getsockname()[1])
        server = preregistered_server(start_oauth_mcp_server, port=port)
        client = PreregisteredClient(CLIENT_ID, SECRET, f"127.0.0.1:{port}", ("mcp:tools",))

        async def attempt() -> None:
            await prepare_auth(server.mcp_url, client=client, on_authorization_url=lambda url: None)

        with pytest.raises(AuthorizationFailedError, match=f"cannot listen on 127.0.0.1:{port}"):
            asyncio.run(attempt())


def test_the_fixture_refuses_registration_and_an_unregistered_redirect(start_oauth_mcp_server: Any) -> None:
    import httpx

    server = preregistered_server(start_oauth_mcp_server, port=free_port())
    base = server.mcp_url.rsplit("/mcp", 1)[0]
    metadata = httpx.get(base + "/.well-known/oauth-authorization-server").json()
    assert "registration_endpoint" not in metadata
    assert httpx.post(base + "/register", json={"redirect_uris": ["http://127.0.0.1:1/"]}).status_code in (404, 405)
    wrong = httpx.get(base + "/authorize", params={
        "response_type": "code", "client_id": CLIENT_ID, "redirect_uri": "http://127.0.0.1:1/callback",
        "code_challenge": "x" * 43, "code_challenge_method": "S256", "state": "s"})
    assert wrong.status_code == 400 and "redirect" in wrong.text.lower()
