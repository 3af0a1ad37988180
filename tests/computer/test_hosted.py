"""kirocrew-computer inside the host: the host service's life, and MCP clients through real relays and a real host."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import FakeDesktop, FakeDesktopPlugin, audit_records, write_keystone

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
        first, second = hosted_server.server(), hosted_server.server()
        chokepoint = hosted()._chokepoint
        assert chokepoint is not None
        reply = await chokepoint.call("computer_list_apps", {})
        await service.stop()
        return first, second, reply.text

    first, second, listed = asyncio.run(host_life())
    assert first is second and first.name == "kirocrew-computer"  # one server, one chokepoint, every connection
    assert "Notes (app id org.example.Notes" in listed
    assert desktop.closed
    with pytest.raises(KirocrewError) as refused:
        hosted_server.server()
    assert refused.value.code == "computer_unavailable"


def test_a_host_that_never_called_a_tool_never_starts_a_driver(plugin_manager: Any, desktop: FakeDesktop) -> None:
    service, _ = contributions(plugin_manager)

    async def host_life() -> None:
        await service.start()
        await service.stop()

    asyncio.run(host_life())
    assert not desktop.closed and desktop.snapshots == [] and audit_records() == []
    assert service.busy() is None
