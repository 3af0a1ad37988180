"""The fake kiro-cli's conformance: its command line, the ACP handshake, sessions, locks, the launcher.

Every ACP test drives a real ``kiro-cli`` subprocess (the fake, through the
``fake_kiro_cli`` fixture's wrapper) with the agent-client-protocol SDK's
client side, and reads raw frames where kiro's wire differs from the SDK's types.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home, kiro, proc
from kirocrew_testing.fake_kiro import script, switches
from kirocrew_testing.fake_kiro.harness import FakeKiroProcess, RecordingClient, start_fake_kiro
from kirocrew_testing.processes import running as alive

DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing" / "fake-kiro-cli.md"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def acp(fake_kiro_cli: Any, *args: str, env: dict[str, str] | None = None,
        client: RecordingClient | None = None, cwd: Path | None = None) -> Any:
    return start_fake_kiro(fake_kiro_cli.path, "acp", *args, env=env or dict(os.environ), client=client, cwd=cwd)


async def started(k: FakeKiroProcess, cwd: Path) -> str:
    await k.initialize()
    return (await k.new_session(str(cwd)))["sessionId"]


def write_agent(directory: Path, name: str, document: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(document))
    return path


def session_file(session_id: str, suffix: str) -> Path:
    return home.kiro_sessions_dir() / f"{session_id}{suffix}"


# -- the command line -------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--version", "-V", "version"])
def test_every_version_spelling_prints_the_imitated_kiro_version(fake_kiro_cli: Any, flag: str) -> None:
    done = fake_kiro_cli.run(flag)
    assert (done.returncode, done.stdout) == (0, f"kiro-cli {switches.IMITATED_VERSION}\n")


def test_the_fixture_makes_the_fake_the_kiro_cli_the_seam_resolves(fake_kiro_cli: Any) -> None:
    assert shutil.which("kiro-cli") == str(fake_kiro_cli.path)
    assert kiro.resolve_kiro_cli().path == fake_kiro_cli.path
    assert kiro.kiro_cli_version() == switches.IMITATED_VERSION


def test_whoami_reports_a_signed_in_identity_as_json(fake_kiro_cli: Any) -> None:
    done = fake_kiro_cli.run("whoami", "--format", "json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["accountType"] == "BuilderId"


def test_whoami_when_signed_out_says_not_logged_in_and_fails(fake_kiro_cli: Any) -> None:
    done = fake_kiro_cli.run("whoami", "--format", "json", env=fake_kiro_cli.env(logged_out="1"))
    assert done.returncode == 1
    assert "Not logged in" in done.stderr and done.stdout == ""


def test_list_models_prints_the_models_and_the_default_as_json(fake_kiro_cli: Any) -> None:
    done = fake_kiro_cli.run("chat", "--list-models", "--format", "json")
    document = json.loads(done.stdout)
    assert document["default_model"] == "auto"
    assert {"model_name", "model_id", "description", "context_window_tokens"} <= set(document["models"][0])
    assert "claude-sonnet-4.5" in [m["model_id"] for m in document["models"]]


def test_list_models_can_answer_in_the_older_flat_array_shape(fake_kiro_cli: Any) -> None:
    done = fake_kiro_cli.run("chat", "--list-models", "--format", "json",
                             env=fake_kiro_cli.env(models_format="flat", models="m-one,m-two"))
    assert [row["model_id"] for row in json.loads(done.stdout)] == ["m-one", "m-two"]


@pytest.mark.parametrize("argv", [["fly"], ["--frobnicate"], ["acp", "--no-such-flag"]])
def test_an_unknown_subcommand_or_flag_is_a_usage_error(fake_kiro_cli: Any, argv: list[str]) -> None:
    done = fake_kiro_cli.run(*argv)
    assert done.returncode == 2
    assert "error" in done.stderr


# -- the handshake ------------------------------------------------------------------


def test_initialize_answers_kiro_v2s_capabilities_exactly(fake_kiro_cli: Any) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            return await k.initialize()

    assert run(scenario()) == {
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": True, "audio": False, "embeddedContext": False},
            "mcpCapabilities": {"http": True, "sse": False},
            "sessionCapabilities": {},
            "auth": {},
        },
        "authMethods": [],
        "agentInfo": {"name": "Kiro CLI Agent", "title": "Kiro CLI Agent", "version": switches.IMITATED_VERSION},
    }


def test_initialize_accepts_the_date_string_protocol_version_kiros_v2_did(fake_kiro_cli: Any) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            return await k.initialize("2025-08-22")

    assert run(scenario())["protocolVersion"] == 1


def test_session_fork_is_neither_advertised_nor_served_by_default(fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            with pytest.raises(RequestError) as refused:
                await k.request("session/fork", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []})
            return refused.value.code

    assert run(scenario()) == -32601


def test_session_fork_is_advertised_and_copies_the_transcript_when_switched_on(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    fake_kiro_cli.switch(advertise_fork="1")

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            init = await k.initialize()
            sid = (await k.new_session(str(tmp_path)))["sessionId"]
            await k.prompt(sid, "remember the word teal")
            fork = await k.request("session/fork", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []})
            return init, sid, fork

    init, sid, fork = run(scenario())
    assert init["agentCapabilities"]["sessionCapabilities"] == {"fork": {}}
    assert fork["sessionId"] != sid and "models" in fork
    assert "teal" in session_file(fork["sessionId"], ".jsonl").read_text()


def test_the_no_images_switch_withdraws_image_support_and_refuses_an_image_prompt(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    fake_kiro_cli.switch(no_images="1")
    image = {"type": "image", "mimeType": "image/png", "data": "aGk="}

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--trust-all-tools") as k:
            init = await k.initialize()
            sid = (await k.new_session(str(tmp_path)))["sessionId"]
            with pytest.raises(RequestError) as refused:
                await k.request("session/prompt", {"sessionId": sid, "prompt": [
                    {"type": "text", "text": "!write refused.txt ran"}, image]})
            text_only = await k.prompt(sid, "still answering")
            return init, refused.value.code, text_only.stop_reason

    init, code, stop_reason = run(scenario())
    assert init["agentCapabilities"]["promptCapabilities"]["image"] is False
    assert code == -32602
    assert not (tmp_path / "refused.txt").exists()  # nothing of the refused prompt ran
    assert stop_reason == "end_turn"


def test_session_new_without_mcp_servers_makes_kiro_exit_zero_silently(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            await k.initialize()
            with pytest.raises(ConnectionError):
                await k.request("session/new", {"cwd": str(tmp_path)})
            return await k.wait_exit(), k.stderr

    code, stderr = run(scenario())
    assert code == 0
    assert stderr == []


def test_a_slow_initialize_switch_holds_the_answer_back(fake_kiro_cli: Any) -> None:
    async def scenario() -> None:
        async with acp(fake_kiro_cli, env=fake_kiro_cli.env(init_delay="60")) as k:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(k.initialize(), 1.0)
            assert k.process.returncode is None

    run(scenario())


def test_the_silent_switch_reads_requests_and_never_answers(fake_kiro_cli: Any) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli, env=fake_kiro_cli.env(silent="1")) as k:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(k.initialize(), 1.0)
            k.process.stdin.close()
            return await k.wait_exit(), [m for d, m in k.frames if d == "incoming"]

    code, received = run(scenario())
    assert code == 0 and received == []


# -- modes, models -------------------------------------------------------------------


def test_session_new_offers_the_agents_as_modes_with_a_local_agent_winning(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent(home.kiro_agents_dir(), "reviewer", {"name": "reviewer", "description": "global one"})
    write_agent(home.kiro_agents_dir(), "globalonly", {"description": "only global"})
    write_agent(tmp_path / ".kiro" / "agents", "reviewer", {"name": "reviewer", "description": "local one"})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, cwd=tmp_path) as k:
            await k.initialize()
            return await k.new_session(str(tmp_path))

    modes = run(scenario())["modes"]
    described = {m["id"]: m["description"] for m in modes["availableModes"]}
    assert modes["currentModeId"] == "kiro_default"
    assert described["reviewer"] == "local one"
    assert set(described) == {"kiro_default", "reviewer", "globalonly"}


def test_the_models_kiro_adds_to_session_new_are_in_the_raw_result(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--model", "claude-haiku-4.5") as k:
            await k.initialize()
            return await k.new_session(str(tmp_path))

    models = run(scenario())["models"]
    assert models["currentModelId"] == "claude-haiku-4.5"
    assert {"modelId": "auto", "name": "auto"}.items() <= models["availableModels"][0].items()


def test_an_agent_spec_with_a_field_kiro_does_not_know_is_refused_outright(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent(home.kiro_agents_dir(), "v3style", {"name": "v3style", "permissions": {"read": "allow"}})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "v3style") as k:
            await k.initialize()
            return await k.new_session(str(tmp_path)), k.stderr

    result, stderr = run(scenario())
    assert [m["id"] for m in result["modes"]["availableModes"]] == ["kiro_default"]
    assert result["modes"]["currentModeId"] == "kiro_default"
    assert any("unknown field `permissions`" in line for line in stderr)
    assert any("no agent with name v3style found" in line for line in stderr)


def test_agent_flag_selects_the_current_mode(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent(home.kiro_agents_dir(), "builder", {"description": "builds"})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "builder") as k:
            await k.initialize()
            return await k.new_session(str(tmp_path))

    assert run(scenario())["modes"]["currentModeId"] == "builder"


def test_set_mode_to_an_unknown_agent_fails_with_mode_not_found(fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            with pytest.raises(RequestError) as refused:
                await k.request("session/set_mode", {"sessionId": sid, "modeId": "ghost"})
            return refused.value

    assert "Mode 'ghost' not found" in str(run(scenario()))


def test_set_mode_switches_the_agent_and_says_so(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent(home.kiro_agents_dir(), "builder", {"description": "builds"})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            await k.request("session/set_mode", {"sessionId": sid, "modeId": "builder"})
            return k.client.of_kind("current_mode_update"), json.loads(session_file(sid, ".json").read_text())

    updates, state = run(scenario())
    assert [u.current_mode_id for u in updates] == ["builder"]
    assert state["agent"] == "builder"


def test_legacy_set_model_accepts_only_an_advertised_model(fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            answer = await k.request("session/set_model", {"sessionId": sid, "modelId": "claude-opus-4.5"})
            with pytest.raises(RequestError) as refused:
                await k.request("session/set_model", {"sessionId": sid, "modelId": "gpt-9"})
            return answer, refused.value, json.loads(session_file(sid, ".json").read_text())

    answer, refused, state = run(scenario())
    assert answer == {}
    assert "gpt-9" in str(refused)
    assert state["model"] == "claude-opus-4.5"


def test_settings_directive_reports_the_flags_the_process_started_with(fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent(home.kiro_agents_dir(), "builder", {"description": "builds"})

    async def scenario() -> list[str]:
        async with acp(fake_kiro_cli, "--agent", "builder", "--model", "claude-haiku-4.5", "--effort", "high") as k:
            sid = await started(k, tmp_path)
            await k.prompt(sid, "!settings")
        async with acp(fake_kiro_cli) as plain:
            other = await started(plain, tmp_path)
            await plain.prompt(other, "!settings")
        return k.client.texts("agent_message_chunk", sid) + plain.client.texts("agent_message_chunk", other)

    assert run(scenario()) == ["settings: model=claude-haiku-4.5 mode=builder effort=high",
                               "settings: model=auto mode=kiro_default effort=none"]


def test_set_model_set_mode_and_the_effort_command_change_what_the_session_runs_on(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent(home.kiro_agents_dir(), "builder", {"description": "builds"})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            await k.request("session/set_mode", {"sessionId": sid, "modeId": "builder"})
            await k.request("session/set_model", {"sessionId": sid, "modelId": "claude-opus-4.5"})
            effort = await k.execute(sid, "effort", {"value": "xhigh"})
            bad = await k.execute(sid, "effort", {"value": "extreme"})
            await k.prompt(sid, "!settings")
            return effort, bad, k.client.texts("agent_message_chunk", sid)

    effort, bad, said = run(scenario())
    assert effort["success"] is True and bad["success"] is False and "extreme" in bad["message"]
    assert said == ["settings: model=claude-opus-4.5 mode=builder effort=xhigh"]


def test_a_loaded_session_comes_back_on_its_saved_model_and_agent_not_on_the_new_flags(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    write_agent(home.kiro_agents_dir(), "builder", {"description": "builds"})

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, "--agent", "builder", "--model", "claude-haiku-4.5", "--effort", "low") as k:
            sid = await started(k, tmp_path)
            await k.execute(sid, "effort", {"value": "max"})
        async with acp(fake_kiro_cli, "--model", "claude-opus-4.5", "--effort", "medium") as again:
            await again.initialize()
            loaded = await again.load_session(sid, str(tmp_path))
            await again.prompt(sid, "!settings")
            return loaded, again.client.texts("agent_message_chunk", sid)[-1]

    loaded, said = run(scenario())
    assert (loaded["models"]["currentModelId"], loaded["modes"]["currentModeId"]) == ("claude-haiku-4.5", "builder")
    # The effort is the new process's: kiro reports none, so the fake keeps it per process (see its docs page).
    assert said == "settings: model=claude-haiku-4.5 mode=builder effort=medium"


def test_commands_available_follows_the_session_start(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            return sid, await k.client.wait_for(lambda: k.client.notified("kiro.dev/commands/available"))

    sid, available = run(scenario())
    first = available[0]
    assert first["sessionId"] == sid
    assert {"/mcp", "/tools", "/model"} <= {c["name"] for c in first["commands"]}
    assert ("read", "built-in") in {(t["name"], t["source"]) for t in first["tools"]}
    assert first["mcpServers"] == []


# -- sessions on disk, locks ---------------------------------------------------------


def test_a_new_session_is_persisted_with_a_lock_naming_the_process(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            await k.prompt(sid, "hello there")
            return sid, k.process.pid, json.loads(session_file(sid, ".lock").read_text())

    sid, pid, lock = run(scenario())
    assert lock["pid"] == pid and lock["started_at"]
    assert json.loads(session_file(sid, ".json").read_text())["cwd"] == str(tmp_path)
    assert "hello there" in session_file(sid, ".jsonl").read_text()


@pytest.mark.parametrize("ending", ["stdin_eof", "sigterm", "sigterm_mid_turn"])
def test_a_graceful_shutdown_removes_the_session_lock(fake_kiro_cli: Any, tmp_path: Path, ending: str) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            assert session_file(sid, ".lock").exists()
            if ending == "stdin_eof":
                k.process.stdin.close()
            elif ending == "sigterm":
                os.kill(k.process.pid, signal.SIGTERM)
            else:
                turn = asyncio.ensure_future(k.prompt(sid, "!say busy\n!hang"))
                await k.client.wait_for(lambda: k.client.texts())
                os.kill(k.process.pid, signal.SIGTERM)
                with pytest.raises(ConnectionError):
                    await turn
            return sid, await k.wait_exit()

    sid, code = run(scenario())
    assert code == 0
    assert not session_file(sid, ".lock").exists()
    assert session_file(sid, ".json").exists()


def test_a_killed_kiro_leaves_its_session_lock_behind(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            os.kill(k.process.pid, signal.SIGKILL)
            await k.wait_exit()
            return sid, k.process.pid

    sid, pid = run(scenario())
    assert json.loads(session_file(sid, ".lock").read_text())["pid"] == pid


def test_a_session_loads_in_a_new_process_and_replays_its_history(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as first:
            sid = await started(first, tmp_path)
            await first.prompt(sid, "the answer is 42")
        async with acp(fake_kiro_cli) as second:
            await second.initialize()
            loaded = await second.load_session(sid, str(tmp_path))
            user = second.client.texts("user_message_chunk", sid)
            agent = second.client.texts("agent_message_chunk", sid)
            lock = json.loads(session_file(sid, ".lock").read_text())
            return loaded, user, agent, lock["pid"] == second.process.pid

    loaded, user, agent, locked_by_second = run(scenario())
    assert "sessionId" not in loaded and {"modes", "models"} <= set(loaded)
    assert user == ["the answer is 42"] and agent == ["the answer is 42"]
    assert locked_by_second


def test_load_refuses_a_session_whose_lock_names_another_pid_even_a_dead_one(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as first:
            sid = await started(first, tmp_path)
            os.kill(first.process.pid, signal.SIGKILL)
            await first.wait_exit()
            dead_pid = first.process.pid
        refusals = []
        async with acp(fake_kiro_cli) as second:
            await second.initialize()
            for _ in range(2):  # durable: asking again does not help
                with pytest.raises(RequestError) as refused:
                    await second.load_session(sid, str(tmp_path))
                refusals.append(refused.value)
            session_file(sid, ".lock").unlink()  # the client's job, once it knows the pid is dead
            loaded = await second.load_session(sid, str(tmp_path))
        return dead_pid, refusals, loaded

    dead_pid, refusals, loaded = run(scenario())
    assert not alive(dead_pid)
    for refusal in refusals:
        assert refusal.code == -32603
        assert str(refusal) == f"Session is active in another process (PID {dead_pid})"
    assert "modes" in loaded


def test_an_unreadable_lock_is_refused_with_kiros_second_marker(fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as first:
            sid = await started(first, tmp_path)
        session_file(sid, ".lock").write_text("{not json")
        async with acp(fake_kiro_cli) as second:
            await second.initialize()
            with pytest.raises(RequestError) as refused:
                await second.load_session(sid, str(tmp_path))
            return refused.value

    assert "failed to re-read lock file" in str(run(scenario()))


def test_loading_an_unknown_session_makes_kiro_exit_zero_by_default(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            await k.initialize()
            with pytest.raises(ConnectionError):
                await k.load_session("0b5e7b4e-0000-4000-8000-000000000000", str(tmp_path))
            return await k.wait_exit()

    assert run(scenario()) == 0


def test_loading_an_unknown_session_can_be_switched_to_an_error(fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli, env=fake_kiro_cli.env(unknown_load="error")) as k:
            await k.initialize()
            with pytest.raises(RequestError) as refused:
                await k.load_session("0b5e7b4e-0000-4000-8000-000000000000", str(tmp_path))
            return refused.value, k.process.returncode

    refusal, returncode = run(scenario())
    assert "Session not found" in str(refusal) and returncode is None


def test_the_crash_on_load_switch_kills_kiro_mid_request(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as first:
            sid = await started(first, tmp_path)
        async with acp(fake_kiro_cli, env=fake_kiro_cli.env(crash_on_load="101")) as second:
            await second.initialize()
            with pytest.raises(ConnectionError):
                await second.load_session(sid, str(tmp_path))
            return await second.wait_exit()

    assert run(scenario()) == 101


def test_terminate_evicts_a_session_and_frees_it_but_keeps_the_transcript(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            await k.prompt(sid, "keep me")
            answer = await k.conn.ext_method("kiro.dev/session/terminate", {"sessionId": sid})
            lock_gone = not session_file(sid, ".lock").exists()
            with pytest.raises(RequestError):
                await k.prompt(sid, "anyone there?")
            reloaded = await k.load_session(sid, str(tmp_path))
            return answer, lock_gone, reloaded

    answer, lock_gone, reloaded = run(scenario())
    assert answer == {} and lock_gone
    assert "modes" in reloaded


def test_an_unknown_kiro_extension_is_refused_or_ignored_without_harm(fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import RequestError

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            await k.conn.ext_notification("kiro.dev/something/new", {"sessionId": sid})
            with pytest.raises(RequestError) as refused:
                await k.conn.ext_method("kiro.dev/something/else", {"sessionId": sid})
            return refused.value.code, await k.prompt(sid, "still here")

    code, response = run(scenario())
    assert code == -32601 and response.stop_reason == "end_turn"


def test_one_process_hosts_several_sessions_each_with_its_own_lock(fake_kiro_cli: Any, tmp_path: Path) -> None:
    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            await k.initialize()
            a = (await k.new_session(str(tmp_path)))["sessionId"]
            b = (await k.new_session(str(tmp_path)))["sessionId"]
            await k.prompt(a, "for a")
            await k.prompt(b, "for b")
            return a, b, k.client.texts(session_id=a), k.client.texts(session_id=b)

    a, b, texts_a, texts_b = run(scenario())
    assert a != b and texts_a == ["for a"] and texts_b == ["for b"]


# -- the launcher -----------------------------------------------------------------------


def test_launcher_mode_runs_the_agent_in_a_kiro_cli_chat_child_of_the_same_group(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    fake_kiro_cli.switch(launcher="1")

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            owner = json.loads(session_file(sid, ".lock").read_text())["pid"]
            children = proc.live_descendants(k.process.pid)
            comm = Path(f"/proc/{owner}/comm").read_text().strip()
            return k.process.pid, owner, children, comm, os.getpgid(owner)

    launcher, owner, children, comm, group = run(scenario())
    assert owner != launcher and owner in children
    assert comm == "kiro-cli-chat"
    assert group == launcher  # the launcher leads the group the client created


def test_sigterm_to_the_launcher_orphans_the_child_until_the_group_is_torn_down(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    fake_kiro_cli.switch(launcher="1")

    async def scenario() -> Any:
        async with acp(fake_kiro_cli) as k:
            sid = await started(k, tmp_path)
            child = json.loads(session_file(sid, ".lock").read_text())["pid"]
            os.kill(k.process.pid, signal.SIGTERM)  # what a client that signals only its child does
            await k.wait_exit()
            await asyncio.sleep(0.3)
            survived = alive(child)
        # leaving the block tears the group down (proc.terminate_async)
        return sid, child, survived

    sid, child, survived = run(scenario())
    assert survived
    assert not alive(child)
    assert not session_file(sid, ".lock").exists()  # the child still got to shut down gracefully


def test_the_launcher_refuses_to_start_acp_when_signed_out(fake_kiro_cli: Any) -> None:
    done = fake_kiro_cli.run("acp", env=fake_kiro_cli.env(launcher="1", logged_out="1"))
    assert done.returncode == 1
    assert "You are not logged in" in done.stderr


# -- the docs page stays true ---------------------------------------------------------------


def test_the_docs_page_states_the_imitated_version() -> None:
    assert f"kiro-cli {switches.IMITATED_VERSION}" in DOCS_PAGE.read_text()


@pytest.mark.parametrize("name", switches.ALL)
def test_every_environment_switch_is_documented(name: str) -> None:
    assert f"| `{name}=" in DOCS_PAGE.read_text()


@pytest.mark.parametrize("directive", script.DIRECTIVES)
def test_every_script_directive_is_documented(directive: str) -> None:
    assert f"| `!{directive}" in DOCS_PAGE.read_text()


def test_a_session_is_told_its_agents_resources_and_agent_spawn_hook_output_in_its_directory(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("global note\n")
    steering = tmp_path / "ws" / ".kiro" / "steering"
    steering.mkdir(parents=True)
    (steering / "style.md").write_text("steering note")
    write_agent(home.kiro_agents_dir(), "told", {
        "resources": [notes.as_uri(), "file://.kiro/steering/**/*.md", (tmp_path / "missing.md").as_uri(),
                      "skill://ignored"],
        "hooks": {"agentSpawn": [{"command": "pwd; cat"}, {"command": "echo never shown; exit 3"}],
                  "stop": [{"command": "echo not at start"}]}})

    async def scenario() -> str:
        async with acp(fake_kiro_cli, "--agent", "told", cwd=tmp_path) as k:
            sid = await started(k, tmp_path / "ws")
            await k.prompt(sid, "!context")
            return "".join(k.client.texts("agent_message_chunk", sid))

    cwd = str((tmp_path / "ws").resolve())
    event = json.dumps({"hook_event_name": "agentSpawn", "cwd": str(tmp_path / "ws")})
    assert run(scenario()) == f"context:\nglobal note\nsteering note\n{cwd}\n{event}"
