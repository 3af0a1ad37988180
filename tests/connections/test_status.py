"""GET /api/connections/status through the real gateway: grant presence by stat, connectedSince, reasons."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, grants, home

from kirocrew_connections import status

URL = "/api/connections/status"
OLD_STAMP = "2020-01-02T03:04:05Z"


# -- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture(autouse=True)
def _connections(plugin_manager: Any) -> Iterator[Any]:
    """The connections plugin on the test's manager; a registry loaded afresh for this test."""
    import kirocrew_connections.plugin
    from kirocrew_connections.registry import clear_registry_cache

    plugin_manager.register(kirocrew_connections.plugin, name="connections")
    clear_registry_cache()
    yield plugin_manager
    clear_registry_cache()


def provider(slug: str) -> Any:
    from kirocrew_connections.registry import load_registry

    return load_registry().get(slug)


def grant(slug: str, *, token: bool = True, registration: bool = True) -> tuple[Path, Path]:
    """kiro-cli's artifact pair for ``slug``'s endpoint, created on disk as kiro-cli would."""
    token_path, registration_path = grants.artifact_paths(provider(slug).mcp_url)
    token_path.parent.mkdir(parents=True, exist_ok=True)
    if token:
        token_path.write_text('{"access_token": "never-read"}')
    if registration:
        registration_path.write_text('{"client_id": "never-read"}')
    return token_path, registration_path


def revoke(slug: str) -> None:
    for path in grants.artifact_paths(provider(slug).mcp_url):
        path.unlink(missing_ok=True)


def rows(client: Any) -> dict[str, dict[str, Any]]:
    response = client.get(URL)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["schema_version"] == 1
    return {row["slug"]: row for row in body["connections"]}


def stored() -> dict[str, Any]:
    return json.loads(status.connected_since_file().read_text())


def store(providers: dict[str, str]) -> bytes:
    path = status.connected_since_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"schema_version": 1,
                       "providers": {slug: {"connected_since": since} for slug, since in providers.items()}})
    path.write_text(data)
    return data.encode()


def stamp_events() -> list[dict[str, Any]]:
    return [record for record in audit.tail(1000) if record.get("event") == status.AUDIT_EVENT]


def loop_the_oauth_cache() -> None:
    """Make the cache dir a symlink to itself: every stat under it fails with ELOOP, even for root."""
    cache = home.oauth_cache_dir()
    cache.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(cache.name, cache)


class ArtifactAndNetworkWatch:
    """An audit hook recording any open of a path in the OAuth cache and any socket use.

    Audit hooks cannot be removed, so one is installed per process and armed per test.
    """

    installed: ArtifactAndNetworkWatch | None = None

    def __init__(self) -> None:
        self.armed = False
        self.events: list[str] = []
        sys.addaudithook(self.hook)

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed:
            return
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if str(home.oauth_cache_dir()) in path:
                self.events.append(f"open {path}")
        elif event in ("socket.connect", "socket.getaddrinfo"):
            self.events.append(f"{event} {args[1:2]}")


@pytest.fixture
def watch() -> Iterator[ArtifactAndNetworkWatch]:
    if ArtifactAndNetworkWatch.installed is None:
        ArtifactAndNetworkWatch.installed = ArtifactAndNetworkWatch()
    watcher = ArtifactAndNetworkWatch.installed
    watcher.events = []
    yield watcher
    watcher.armed = False


# -- which rows, which verdicts ---------------------------------------------------------


def test_the_rows_are_the_visible_grid_plus_the_preregistered_providers(gateway_client: Any) -> None:
    from kirocrew_connections.registry import load_registry

    registry = load_registry()
    expected = [p.slug for p in registry.all()
                if p.visibility == "visible"
                or (p.auth is not None and p.auth.mode == "preregistered" and p.visibility != "hidden")]
    response = gateway_client.get(URL)
    assert [row["slug"] for row in response.json()["connections"]] == expected
    assert {"notion", "github"} <= set(expected)
    hidden = [p.slug for p in registry.all() if p.visibility == "hidden"]
    assert hidden and not set(hidden) & set(expected)


def test_a_provider_without_a_grant_is_not_connected(gateway_client: Any) -> None:
    assert rows(gateway_client)["notion"] == {
        "slug": "notion", "status": "not_connected", "reason": "no_grant",
        "grantPresent": False, "grantIndeterminate": False, "connectedSince": None,
    }


def test_a_paired_grant_is_connected_since_a_persisted_first_observation(gateway_client: Any) -> None:
    grant("notion")
    row = rows(gateway_client)["notion"]
    assert (row["status"], row["reason"], row["grantPresent"], row["grantIndeterminate"]) == (
        "connected", "grant_present", True, False)
    since = row["connectedSince"]
    assert since and since.endswith("Z")
    assert stored() == {"schema_version": 1, "providers": {"notion": {"connected_since": since}}}


def test_half_a_grant_is_no_grant(gateway_client: Any) -> None:
    grant("notion", registration=False)
    grant("linear", token=False)
    found = rows(gateway_client)
    assert (found["notion"]["status"], found["notion"]["reason"]) == ("not_connected", "no_grant")
    assert (found["linear"]["status"], found["linear"]["reason"]) == ("not_connected", "no_grant")
    assert not status.connected_since_file().exists()


def test_the_clock_survives_polls_and_is_audited_once(gateway_client: Any) -> None:
    grant("notion")
    first = rows(gateway_client)["notion"]["connectedSince"]
    before = status.connected_since_file().read_bytes()
    for _ in range(3):
        assert rows(gateway_client)["notion"]["connectedSince"] == first
    assert status.connected_since_file().read_bytes() == before
    events = stamp_events()
    assert len(events) == 1
    assert events[0]["fields"]["provider"] == "notion"
    assert events[0]["fields"]["connected_since"] == first


def test_concurrent_first_reads_agree_on_one_stamp_and_audit_it_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from kirocrew_connections.registry import load_registry

    providers = status.status_providers(load_registry())
    grant("notion")
    grant("linear")
    with ThreadPoolExecutor(max_workers=8) as pool:
        reads = list(pool.map(lambda _: status.collect_statuses(providers), range(16)))
    published = {tuple((row.slug, row.connected_since) for row in read if row.connected_since) for read in reads}
    assert len(published) == 1
    assert {slug for slug, _ in next(iter(published))} == {"notion", "linear"}
    assert sorted(event["fields"]["provider"] for event in stamp_events()) == ["linear", "notion"]


def test_a_stored_clock_is_reported_rather_than_re_dated(gateway_client: Any) -> None:
    grant("notion")
    store({"notion": OLD_STAMP})
    assert rows(gateway_client)["notion"]["connectedSince"] == OLD_STAMP
    assert stamp_events() == []


def test_a_gone_grant_prunes_the_clock_and_a_reconnect_starts_a_fresh_one(gateway_client: Any) -> None:
    grant("notion")
    grant("linear")
    store({"notion": OLD_STAMP, "linear": OLD_STAMP})
    revoke("notion")
    found = rows(gateway_client)
    assert found["notion"]["connectedSince"] is None
    assert found["linear"]["connectedSince"] == OLD_STAMP
    assert stored()["providers"] == {"linear": {"connected_since": OLD_STAMP}}
    grant("notion")
    fresh = rows(gateway_client)["notion"]["connectedSince"]
    assert fresh not in (None, OLD_STAMP)
    assert stored()["providers"]["notion"] == {"connected_since": fresh}


def test_a_clock_for_a_provider_the_read_does_not_list_is_left_alone(gateway_client: Any) -> None:
    store({"no-such-provider": OLD_STAMP})
    grant("notion")
    rows(gateway_client)
    assert stored()["providers"]["no-such-provider"] == {"connected_since": OLD_STAMP}


# -- unreadable is not absent -----------------------------------------------------------


def test_an_unreadable_cache_is_indeterminate_and_keeps_the_stored_clock(gateway_client: Any) -> None:
    data = store({"notion": OLD_STAMP})
    loop_the_oauth_cache()
    row = rows(gateway_client)["notion"]
    assert row == {"slug": "notion", "status": "not_connected", "reason": "grant_unreadable",
                   "grantPresent": False, "grantIndeterminate": True, "connectedSince": None}
    assert status.connected_since_file().read_bytes() == data
    assert stamp_events() == []


def test_an_unreadable_artifact_whose_partner_is_absent_is_an_absence(gateway_client: Any) -> None:
    token_path, _ = grant("notion", token=False, registration=False)
    os.symlink(token_path.name, token_path)  # the token stat fails (ELOOP); no registration at all
    store({"notion": OLD_STAMP})
    row = rows(gateway_client)["notion"]
    assert (row["reason"], row["grantIndeterminate"]) == ("no_grant", False)
    assert stored()["providers"] == {}


def test_an_unreadable_artifact_beside_a_present_one_is_indeterminate(gateway_client: Any) -> None:
    token_path, _ = grant("notion", token=False)
    os.symlink(token_path.name, token_path)
    data = store({"notion": OLD_STAMP})
    row = rows(gateway_client)["notion"]
    assert (row["reason"], row["grantPresent"], row["grantIndeterminate"]) == ("grant_unreadable", False, True)
    assert status.connected_since_file().read_bytes() == data


def test_the_read_never_opens_an_artifact_nor_touches_the_network(gateway_client: Any,
                                                                  watch: ArtifactAndNetworkWatch) -> None:
    token, _ = grant("notion")
    grant("linear", registration=False)
    watch.armed = True
    found = rows(gateway_client)
    assert found["notion"]["status"] == "connected"
    assert watch.events == []
    token.read_bytes()  # the watch does see an open of an artifact
    assert watch.events == [f"open {token}"]


# -- a clock that cannot persist is not published ---------------------------------------


def test_a_stamp_that_cannot_be_written_is_neither_published_nor_audited(gateway_client: Any) -> None:
    state = home.crew_home() / "state"
    state.write_text("a file where the state folder should be")
    grant("notion")
    row = rows(gateway_client)["notion"]
    assert (row["status"], row["connectedSince"]) == ("connected", None)
    assert stamp_events() == []


def test_a_persisted_clock_stays_reportable_when_new_stamps_cannot_be_written(gateway_client: Any) -> None:
    store({"notion": OLD_STAMP})
    grant("notion")
    grant("linear")
    shutil.rmtree(home.locks_dir(), ignore_errors=True)
    home.locks_dir().write_text("no lock can be taken here")
    found = rows(gateway_client)
    assert found["notion"]["connectedSince"] == OLD_STAMP
    assert (found["linear"]["status"], found["linear"]["connectedSince"]) == ("connected", None)
    assert stored()["providers"] == {"notion": {"connected_since": OLD_STAMP}}


def test_a_crew_home_that_cannot_exist_still_answers(gateway_client: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file")
    monkeypatch.setenv(home.CREW_HOME_ENV, str(blocker / "crew"))
    grant("notion")
    row = rows(gateway_client)["notion"]
    assert (row["status"], row["connectedSince"]) == ("connected", None)


def test_a_malformed_clock_file_is_left_byte_identical_and_reports_no_clock(gateway_client: Any) -> None:
    path = status.connected_since_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"schema_version": 1, "providers": {"notion": 7}}')
    grant("notion")
    grant("linear")
    found = rows(gateway_client)
    assert found["notion"]["connectedSince"] is None and found["linear"]["connectedSince"] is None
    assert path.read_bytes() == b'{"schema_version": 1, "providers": {"notion": 7}}'
    assert stamp_events() == []


# -- pre-registered providers -----------------------------------------------------------


def test_an_unconfigured_preregistered_provider_is_flagged(gateway_client: Any) -> None:
    row = rows(gateway_client)["github"]
    assert (row["status"], row["reason"], row["needsClientConfig"]) == (
        "not_connected", "client_not_configured", True)
    assert "needsClientConfig" not in rows(gateway_client)["notion"]


def test_an_environment_configured_client_clears_the_flag(gateway_client: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIROCREW_CONNECTIONS_GITHUB_CLIENT_ID", "Iv1.0123456789")
    monkeypatch.setenv("KIROCREW_CONNECTIONS_GITHUB_CLIENT_SECRET", "s3cret")
    row = rows(gateway_client)["github"]
    assert (row["reason"], row["needsClientConfig"]) == ("no_grant", False)


def test_a_confidential_client_with_only_an_id_stays_flagged(gateway_client: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIROCREW_CONNECTIONS_GITHUB_CLIENT_ID", "Iv1.0123456789")
    assert rows(gateway_client)["github"]["needsClientConfig"] is True


def test_a_held_grant_suppresses_the_flag(gateway_client: Any) -> None:
    grant("github")
    row = rows(gateway_client)["github"]
    assert (row["status"], row["needsClientConfig"]) == ("connected", False)


def test_an_indeterminate_grant_lookup_still_flags(gateway_client: Any) -> None:
    loop_the_oauth_cache()
    row = rows(gateway_client)["github"]
    assert (row["reason"], row["grantIndeterminate"], row["needsClientConfig"]) == ("grant_unreadable", True, True)


# -- the classifier and the mint table --------------------------------------------------


@pytest.mark.parametrize(("presence", "mint_state", "expected"), [
    (True, None, ("connected", "grant_present")),
    (True, "waiting", ("connected", "grant_present")),
    (False, "minting", ("awaiting_consent", "mint_in_flight")),
    (False, "waiting", ("awaiting_consent", "mint_in_flight")),
    (None, "waiting", ("awaiting_consent", "mint_in_flight")),
    (False, "failed", ("not_connected", "no_grant")),
    (False, "granted", ("not_connected", "no_grant")),
    (None, "expired", ("not_connected", "grant_unreadable")),
    (None, None, ("not_connected", "grant_unreadable")),
])
def test_a_grant_wins_then_an_in_flight_mint_then_an_unreadable_lookup(
        presence: bool | None, mint_state: str | None, expected: tuple[str, str]) -> None:
    assert status.classify(presence, mint_state) == expected


def test_an_in_flight_mint_keeps_its_own_reason_and_is_not_flagged() -> None:
    row = status.provider_status(provider("github"), False, "waiting", None, env={})
    assert (row.status, row.reason, row.needs_client_config) == ("awaiting_consent", "mint_in_flight", False)


def test_a_consent_under_way_in_the_mint_engine_reads_as_awaiting_consent() -> None:
    from kirocrew_connections import mint
    from kirocrew_connections.registry import load_registry

    providers = status.status_providers(load_registry())

    async def scenario() -> tuple[dict[str, str | None], str | None]:
        engine = mint.mint_engine()
        engine.start(provider("notion"))  # the row is "minting" on return; cancelled before it runs
        states = status.current_mint_states(providers)
        await engine.cancel("notion")
        return states, engine.state("notion")

    states, after = asyncio.run(scenario())
    assert states["notion"] == "minting" and after is None
    found = {row.slug: row for row in status.collect_statuses(providers, states)}
    assert (found["notion"].status, found["notion"].reason) == ("awaiting_consent", "mint_in_flight")
    assert (found["linear"].status, found["linear"].reason) == ("not_connected", "no_grant")


def test_importing_the_handlers_does_not_import_the_mint_engine() -> None:
    code = ("import sys, kirocrew_connections.api, kirocrew_connections.status_api, "
            "kirocrew_connections.status; assert 'kirocrew_connections.mint' not in sys.modules, "
            "'mint imported'; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ), stdin=subprocess.DEVNULL)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_status_read_in_a_fresh_gateway_does_not_import_the_mint_engine() -> None:
    code = """
import sys
from starlette.testclient import TestClient
import kirocrew_connections.plugin
from kirocrew_core import plugins
from kirocrew_core.gateway.app import create_app
from kirocrew_core.gateway.auth import SESSION_COOKIE, load_or_create_token

pm = plugins.make_plugin_manager(load_entrypoints=False, env={})
pm.register(kirocrew_connections.plugin, name="connections")
token = load_or_create_token()
with TestClient(create_app(pm), base_url="http://127.0.0.1", headers={"Origin": "http://127.0.0.1"}) as client:
    client.cookies.set(SESSION_COOKIE, token)
    response = client.get("/api/connections/status")
assert response.status_code == 200, response.text
assert "kirocrew_connections.status" in sys.modules
print("mint imported" if "kirocrew_connections.mint" in sys.modules else "ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ), stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
