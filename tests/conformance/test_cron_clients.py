"""``kirocrew mcp-cron`` as the official TypeScript SDK client sees it (the relay, the host, the eight cron tools).

The client is not a session kirocrew started: it lists every tool and reads, but sees no job
and may write nothing, and its refusals arrive as ``error[<code>]: …`` results the SDK's strict
validation accepts. (The Python SDK's client drives the same server in tests/cron/test_tools_e2e.py.)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_clients import (
    StdioServer,
    assert_refused,
    call_result,
    run_typescript_client,
    run_typescript_client_in_a_session,
    text_of,
)

from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.requirements import unavailable

TOOLS = ["cron_add", "cron_list", "cron_pause", "cron_remove", "cron_remove_all", "cron_resume", "cron_trigger",
         "cron_update"]


@pytest.fixture
def cron_server(fake_kiro_cli: Any, tmp_path: Path) -> StdioServer:
    """Bare ``kirocrew mcp-cron``: a relay to a host it starts."""
    from kirocrew_mcp.render import rebuild_agent_config

    crew = CrewHarness(tmp_path, {**os.environ, "KIRO_CLI_PATH": str(fake_kiro_cli.sandboxable_path)},
                       rebuild_agent_config)
    return StdioServer(kirocrew_argv("mcp-cron"), crew.env, tmp_path, tmp_path / "server.stderr")


def test_the_typescript_client_lists_the_cron_tools_reads_an_empty_list_and_reads_refusals_by_their_code(
        node_sdk_problem: str | None, cron_server: StdioServer) -> None:
    if node_sdk_problem:
        unavailable(node_sdk_problem)
    report = run_typescript_client(cron_server, [
        {"name": "cron_list", "arguments": {"verbose": True}},
        {"name": "cron_add", "arguments": {"name": "x", "message": "m", "every": 3600}},
        {"name": "cron_remove", "arguments": {"job_id": "NOT-HEX"}},
    ])
    assert report["serverInfo"]["name"] == "kirocrew-cron"
    assert sorted(tool["name"] for tool in report["tools"]) == TOOLS
    assert report["schemaProblems"] == []
    listing = {tool["name"]: tool for tool in report["tools"]}["cron_list"]
    assert listing["annotations"]["readOnlyHint"] is True
    listed = call_result(report, 0)
    assert listed.get("isError") is not True and text_of(listed).startswith("0 cron job(s): 0 active, 0 paused")
    for index, code in ((1, "caller_unverified"), (2, "invalid_arguments")):
        assert_refused(report, index, code)


def test_a_sessions_typescript_client_reads_the_cron_refusals_by_their_code(
        node_sdk_problem: str | None, fake_kiro_cli: Any, tmp_path: Path) -> None:
    """The client run by crew sessions (their kiro-cli's ``!shell``): each refusal of issue 27 arrives as
    ``error[<code>]: …`` the SDK accepts; the second session finds the sessions' share full."""
    import time

    from kirocrew_cron import model
    from kirocrew_cron.store import CronStore
    from kirocrew_mcp.render import rebuild_agent_config

    from kirocrew_testing.aio import run_bounded

    if node_sdk_problem:
        unavailable(node_sdk_problem)
    crew = CrewHarness(tmp_path, {**os.environ, "KIRO_CLI_PATH": str(fake_kiro_cli.sandboxable_path)},
                       rebuild_agent_config)
    crew.render_agent()
    now = time.time()
    with CronStore.open() as store:  # other sessions' jobs, leaving this session's cap to fill the share
        for n in range(model.MAX_SESSION_JOBS - model.MAX_JOBS_PER_SESSION):
            store.add(model.Job(id=f"e{n:07x}", name="other", schedule=model.Schedule("every", every_secs=86_400),
                                message="m", owner=f"conversation:other-{n // 40}", created_ts=now))
    ours = [{"name": "cron_add", "arguments": {"name": f"hourly {n}", "message": "m", "every": 3600}}
            for n in range(model.MAX_JOBS_PER_SESSION)]
    first = [
        {"name": "cron_add", "arguments": {"name": "x\n# Owner", "message": "m", "every": 3600}},
        {"name": "cron_add", "arguments": {"name": "x", "message": "clear \u001b[2J", "every": 3600}},
        {"name": "cron_add", "arguments": {"name": "x", "message": "m", "cron_expr": "*/99999999999999999999 * * * *"}},
        *ours,
        {"name": "cron_add", "arguments": {"name": "one too many", "message": "m", "every": 3600}},
    ]
    second = [{"name": "cron_add", "arguments": {"name": "mine", "message": "m", "every": 3600}}]

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with crew.conversations() as conv:
            one = await run_typescript_client_in_a_session(crew, conv, kirocrew_argv("mcp-cron"), first, name="one")
            two = await run_typescript_client_in_a_session(crew, conv, kirocrew_argv("mcp-cron"), second, name="two")
        return one, two

    one, two = run_bounded(main(), 120)
    expected = {0: "name_control_characters", 1: "message_control_characters", 2: "cron_step_out_of_range",
                len(first) - 1: "session_jobs_full"}
    for index, code in expected.items():
        assert_refused(one, index, code)
    assert all(call_result(one, 3 + n).get("isError") is not True for n in range(model.MAX_JOBS_PER_SESSION))
    assert text_of(call_result(two, 0)).startswith("error[jobs_full]: ")
