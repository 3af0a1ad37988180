"""Runs are the rendered ``kirocrew`` agent unless a mode is named, and never start without its file.

The real server (standalone, or the host a relay starts) drives the fake kiro-cli, which announces
``<kiro home>/agents/*.json`` as modes and answers ``!settings`` with what the session really runs
on. A host renders the agent file when it starts (its managed servers: ``kirocrew-core`` and the
rest); the standalone tests work on the lean file :func:`kirocrew_testing.fixtures.write_lean_kirocrew_agent`
leaves.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import home
from kirocrew_testing.fixtures import write_lean_kirocrew_agent

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversation_calls import ref

EAGER = {"KIRO_FAKE_EAGER_MCP": "1"}  # a session answers once its MCP servers are up, so a first !mcp finds them
FOLLOWUP = {"items": [{"title": "Write the changelog", "description": "Summarise the change.", "prompt": "!say ok"}]}


def settings_reply(run: dict[str, Any]) -> str:
    assert run["status"] == "completed", run
    return str(run["reply"]["text"])


def test_a_new_conversation_without_a_mode_runs_as_kirocrew_and_calls_a_kirocrew_core_tool(
        hosted_conversations_client: Any, run_async: Any, tmp_path: Path, conversations_rows: Any) -> None:
    message = f"!settings\n!mcp kirocrew-core suggest_followup {json.dumps(FOLLOWUP)}"

    async def main() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with hosted_conversations_client(extra_env=EAGER) as client:
            caps = await client.call("kiro_capabilities")
            out = await client.call("kiro_delegate", conversation="new", name="plain", workspace=str(tmp_path),
                                    message=message)
            return caps, out["run"], await client.call("kiro_result", **ref(out["run"]))

    caps, run, result = run_async(main())
    assert caps["defaults"]["mode"] == "kirocrew" and caps["defaultMode"] == "kiro_default"
    assert run["settings"]["mode"] == "kirocrew" and run["warnings"] == []
    assert settings_reply(run) == f"settings: model={run['settings']['model']} mode=kirocrew effort=none"
    # the tool kirocrew-core served landed on this conversation
    assert [item["title"] for item in result["session"]["followUps"]["items"]] == ["Write the changelog"]
    assert conversations_rows("SELECT mode FROM runs WHERE id = ?", run["runId"]) == [("kirocrew",)]


def test_a_run_on_another_agent_carries_a_warning_and_the_next_run_without_a_mode_is_kirocrew_again(
        conversations_client: Any, run_async: Any, tmp_path: Path, conversations_rows: Any) -> None:
    async def main() -> list[dict[str, Any]]:
        async with conversations_client() as client:
            first = (await client.call("kiro_delegate", conversation="new", name="mixed", workspace=str(tmp_path),
                                       message="!settings"))["run"]
            cid = first["conversationId"]
            sent = await client.call("kiro_send", conversationId=cid, message="!settings", mode="kiro_default")
            other = (await client.call("kiro_wait", targets=[ref(sent)], mode="all"))["runs"][0]
            again = await client.call("kiro_send", conversationId=cid, message="!settings")
            back = (await client.call("kiro_wait", targets=[ref(again)], mode="all"))["runs"][0]
            result = await client.call("kiro_result", **ref(other))
            return [first, sent, other, again, back, result]

    first, sent, other, again, back, result = run_async(main())
    # the conversation is stored without a mode, and its runs without one run as kirocrew
    assert conversations_rows("SELECT mode FROM conversations WHERE id = ?", first["conversationId"]) == [(None,)]
    assert "mode=kirocrew " in settings_reply(first) and "mode=kirocrew " in settings_reply(back)
    assert first["warnings"] == back["warnings"] == again["warnings"] == []
    # the run on kiro_default ran (a warning, not an error) and says kirocrew's servers are not mounted there
    assert "mode=kiro_default " in settings_reply(other) and other["error"] is None
    for shown in (sent, other, result):
        [warning] = shown["warnings"]
        assert warning["code"] == "kirocrew_servers_not_mounted"
        assert "'kiro_default'" in warning["message"] and "kirocrew-core" in warning["message"]


@pytest.mark.parametrize("damage", ["missing", "malformed"])
def test_without_a_usable_agent_file_a_run_fails_with_agent_file_unavailable_and_starts_no_kiro_cli(
        damage: str, conversations_client: Any, fake_kiro_env: dict[str, str], fake_kiro_cli: Any,
        run_async: Any, tmp_path: Path) -> None:
    launches = tmp_path / "kiro-cli-launches.log"
    counting = tmp_path / "counting-kiro-cli"
    counting.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{launches}"\n'
                        f'exec "{fake_kiro_cli.sandboxable_path}" "$@"\n')
    counting.chmod(0o755)
    agent = home.rendered_agent_file()
    if damage == "missing":
        agent.unlink()
    else:
        agent.write_text('{"name": "kirocrew", "mcpServers": {')

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with conversations_client(env={**fake_kiro_env, "KIRO_CLI_PATH": str(counting)}) as client:
            failed = (await client.call("kiro_delegate", conversation="new", name="nofile", workspace=str(tmp_path),
                                        message="!say must not run"))["run"]
            write_lean_kirocrew_agent()  # rendered again: the next run starts, no restart needed
            retried = (await client.call("kiro_delegate", conversation=failed["conversationId"],
                                         message="!say ran"))["run"]
            return failed, retried

    failed, retried = run_async(main())
    assert failed["status"] == "failed" and failed["reply"] is None, failed
    assert failed["error"]["code"] == "agent_file_unavailable"
    assert "kirocrew.json" in failed["error"]["message"] and "kirocrew mcp rebuild" in failed["error"]["message"]
    assert str(home.kiro_home()) not in failed["error"]["message"]
    started = launches.read_text().splitlines()
    on_kirocrew = [line for line in started if line.startswith("acp --agent kirocrew")]
    assert len(on_kirocrew) == 1, f"only the retried run starts a kiro-cli on the kirocrew agent: {started}"
    assert retried["status"] == "completed" and retried["reply"]["text"] == "ran"


def test_an_mcp_server_found_only_in_local_bin_is_rendered_probes_online_and_works_in_a_session(
        hosted_conversations_client: Any, isolated_homes: Any, run_async: Any, tmp_path: Path) -> None:
    from kirocrew_mcp.probe import STATUS_OK, probe_server
    from kirocrew_mcp.render import rebuild_agent_config

    local_bin = isolated_homes.user_home / ".local" / "bin"
    local_bin.mkdir(parents=True)
    command = local_bin / "localbin-mcp"
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kirocrew_testing.servers.stdio_server '
                       '--label localbin "$@"\n')
    command.chmod(0o755)
    assert str(local_bin) not in os.environ["PATH"].split(os.pathsep) and shutil.which("localbin-mcp") is None
    settings = home.kiro_global_mcp_file()
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"mcpServers": {"localbin": {"command": "localbin-mcp"}}}))

    report = rebuild_agent_config()
    assert "localbin" in report.servers
    assert json.loads(home.rendered_agent_file().read_text())["mcpServers"]["localbin"] == {"command": "localbin-mcp"}
    probed = probe_server("localbin", {"command": "localbin-mcp"})
    assert (probed.status, probed.tools) == (STATUS_OK, ("tool_1", "tool_2")), probed.error

    async def main() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with hosted_conversations_client(extra_env=EAGER) as client:
            out = await client.call("kiro_delegate", conversation="new", name="localbin", workspace=str(tmp_path),
                                    message='!mcp localbin tool_1 {"text": "from a session"}\n!say called')
            return out["run"], (await client.call("kiro_events", **ref(out["run"]), limit=100))["events"]

    run, events = run_async(main())
    assert run["status"] == "completed" and run["reply"]["text"] == "called", run
    ended = [e.get("toolStatus") for e in events
             if e.get("toolName") == "tool_1" and e["summary"] == "tool call update"]
    assert ended[-1:] == ["completed"], events
