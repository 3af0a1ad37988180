"""Conversations in the host: MCP clients (through real relays) and CLI twins share one orchestrator.

Every client here is bare ``kirocrew mcp-conversations``, a relay; the first one starts the
test's host in the background with the test's environment (the fake kiro-cli, the test's
state directory). The host is a real ``kirocrew serve --background`` process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import home
from kirocrew_core.errors import KirocrewError
from kirocrew_core.host import client as host_client
from kirocrew_testing.fixtures import kirocrew_argv, run_kirocrew
from mcp.shared.exceptions import MCPError

from kirocrew_conversations.hosted import HostedConversations
from kirocrew_conversations.state_paths import recorded_owner

NONTERMINAL = ("queued", "running", "needs_attention")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def spawn_args(workspace: Path, name: str, message: str) -> dict[str, Any]:
    return {"conversation": "new", "name": name, "workspace": str(workspace), "message": message}


def target(out: dict[str, Any]) -> dict[str, str]:
    return {"conversationId": out["conversationId"], "runId": out["runId"]}


def host_pid() -> int:
    return int(host_client.ping()["pid"])


def twin(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_kirocrew("conversations", *args, env=env, timeout=120)


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    return done


def kiro_pids(workspace: Path) -> list[int]:
    """The kiro-cli pids that ran ``!shell echo $PPID >> kiro.pids`` in ``workspace``, in order."""
    return [int(line) for line in (workspace / "kiro.pids").read_text().split()]


RECORD_PID = "!shell echo $PPID >> kiro.pids\n"


def alive(pid: int) -> bool:
    return not host_client.pid_gone(pid)


# -- sharing -----------------------------------------------------------------------------------------------


def test_a_run_one_client_started_is_waited_on_by_another_after_the_first_left(
        hosted_conversations_client: Any, run_async: Any, workspace: Path, conversations_state_dir: Path) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with hosted_conversations_client() as first:
            started = await first.call("kiro_spawn", **spawn_args(workspace, "shared", "!sleep 1\n!say from A"))
        async with hosted_conversations_client() as second:  # the first relay has exited meanwhile
            waited = await second.call("kiro_wait", targets=[target(started)], mode="all")
        return started, waited

    started, waited = run_async(main())
    assert started["status"] in NONTERMINAL
    [run] = waited["runs"]
    assert run["status"] == "completed" and run["reply"]["text"] == "from A"
    assert recorded_owner(conversations_state_dir) == host_pid(), "the host owns the state directory"


def test_two_mcp_clients_and_a_twin_share_one_orchestrator_at_once(
        hosted_conversations_client: Any, run_async: Any, hosted_env: dict[str, str], workspace: Path) -> None:
    async def main() -> dict[str, Any]:
        async with hosted_conversations_client() as a, hosted_conversations_client() as b:
            assert host_client.ping()["connections"] == 2
            from_a = await a.call("kiro_spawn", **spawn_args(workspace, "from-a", "!sleep 1\n!say a"))
            # The twin's spawn returns at once: the host supervises the run, not the command.
            spawned = await asyncio.to_thread(twin, hosted_env, "--json", "spawn", "--name", "from-twin",
                                              "--workspace", str(workspace), "!say twin")
            [from_twin] = [json.loads(line) for line in ok(spawned).stdout.splitlines()]
            assert "supervising" not in spawned.stderr
            both = await b.call("kiro_wait", targets=[target(from_a), target(from_twin)], mode="all")
            listed = await a.call("kiro_status")
            waited = await asyncio.to_thread(twin, hosted_env, "--json", "result", from_a["conversationId"],
                                             from_a["runId"])
            return {"both": both, "listed": listed, "twin_result": json.loads(ok(waited).stdout)}

    out = run_async(main())
    assert [(r["status"], r["reply"]["text"]) for r in out["both"]["runs"]] == [("completed", "a"),
                                                                                 ("completed", "twin")]
    assert sorted(c["name"] for c in out["listed"]["conversations"]) == ["from-a", "from-twin"]
    assert out["twin_result"]["status"] == "completed" and out["twin_result"]["reply"]["text"] == "a"


def test_a_twin_with_no_host_running_starts_one_and_its_run_outlives_the_command(
        hosted_env: dict[str, str], workspace: Path, conversations_state_dir: Path) -> None:
    spawned = ok(twin(hosted_env, "--json", "spawn", "--name", "bg", "--workspace", str(workspace),
                      "!sleep 1\n!say outlived"))
    [out] = [json.loads(line) for line in spawned.stdout.splitlines()]
    assert out["status"] in NONTERMINAL and "supervising" not in spawned.stderr
    assert recorded_owner(conversations_state_dir) == host_pid()
    waited = ok(twin(hosted_env, "--json", "wait", f"{out['conversationId']}:{out['runId']}"))
    assert json.loads(waited.stdout)["runs"][0]["reply"]["text"] == "outlived"


def test_a_twin_that_starts_the_host_gives_it_its_state_directory_made_absolute(
        hosted_env: dict[str, str], workspace: Path, tmp_path: Path) -> None:
    env = {**hosted_env, "KIRO_CONVERSATIONS_STATE_DIR": "relative-state"}
    spawned = subprocess.run([*kirocrew_argv("conversations"), "--json", "spawn", "--name", "rel", "--workspace",
                              str(workspace), "!say hi"], capture_output=True, text=True, env=env, cwd=tmp_path,
                             stdin=subprocess.DEVNULL, timeout=120)
    assert "supervising" not in ok(spawned).stderr, "the host, not the command, supervises the run"
    assert recorded_owner(tmp_path / "relative-state") == host_pid()


def test_with_kirocrew_no_host_a_twin_works_in_process_and_starts_no_host(
        hosted_env: dict[str, str], workspace: Path) -> None:
    done = ok(twin({**hosted_env, "KIROCREW_NO_HOST": "1"}, "delegate", "--name", "here", "--workspace",
                   str(workspace), "!say in process"))
    assert "in process" in done.stdout and "supervising" in done.stderr
    with pytest.raises(host_client.HostError) as none:
        host_client.ping()
    assert none.value.code == "host_unavailable"


def test_a_twin_naming_another_state_dir_than_the_hosts_works_in_process(
        hosted_conversations_client: Any, run_async: Any, hosted_env: dict[str, str], workspace: Path,
        tmp_path: Path) -> None:
    other = tmp_path / "other-state"

    async def main() -> subprocess.CompletedProcess[str]:
        async with hosted_conversations_client() as client:
            await client.call("kiro_status")
            return await asyncio.to_thread(twin, hosted_env, "--state-dir", str(other), "delegate", "--name",
                                           "elsewhere", "--workspace", str(workspace), "!say local")

    done = ok(run_async(main()))
    assert "local" in done.stdout and "supervising" in done.stderr  # its own directory, in this process
    assert recorded_owner(other) not in (None, host_pid())


def test_a_twin_uses_a_standalone_server_owning_the_directory_and_starts_no_host(
        conversations_client: Any, run_async: Any, hosted_env: dict[str, str], workspace: Path) -> None:
    async def main() -> subprocess.CompletedProcess[str]:
        async with conversations_client(env=hosted_env) as standalone:
            await standalone.call("kiro_status")
            return await asyncio.to_thread(twin, hosted_env, "--json", "spawn", "--name", "via-socket",
                                           "--workspace", str(workspace), "!say hi")

    spawned = ok(run_async(main()))
    assert len(spawned.stdout.splitlines()) == 1 and "supervising" not in spawned.stderr
    with pytest.raises(host_client.HostError) as none:
        host_client.ping()
    assert none.value.code == "host_unavailable"


def test_the_host_takes_its_settings_from_the_environment_of_the_relay_that_started_it(
        hosted_conversations_client: Any, run_async: Any, workspace: Path) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with hosted_conversations_client(extra_env={"KIRO_CONVERSATIONS_WAIT_CALL_SECS": "0.5",
                                                          "KIRO_CONVERSATIONS_MAX_WORKERS": "2"}) as client:
            started = await client.call("kiro_spawn", **spawn_args(workspace, "slow", "!sleep 30"))
            waited = await client.call("kiro_wait", targets=[target(started)], mode="all")  # no progress token
            caps = await client.call("kiro_capabilities")
            await client.call("kiro_cancel", **target(started))
            return waited, caps

    waited, caps = run_async(main())
    assert waited["waitExpired"] is True and waited["runs"][0]["status"] in NONTERMINAL
    assert caps["defaults"]["maxWorkers"] == 2


def test_a_malformed_setting_in_the_hosts_environment_fails_each_clients_initialize_with_its_code(
        hosted_conversations_client: Any, run_async: Any) -> None:
    async def main() -> BaseException:
        with pytest.raises(Exception) as refused:
            async with hosted_conversations_client(extra_env={"KIRO_CONVERSATIONS_MAX_WORKERS": "99"}):
                pass
        return refused.value

    refused = run_async(main())
    while isinstance(refused, BaseExceptionGroup):  # the SDK's task groups wrap the initialize error
        [refused] = refused.exceptions
    assert "error[invalid_configuration]" in str(refused)
    pong = host_client.ping()
    assert "conversations" not in pong["services"] and "conversations" in pong["failedServices"]


def test_a_host_retiring_for_other_code_lets_its_run_finish_then_clients_move_to_a_new_host(
        hosted_conversations_client: Any, run_async: Any, workspace: Path) -> None:
    async def main() -> dict[str, Any]:
        async with hosted_conversations_client(extra_env={"KIROCREW_CODE_FINGERPRINT": "old-code"}) as old:
            started = await old.call("kiro_spawn", **spawn_args(workspace, "long", "!sleep 2\n!say finished"))
            first = host_pid()
            async with hosted_conversations_client(extra_env={"KIROCREW_CODE_FINGERPRINT": "new-code"}) as new:
                assert host_client.ping()["retiring"], "a client of other code makes the host retire"
                waited = await new.call("kiro_wait", targets=[target(started)], mode="all")
                assert await asyncio.to_thread(host_client.wait_gone, first, 60), "the idle retired host exits"
                while True:  # the relay moves to a fresh host on the next request
                    try:
                        again = await new.call("kiro_result", **target(started))
                        break
                    except MCPError as exc:
                        assert "error[host_restarted]" in exc.message, exc
                return {"waited": waited, "again": again, "first": first, "second": host_pid()}

    out = run_async(main())
    assert out["waited"]["runs"][0]["status"] == "completed", "the retiring host never interrupted the run"
    assert out["again"]["status"] == "completed" and out["again"]["reply"]["text"] == "finished"
    assert out["second"] != out["first"] and host_client.ping()["fingerprint"] == "new-code"


# -- restart_sessions --------------------------------------------------------------------------------------


def restart_through_the_gateway() -> dict[str, Any]:
    """``POST /api/sessions/restart`` on the running host, as the dashboard's owner."""
    import httpx

    url = host_client.ping()["url"].rstrip("/")
    token = home.gateway_token_file().read_text().strip()
    response = httpx.post(f"{url}/api/sessions/restart", json={"reason": "mcp_apply"},
                          headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_restart_sessions_closes_idle_workers_now_and_retires_busy_ones_after_their_run(
        hosted_conversations_client: Any, run_async: Any, tmp_path: Path) -> None:
    idle_ws, busy_ws = tmp_path / "idle", tmp_path / "busy"
    idle_ws.mkdir()
    busy_ws.mkdir()

    async def main() -> dict[str, Any]:
        async with hosted_conversations_client() as client:
            idle = await client.call("kiro_delegate", **spawn_args(idle_ws, "idle", RECORD_PID + "!say idle"))
            busy = await client.call("kiro_spawn", **spawn_args(busy_ws, "busy", RECORD_PID + "!sleep 2\n!say done"))
            while not (busy_ws / "kiro.pids").exists():
                await asyncio.sleep(0.05)
            answer = await asyncio.to_thread(restart_through_the_gateway)
            [idle_pid], [busy_pid] = kiro_pids(idle_ws), kiro_pids(busy_ws)
            assert alive(busy_pid), "a busy kiro-cli is never killed mid-run"
            finished = await client.call("kiro_wait", targets=[target(busy)], mode="all")
            for pid in (idle_pid, busy_pid):  # the idle one at once, the busy one once its run ended
                while alive(pid):
                    await asyncio.sleep(0.05)
            again = await client.call("kiro_delegate", conversation=busy["conversationId"],
                                      message=RECORD_PID + "!recall")
            return {"answer": answer, "idle": idle, "finished": finished, "again": again, "busy_pid": busy_pid}

    out = run_async(main())
    assert out["idle"]["run"]["status"] == "completed"
    assert out["answer"]["restarted"] == 2 and "conversations" in out["answer"]["handledBy"]
    assert out["finished"]["runs"][0]["status"] == "completed"  # not interrupted by the restart
    again = out["again"]["run"]
    assert again["status"] == "completed" and "!sleep 2" in again["reply"]["text"], "the session was resumed"
    assert kiro_pids(tmp_path / "busy")[1] != out["busy_pid"], "the next run got a new kiro-cli"


# -- faults ------------------------------------------------------------------------------------------------


def test_a_host_killed_mid_run_leaves_the_run_interrupted_and_the_next_host_says_so(
        hosted_conversations_client: Any, run_async: Any, workspace: Path) -> None:
    async def main() -> tuple[int, int, dict[str, Any]]:
        async with hosted_conversations_client() as client:
            started = await client.call("kiro_spawn", **spawn_args(workspace, "doomed", RECORD_PID + "!sleep 60"))
            while not (workspace / "kiro.pids").exists():
                await asyncio.sleep(0.05)
            killed = host_pid()
            os.kill(killed, signal.SIGKILL)
            assert host_client.wait_gone(killed, 30)
            while True:  # the relay reconnects to a fresh host; only a call in flight fails, and may be retried
                try:
                    after = await client.call("kiro_result", **target(started))
                    break
                except MCPError as exc:
                    assert "error[host_restarted]" in exc.message and exc.data["retryable"], exc
            return killed, host_pid(), after

    killed, fresh, after = run_async(main())
    assert fresh != killed
    assert after["status"] == "interrupted" and after["error"]["code"] == "server_restarted"
    [kiro] = kiro_pids(workspace)
    assert host_client.wait_gone(kiro, 30), "the dead host's kiro-cli did not outlive it"


def test_while_a_standalone_server_owns_the_directory_the_host_refuses_with_its_code_then_takes_over(
        conversations_client: Any, hosted_conversations_client: Any, run_async: Any, hosted_env: dict[str, str],
        conversations_state_dir: Path) -> None:
    async def main() -> tuple[Exception, dict[str, Any]]:
        async with conversations_client(env=hosted_env):
            with pytest.raises(Exception) as refused:  # the relay answers initialize with the host's refusal
                async with hosted_conversations_client():
                    pass
        async with hosted_conversations_client() as client:  # the standalone server is gone: the host retries
            return refused.value, await client.call("kiro_status")

    refused, status = run_async(main())
    while isinstance(refused, BaseExceptionGroup):  # the SDK's task groups wrap the initialize error
        [refused] = refused.exceptions
    assert "error[state_dir_in_use]" in str(refused)
    assert status["conversations"] == []
    assert recorded_owner(conversations_state_dir) == host_pid()


def test_a_standalone_server_on_the_hosts_directory_fails_at_startup_naming_the_host(
        hosted_conversations_client: Any, run_async: Any, fake_kiro_env: dict[str, str]) -> None:
    async def main() -> tuple[subprocess.CompletedProcess[str], int]:
        async with hosted_conversations_client() as client:
            await client.call("kiro_status")
            second = await asyncio.to_thread(run_kirocrew, "mcp-conversations", "--standalone",
                                             env=fake_kiro_env, timeout=60)
            return second, host_pid()

    second, pid = run_async(main())
    assert second.returncode == 1 and second.stdout == ""
    assert "error[state_dir_in_use]" in second.stderr and f"pid {pid}" in second.stderr


# -- the command's options -----------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [("--max-workers", "2"), ("--state-dir", "x", "--wait-call-secs", "1")])
def test_server_options_without_standalone_exit_2_standalone_only_and_start_nothing(
        hosted_env: dict[str, str], options: tuple[str, ...]) -> None:
    done = run_kirocrew("mcp-conversations", *options, env=hosted_env, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert "error[standalone_only]" in done.stderr and "KIRO_CONVERSATIONS_" in done.stderr
    assert options[0] in done.stderr
    assert not (home.crew_home() / "host").exists(), "no host was started"


def test_bare_mcp_conversations_reached_through_the_full_cli_relays_to_the_host(
        hosted_env: dict[str, str], tmp_path: Path) -> None:
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    # Not the launcher's fast path: the click command itself relays.
    done = subprocess.run([sys.executable, "-m", "kirocrew_core.cli", "mcp-conversations"],
                          input="".join(json.dumps(f) + "\n" for f in frames), capture_output=True, text=True,
                          env=hosted_env, cwd=tmp_path, timeout=60)
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines())}
    assert done.returncode == 0, done.stderr
    assert answers[1]["result"]["serverInfo"]["name"] == "kirocrew-conversations"
    assert len(answers[2]["result"]["tools"]) == 17
    assert "kirocrew-conversations" in host_client.ping()["servers"]


def test_with_a_host_that_serves_no_conversations_twins_work_in_process_and_the_relay_says_why(
        hosted_env: dict[str, str], workspace: Path) -> None:
    host_client.ensure_host({**hosted_env, "KIROCREW_DISABLE_PLUGINS": "conversations"})
    assert "kirocrew-conversations" not in host_client.ping()["servers"]

    done = ok(twin(hosted_env, "delegate", "--name", "here", "--workspace", str(workspace), "!say in process"))
    relay = subprocess.run(kirocrew_argv("mcp-conversations"), input="", capture_output=True, text=True,
                           env=hosted_env, timeout=60)

    assert "in process" in done.stdout and "supervising" in done.stderr
    assert relay.returncode == 1 and relay.stdout == ""
    assert "error[unknown_server]" in relay.stderr and "--standalone" in relay.stderr


# -- the host service in process, against a real ConversationsService ---------------------------------------


def test_the_host_service_is_busy_while_a_run_executes_and_its_stop_interrupts_the_run(
        fake_kiro_cli: Any, lean_kirocrew_agent: Path, conversations_state_dir: Path, workspace: Path,
        monkeypatch: pytest.MonkeyPatch, run_async: Any) -> None:
    monkeypatch.setenv("KIRO_CONVERSATIONS_STATE_DIR", str(conversations_state_dir))

    async def main() -> tuple[list[str | None], str]:
        hosted = HostedConversations()
        await hosted.start()
        seen = [hosted.busy()]
        assert hosted.service is not None
        out = await hosted.service.call("kiro_spawn", spawn_args(workspace, "long", "!sleep 60"))
        while hosted.service.orchestrator.runs_in_progress() == 0 or \
                (await hosted.service.call("kiro_result", target(out)))["status"] != "running":
            await asyncio.sleep(0.05)
        seen.append(hosted.busy())
        await hosted.stop()
        seen.append(hosted.busy())
        reopened = HostedConversations()
        await reopened.start()
        assert reopened.service is not None
        status = (await reopened.service.call("kiro_result", target(out)))["status"]
        await reopened.stop()
        return seen, status

    seen, status = run_async(main())
    assert seen == [None, "1 run in progress", None]
    assert status == "interrupted"


def test_a_host_service_that_cannot_start_refuses_with_its_code_and_starts_on_a_later_connection(
        fake_kiro_cli: Any, conversations_state_dir: Path, monkeypatch: pytest.MonkeyPatch, run_async: Any) -> None:
    from kirocrew_conversations.state_paths import acquire_ownership

    monkeypatch.setenv("KIRO_CONVERSATIONS_STATE_DIR", str(conversations_state_dir))

    async def main() -> tuple[str, str, bool]:
        holder = acquire_ownership(conversations_state_dir)  # another owner (a standalone server's lock)
        hosted = HostedConversations()
        try:
            with pytest.raises(KirocrewError) as failed:  # the host logs it, lists it and runs on
                await hosted.start()
            assert hosted.failure is failed.value
            kept = hosted.failure.code
            with pytest.raises(KirocrewError) as refused:
                await hosted.server()
        finally:
            holder.release()
        server = await hosted.server()  # retried now that the directory is free
        await hosted.stop()
        return kept, refused.value.code, server is not None

    kept, refused, served = run_async(main())
    assert kept == refused == "state_dir_in_use" and served


def test_before_its_service_starts_the_worker_load_reports_no_workers_and_the_configured_limits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kirocrew_core.contributions import WorkerLoad

    monkeypatch.setenv("KIRO_CONVERSATIONS_MAX_WORKERS", "3")
    monkeypatch.setenv("KIRO_CONVERSATIONS_MAX_SUBAGENTS", "2")
    assert HostedConversations().worker_load() == WorkerLoad("conversations", (), 3, 0, 2)
    monkeypatch.setenv("KIRO_CONVERSATIONS_MAX_SUBAGENTS", "many")
    with pytest.raises(KirocrewError) as bad:  # a bad setting is its plugin's failure in resource_status
        HostedConversations().worker_load()
    assert bad.value.code == "invalid_configuration"
