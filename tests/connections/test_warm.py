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

from kirocrew_connections import warm, warm_files, warm_plan
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
    runtime.settle_window = 1.5  # the spec's 0.5 s, widened: four test runs share two cores
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


def cold_tests() -> Any:
    """The cold mint's test module (its credential-leaking authorization server is reused here)."""
    import importlib.util

    path = Path(__file__).with_name("test_mint.py")
    spec = importlib.util.spec_from_file_location("connections_cold_mint_tests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_an_adopted_row_is_not_displaced_by_a_later_premint_and_a_live_premint_is_kept(
        two_servers: tuple[Any, Any]) -> None:
    first, second = two_servers
    a, b = provider_at(first.mcp_url, "alpha"), provider_at(second.mcp_url, "beta")

    async def scenario() -> None:
        table = make_table([a, b])
        try:
            await table.warm_mint_all()
            token = await table.adopt_shared_mint("alpha", a.mcp_url)
            adopted, premint = table.engine.row("alpha"), table.engine.row("beta")
            assert adopted is not None and premint is not None
            before = (adopted.token, adopted.oauth_url, premint.token, premint.oauth_url)
            assert await table.warm_mint_all() == []
            assert table.engine.row("alpha") is adopted and table.engine.row("beta") is premint
            assert (adopted.token, adopted.oauth_url, premint.token, premint.oauth_url) == before
            assert adopted.token == token and not adopted.shared
            assert len(table.runtime.processes) == 1 and table.runtime.generation == 1
        finally:
            await table.shutdown()

    run(scenario)


def test_a_connect_for_a_provider_with_no_premint_is_not_adopted(two_servers: tuple[Any, Any]) -> None:
    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")

    async def scenario() -> None:
        table = make_table([a])
        try:
            assert await table.adopt_shared_mint("alpha", a.mcp_url) is None  # nothing warmed: cold path
            await table.warm_mint_all()
            assert await table.adopt_shared_mint("alpha", "https://elsewhere.test/mcp") is None
            assert await table.adopt_shared_mint("alpha", a.mcp_url) is not None
            assert await table.adopt_shared_mint("alpha", a.mcp_url) is None, "a row is adopted once"
        finally:
            await table.shutdown()

    run(scenario)


# -- the runtime: one process, generations, parking, the reaper -----------------------------


def test_two_concurrent_activations_share_one_spawned_process(two_servers: tuple[Any, Any]) -> None:
    first, second = two_servers
    a, b = provider_at(first.mcp_url, "alpha"), provider_at(second.mcp_url, "beta")

    async def scenario() -> tuple[Any, Any, int]:
        table = make_table([a, b])
        try:
            one, two = await asyncio.gather(table.runtime.activate(["alpha"]), table.runtime.activate(["beta"]))
            return one, two, len(kiro_pids())
        finally:
            await table.shutdown()

    one, two, processes = run(scenario)
    assert (one.generation, two.generation) == (1, 1)
    assert one.activation != two.activation
    assert processes == 1
    assert set(one.requests) == {"alpha"} and set(two.requests) == {"beta"}


def test_the_generation_number_advances_only_on_a_handed_over_spawn(
        two_servers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")
    real = os.environ["KIRO_CLI_PATH"]

    async def scenario() -> None:
        table = make_table([a])
        try:
            monkeypatch.setenv("KIRO_CLI_PATH", str(tmp_path / "no-such-kiro-cli"))
            assert await table.warm_mint_all() == []
            assert table.runtime.generation == 0 and table.runtime.current is None
            assert table.engine.row("alpha") is None, "the claim was released"
            assert generation_dirs() == [], "a spawn that never ran leaves no tree"
            monkeypatch.setenv("KIRO_CLI_PATH", real)
            assert await table.warm_mint_all() == ["alpha"]
            assert table.runtime.generation == 1
        finally:
            await table.shutdown()

    run(scenario)


def test_an_unservable_plan_parks_the_generation_holding_a_card_url_and_the_drain_retires_it_after(
        two_servers: tuple[Any, Any]) -> None:
    first, second = two_servers
    a, b = provider_at(first.mcp_url, "alpha"), provider_at(second.mcp_url, "beta")
    catalog = [a]

    async def scenario() -> None:
        table = make_table([])
        table.catalog = lambda: list(catalog)
        runtime = table.runtime
        try:
            await table.warm_mint_all()
            assert await table.adopt_shared_mint("alpha", a.mcp_url) is not None
            old = runtime.current
            assert old is not None
            catalog.append(b)  # the registry grew: the resident specs cannot serve it
            assert await table.warm_mint_all() == ["beta"]
            assert runtime.generation == 2 and runtime.retiring == [old] and old.alive
            row = table.engine.row("alpha")
            assert row is not None and row.generation == 1 and row.state == "waiting"
            assert table.row_alive(row), "the parked process still redeems the card's URL"
            assert row.oauth_url is not None
            await redeem(first, row.oauth_url, a)
            await until(lambda: row.state == "granted")
            await until(lambda: not runtime.retiring)
            assert not old.alive and not old.path.exists()
            assert len(kiro_pids()) == 1
        finally:
            await table.shutdown()

    run(scenario)


def test_the_reaper_retires_an_idle_process_once_its_rows_are_gone(two_servers: tuple[Any, Any]) -> None:
    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")

    async def scenario() -> None:
        table = make_table([a])
        table.engine.ttl = 1.0
        table.runtime.idle_grace = 0.5
        try:
            await table.warm_mint_all()
            gen = table.runtime.current
            assert gen is not None
            await until(lambda: table.runtime.current is None and not gen.alive and not gen.path.exists())
            row = table.engine.row("alpha")
            assert row is not None and (row.state, row.reason) == ("expired", "mint_ttl_elapsed")
            assert not gen.alive and not gen.path.exists() and table.runtime.sessions == {}
            assert kiro_pids() == set()
        finally:
            await table.shutdown()

    run(scenario)


def test_a_killed_warm_process_withdraws_its_rows_and_is_replaced_once_but_not_twice(
        two_servers: tuple[Any, Any]) -> None:
    import signal

    first, second = two_servers
    a, b = provider_at(first.mcp_url, "alpha"), provider_at(second.mcp_url, "beta")

    async def scenario() -> None:
        table = make_table([a, b])
        runtime = table.runtime
        try:
            await table.warm_mint_all()
            first_gen = runtime.current
            assert first_gen is not None and first_gen.runtime.pid is not None
            old_row = table.engine.row("alpha")
            os.kill(first_gen.runtime.pid, signal.SIGKILL)
            await until(lambda: runtime.generation == 2 and runtime.current is not None)
            assert old_row is not None and (old_row.state, old_row.reason) == ("expired", "mint_process_gone")
            await until(lambda: all((r := table.engine.row(s)) is not None and r.state == "waiting"
                                    for s in ("alpha", "beta")))
            second_gen = runtime.current
            assert second_gen is not None and second_gen.runtime.pid is not None, (
                runtime.generation, runtime.retiring, [(e["outcome"], e["fields"]) for e in events(
                    "connections_warm_mint_spawn")], [(r.slug, r.state, r.generation) for r in table.engine.rows()])
            assert not first_gen.path.exists()
            os.kill(second_gen.runtime.pid, signal.SIGKILL)
            await until(lambda: runtime.current is None)
            await asyncio.sleep(1.0)
            assert runtime.generation == 2, "a replacement never earns another"
            for slug in ("alpha", "beta"):
                row = table.engine.row(slug)
                assert row is not None and (row.state, row.reason) == ("expired", "mint_process_gone")
            assert table.engine.view("alpha")["state"] == "expired" and "oauth_url" not in table.engine.view("alpha")
        finally:
            await table.shutdown()

    run(scenario)
    assert kiro_pids() == set() and generation_dirs() == []


def test_shutdown_disarms_the_re_arm_and_leaves_nothing_running(two_servers: tuple[Any, Any]) -> None:
    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")

    async def scenario() -> None:
        table = make_table([a])
        assert await table.warm_mint_all() == ["alpha"]
        number = table.runtime.generation
        await table.shutdown()
        assert table.runtime.start_rearm(number) is None
        assert table.runtime.sessions == {} and table.runtime.processes == []
        row = table.engine.row("alpha")
        assert row is not None and (row.state, row.reason) == ("expired", "mint_process_gone")

    run(scenario)
    assert kiro_pids() == set() and generation_dirs() == []


# -- files: ownership, the boot scavenge ------------------------------------------------------


def test_a_foreign_spec_at_a_planned_path_refuses_warming_and_the_cold_path_still_serves(
        two_servers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")
    real = warm_files.create_generation_dir
    stranger = {"name": "kirocrew-mint-warm-all", "description": "someone else's", "mcpServers": {}}

    def planted() -> Path:
        path = real()
        (warm_files.agents_dir(path) / "kirocrew-mint-warm-all.json").write_text(json.dumps(stranger))
        return path

    monkeypatch.setattr(warm_files, "create_generation_dir", planted)

    async def scenario() -> str:
        table = make_table([a])
        try:
            assert await table.warm_mint_all() == []
            assert table.runtime.current is None and table.runtime.generation == 0
            assert table.engine.row("alpha") is None
            assert await table.adopt_shared_mint("alpha", a.mcp_url) is None
            cold = table.engine.start(a)
            await until(lambda: cold.state != "minting")
            return cold.state
        finally:
            await table.engine.aclose()
            await table.shutdown()

    assert run(scenario) == "waiting"
    assert [e["fields"]["spec"] for e in events("warm_mint_spec_write")] == ["kirocrew-mint-warm-all"]
    (refusal,) = events("connections_warm_mint_spawn")
    assert (refusal["outcome"], refusal["fields"]["reason"]) == ("refused", "unowned_specs:1")


def test_spec_ownership_is_read_from_content_and_fails_closed(tmp_path: Path) -> None:
    plan = warm_plan.build_plan([])
    ours = tmp_path / "kirocrew-mint-warm-base.json"
    ours.write_text(json.dumps(plan.specs["kirocrew-mint-warm-base"]))
    assert warm_files.spec_is_ours(ours)
    renamed = tmp_path / "kirocrew-mint-warm-all.json"
    renamed.write_text(ours.read_text())
    assert not warm_files.spec_is_ours(renamed), "the name must match the stem"
    link = tmp_path / "link.json"
    link.symlink_to(ours)
    assert not warm_files.spec_is_ours(link)
    for body in ("[]", "{", json.dumps({**plan.specs["kirocrew-mint-warm-base"], "description": "mine"}),
                 json.dumps({**plan.specs["kirocrew-mint-warm-base"], "allowedTools": ["*"]})):
        ours.write_text(body)
        assert not warm_files.spec_is_ours(ours)
    assert not warm_files.spec_is_ours(tmp_path / "missing.json")


def test_the_boot_scavenge_removes_only_provably_dead_generations(tmp_path: Path) -> None:
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        def generation(host: int, runtime: int) -> Path:
            path = warm_files.create_generation_dir()
            marker = {"sentinel": warm_files.MARKER_SENTINEL, "version": 1,
                      "host_pid": host, "host_started": warm_files.start_id(host) or "1",
                      "runtime_pid": runtime, "runtime_started": warm_files.start_id(runtime) or "1"}
            (path / warm_files.MARKER_NAME).write_text(json.dumps(marker))
            return path

        dead = generation(gone.pid, gone.pid)
        live_host = generation(os.getpid(), gone.pid)
        live_runtime = generation(gone.pid, sleeper.pid)
        provisional = warm_files.create_generation_dir()  # runtime 0: never provably dead
        malformed = warm_files.create_generation_dir()
        (malformed / warm_files.MARKER_NAME).write_text("{")
        stranger = warm_files.generations_root() / "not-a-generation"
        stranger.mkdir()
        assert warm.scavenge_warm_mint_artifacts() == 1
        assert not dead.exists()
        assert all(p.exists() for p in (live_host, live_runtime, provisional, malformed, stranger))
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_credential_bearing_warm_url_is_released_and_named_by_slug_only(
        fake_kiro_cli: Any, caplog: pytest.LogCaptureFixture) -> None:
    leaky = cold_tests().LeakyAuthServer()
    provider = provider_at(f"{leaky.base}/mcp", "leaky")

    async def scenario() -> None:
        table = make_table([provider])
        try:
            assert await table.warm_mint_all() == []
            assert table.engine.row("leaky") is None, "released: a later Connect takes the cold path"
            assert await table.adopt_shared_mint("leaky", provider.mcp_url) is None
        finally:
            await table.shutdown()

    try:
        run(scenario)
    finally:
        leaky.stop()
    (refusal,) = events("connections_warm_mint_url")
    assert (refusal["outcome"], refusal["fields"]) == ("refused", {"provider": "leaky"})
    assert "leak" not in json.dumps(audit.tail(2000)).replace('"leaky"', "")
    assert "client_secret" not in caplog.text and "leaky" in caplog.text
