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
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, grants, processes

from kirocrew_connections.approval_url import url_origin
from kirocrew_connections import warm, warm_files, warm_plan
from kirocrew_connections.mint import MintEngine
from kirocrew_connections.warm import WarmTable

WAIT_SECS = 60.0


# -- helpers -----------------------------------------------------------------------------


def provider_at(url: str, slug: str) -> Any:
    """A real registry Provider (notion's, visible, DCR), pointed at a fixture server."""
    from kirocrew_connections.registry import load_registry

    return dataclasses.replace(load_registry().get("notion"), slug=slug, mcp_url=url, tool_aliases={},
                               approval_origins=(url_origin(url) or url,))


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


@pytest.fixture(scope="module")
def module_servers() -> Iterator[tuple[Any, Any]]:
    """Two OAuth fixture servers for the whole module: each test's kiro-cli registers its own client
    (dynamic registration) and keeps its grants in the test's own homes, so the tests share no state."""
    from kirocrew_testing.mcp_fixtures import OAuthMCPServer
    from kirocrew_testing.servers import OAUTH_MODULE, launch

    started: list[Any] = []
    try:
        for _ in range(2):
            started.append(OAuthMCPServer(launch(OAUTH_MODULE, "--port", "0")))
        yield started[0], started[1]
    finally:
        for server in started:
            server.stop()


@pytest.fixture
def two_servers(fake_kiro_cli: Any, module_servers: tuple[Any, Any]) -> tuple[Any, Any]:
    return module_servers


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
    assert marker["host_started"] == processes.start_token(os.getpid())
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
                      "host_pid": host, "host_started": processes.start_token(host) or "1",
                      "runtime_pid": runtime, "runtime_started": processes.start_token(runtime) or "1"}
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
    assert (refusal["outcome"], refusal["fields"]) == ("refused", {"provider": "leaky", "reason": "mint_url_rejected"})
    assert "leak" not in json.dumps(audit.tail(2000)).replace('"leaky"', "")
    assert "client_secret" not in caplog.text and "leaky" in caplog.text


def test_a_warm_url_outside_the_providers_approval_hosts_is_released_audited_and_never_adoptable(
        two_servers: tuple[Any, Any]) -> None:
    first, _second = two_servers
    # The provider's consent page is on mcp.notion.com; this server sends the user to its own loopback page.
    provider = dataclasses.replace(provider_at(first.mcp_url, "foreign"), approval_origins=("https://mcp.notion.com",))

    async def scenario() -> None:
        table = make_table([provider])
        try:
            assert await table.warm_mint_all() == []
            assert table.engine.row("foreign") is None, "released: a later Connect takes the cold path"
            assert await table.adopt_shared_mint("foreign", provider.mcp_url) is None
        finally:
            await table.shutdown()

    run(scenario)
    (refusal,) = events("connections_warm_mint_url")
    assert (refusal["outcome"], refusal["fields"]) == (
        "refused", {"provider": "foreign", "reason": "mint_approval_host_refused", "approval_host": "127.0.0.1"})
    assert "/authorize" not in json.dumps(audit.tail(2000)), "the refused address itself is never recorded"


# -- session-handle ownership and atomicity around an await -----------------------------------


def gate_sync(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, reached: Callable[[], None]) -> None:
    """Make ``owner.name`` (run in a worker thread) report arrival, then take a moment before doing its work."""
    real = getattr(owner, name)

    def gated(*args: Any, **kwargs: Any) -> Any:
        reached()
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, gated)


def gate_async(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, reached: Callable[[], None],
               *, after: bool = False) -> None:
    """Make the coroutine ``owner.name`` report arrival (before, or once the peer answered) and linger."""
    real = getattr(owner, name)

    async def gated(*args: Any, **kwargs: Any) -> Any:
        if not after:
            reached()
            await asyncio.sleep(0.3)
        result = await real(*args, **kwargs)
        if after:
            reached()
            await asyncio.sleep(0.3)
        return result

    monkeypatch.setattr(owner, name, gated)


AWAIT_POINTS = ["plan", "generation_dir", "write_specs", "verify_specs", "spawn", "marker", "create",
                "create_answered", "set_mode", "collect"]


@pytest.mark.parametrize("point", AWAIT_POINTS)
def test_cancelling_an_activation_at_each_await_leaves_no_row_session_process_spec_or_generation_behind(
        two_servers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    from kirocrew_core.acp_runtime import AcpRuntime
    from kirocrew_core.acp_session import AcpSession

    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        arrived = asyncio.Event()

        def reached() -> None:
            loop.call_soon_threadsafe(arrived.set)

        table = make_table([a])
        runtime = table.runtime
        targets: dict[str, Callable[[], None]] = {
            "plan": lambda: gate_sync(monkeypatch, runtime, "plan_builder", reached),
            "generation_dir": lambda: gate_sync(monkeypatch, warm_files, "create_generation_dir", reached),
            "write_specs": lambda: gate_sync(monkeypatch, warm_files, "write_specs", reached),
            "verify_specs": lambda: gate_sync(monkeypatch, warm_files, "unowned_specs", reached),
            "spawn": lambda: gate_async(monkeypatch, AcpRuntime, "open", reached),
            "marker": lambda: gate_sync(monkeypatch, warm_files, "write_marker", reached),
            "create": lambda: gate_async(monkeypatch, AcpRuntime, "new_session", reached),
            "create_answered": lambda: gate_async(monkeypatch, AcpRuntime, "new_session", reached, after=True),
            "set_mode": lambda: gate_async(monkeypatch, AcpSession, "set_mode", reached),
            "collect": lambda: gate_async(monkeypatch, runtime, "collect", reached),
        }
        owners = {"plan": (runtime, "plan_builder"), "spawn": (AcpRuntime, "open"),
                  "create": (AcpRuntime, "new_session"), "create_answered": (AcpRuntime, "new_session"),
                  "set_mode": (AcpSession, "set_mode"), "collect": (runtime, "collect")}
        owner, name = owners.get(point, (warm_files, {"generation_dir": "create_generation_dir",
                                                      "write_specs": "write_specs", "verify_specs": "unowned_specs",
                                                      "marker": "write_marker"}.get(point, "")))
        originals = [(owner, name, getattr(owner, name))]
        targets[point]()
        try:
            task = asyncio.ensure_future(table.warm_mint_all())
            await asyncio.wait_for(arrived.wait(), WAIT_SECS)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert table.engine.rows() == [], "the claim went with the cancelled activation"
            await until(lambda: not runtime._background - {runtime._reaper})
            assert runtime.sessions == {}, "no session handle is left registered"
            processes = runtime.processes
            assert len(processes) <= 1 and all(g.number > 0 for g in processes)
            assert len(kiro_pids()) == len(processes), "only a handed-over process may stay (as the resident one)"
            assert len(generation_dirs()) == len(processes)
            for owner, name, real in originals:
                monkeypatch.setattr(owner, name, real)
            if processes and processes[0].plan is not None:
                assert await table.warm_mint_all() == ["alpha"], "the resident process still serves"
        finally:
            await table.shutdown()

    run(scenario)
    assert kiro_pids() == set() and generation_dirs() == []


def test_1_3_an_abandoned_create_whose_handle_arrives_late_is_registered_expired_then_destroyed(
        two_servers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from kirocrew_core.acp_runtime import AcpRuntime

    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")
    real = AcpRuntime.new_session
    created: list[Any] = []

    async def slow(self: Any, *args: Any, **kwargs: Any) -> Any:
        session = await real(self, *args, **kwargs)
        created.append(session)
        await asyncio.sleep(1.0)  # the backend answered; our wait was abandoned before the handle came back
        return session

    async def scenario() -> None:
        table = make_table([a])
        runtime = table.runtime
        runtime.create_timeout = 0.5
        monkeypatch.setattr(AcpRuntime, "new_session", slow)
        try:
            assert await table.warm_mint_all() == []
            (session,) = created
            gen = runtime.current
            assert gen is not None and gen.plan is not None, "a recovered handle needs no quarantine"
            assert runtime.sessions == {} and session.session_id not in gen.runtime.sessions
            assert session.closed, "the recovered session was terminated, its listener with it"
        finally:
            await table.shutdown()

    run(scenario)


def test_4_an_abandoned_create_with_no_handle_quarantines_the_generation_until_the_next_activation(
        two_servers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from kirocrew_core.acp_runtime import AcpRuntime

    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")
    real = AcpRuntime.new_session

    async def never(self: Any, *args: Any, **kwargs: Any) -> Any:
        await asyncio.Event().wait()

    async def scenario() -> None:
        table = make_table([a])
        runtime = table.runtime
        runtime.create_timeout = runtime.late_create_timeout = 0.3
        monkeypatch.setattr(AcpRuntime, "new_session", never)
        try:
            assert await table.warm_mint_all() == []
            quarantined = runtime.current
            assert quarantined is not None and quarantined.plan is None and quarantined.alive
            monkeypatch.setattr(AcpRuntime, "new_session", real)
            assert await table.warm_mint_all() == ["alpha"]
            assert runtime.generation == 2, "the quarantined generation was stood down"
            await until(lambda: not quarantined.alive)
            assert len(kiro_pids()) == 1
        finally:
            await table.shutdown()

    run(scenario)


def test_5_a_failed_collection_expires_then_destroys_its_session_and_releases_the_claims(
        two_servers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")

    async def broken(session: Any, wanted: set[str]) -> dict[str, str]:
        raise RuntimeError("the collector broke")

    async def scenario() -> None:
        table = make_table([a])
        monkeypatch.setattr(table.runtime, "collect", broken)
        try:
            assert await table.warm_mint_all() == []
            gen = table.runtime.current
            assert gen is not None and gen.alive, "an error on a live process kills nothing"
            assert table.runtime.sessions == {} and gen.runtime.sessions == {}
            assert table.engine.rows() == []
        finally:
            await table.shutdown()

    run(scenario)


def test_6_9_the_sweep_forgets_a_session_only_once_its_destroy_completed(
        two_servers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from kirocrew_core.acp_session import AcpSession

    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")
    real = AcpSession.terminate
    outcomes: list[BaseException | None] = [RuntimeError("busy"), asyncio.CancelledError(), None]

    async def flaky(self: Any) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        await real(self)

    async def scenario() -> None:
        table = make_table([a])
        runtime = table.runtime
        runtime.reaper_interval = 3600.0  # the test drives the sweep itself
        try:
            result = await runtime.activate(["alpha"])
            assert result is not None
            runtime.settle_activation(result.activation, keep=False)
            record = runtime.sessions[result.activation]
            monkeypatch.setattr(AcpSession, "terminate", flaky)
            await runtime.sweep_sessions()  # a failed destroy is swallowed: the record stays
            assert runtime.sessions == {result.activation: record}
            with pytest.raises(asyncio.CancelledError):  # cancellation propagates: the record stays
                await runtime.sweep_sessions()
            assert runtime.sessions == {result.activation: record}
            await runtime.sweep_sessions()
            assert runtime.sessions == {} and record.session.closed
        finally:
            await table.shutdown()

    run(scenario)


def test_6_a_session_a_card_still_uses_is_never_swept(two_servers: tuple[Any, Any]) -> None:
    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")

    async def scenario() -> None:
        table = make_table([a])
        runtime = table.runtime
        runtime.session_ttl = 0.0  # expired at once: only the row's use keeps it
        try:
            await table.warm_mint_all()
            row = table.engine.row("alpha")
            assert row is not None and row.activation is not None
            await runtime.sweep_sessions()
            assert row.activation in runtime.sessions and table.row_alive(row)
            await table.engine.cancel("alpha")
            await runtime.sweep_sessions()
            assert runtime.sessions == {}
        finally:
            await table.shutdown()

    run(scenario)


def test_7_8_a_dead_or_retired_process_drops_its_sessions_without_a_destroy(
        two_servers: tuple[Any, Any]) -> None:
    import signal

    first, second = two_servers
    a, b = provider_at(first.mcp_url, "alpha"), provider_at(second.mcp_url, "beta")

    async def scenario() -> None:
        table = make_table([a, b])
        runtime = table.runtime
        try:
            await table.warm_mint_all(arm_supervision=False)  # no replacement: this test watches the death
            gen = runtime.current
            assert gen is not None and gen.runtime.pid is not None and runtime.sessions
            os.kill(gen.runtime.pid, signal.SIGKILL)  # 7
            await until(lambda: runtime.current is None and not gen.path.exists())
            assert runtime.sessions == {}
            await table.warm_mint_all(arm_supervision=False)
            assert runtime.sessions
            await runtime.retire_all()  # 8
            assert runtime.sessions == {} and runtime.processes == []
        finally:
            await table.shutdown()

    run(scenario)


def test_an_adoption_miss_redrains_the_live_session_once_and_adopts_the_late_url(
        two_servers: tuple[Any, Any]) -> None:
    first, _second = two_servers
    a = provider_at(first.mcp_url, "alpha")

    async def scenario() -> None:
        table = make_table([a])
        runtime = table.runtime
        runtime.settle_rounds, runtime.settle_window = 0, 0.01  # the premint gives up before the URL comes
        try:
            assert await table.warm_mint_all() == []
            assert table.engine.row("alpha") is None
            ((activation, record),) = runtime.sessions.items()
            assert record.roster == {"alpha": (a.mcp_url, (), None)}
            await until(lambda: "alpha" in record.session.oauth_servers)  # the late frame, still unread
            assert await table.adopt_shared_mint("alpha", "https://elsewhere.test/mcp") is None
            token = await table.adopt_shared_mint("alpha", a.mcp_url)
            assert token is not None
            row = table.engine.row("alpha")
            assert row is not None and (row.activation, row.token, row.shared) == (activation, token, False)
            assert row.oauth_url is not None
            assert runtime.live_sessions_for("alpha", record.roster["alpha"]) == [], \
                "a session whose one URL for a server was taken is never redrained for it again"
            await redeem(first, row.oauth_url, a)
            await until(lambda: row.state == "granted")
        finally:
            await table.shutdown()

    run(scenario)


# -- invariants read from the source ----------------------------------------------------------

#: The synchronous helpers that touch the filesystem (or /proc); a coroutine may only hand them to a worker thread.
FS_HELPERS = frozenset({
    "configured_entries", "build_plan", "spec_universe", "candidate_scan", "audited_candidates", "candidates",
    "audit_event", "plan_builder", "_plan", "_registry", "mintable_providers", "scavenge_warm_mint_artifacts",
    "start_id", "identity_live", "create_generation_dir", "write_marker", "remove_generation_dir",
    "generation_provably_dead", "scavenge_generations", "spec_is_ours", "write_specs", "unowned_specs",
    "remove_specs", "grant_presence",
})


def test_no_coroutine_of_the_warm_engine_calls_a_filesystem_helper_on_the_event_loop() -> None:
    import ast
    import inspect

    from kirocrew_connections import premint_api, warm_runtime

    public = {name for name, value in vars(warm_files).items()
              if inspect.isfunction(value) and value.__module__ == warm_files.__name__}
    reached_through_others = {"generations_root", "agents_dir", "_private_dir", "_read_marker", "_read_private_json"}
    assert public - reached_through_others <= FS_HELPERS, \
        "a new file helper must join FS_HELPERS (and be kept off the event loop)"
    found: list[str] = []
    for module in (warm, warm_runtime, premint_api):
        tree = ast.parse(inspect.getsource(module))
        for coroutine in (n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef)):
            for call in (n for n in ast.walk(coroutine) if isinstance(n, ast.Call)):
                func = call.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if name in FS_HELPERS:
                    found.append(f"{module.__name__}.{coroutine.name} calls {name}() on the loop")
    assert found == []


# -- which providers are warmed, and the plan -------------------------------------------------


def registry_provider(slug: str) -> Any:
    from kirocrew_connections.registry import load_registry

    return load_registry().get(slug)


def write_rendered_agent(servers: dict[str, Any]) -> None:
    from kirocrew_core import home

    path = home.rendered_agent_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": "kirocrew", "mcpServers": servers}))


def test_the_all_spec_renders_the_registry_tool_aliases_keyed_by_the_mounted_server(isolated_homes: Any) -> None:
    linear, gitlab, notion = (registry_provider(s) for s in ("linear", "gitlab", "notion"))
    plan = warm_plan.build_plan([linear, gitlab, notion])
    spec = plan.specs["kirocrew-mint-warm-all"]
    assert spec["toolAliases"]["@linear/list_issues"] == "linear_list_issues"
    assert spec["toolAliases"]["@gitlab/list_issues"] == "gitlab_list_issues"
    assert not any(key.startswith("@notion/") for key in spec["toolAliases"])
    assert "toolAliases" not in plan.specs["kirocrew-mint-warm-base"]
    assert sorted(spec["mcpServers"]) == ["gitlab", "linear", "notion"]


def test_the_plan_is_registry_derived_so_a_connect_writing_config_does_not_change_it(isolated_homes: Any) -> None:
    notion = registry_provider("notion")
    before = warm_plan.build_plan([notion])
    write_rendered_agent({"notion": {"url": notion.mcp_url, "timeout": 30000}})
    after = warm_plan.build_plan([notion])
    assert before.digest == after.digest and warm_plan.servable(before, after)
    assert not warm_plan.servable(before, warm_plan.build_plan([notion, registry_provider("linear")]))
    assert not warm_plan.servable(warm_plan.build_plan([notion, registry_provider("linear")]), before), \
        "a plan that shrank is not servable: the all mode would still challenge the dropped provider"


def test_a_switched_off_or_differently_asked_entry_is_not_warmed_and_a_hidden_one_never(
        isolated_homes: Any) -> None:
    notion, linear, vercel, figma = (registry_provider(s) for s in ("notion", "linear", "vercel", "figma"))
    write_rendered_agent({
        "notion": {"url": notion.mcp_url, "disabled": True},
        "linear": {"url": linear.mcp_url, "oauthScopes": ["write"]},
        "vercel": {"url": "https://elsewhere.test/mcp", "oauthScopes": ["other"]},  # another server's entry
    })
    assert [p.slug for p in warm_plan.spec_universe([notion, linear, vercel, figma])] == ["vercel"]
    github = dataclasses.replace(registry_provider("github"), launch_gate_passed=True, client_id=None)
    assert not warm_plan.mintable(github), "no dynamic registration and no client: only the cold path"
    configured = dataclasses.replace(github, client_id="owner-app")
    assert not warm_plan.mintable(configured), "a fixed callback port: a warm session would hold it, so always cold"
    public = dataclasses.replace(github, auth=None, client_id="public-app")  # a registry client, random port
    assert warm_plan.mintable(public)
    assert warm_plan.registry_entry(public) == {"url": github.mcp_url, "oauth": {"clientId": "public-app"}}


def test_only_a_confirmed_absent_grant_is_a_candidate(isolated_homes: Any) -> None:
    from kirocrew_core import grants

    notion, linear, vercel = (registry_provider(s) for s in ("notion", "linear", "vercel"))
    token, registration = grants.artifact_paths(notion.mcp_url)
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_text("{}")
    registration.write_text("{}")
    looped, linear_registration = grants.artifact_paths(linear.mcp_url)
    looped.symlink_to(looped)  # a stat that fails with ELOOP: unreadable, not absent
    linear_registration.write_text("{}")
    universe, candidates = warm_plan.candidate_scan(lambda: [notion, linear, vercel])
    assert [p.slug for p in universe] == ["notion", "linear", "vercel"]
    assert [p.slug for p in candidates] == ["vercel"]
