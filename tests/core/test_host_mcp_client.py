"""``kirocrew_core.host.mcp_client``: an MCP session on a hosted server, as kirocrew's own commands open one.

Against a real host (``kirocrew serve --background``, started on demand by the call under
test) serving the test echo server (:mod:`kirocrew_testing.servers.hosted_echo`).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from kirocrew_core.errors import KirocrewError
from kirocrew_core.host import client
from kirocrew_core.host.mcp_client import NO_HOST_ENV, host_disabled, host_session

TEST_TIMEOUT_SECS = 90.0


def run(coro: Any) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, TEST_TIMEOUT_SECS)

    return asyncio.run(bounded())


def test_a_host_session_starts_a_host_and_its_tools_see_a_cli_caller_of_this_process(
        echo_host_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIROCREW_SESSION_KEY", "session-under-test")

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with host_session("kirocrew-echo", env=echo_host_env) as hosted:
            result = await hosted.session.call_tool("whoami", {})
            return hosted.welcome, result.structured_content

    welcome, whoami = run(main())
    assert welcome["server"] == "kirocrew-echo" and welcome["pid"] == client.ping()["pid"] != os.getpid()
    assert whoami["caller"] == whoami["stamped"] == {
        "schemaVersion": 1, "sessionKey": "session-under-test", "sessionType": "cli",
        "relayPid": os.getpid(), "hostPid": os.getppid()}


def test_a_host_session_names_a_server_by_its_command_too_and_a_second_one_reuses_the_host(
        echo_host_env: dict[str, str]) -> None:
    async def main() -> list[int]:
        pids = []
        for name in ("mcp-echo", "kirocrew-echo"):
            async with host_session(name, env=echo_host_env) as hosted:
                await hosted.session.call_tool("noop", {})
                pids.append(hosted.host_pid)
        return pids

    first, second = run(main())
    assert first == second


def test_a_server_the_host_does_not_serve_is_refused_with_unknown_server(echo_host_env: dict[str, str]) -> None:
    async def main() -> None:
        async with host_session("kirocrew-nothing", env=echo_host_env):
            raise AssertionError("the host welcomed a server it does not serve")

    with pytest.raises(client.HostError) as refused:
        run(main())
    assert refused.value.code == "unknown_server" and "kirocrew-echo" in refused.value.message


def test_an_error_in_the_body_leaves_as_itself_not_wrapped_in_exception_groups(
        echo_host_env: dict[str, str]) -> None:
    async def main() -> None:
        async with host_session("kirocrew-echo", env=echo_host_env):
            raise KirocrewError("raised in the body", code="body_error")

    with pytest.raises(KirocrewError) as raised:
        run(main())
    assert raised.value.code == "body_error"


@pytest.mark.parametrize("value, disabled", [("1", True), ("yes", True), ("true", True), ("", False),
                                             ("0", False), ("false", False), (" no ", False)])
def test_kirocrew_no_host_is_read_as_a_yes_no_switch(value: str, disabled: bool) -> None:
    assert host_disabled({NO_HOST_ENV: value}) is disabled
    assert host_disabled({}) is False


def test_a_host_session_opened_while_the_host_stops_reaches_the_next_host(echo_host_env: dict[str, str]) -> None:
    async def main() -> tuple[int, int]:
        async with host_session("kirocrew-echo", env=echo_host_env) as hosted:
            first = hosted.host_pid
        assert client.request_stop(wait=None) == first  # stopping now; it may still answer pings for a moment
        async with host_session("kirocrew-echo", env=echo_host_env) as hosted:
            await hosted.session.call_tool("noop", {})
            return first, hosted.host_pid

    first, second = run(main())
    assert second != first and client.pid_gone(first)
