"""The warm mint table against the real fake kiro-cli and the OAuth fixture servers.

Each engine test builds its own :class:`WarmTable` over a fresh
:class:`MintEngine` on its own event loop, with a catalog of registry
providers (notion's entry) pointed at OAuth fixture servers on 127.0.0.1, and
timers shortened through the engine's attributes. "The user" opens the
approval URL and clicks Allow over HTTP. Faults are injected only on our side
of the wire (a gate at one of our awaits, a killed process); kiro-cli and the
authorization server stay real.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, grants

from kirocrew_connections import warm_files, warm_plan
from kirocrew_connections.mint import MintEngine
from kirocrew_connections.warm import WarmTable

WAIT_SECS = 60.0


# -- helpers -----------------------------------------------------------------------------


def provider_at(url: str, slug: str) -> Any:
    """A real registry Provider (notion's, visible, DCR), pointed at a fixture server."""
    from kirocrew_connections.registry import load_registry

    return dataclasses.replace(load_registry().get("notion"), slug=slug, mcp_url=url, tool_aliases={})


def make_table(providers: list[Any]) -> WarmTable:
    engine = MintEngine()
    engine.poll = 0.1
    table = WarmTable(engine)
    table.catalog = lambda: list(providers)
    runtime = table.runtime
    runtime.reaper_interval = 0.1
    runtime.destroy_timeout = runtime.late_create_timeout = runtime.kill_timeout = 10.0
    return table


def kiro_pids() -> set[int]:
    """Live fake kiro-cli processes descending from this test process."""
    from kirocrew_core import proc

    found = set()
    for pid in proc.live_descendants():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"fake_kiro" in fh.read():
                    found.add(pid)
        except OSError:
            continue
    return found


def generation_dirs() -> list[Path]:
    root = warm_files.generations_root()
    return sorted(root.iterdir()) if root.exists() else []


def events(name: str) -> list[dict[str, Any]]:
    return [r for r in audit.tail(2000) if r.get("event") == name]


async def until(predicate: Callable[[], bool], timeout: float = WAIT_SECS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def redeem(server: Any, url: str, provider: Any) -> None:
    landing = await server.aconsent(url)
    assert landing.status_code == 200
    await until(lambda: grants.grant_presence(provider.mcp_url) is True)


@pytest.fixture
def two_servers(fake_kiro_cli: Any, start_oauth_mcp_server: Callable[..., Any]) -> tuple[Any, Any]:
    return start_oauth_mcp_server(), start_oauth_mcp_server()


def run(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(scenario())


# -- premint, adoption, redemption ---------------------------------------------------------


def test_a_premint_is_adopted_by_the_click_and_its_url_redeems_to_granted_without_a_cold_spawn(
        two_servers: tuple[Any, Any]) -> None:
    first, second = two_servers
    a, b = provider_at(first.mcp_url, "alpha"), provider_at(second.mcp_url, "beta")

    async def scenario() -> None:
        table = make_table([a, b])
        engine = table.engine
        try:
            minted = await table.warm_mint_all()
            assert sorted(minted) == ["alpha", "beta"]
            assert len(table.runtime.processes) == 1, "one process serves every card"
            premint = engine.row("alpha")
            assert premint is not None and premint.shared and premint.state == "waiting"
            assert "oauth_url" not in engine.view("alpha"), "a premint's URL is served to nobody"
            assert engine.consent_state("alpha") is None, "a premint is not a consent under way"
            assert engine.in_progress() == 0, "an unclaimed premint does not keep the host busy"
            claim_token = premint.token

            token = await table.adopt_shared_mint("alpha", a.mcp_url)
            assert token is not None and token != claim_token
            row = engine.row("alpha")
            assert row is premint and not row.shared and row.generation == 1 and row.task is None
            view = engine.view("alpha")
            assert view["state"] == "waiting" and view["token"] == token and view["oauth_url"]
            assert engine.consent_state("alpha") == "waiting" and engine.in_progress() == 1

            await redeem(first, view["oauth_url"], a)
            await until(lambda: engine.view("alpha")["state"] == "granted")
            beta = engine.row("beta")
            assert beta is not None and beta.state == "waiting" and beta.shared
        finally:
            await table.shutdown()

    run(scenario)
    assert kiro_pids() == set()
    assert generation_dirs() == []
    spawns = events("connections_warm_mint_spawn")
    assert [e["outcome"] for e in spawns] == ["ok"]
    assert [e["fields"]["provider"] for e in events("connections_warm_mint_adopt")] == ["alpha"]
    summary = events("connections_warm_mint")
    assert summary[-1]["fields"] == {"activated": 2, "minted": 2}
    for record in audit.tail(2000):
        assert "authorize?" not in json.dumps(record), "no event carries a URL"


def test_the_warm_specs_mount_every_planned_server_from_a_private_generation_directory(
        two_servers: tuple[Any, Any]) -> None:
    first, second = two_servers
    a, b = provider_at(first.mcp_url, "alpha"), provider_at(second.mcp_url, "beta")
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        table = make_table([a, b])
        try:
            await table.warm_mint_all()
            gen = table.runtime.current
            assert gen is not None
            seen["path"] = gen.path
            agents = warm_files.agents_dir(gen.path)
            seen["specs"] = {p.name: json.loads(p.read_text()) for p in agents.iterdir()}
            seen["modes"] = [os.stat(p).st_mode & 0o777 for p in (gen.path.parent, gen.path, agents)]
            seen["marker"] = json.loads((gen.path / warm_files.MARKER_NAME).read_text())
            seen["runtime_pid"] = gen.runtime.pid
        finally:
            await table.shutdown()

    run(scenario)
    specs = seen["specs"]
    assert sorted(specs) == ["kirocrew-mint-warm-all.json", "kirocrew-mint-warm-base.json"]
    assert specs["kirocrew-mint-warm-base.json"]["mcpServers"] == {}
    assert specs["kirocrew-mint-warm-all.json"]["mcpServers"] == {
        "alpha": {"url": a.mcp_url}, "beta": {"url": b.mcp_url}}
    assert all(s["description"].startswith(warm_plan.SPEC_SENTINEL) for s in specs.values())
    assert seen["modes"] == [0o700, 0o700, 0o700]
    marker = seen["marker"]
    assert marker["host_pid"] == os.getpid() and marker["runtime_pid"] == seen["runtime_pid"]
    assert marker["host_started"] == warm_files.start_id(os.getpid())
    assert not seen["path"].exists(), "a graceful stop removes the generation once its process is gone"
