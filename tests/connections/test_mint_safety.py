"""The cold mint's and Disconnect's safety paths, against the fake kiro-cli and the OAuth fixture server.

Each test drives a real :class:`MintEngine` on its own event loop (or the real
Disconnect transaction) with the fake kiro-cli and a real fixture server on
127.0.0.1; "the user" is an HTTP client opening the approval URL. The fake is
started through a wrapper that logs every spawn, so "no process was started" is
a fact the test reads rather than assumes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, grants, home
from kirocrew_core.locks import named_lock

from kirocrew_connections.approval_url import url_origin
from kirocrew_connections import mint
from kirocrew_connections.disconnect import AUDIT_EVENT as DISCONNECT_EVENT
from kirocrew_connections.disconnect import disconnect_provider, remove_provider_entry
from kirocrew_connections.mint import MintEngine
from kirocrew_testing.processes import running as alive

WAIT_SECS = 60.0
NOTION = "https://mcp.notion.com/mcp"


# -- helpers ------------------------------------------------------------------------------


@dataclasses.dataclass
class Spawns:
    """The kiro-cli spawns of this test, as the wrapper logged them."""

    log: Path

    def count(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0


@pytest.fixture
def spawns(fake_kiro_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Spawns:
    """Every kiro-cli the mint starts goes through a wrapper that logs it, then execs the fake."""
    log = tmp_path / "spawns.log"
    wrapper = tmp_path / "logging-bin" / "kiro-cli"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$$ $*" >> "{log}"\nexec "{fake_kiro_cli.path}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("KIRO_CLI_PATH", str(wrapper))
    return Spawns(log)


def fixture_provider(url: str, slug: str = "fixture") -> Any:
    """A real registry Provider (Notion's), pointed at a fixture server."""
    from kirocrew_connections.registry import load_registry

    return dataclasses.replace(load_registry().get("notion"), slug=slug, mcp_url=url,
                               approval_origins=(url_origin(url) or url,))


def engine(*, poll: float = 0.2) -> MintEngine:
    fresh = MintEngine()
    fresh.poll = poll
    return fresh


async def wait_for(predicate: Callable[[], object], timeout: float = WAIT_SECS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition never held")
        await asyncio.sleep(0.05)


async def wait_state(eng: MintEngine, slug: str, states: set[str]) -> dict[str, Any]:
    view: dict[str, Any] = {}

    def reached() -> bool:
        view.update(eng.view(slug))
        return view["state"] in states

    await wait_for(reached)
    return view


def mint_specs() -> list[Path]:
    """Every mint spec: in the private mint agents dir, and in the global one an older build used."""
    return sorted(spec for agents in (mint.mint_agents_dir(), home.kiro_agents_dir()) if agents.exists()
                  for spec in agents.glob("kirocrew-mint-*.json"))


def manifest_paths() -> list[str]:
    path = mint.manifest_file()
    return [row["path"] for row in json.loads(path.read_text())["specs"]] if path.exists() else []


def events(name: str = mint.AUDIT_EVENT) -> list[dict[str, Any]]:
    return [r for r in audit.tail(1000) if r.get("event") == name]


def record_spec(path: Path, created_at: float, slug: str = "fixture") -> None:
    """A manifest row as a mint (of this or a crashed gateway) leaves it."""
    manifest = mint.manifest_file()
    manifest.parent.mkdir(parents=True, exist_ok=True)
    rows = [r for r in json.loads(manifest.read_text())["specs"]] if manifest.exists() else []
    rows.append({"path": str(path), "slug": slug, "created_at": created_at})
    manifest.write_text(json.dumps({"schema_version": 1, "specs": rows}))


# -- dead-holder expiry -------------------------------------------------------------------------


@pytest.mark.parametrize("noticed_by", ["the card's read", "the watch loop"])
def test_a_waiting_mint_whose_kiro_cli_dies_reads_expired_and_never_serves_its_url(
        spawns: Spawns, oauth_mcp_server: Any, connections_plugins: Any, noticed_by: str) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)

    async def scenario() -> list[dict[str, Any]]:
        # A long poll leaves the death to the card's read; a short one lets the watch loop see it first.
        eng = engine(poll=60.0 if noticed_by == "the card's read" else 0.1)
        try:
            row = eng.start(provider)
            waiting = await wait_state(eng, "fixture", {"waiting", "failed"})
            assert waiting["state"] == "waiting" and waiting["oauth_url"]
            runtime = row.runtime
            assert runtime is not None and runtime.pid is not None
            os.kill(runtime.pid, signal.SIGKILL)
            if noticed_by == "the card's read":
                await wait_for(lambda: runtime.returncode is not None)
            else:  # nothing reads the row until the watch loop has settled it
                await wait_for(lambda: row.task is not None and row.task.done())
                assert row.state == "expired"
            after = [eng.view("fixture") for _ in range(3)]  # from the moment the death is known
            await wait_for(lambda: row.task is not None and row.task.done() and not mint_specs())
            await asyncio.sleep(0.3)  # a second audit, were there one, would land now
            return after
        finally:
            await eng.aclose()

    after = asyncio.run(scenario())
    assert all((v["state"], v["reason"]) == ("expired", "mint_process_gone") for v in after), after
    assert not any("oauth_url" in v for v in after)
    assert mint_specs() == [] and manifest_paths() == []
    expired = [e for e in events() if e["outcome"] == "expired"]
    assert [(e["fields"]["reason"], e["fields"]["url_minted"]) for e in expired] == [("mint_process_gone", True)]
    assert spawns.count() == 1


# -- url_minted: false ---------------------------------------------------------------------------


def test_a_server_that_settles_without_a_challenge_is_granted_and_audited_url_minted_false(
        spawns: Spawns, mcp_http_server: str, connections_plugins: Any) -> None:
    provider = fixture_provider(mcp_http_server)

    async def scenario() -> dict[str, Any]:
        eng = engine()
        try:
            eng.start(provider)
            return await wait_state(eng, "fixture", {"granted", "failed", "expired", "waiting"})
        finally:
            await eng.aclose()

    view = asyncio.run(scenario())
    assert view["state"] == "granted" and "oauth_url" not in view
    [event] = events()
    assert (event["outcome"], event["fields"]["url_minted"], event["fields"]["reason"]) == (
        "ok", False, "no_challenge")
    assert mint_specs() == [] and manifest_paths() == []


# -- the orphan-spec sweep -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["private", "legacy global"])
def test_the_sweep_removes_only_an_old_recorded_spec_no_live_mint_holds(tmp_path: Path, where: str) -> None:
    agents = mint.mint_agents_dir() if where == "private" else home.kiro_agents_dir()
    agents.mkdir(parents=True, exist_ok=True)
    old = time.time() - 3 * mint.MINT_TTL_SECS
    crashed = agents / "kirocrew-mint-fixture-111-0badc0de.json"
    young = agents / "kirocrew-mint-fixture-222-0badc0df.json"
    live = agents / "kirocrew-mint-fixture-333-0badc0e0.json"
    unrecorded = agents / "kirocrew-mint-fixture-444-0badc0e1.json"
    foreign = agents / "kirocrew-mint-fixture-notours.json"
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    symlinked = agents / "kirocrew-mint-fixture-555-0badc0e2.json"
    symlinked.symlink_to(victim)
    for spec in (crashed, young, live, unrecorded, foreign):
        spec.write_text("{}")
    for spec in (crashed, live, foreign, symlinked):
        record_spec(spec, old)
    record_spec(young, time.time())

    removed = mint.sweep_orphan_specs({str(live)})

    assert removed == [str(crashed)]
    assert not crashed.exists()
    assert all(p.exists() for p in (young, live, unrecorded, foreign)) and symlinked.is_symlink()
    assert victim.read_text() == "precious"
    assert str(crashed) not in manifest_paths() and str(young) in manifest_paths()


@pytest.mark.parametrize("where", ["private", "legacy global"])
def test_the_first_mint_of_a_gateway_sweeps_a_crashed_gateways_spec(
        spawns: Spawns, oauth_mcp_server: Any, connections_plugins: Any, where: str) -> None:
    agents = mint.mint_agents_dir() if where == "private" else home.kiro_agents_dir()
    agents.mkdir(parents=True, exist_ok=True)
    crashed = agents / "kirocrew-mint-fixture-111-0badc0de.json"
    young = agents / "kirocrew-mint-fixture-222-0badc0df.json"
    crashed.write_text("{}")
    young.write_text("{}")
    record_spec(crashed, time.time() - 3 * mint.MINT_TTL_SECS)
    record_spec(young, time.time() - 60)
    provider = fixture_provider(oauth_mcp_server.mcp_url)

    async def scenario() -> None:
        eng = engine()
        try:
            eng.start(provider)
            await wait_state(eng, "fixture", {"waiting", "failed"})
        finally:
            await eng.aclose()

    asyncio.run(scenario())
    assert not crashed.exists()
    assert young.exists() and manifest_paths() == [str(young)]


# -- Disconnect and a live mint ---------------------------------------------------------------------


def test_disconnect_cancels_a_live_mint_its_process_and_its_spec(
        spawns: Spawns, oauth_mcp_server: Any, connections_plugins: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)
    monkeypatch.setattr(mint, "_engine", engine())

    async def scenario() -> tuple[int, dict[str, Any], Any]:
        eng = mint.mint_engine()
        try:
            row = eng.start(provider)
            await wait_state(eng, "fixture", {"waiting"})
            assert row.runtime is not None and row.runtime.pid is not None
            pid = row.runtime.pid
            result = await disconnect_provider(provider, pm=connections_plugins)
            return pid, eng.view("fixture"), result
        finally:
            await eng.aclose()

    pid, view, result = asyncio.run(scenario())
    assert view == {"slug": "fixture", "state": "idle"}
    assert not alive(pid)
    assert mint_specs() == [] and manifest_paths() == []
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is False
    assert result.grant_removed is False and result.grant_surviving == []
    assert [e["fields"]["slug"] for e in events(DISCONNECT_EVENT)] == ["fixture"]


# -- a pair kept on purpose ------------------------------------------------------------------------------


def _grant(url: str) -> tuple[Path, Path]:
    pair = grants.artifact_paths(url)
    for path in pair:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"{}")
    return pair


def _servers(path: Path, servers: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))


@pytest.mark.parametrize("why", ["shared", "census incomplete"])
def test_a_pair_kept_on_purpose_is_not_reported_as_surviving(connections_plugins: Any, why: str) -> None:
    from kirocrew_connections.registry import load_registry

    provider = load_registry().get("notion")
    _servers(home.crew_mcp_file(), {"notion": {"url": NOTION}})
    if why == "shared":
        _servers(home.kiro_global_mcp_file(), {"notion-ws": {"url": NOTION + "?workspace=acme"}})
    else:
        spec = home.kiro_agents_dir() / "broken.json"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text("{not json")
    pair = _grant(NOTION)

    result = remove_provider_entry(provider, pm=connections_plugins)

    assert all(p.exists() for p in pair), "the pair is kept on purpose"
    assert (result.grant_removed, result.grant_surviving, result.entry_removed) == (False, [], True)
    assert result.grant_census_incomplete is (why == "census incomplete")
    [event] = events(DISCONNECT_EVENT)
    assert (event["outcome"], event["fields"]["grant_surviving"]) == ("ok", [])


# -- an audit log that fails -------------------------------------------------------------------------------


@pytest.fixture
def broken_audit_log() -> Path:
    """The SEL path is a directory: every append fails, whoever runs the test (root included)."""
    path = home.audit_log_file()
    path.mkdir(parents=True)
    (path / "keep").write_text("")
    return path


def test_a_mint_and_a_disconnect_complete_when_the_audit_log_cannot_be_written(
        spawns: Spawns, oauth_mcp_server: Any, connections_plugins: Any, broken_audit_log: Path,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)
    monkeypatch.setattr(mint, "_engine", engine())
    secrets_seen: list[str] = []

    async def scenario() -> tuple[dict[str, Any], Any]:
        eng = mint.mint_engine()
        try:
            eng.start(provider)
            waiting = await wait_state(eng, "fixture", {"waiting", "failed"})
            assert waiting["state"] == "waiting", waiting
            secrets_seen.append(waiting["oauth_url"])
            landing = await oauth_mcp_server.aconsent(waiting["oauth_url"])
            secrets_seen.append(str(landing.url))
            granted = await wait_state(eng, "fixture", {"granted", "failed", "expired"})
            result = await disconnect_provider(provider, pm=connections_plugins)
            return granted, result
        finally:
            await eng.aclose()

    with caplog.at_level(logging.WARNING):
        granted, result = asyncio.run(scenario())

    assert granted["state"] == "granted"
    assert result.grant_removed is True and result.grant_surviving == []
    assert grants.grant_presence(oauth_mcp_server.mcp_url) is False
    assert any(f"could not record {DISCONNECT_EVENT}" in w for w in result.warnings)
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("could not audit the mint of fixture" in m for m in messages), messages
    assert any(f"could not record {DISCONNECT_EVENT}" in m for m in messages), messages
    logged = "\n".join(messages + result.warnings)
    for secret in secrets_seen:
        assert secret not in logged
    assert "code=" not in logged and "state=" not in logged
    assert sorted(p.name for p in broken_audit_log.iterdir()) == ["keep"]
    assert mint_specs() == [] and manifest_paths() == []


# -- a cancel during the spec write --------------------------------------------------------------------------


class HeldLock:
    """The ``connections`` lock held by another thread, so the mint's spec write waits on it."""

    def __init__(self) -> None:
        self.acquired, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        with named_lock("connections"):
            self.acquired.set()
            self.release.wait(WAIT_SECS)

    def __enter__(self) -> HeldLock:
        self.thread.start()
        assert self.acquired.wait(WAIT_SECS)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(WAIT_SECS)


def test_a_cancel_during_the_spec_write_removes_the_spec_and_its_row_and_starts_no_process(
        spawns: Spawns, oauth_mcp_server: Any, connections_plugins: Any) -> None:
    provider = fixture_provider(oauth_mcp_server.mcp_url)

    async def scenario() -> tuple[bool, dict[str, Any], bool]:
        eng = engine()
        eng._swept = True  # the boot sweep takes the same lock; this test is about the write
        try:
            with HeldLock() as held:
                row = eng.start(provider)
                await asyncio.sleep(0.5)  # the attempt is now inside the spec write, waiting on the lock
                assert row.state == "minting" and row.runtime is None
                cancel = asyncio.ensure_future(eng.cancel("fixture", row.token))
                await asyncio.sleep(0.5)
                returned_early = cancel.done()  # it must wait for the write it cancelled to be undone
                held.release.set()
                dropped = await asyncio.wait_for(cancel, WAIT_SECS)
            return returned_early, eng.view("fixture"), dropped
        finally:
            await eng.aclose()

    returned_early, view, dropped = asyncio.run(scenario())
    assert returned_early is False and dropped is True
    assert view == {"slug": "fixture", "state": "idle"}
    assert mint_specs() == [] and manifest_paths() == []
    assert spawns.count() == 0
    assert oauth_mcp_server.pending_consents() == []

