"""kirocrew-computer inside the host: the host service's life, and MCP clients through real relays and a real host."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import (
    FakeDesktop,
    FakeDesktopPlugin,
    audit_records,
    driver_closed_marker,
    fake_desktop_host_env,
    mcp_client,
    text_of,
    write_keystone,
)

from kirocrew_core.contributions import HostedMcpServer, HostService
from kirocrew_core.errors import KirocrewError

ON = {"enabled": True, "allowed_apps": [], "extra_denied_apps": []}


@pytest.fixture
def desktop(plugin_manager: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDesktop:
    import kirocrew_computer.plugin

    plugin_manager.register(kirocrew_computer.plugin, name="computer")
    plugin = FakeDesktopPlugin()
    plugin_manager.register(plugin, name="fake_desktop")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("KIROCREW_SESSION_KEY", raising=False)
    return plugin.desktop


def contributions(pm: Any) -> tuple[HostService, HostedMcpServer]:
    """What the computer plugin gives the host, through the real hooks."""
    from kirocrew_core.contributions import flatten
    from kirocrew_core.plugins import collect

    (service,) = [c.value for c in flatten(collect(pm, "host_services")) if c.plugin == "computer"]
    (server,) = [c.value for c in flatten(collect(pm, "host_mcp_servers")) if c.plugin == "computer"]
    return service, server


# -- the host service, driven the way the host drives it ----------------------------------------------------


def test_the_host_service_owns_one_chokepoint_whose_driver_closes_when_the_host_stops(
        plugin_manager: Any, desktop: FakeDesktop) -> None:
    from kirocrew_computer.hosted import hosted

    write_keystone(ON)
    service, hosted_server = contributions(plugin_manager)
    assert (hosted_server.name, hosted_server.command) == ("kirocrew-computer", "mcp-computer")

    async def host_life() -> tuple[Any, Any, str]:
        await service.start()
        first, second = await hosted_server.server(), await hosted_server.server()
        chokepoint = hosted().chokepoint
        assert chokepoint is not None
        reply = await chokepoint.call("computer_list_apps", {})
        await service.stop()
        return first, second, reply.text

    first, second, listed = asyncio.run(host_life())
    assert first is second and first.name == "kirocrew-computer"  # one server, one chokepoint, every connection
    assert "Notes (app id org.example.Notes" in listed
    assert desktop.closed
    with pytest.raises(KirocrewError) as refused:
        asyncio.run(hosted_server.server())
    assert refused.value.code == "computer_unavailable"


def test_a_host_that_never_called_a_tool_never_starts_a_driver(plugin_manager: Any, desktop: FakeDesktop) -> None:
    service, _ = contributions(plugin_manager)

    async def host_life() -> None:
        await service.start()
        await service.stop()

    asyncio.run(host_life())
    assert not desktop.closed and desktop.snapshots == [] and audit_records() == []
    assert service.busy() is None


class HeldDesktop(FakeDesktop):
    """A fake desktop whose app listing waits until the test lets it go (a call the host's stop must outwait)."""

    def __init__(self) -> None:
        super().__init__()
        self.listing, self.release = threading.Event(), threading.Event()

    def list_apps(self) -> list[Any]:
        self.listing.set()
        assert self.release.wait(60), "the test never released the call"
        return super().list_apps()


def test_the_host_stop_waits_for_the_call_in_progress_and_refuses_later_ones(plugin_manager: Any) -> None:
    import kirocrew_computer.plugin
    from kirocrew_computer.hosted import hosted

    held = HeldDesktop()
    plugin_manager.register(kirocrew_computer.plugin, name="computer")
    plugin_manager.register(FakeDesktopPlugin(held), name="fake_desktop")
    write_keystone(ON)
    service, _ = contributions(plugin_manager)

    async def host_life() -> tuple[bool, Any, Any]:
        await service.start()
        chokepoint = hosted().chokepoint
        assert chokepoint is not None
        call = asyncio.ensure_future(chokepoint.call("computer_list_apps", {}))
        await asyncio.to_thread(held.listing.wait, 60)
        stop = asyncio.ensure_future(service.stop())
        await asyncio.sleep(0.2)  # give a stop that does not wait the chance to close the driver
        closed_mid_call = held.closed
        held.release.set()
        await stop
        return closed_mid_call, await call, await chokepoint.call("computer_list_apps", {})

    try:
        closed_mid_call, during, after = asyncio.run(host_life())
    finally:
        held.release.set()
    assert not closed_mid_call and held.closed
    assert during.ok and "Notes" in during.text
    assert after.code == "driver_closed"  # and no new driver was started for it


# -- through real relays and a real host ----------------------------------------------------------------------


def relay_argv() -> list[str]:
    """What the rendered agent gives kiro-cli: the bare command, i.e. the relay."""
    from kirocrew_testing.fixtures import kirocrew_argv

    return kirocrew_argv("mcp-computer")


def host_pid() -> int:
    from kirocrew_core.host import client

    return int(client.ping()["pid"])


def actors_by_call() -> list[tuple[str, str, str]]:
    return [(r["actor"], r["fields"]["tool"], r["fields"]["code"]) for r in audit_records()]


def test_two_clients_share_the_hosts_one_driver_but_never_each_others_snapshots(tmp_path: Path) -> None:
    write_keystone(ON)
    env = fake_desktop_host_env(tmp_path)
    click_save = {"app": "Notes", "element_index": 3}

    async def scenario() -> list[Any]:
        async with mcp_client(relay_argv(), tmp_path, env, KIROCREW_SESSION_KEY="agent:alpha:1") as alpha, \
                mcp_client(relay_argv(), tmp_path, env, KIROCREW_SESSION_KEY="agent:beta:2") as beta:
            return [await alpha.call_tool("computer_get_state", {"app": "Notes"}),
                    await alpha.call_tool("computer_click", click_save),
                    await beta.call_tool("computer_click", click_save),  # beta never read the window
                    await beta.call_tool("computer_get_state", {"app": "Notes"}),
                    await beta.call_tool("computer_click", click_save)]

    a_state, a_click, b_blind, b_state, b_click = asyncio.run(scenario())
    assert not a_state.is_error and not a_click.is_error and "saved 1 times" in text_of(a_click)
    assert b_blind.is_error and text_of(b_blind).startswith("error[no_state]: ")
    assert "saved 1 times" in text_of(b_state)  # the same desktop (one driver in one host) ...
    assert "saved 2 times" in text_of(b_click)  # ... acted on by both
    assert actors_by_call() == [
        ("agent:alpha:1", "computer_get_state", "ok"), ("agent:alpha:1", "computer_click", "ok"),
        ("agent:beta:2", "computer_click", "no_state"), ("agent:beta:2", "computer_get_state", "ok"),
        ("agent:beta:2", "computer_click", "ok")]


def test_a_caller_block_the_client_forges_never_reaches_the_chokepoint(tmp_path: Path) -> None:
    from kirocrew_core.host.protocol import CALLER_META_KEY

    write_keystone(ON)
    forged = {"schemaVersion": 1, "sessionKey": "agent:victim:9", "sessionType": "relay",
              "relayPid": 1, "hostPid": None}

    async def scenario() -> Any:
        async with mcp_client(relay_argv(), tmp_path, fake_desktop_host_env(tmp_path),
                              KIROCREW_SESSION_KEY="agent:honest:1") as session:
            return await session.call_tool("computer_list_apps", {}, meta={CALLER_META_KEY: forged})

    listed = asyncio.run(scenario())
    assert not listed.is_error and "Notes" in text_of(listed)
    assert actors_by_call() == [("agent:honest:1", "computer_list_apps", "ok")]


def test_a_client_without_a_session_key_is_attributed_to_its_own_relay_not_the_host(tmp_path: Path) -> None:
    write_keystone(ON)
    env = {k: v for k, v in fake_desktop_host_env(tmp_path).items() if k != "KIROCREW_SESSION_KEY"}

    async def scenario() -> int:
        async with mcp_client(relay_argv(), tmp_path, env) as first, mcp_client(relay_argv(), tmp_path, env) as second:
            await first.call_tool("computer_list_apps", {})
            await second.call_tool("computer_list_apps", {})
            return host_pid()

    pid = asyncio.run(scenario())
    first, second = (actor for actor, _, _ in actors_by_call())
    assert first.startswith("unresolved:") and second.startswith("unresolved:")
    assert first != second and f"unresolved:{pid}" not in (first, second)


def test_through_the_relay_the_keystone_is_reread_on_every_request(tmp_path: Path) -> None:
    async def scenario() -> tuple[Any, Any, Any, Any]:
        async with mcp_client(relay_argv(), tmp_path, fake_desktop_host_env(tmp_path)) as session:
            before = await session.list_tools()
            write_keystone(ON)  # while the host runs: nothing is cached
            during = await session.list_tools()
            write_keystone({**ON, "enabled": False})
            return before, during, await session.list_tools(), await session.call_tool("computer_list_apps", {})

    before, during, after, refused = asyncio.run(scenario())
    assert before.tools == [] and after.tools == []
    assert len(during.tools) == 10
    assert refused.is_error and text_of(refused).startswith("error[keystone_off]: computer use is off")


def test_mcp_computer_reached_through_the_full_cli_relays_to_the_host_too(tmp_path: Path) -> None:
    write_keystone(ON)
    env = fake_desktop_host_env(tmp_path)
    full_cli = [sys.executable, "-m", "kirocrew_core.cli", "mcp-computer"]  # not the launcher's fast path

    async def scenario() -> tuple[Any, int]:
        async with mcp_client(full_cli, tmp_path, env, KIROCREW_SESSION_KEY="agent:cli:1") as session:
            return await session.call_tool("computer_list_apps", {}), host_pid()

    listed, pid = asyncio.run(scenario())
    assert not listed.is_error and "Notes" in text_of(listed)
    assert actors_by_call() == [("agent:cli:1", "computer_list_apps", "ok")]
    assert pid != 0


def test_stopping_the_host_closes_its_desktop_driver(tmp_path: Path) -> None:
    from kirocrew_core.host import client

    write_keystone(ON)

    async def scenario() -> None:
        async with mcp_client(relay_argv(), tmp_path, fake_desktop_host_env(tmp_path)) as session:
            await session.call_tool("computer_list_apps", {})

    asyncio.run(scenario())
    assert not driver_closed_marker(tmp_path).exists()  # the host outlives its clients
    pid = host_pid()
    client.request_stop()
    assert client.wait_gone(pid, 30)
    assert driver_closed_marker(tmp_path).read_text() == "closed"


def test_a_host_that_serves_no_computer_use_is_a_clear_error_not_a_loop(kirocrew, tmp_path: Path) -> None:
    import os

    from kirocrew_core.host import client

    client.ensure_host(env={**os.environ, "KIROCREW_DISABLE_PLUGINS": "computer"})  # started without the plugin

    result = kirocrew("mcp-computer")  # the launcher's relay is refused, so is the CLI's: then it says so

    assert result.returncode == 1 and result.stdout == ""
    assert "kirocrew: error[not_hosted]: the kirocrew host serves no kirocrew-computer" in result.stderr
    assert "kirocrew mcp-computer --standalone" in result.stderr
