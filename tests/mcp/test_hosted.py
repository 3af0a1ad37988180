"""kirocrew-mcp's host service: the agent file is rendered when the host starts, in the background, never fatally."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from kirocrew_testing.plugins import BlockingServerSource

from kirocrew_core import home
from kirocrew_core.contributions import HostService

CAT = {"command": "/bin/cat", "args": ["-u"]}
WAIT_SECS = 60.0


@pytest.fixture(autouse=True)
def _mcp(plugin_manager: Any) -> Any:
    import kirocrew_mcp.plugin

    plugin_manager.register(kirocrew_mcp.plugin, name="mcp")
    return plugin_manager


def the_service(pm: Any) -> HostService:
    """The service the mcp plugin contributes through the real hook."""
    from kirocrew_core.contributions import flatten
    from kirocrew_core.plugins import collect

    (service,) = [c.value for c in flatten(collect(pm, "host_services")) if c.plugin == "mcp"]
    assert isinstance(service, HostService)
    return service


def write_crew_store(servers: dict[str, Any]) -> None:
    path = home.crew_mcp_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))


def test_the_host_service_renders_the_agent_file_when_the_host_starts(plugin_manager) -> None:
    write_crew_store({"srv": CAT})
    service = the_service(plugin_manager)

    async def host_life() -> None:
        await service.start()
        await service.stop()

    asyncio.run(host_life())
    assert service.name == "mcp.agent-file" and service.busy() is None
    assert json.loads(home.rendered_agent_file().read_text())["mcpServers"] == {"srv": CAT}


def test_a_failed_render_at_host_start_is_logged_and_never_stops_the_host(plugin_manager, caplog) -> None:
    home.rendered_agent_file().mkdir(parents=True)  # a directory where the file should be: unreadable
    service = the_service(plugin_manager)

    async def host_life() -> None:
        await service.start()  # must not raise
        await service.stop()

    with caplog.at_level(logging.WARNING, logger="kirocrew_mcp.hosted"):
        asyncio.run(host_life())
    (line,) = [r.getMessage() for r in caplog.records if r.name == "kirocrew_mcp.hosted"]
    assert line.startswith("could not render the agent file at host start (agent_file_unreadable)")
    assert home.rendered_agent_file().is_dir()


def test_the_start_does_not_wait_for_the_render_and_busy_says_it_runs(plugin_manager) -> None:
    slow = BlockingServerSource({"late": CAT}, WAIT_SECS)
    plugin_manager.register(slow, name="slow-source")
    service = the_service(plugin_manager)

    async def host_life() -> tuple[str | None, str | None]:
        await service.start()  # returns while the render is still held
        await asyncio.wait_for(asyncio.to_thread(slow.entered.wait), WAIT_SECS)
        during = service.busy()
        slow.release.set()
        await service.stop()  # waits for the render: the host never exits mid-write
        return during, service.busy()

    try:
        during, after = asyncio.run(host_life())
    finally:
        slow.release.set()
    assert (during, after) == ("rendering the agent file", None)
    assert "late" in json.loads(home.rendered_agent_file().read_text())["mcpServers"]


def test_a_session_on_the_rendered_agent_waits_for_the_startup_render_then_starts(plugin_manager) -> None:
    from kirocrew_core.agent_file import require_ready

    slow = BlockingServerSource({"late": CAT}, WAIT_SECS)
    plugin_manager.register(slow, name="slow-source")
    service = the_service(plugin_manager)

    async def host_life() -> tuple[bool, BaseException | None]:
        await service.start()
        await asyncio.wait_for(asyncio.to_thread(slow.entered.wait), WAIT_SECS)
        # No agent file yet: a check that did not wait for the render would fail the session now.
        session = asyncio.ensure_future(require_ready("kirocrew", plugin_manager))
        await asyncio.wait({session}, timeout=0.5)
        waited = not session.done()
        slow.release.set()
        await asyncio.wait({session}, timeout=WAIT_SECS)
        await service.stop()
        return waited, session.exception()

    try:
        waited, failure = asyncio.run(host_life())
    finally:
        slow.release.set()
    assert waited and failure is None
    assert "late" in json.loads(home.rendered_agent_file().read_text())["mcpServers"]


def test_after_a_failed_startup_render_a_session_is_refused_saying_why(plugin_manager) -> None:
    from kirocrew_core.agent_file import AgentFileUnavailable, require_ready

    home.rendered_agent_file().mkdir(parents=True)  # unreadable: the render fails, and so would kiro-cli
    service = the_service(plugin_manager)

    async def host_life() -> None:
        await service.start()
        try:
            await require_ready("kirocrew", plugin_manager)
        finally:
            await service.stop()

    with pytest.raises(AgentFileUnavailable) as refused:
        asyncio.run(host_life())
    assert refused.value.code == "agent_file_unavailable"
    assert refused.value.message.startswith("the agent file kirocrew.json cannot be read")
    assert "(the host's render failed: agent_file_unreadable)" in refused.value.message


def test_a_service_that_never_started_stops_cleanly(plugin_manager) -> None:
    service = the_service(plugin_manager)

    async def stop_only() -> None:
        await service.stop()

    asyncio.run(stop_only())
    assert service.busy() is None and not home.rendered_agent_file().exists()


# -- through a real host ----------------------------------------------------------------------------------------


def wait_for(what: str, ready: Callable[[], Any]) -> Any:
    """Poll ``ready`` until it is truthy (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + WAIT_SECS
    while not (value := ready()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def rendered_servers() -> dict[str, Any] | None:
    path = home.rendered_agent_file()
    return json.loads(path.read_text())["mcpServers"] if path.is_file() else None


def test_a_host_started_on_demand_renders_the_agent_file_with_the_live_commands() -> None:
    from kirocrew_core.host import client

    write_crew_store({"srv": CAT})
    pong = client.ensure_host()  # what a relay does when no host answers
    assert "mcp.agent-file" in pong["services"]

    servers = wait_for("the host's startup render", rendered_servers)
    assert servers["srv"] == CAT
    assert servers["kirocrew-computer"]["args"] == ["mcp-computer"]  # the installed plugins' managed servers
    assert servers["kirocrew-conversations"]["args"] == ["mcp-conversations"]


def test_a_host_whose_startup_render_fails_logs_it_and_serves_on() -> None:
    from kirocrew_core.host import client, paths

    home.rendered_agent_file().mkdir(parents=True)  # unreadable: the render must fail
    client.ensure_host()

    line = "could not render the agent file at host start (agent_file_unreadable)"
    wait_for("the render failure in the host log", lambda: line in paths.log_file().read_text())
    assert client.ping()["pid"] > 0  # the host runs on
    assert home.rendered_agent_file().is_dir()


def test_the_real_hosts_restart_route_renders_first_and_answers_what_it_did() -> None:
    import urllib.request

    from kirocrew_core.gateway.auth import load_or_create_token
    from kirocrew_core.host import client

    pong = client.ensure_host()
    assert "mcp.agent-file" in pong["services"]
    wait_for("the startup render to finish", lambda: rendered_servers() is not None and not client.ping()["busy"])
    write_crew_store({"srv": CAT})  # after the startup render: only the restart's own render can pick it up
    url = f"{pong['url'].rstrip('/')}/api/sessions/restart"
    headers = {"Authorization": f"Bearer {load_or_create_token()}", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=b'{"reason": "mcp_apply"}', method="POST", headers=headers)
    with urllib.request.urlopen(request, timeout=WAIT_SECS) as response:
        answer = json.loads(response.read())

    assert answer["ok"] is True and answer["mcpSyncOk"] is True and answer["mcpSyncError"] is None
    servers = rendered_servers()
    assert servers is not None and servers["srv"] == CAT and answer["mcpSynced"] == len(servers)
    assert isinstance(answer["restarted"], int) and isinstance(answer["handledBy"], list)
