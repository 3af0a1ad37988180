"""The warm table through the gateway's routes: premint, adoption by POST mint, status, Disconnect's re-arm.

A plugin contributes two visible providers at ``https://<slug>.test/mcp``; the
origin overrides route each to its own OAuth fixture server, and the warm
table's catalog is those two (the shipped providers would need the internet).
kiro-cli is the fake; the user consents over HTTP.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kirocrew_core import audit, hookimpl
from kirocrew_core.contributions import RegistryLoader
from kirocrew_core.origin_overrides import OriginOverrides, activate

from kirocrew_connections import mint, warm
from kirocrew_connections.registry import builtin_document, clear_registry_cache, routed_registry

WAIT_SECS = 60.0
SLUGS = ("alpha", "beta")


class TwoProviders:
    @hookimpl
    def registry_loaders(self) -> list[RegistryLoader]:
        def load() -> list[dict[str, Any]]:
            notion = next(dict(e) for e in builtin_document() if e["slug"] == "notion")
            notion.pop("revoke_manual_path", None)
            notion.pop("tool_aliases", None)
            return [{**notion, "slug": slug, "name": slug.title(), "mcp_url": f"https://{slug}.test/mcp",
                     "approval_hosts": [f"{slug}.test"]}
                    for slug in SLUGS]

        return [RegistryLoader("connections.providers", load, "two providers on fixture servers")]


@pytest.fixture
def plugin_manager(connections_plugins: Any) -> Iterator[Any]:
    connections_plugins.register(TwoProviders(), name="two-providers")
    clear_registry_cache()
    yield connections_plugins
    clear_registry_cache()


@pytest.fixture(scope="module")
def module_servers() -> Iterator[dict[str, Any]]:
    """One OAuth fixture server per provider for the whole module: each test's kiro-cli registers its own
    client (dynamic registration) and keeps its grants in the test's own homes, so the tests share no state."""
    from kirocrew_testing.mcp_fixtures import OAuthMCPServer
    from kirocrew_testing.servers import OAUTH_MODULE, launch

    started: dict[str, Any] = {}
    try:
        for slug in SLUGS:
            started[slug] = OAuthMCPServer(launch(OAUTH_MODULE, "--port", "0"))
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture
def servers(fake_kiro_cli: Any, module_servers: dict[str, Any]) -> Iterator[dict[str, Any]]:
    activate(OriginOverrides({f"https://{slug}.test": s.base_url.rstrip("/") for slug, s in module_servers.items()}))
    yield module_servers
    activate(OriginOverrides())


@pytest.fixture
def client(gateway_client: Any, plugin_manager: Any, servers: dict[str, Any]) -> Iterator[Any]:
    """The gateway, with a fresh mint engine and warm table whose catalog is the two fixture providers."""
    mint._engine, warm._table = None, None
    table = warm.warm_table(plugin_manager)
    table.catalog = lambda: [p for p in routed_registry(plugin_manager).all() if p.slug in SLUGS]
    table.runtime.settle_window = 1.5  # the spec's 0.5 s, widened: test runs share two cores
    table.runtime.reaper_interval = 0.2
    table.engine.poll = 0.1
    yield gateway_client
    gateway_client.portal.call(warm.shutdown_warm_mint)
    gateway_client.portal.call(mint.aclose_engine)
    mint._engine, warm._table = None, None


def until(read: Callable[[], Any], accept: Callable[[Any], bool], timeout: float = WAIT_SECS) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"stayed {value!r}")
        time.sleep(0.05)


def status_of(client: Any, slug: str) -> dict[str, Any]:
    rows = client.get("/api/connections/status").json()["connections"]
    return next(row for row in rows if row["slug"] == slug)


def premint_ready(client: Any) -> None:
    answer = client.post("/api/connections/premint", json={})
    assert answer.status_code == 200 and answer.json() == {"ok": True, "preminting": list(SLUGS)}
    engine = mint.mint_engine()
    until(lambda: [(r.state if (r := engine.row(s)) else None) for s in SLUGS],
          lambda states: states == ["waiting", "waiting"])


def test_premint_then_connect_adopts_the_warm_url_and_consent_turns_the_card_connected(
        client: Any, servers: dict[str, Any]) -> None:
    premint_ready(client)
    assert status_of(client, "alpha")["status"] == "not_connected", "a premint is not a consent under way"
    assert "oauth_url" not in client.get("/api/connections/mint", params={"slug": "alpha"}).json()
    engine = mint.mint_engine()
    premint = engine.row("alpha")
    assert premint is not None

    assert client.post("/api/connections/install", json={"slug": "alpha"}).status_code == 200
    answer = client.post("/api/connections/mint", json={"slug": "alpha"}).json()
    assert answer == {"ok": True, "slug": "alpha", "state": "waiting", "token": answer["token"]}
    assert engine.row("alpha") is premint and premint.task is None, "no cold attempt was started"
    assert status_of(client, "alpha")["status"] == "awaiting_consent"
    view = client.get("/api/connections/mint", params={"slug": "alpha"}).json()
    assert view["token"] == answer["token"] and view["oauth_url"]
    assert servers["alpha"].consent(view["oauth_url"]).status_code == 200
    until(lambda: client.get("/api/connections/mint", params={"slug": "alpha"}).json()["state"],
          lambda state: state == "granted")
    assert status_of(client, "alpha")["status"] == "connected"
    assert status_of(client, "beta")["status"] == "not_connected"
    adopted = [r for r in audit.tail(2000) if r.get("event") == mint.AUDIT_EVENT
               and r["fields"].get("reason") == "adopted_warm_mint"]
    assert [r["fields"]["slug"] for r in adopted] == ["alpha"]
    (started,) = [r for r in audit.tail(2000) if r.get("event") == "connections_premint"]
    assert (started["outcome"], started["fields"]) == ("started", {"providers": 2})


def test_a_disconnect_re_arms_only_that_provider(client: Any, servers: dict[str, Any]) -> None:
    premint_ready(client)
    engine = mint.mint_engine()
    client.post("/api/connections/install", json={"slug": "alpha"})
    client.post("/api/connections/mint", json={"slug": "alpha"})
    url = client.get("/api/connections/mint", params={"slug": "alpha"}).json()["oauth_url"]
    servers["alpha"].consent(url)
    until(lambda: status_of(client, "alpha")["status"], lambda status: status == "connected")
    beta = engine.row("beta")
    assert beta is not None
    beta_before = (beta.token, beta.oauth_url)

    answer = client.post("/api/connections/disconnect", json={"slug": "alpha"}).json()
    assert answer["grantRemoved"] is True and answer["grantSurviving"] == []
    row = until(lambda: engine.row("alpha"), lambda r: r is not None and r.shared and r.state == "waiting")
    assert row.oauth_url and row.oauth_url != url
    assert engine.row("beta") is beta and (beta.token, beta.oauth_url) == beta_before
    assert status_of(client, "alpha")["status"] == "not_connected"


def test_a_status_read_withdraws_a_warm_url_whose_process_died(client: Any) -> None:
    import os
    import signal

    table = warm.warm_table()
    # Before the process starts, so the reaper's first sleep is already this long: only the status read (or the
    # process's own exit watcher, which withdraws the row the same way) may judge the row here; a reaper tick
    # would also re-arm a new generation and a new row.
    table.runtime.reaper_interval = 3600.0
    premint_ready(client)
    client.post("/api/connections/install", json={"slug": "alpha"})
    token = client.post("/api/connections/mint", json={"slug": "alpha"}).json()["token"]
    gen = table.runtime.current
    assert gen is not None and gen.runtime.pid is not None
    os.kill(gen.runtime.pid, signal.SIGKILL)
    until(lambda: gen.runtime.returncode, lambda code: code is not None)
    assert status_of(client, "alpha")["status"] == "not_connected"
    view = client.get("/api/connections/mint", params={"slug": "alpha"}).json()
    assert view == {"slug": "alpha", "state": "expired", "token": token, "reason": "mint_process_gone"}


def test_a_warm_url_is_withdrawn_the_moment_its_process_dies_without_waiting_for_a_read_or_the_reaper(
        client: Any) -> None:
    import os
    import signal

    table = warm.warm_table()
    # Set before the process starts, so the reaper's first sleep is already this long: neither the reaper nor
    # a status read may judge the rows here.
    table.runtime.reaper_interval = 3600.0
    premint_ready(client)
    client.post("/api/connections/install", json={"slug": "alpha"})
    token = client.post("/api/connections/mint", json={"slug": "alpha"}).json()["token"]
    row = table.engine.row("alpha")
    gen = table.runtime.current
    assert row is not None and row.state == "waiting" and gen is not None and gen.runtime.pid is not None
    os.kill(gen.runtime.pid, signal.SIGKILL)
    # Read the rows directly (no route runs expire_dead_mints): the process's own watcher withdraws them.
    until(lambda: [(r.state, r.reason) for s in SLUGS if (r := table.engine.row(s)) is not None],
          lambda rows: rows == [("expired", "mint_process_gone")] * 2, timeout=10)
    assert row.oauth_url is None
    view = client.get("/api/connections/mint", params={"slug": "alpha"}).json()
    assert view == {"slug": "alpha", "state": "expired", "token": token, "reason": "mint_process_gone"}


@pytest.mark.parametrize(("body", "code"), [
    (b'{"slug": "alpha"}', "unexpected_fields"),
    (b'{"providers": []}', "unexpected_fields"),
    (b"[]", "bad_json"),
    (b'"alpha"', "bad_json"),
    (b"{", "bad_json"),
    (b'{"pad": "' + b"x" * (64 * 1024) + b'"}', "body_too_large"),
])
def test_a_premint_body_other_than_nothing_or_an_empty_object_is_refused_and_starts_nothing(
        client: Any, body: bytes, code: str) -> None:
    answer = client.post("/api/connections/premint", content=body, headers={"Content-Type": "application/json"})
    assert (answer.status_code, answer.json()["code"]) == (400, code), answer.text
    assert [mint.mint_engine().row(s) for s in SLUGS] == [None, None]
    assert warm.warm_table().runtime.current is None
    assert [r for r in audit.tail(2000) if r.get("event") == "connections_premint"] == []


def test_importing_the_routes_status_and_plugin_loads_neither_the_warm_nor_the_mint_engine() -> None:
    code = ("import sys, kirocrew_connections.api, kirocrew_connections.status_api, kirocrew_connections.status, "
            "kirocrew_connections.plugin, kirocrew_connections.premint_api, kirocrew_connections.mint_api, "
            "kirocrew_connections.disconnect_api, kirocrew_connections.cards; "
            "print(sorted(m for m in sys.modules if m.startswith(('kirocrew_connections.warm', "
            "'kirocrew_connections.mint')) and m != 'kirocrew_connections.mint_api'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_the_gateway_start_removes_a_dead_generation_in_the_background(plugin_manager: Any) -> None:
    import json

    from starlette.testclient import TestClient

    from kirocrew_core.gateway.app import create_app

    from kirocrew_connections import warm_files

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = warm_files.create_generation_dir()
    (dead / warm_files.MARKER_NAME).write_text(json.dumps({
        "sentinel": warm_files.MARKER_SENTINEL, "version": 1, "host_pid": gone.pid, "host_started": "1",
        "runtime_pid": gone.pid, "runtime_started": "1"}))
    kept = warm_files.create_generation_dir()  # provisional: never provably dead
    with TestClient(create_app(plugin_manager), base_url="http://127.0.0.1"):
        until(dead.exists, lambda exists: not exists)
    assert kept.exists()
