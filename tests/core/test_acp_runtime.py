"""The ACP session runtime against the fake kiro-cli, speaking real ACP over real pipes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kirocrew_core import acp_runtime, grants, home, kiro, kiro_sessions, processes
from kirocrew_core.acp_runtime import (
    AcpConnectionLost,
    AcpOptions,
    AcpRequestError,
    AcpRuntime,
    AcpSession,
    AcpTimeoutError,
    PermissionRequest,
    SessionLockedError,
    SettingsNotAppliedError,
    UnsupportedCapabilityError,
)
from kirocrew_core.errors import BadInputError
from kirocrew_core.kiro_ext import MCP_FAILED, MCP_INITIALIZED, OAuthRequest
from kirocrew_testing.mcp_fixtures import stdio_server_argv

T = TypeVar("T")
TEST_TIMEOUT_SECS = 90.0


def run(coro: Awaitable[T]) -> T:
    """Run one test's coroutine; a hang fails the test instead of stalling the suite."""
    async def bounded() -> T:
        return await asyncio.wait_for(coro, TEST_TIMEOUT_SECS)

    return asyncio.run(bounded())


@pytest.fixture(autouse=True)
def _fake(fake_kiro_cli: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(acp_runtime, "LOAD_RETRY_BACKOFF_SECS", (0.05, 0.05, 0.05))
    # The fake checks every frame with the acp SDK's models here: a malformed request from the runtime
    # is answered -32602, a wrong shape from the fake ends it (see fake_kiro/strict.py).
    fake_kiro_cli.switch(strict="1")
    return fake_kiro_cli


class Recorder:
    """An update sink that keeps what it got, as (kind, text) pairs and raw updates."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def __call__(self, session_id: str, update: Any) -> None:
        self.updates.append(update)

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]

    def texts(self, kind: str = "agent_message_chunk") -> list[str]:
        return [u.content.text for u in self.updates if u.session_update == kind]

    def tool_statuses(self) -> list[str]:
        return [str(getattr(u.status, "value", u.status)) for u in self.updates
                if u.session_update == "tool_call_update" and u.status is not None]


def write_agent(name: str, spec: dict[str, Any]) -> Path:
    path = home.kiro_agents_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, **spec}))
    return path


def stdio_entry(*options: str) -> dict[str, Any]:
    argv = stdio_server_argv(*options)
    return {"command": argv[0], "args": argv[1:]}


async def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


# -- starting ---------------------------------------------------------------------------


def test_the_handshake_reports_kiros_agent_info_and_capabilities(fake_kiro_cli: Any) -> None:
    fake_kiro_cli.switch(version="2.16.0")

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            assert rt.alive and rt.pid is not None
            assert rt.initialize_result["protocolVersion"] == 1
            assert rt.agent_info["version"] == "2.16.0"
            capabilities = rt.initialize_response.agent_capabilities
            assert capabilities is not None and capabilities.load_session is True
        assert not rt.alive

    run(main())


def test_wait_exit_returns_the_moment_kiro_cli_dies_and_none_before_it_started(fake_kiro_cli: Any) -> None:
    async def main() -> tuple[int | None, int | None]:
        never_started = await AcpRuntime().wait_exit()
        async with AcpRuntime.start() as rt:
            assert rt.pid is not None
            waiting = asyncio.ensure_future(rt.wait_exit())
            await asyncio.sleep(0.2)
            assert not waiting.done(), "returned while kiro-cli still ran"
            os.kill(rt.pid, signal.SIGKILL)
            return never_started, await asyncio.wait_for(waiting, 10)

    never_started, status = run(main())
    assert never_started is None and status == -signal.SIGKILL


def test_without_kiro_cli_the_runtime_does_not_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KIRO_CLI_PATH")
    monkeypatch.setenv("PATH", str(tmp_path))

    async def main() -> None:
        async with AcpRuntime.start():
            raise AssertionError("started without kiro-cli")

    with pytest.raises(kiro.KiroNotInstalledError):
        run(main())


def test_conflicting_trust_flags_are_refused_before_anything_is_spawned() -> None:
    with pytest.raises(BadInputError):
        run(AcpRuntime(AcpOptions(trust_all_tools=True, trust_tools=["shell"])).open())


def test_an_initialize_that_never_answers_times_out_and_leaves_no_process(fake_kiro_cli: Any) -> None:
    fake_kiro_cli.switch(init_delay="60")
    runtime = AcpRuntime(AcpOptions(initialize_timeout=0.5))
    with pytest.raises(AcpTimeoutError) as caught:
        run(runtime.open())
    assert caught.value.code == "acp_timeout" and caught.value.method == "initialize"
    assert runtime.returncode is not None and runtime.pid is not None
    assert processes.alive(runtime.pid) is False


def test_a_signed_out_launcher_fails_the_start_with_its_own_words(fake_kiro_cli: Any) -> None:
    fake_kiro_cli.switch(launcher="1", logged_out="1")
    runtime = AcpRuntime()
    with pytest.raises(AcpConnectionLost) as caught:
        run(runtime.open())
    assert caught.value.returncode == 1
    assert "not logged in" in str(caught.value)


def test_the_child_gets_the_full_environment_it_was_given(tmp_path: Path) -> None:
    env = {**os.environ, "KIROCREW_TEST_MARK": "passed-through"}

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(env=env, trust_all_tools=True)) as rt:
            session = await rt.new_session(tmp_path)
            result = await session.prompt('!shell echo "$KIROCREW_TEST_MARK" > mark.txt')
            assert result.stop_reason == "end_turn"

    run(main())
    assert (tmp_path / "mark.txt").read_text().strip() == "passed-through"


# -- sessions ------------------------------------------------------------------------------


def test_a_new_session_carries_kiros_models_and_the_agents_as_modes(tmp_path: Path) -> None:
    write_agent("reviewer", {"description": "Reviews code"})

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(model="claude-sonnet-4.5")) as rt:
            session = await rt.new_session(tmp_path, mcp_servers=[])
            assert uuid.UUID(session.session_id)
            assert "models" in session.raw  # the field the typed SDK response drops
            assert session.models is not None
            assert session.models.current_model_id == "claude-sonnet-4.5"
            assert "auto" in session.models.ids()
            assert session.modes is not None and {"kiro_default", "reviewer"} <= set(session.modes.ids())
            assert session.current_mode_id == "kiro_default"
            assert rt.sessions == {session.session_id: session}

    run(main())


def test_a_relative_cwd_is_refused_and_the_runtime_stays_usable(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            with pytest.raises(BadInputError) as caught:
                await rt.new_session("relative/dir")
            assert caught.value.code == "bad_cwd"
            assert (await rt.new_session(tmp_path)).session_id

    run(main())


def test_a_prompt_round_trip_delivers_every_update_in_order_before_it_returns(tmp_path: Path) -> None:
    recorder = Recorder()
    first_seen = asyncio.Event()

    async def slow_first(session_id: str, update: Any) -> None:
        if not first_seen.is_set():
            first_seen.set()
            await asyncio.sleep(0.2)  # a slow sink must not reorder or lose what follows
        await recorder(session_id, update)

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path, on_update=slow_first)
            result = await session.prompt("!say one\n!think hmm\n!say two\nplain three")
            assert result.stop_reason == "end_turn"
            assert recorder.texts() == ["one", "two", "plain three"]
            assert recorder.texts("agent_thought_chunk") == ["hmm"]
            await session.wait_until(lambda s: s.metadata is not None, 10)
            assert session.metadata is not None and "turnDurationMs" in session.metadata

    run(main())


def test_frames_far_larger_than_64_kib_come_through_whole(tmp_path: Path) -> None:
    recorder = Recorder()
    big = "diff-line" * 40_000  # ~360 KB in one JSON line, like a large diff or image

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path, on_update=recorder)
            assert (await session.prompt(f"!say {big}")).stop_reason == "end_turn"

    run(main())
    assert recorder.texts() == [big]


def test_a_json_rpc_error_from_a_prompt_keeps_its_code(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            with pytest.raises(AcpRequestError) as caught:
                await session.prompt("!error -32042 quota exhausted")
            assert caught.value.rpc_code == -32042 and "quota exhausted" in caught.value.rpc_message
            assert (await session.prompt("still here")).stop_reason == "end_turn"

    run(main())


def test_a_refusal_fails_the_prompt_and_leaves_kiros_reason_in_the_metadata(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            with pytest.raises(AcpRequestError) as caught:
                await session.prompt("!refuse")
            assert caught.value.rpc_code == -32603
            assert session.metadata is not None and session.metadata["stopReason"] == "CONTENT_FILTERED"
            assert "refusal" in session.metadata

    run(main())


def test_set_mode_and_the_legacy_set_model_reach_kiro(tmp_path: Path) -> None:
    write_agent("reviewer", {"description": "Reviews code"})

    async def main() -> str:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            await session.set_mode("reviewer")
            assert session.current_mode_id == "reviewer"
            with pytest.raises(AcpRequestError, match="Mode 'nobody' not found"):
                await session.set_mode("nobody")
            await session.set_model("claude-haiku-4.5")
            with pytest.raises(AcpRequestError):
                await session.set_model("no-such-model")
            return session.session_id

    session_id = run(main())

    async def reload() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.load_session(session_id, tmp_path)
            assert session.models is not None and session.models.current_model_id == "claude-haiku-4.5"

    run(reload())


async def settings_reply(session: AcpSession) -> str:
    sink = Recorder()
    session.on_update = sink
    await session.prompt("!settings")
    return sink.texts()[-1]


def test_a_loaded_session_keeps_its_saved_settings_until_apply_settings_moves_it(tmp_path: Path) -> None:
    write_agent("reviewer", {"description": "Reviews code"})

    async def first() -> str:
        async with AcpRuntime.start(AcpOptions(agent="reviewer", model="claude-haiku-4.5")) as rt:
            session = await rt.new_session(tmp_path)
            applied = await session.apply_settings(model="claude-haiku-4.5", mode="reviewer")
            assert applied.changed == () and (applied.model, applied.mode) == ("claude-haiku-4.5", "reviewer")
            return session.session_id

    session_id = run(first())

    async def reload() -> None:
        async with AcpRuntime.start(AcpOptions(model="claude-opus-4.5", effort="high")) as rt:
            session = await rt.load_session(session_id, tmp_path)
            # The defect's trigger: the new process's flags do not reach a loaded session.
            assert (session.current_model_id, session.current_mode_id) == ("claude-haiku-4.5", "reviewer")
            assert await settings_reply(session) == "settings: model=claude-haiku-4.5 mode=reviewer effort=high"
            applied = await session.apply_settings(model="claude-opus-4.5", mode="kiro_default", effort="max")
            assert applied.changed == ("mode", "model", "effort")
            assert (applied.model, applied.mode, applied.effort) == ("claude-opus-4.5", "kiro_default", "max")
            assert await settings_reply(session) == "settings: model=claude-opus-4.5 mode=kiro_default effort=max"
            again = await session.apply_settings(model="claude-opus-4.5", mode="kiro_default", effort="max")
            assert again.changed == (), "settings already in place send nothing"

    run(reload())


def test_a_setting_kiro_refuses_raises_settings_not_applied_listing_what_it_offers(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(agent="ghost")) as rt:  # kiro falls back to its default agent
            session = await rt.new_session(tmp_path)
            with pytest.raises(SettingsNotAppliedError) as mode:
                await session.apply_settings(mode="ghost")
            assert mode.value.code == "settings_not_applied" and mode.value.setting == "mode"
            assert "Mode 'ghost' not found" in str(mode.value) and "kiro_default" in mode.value.available
            with pytest.raises(SettingsNotAppliedError) as model:
                await session.apply_settings(model="gpt-9")
            assert model.value.setting == "model" and "claude-sonnet-4.5" in model.value.available
            with pytest.raises(SettingsNotAppliedError, match="extreme"):
                await session.apply_settings(effort="extreme")
            assert await settings_reply(session) == "settings: model=auto mode=kiro_default effort=none"

    run(main())


def test_a_turns_usage_metadata_comes_with_its_prompt_result(tmp_path: Path) -> None:
    from kirocrew_core.kiro_ext import parse_usage

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            result = await session.prompt("!say hello")
            usage = parse_usage(result.metadata)
            assert usage is not None and usage.credits == pytest.approx(0.01)
            assert usage.context_percent is not None and usage.turn_duration_ms is not None
            assert 0 <= usage.context_percent <= 100 and usage.turn_duration_ms >= 0

    run(main())


# -- permissions ------------------------------------------------------------------------------


def test_by_default_a_permission_request_is_rejected(tmp_path: Path) -> None:
    recorder = Recorder()

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path, on_update=recorder)
            assert (await session.prompt("!tool deploy")).stop_reason == "end_turn"

    run(main())
    assert recorder.tool_statuses() == ["failed"]


def test_a_permission_handler_sees_kiros_options_and_its_choice_is_sent(tmp_path: Path) -> None:
    recorder = Recorder()
    seen: list[PermissionRequest] = []

    async def allow(request: PermissionRequest) -> str | None:
        seen.append(request)
        return request.option_of_kind("allow_once")

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(on_permission=allow)) as rt:
            session = await rt.new_session(tmp_path, on_update=recorder)
            assert (await session.prompt('!tool deploy {"to": "prod"}')).stop_reason == "end_turn"

    run(main())
    assert [o.option_id for o in seen[0].options] == ["allow_once", "allow_always", "reject_once"]
    assert "trustOptions" in seen[0].meta
    assert recorder.tool_statuses()[-1] == "completed"


def test_an_option_that_was_not_offered_is_answered_as_cancelled(tmp_path: Path) -> None:
    async def invent(request: PermissionRequest) -> str | None:
        return "yes_please"

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path, on_permission=invent)
            assert (await session.prompt("!tool deploy")).stop_reason == "cancelled"

    run(main())


def test_trusting_all_tools_means_no_permission_is_asked(tmp_path: Path) -> None:
    asked: list[PermissionRequest] = []

    async def record(request: PermissionRequest) -> str | None:
        asked.append(request)
        return None

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(trust_all_tools=True, on_permission=record)) as rt:
            session = await rt.new_session(tmp_path)
            await session.prompt("!tool deploy")

    run(main())
    assert asked == []


def test_trusting_some_tools_asks_only_for_the_others(tmp_path: Path) -> None:
    asked: list[str] = []

    async def record(request: PermissionRequest) -> str | None:
        asked.append(request.tool_call.title or "")
        return request.option_of_kind("allow_once")

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(trust_tools=["shell"], on_permission=record)) as rt:
            session = await rt.new_session(tmp_path)
            await session.prompt("!shell true\n!tool deploy")

    run(main())
    assert asked == ["Running deploy"]


def test_an_unanswered_permission_is_cancelled_after_the_permission_timeout(tmp_path: Path) -> None:
    async def never(request: PermissionRequest) -> str | None:
        await asyncio.Event().wait()
        return None

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(on_permission=never, permission_timeout=0.3)) as rt:
            session = await rt.new_session(tmp_path)
            assert (await session.prompt("!tool deploy")).stop_reason == "cancelled"

    run(main())


# -- cancel -------------------------------------------------------------------------------------


def test_cancel_ends_a_hanging_turn_as_cancelled(tmp_path: Path) -> None:
    recorder = Recorder()

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path, on_update=recorder)
            turn = asyncio.ensure_future(session.prompt("!say started\n!hang"))
            await wait_for(lambda: recorder.texts() == ["started"])
            await session.cancel()
            assert (await turn).stop_reason == "cancelled"
            assert (await session.prompt("after")).stop_reason == "end_turn"

    run(main())


def test_cancel_answers_an_open_permission_request_with_cancelled(tmp_path: Path) -> None:
    asked = asyncio.Event()
    abandoned: list[str] = []

    async def undecided(request: PermissionRequest) -> str | None:
        asked.set()
        try:
            await asyncio.Event().wait()  # the user never decides
        except asyncio.CancelledError:
            abandoned.append(request.tool_call.tool_call_id)
            raise
        return None

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(on_permission=undecided)) as rt:
            session = await rt.new_session(tmp_path)
            turn = asyncio.ensure_future(session.prompt("!tool deploy"))
            await asyncio.wait_for(asked.wait(), 30)
            await session.cancel()
            assert (await turn).stop_reason == "cancelled"
            assert len(abandoned) == 1  # the pending decision was withdrawn, not left dangling

    run(main())


def test_cancelling_the_awaiting_task_cancels_the_turn_too(tmp_path: Path) -> None:
    recorder = Recorder()

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path, on_update=recorder)
            turn = asyncio.ensure_future(session.prompt("!say started\n!hang"))
            await wait_for(lambda: recorder.texts() == ["started"])
            turn.cancel()
            with pytest.raises(asyncio.CancelledError):
                await turn
            # The fake refuses a second prompt while a turn runs: this one proves the first ended.
            await wait_for_prompt_accepted(session)

    async def wait_for_prompt_accepted(session: AcpSession) -> None:
        for _ in range(100):
            try:
                assert (await session.prompt("next")).stop_reason == "end_turn"
                return
            except AcpRequestError:
                await asyncio.sleep(0.05)
        raise AssertionError("the cancelled turn never ended")

    run(main())


# -- the child going away ----------------------------------------------------------------------


def test_the_child_exiting_fails_every_pending_call_with_its_exit_status(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            waiting = await rt.new_session(tmp_path)
            dying = await rt.new_session(tmp_path)
            hanging = asyncio.ensure_future(waiting.prompt("!hang"))
            with pytest.raises(AcpConnectionLost) as caught:
                await dying.prompt("!exit 4")
            assert caught.value.code == "kiro_exited" and caught.value.returncode == 4
            assert "status 4" in str(caught.value)
            with pytest.raises(AcpConnectionLost):
                await hanging
            with pytest.raises(AcpConnectionLost):  # and every later call, at once
                await rt.new_session(tmp_path)

    run(main())


def test_a_crash_carries_the_tail_of_kiros_stderr(fake_kiro_cli: Any, tmp_path: Path) -> None:
    fake_kiro_cli.switch(crash_on_load="101")

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            with pytest.raises(AcpConnectionLost) as caught:
                await rt.load_session(str(uuid.uuid4()), tmp_path)
            assert caught.value.returncode == 101
            assert "panicked" in str(caught.value)
            assert any("panicked" in line for line in caught.value.stderr_tail)

    run(main())


def test_loading_an_unknown_session_where_kiro_exits_is_a_connection_loss(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            with pytest.raises(AcpConnectionLost) as caught:
                await rt.load_session(str(uuid.uuid4()), tmp_path)
            assert caught.value.returncode == 0  # kiro 2.4 exits cleanly on an unknown id

    run(main())


def test_loading_an_unknown_session_where_kiro_hangs_times_out(fake_kiro_cli: Any, tmp_path: Path) -> None:
    fake_kiro_cli.switch(unknown_load="hang")

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(session_timeout=0.5)) as rt:
            with pytest.raises(AcpTimeoutError) as caught:
                await rt.load_session(str(uuid.uuid4()), tmp_path)
            assert caught.value.method == "session/load"
            assert rt.sessions == {}
            assert (await rt.new_session(tmp_path)).session_id  # the process was left running

    run(main())


def test_a_session_id_that_could_leave_the_sessions_dir_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            with pytest.raises(BadInputError) as caught:
                await rt.load_session("../../etc/passwd", tmp_path)
            assert caught.value.code == "bad_session_id"
            assert rt.alive

    run(main())


# -- capabilities: fork and images ---------------------------------------------------------------


def test_a_fork_answers_prompts_and_starts_with_the_source_history(fake_kiro_cli: Any, tmp_path: Path) -> None:
    fake_kiro_cli.switch(advertise_fork="1")
    recorder = Recorder()

    async def main() -> tuple[str, str]:
        async with AcpRuntime.start() as rt:
            assert rt.supports_fork
            source = await rt.new_session(tmp_path)
            await source.prompt("remember the word teal")
            fork = await rt.fork_session(source.session_id, tmp_path, on_update=recorder)
            assert fork.session_id != source.session_id and fork.models is not None
            assert rt.sessions.keys() == {source.session_id, fork.session_id}
            assert (await fork.prompt("!say forked")).stop_reason == "end_turn"
            assert recorder.texts() == ["forked"]  # a fork replays nothing
            return source.session_id, fork.session_id

    source_id, fork_id = run(main())

    async def history(session_id: str) -> list[str]:
        replay = Recorder()
        async with AcpRuntime.start() as rt:
            await rt.load_session(session_id, tmp_path, on_update=replay)
        return replay.texts("user_message_chunk")

    assert run(history(fork_id)) == ["remember the word teal", "!say forked"]
    assert run(history(source_id)) == ["remember the word teal"]  # the source is left as it was


def test_without_an_advertised_fork_fork_session_refuses_before_sending(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            assert not rt.supports_fork
            source = await rt.new_session(tmp_path)
            with pytest.raises(UnsupportedCapabilityError) as caught:
                # Had it been sent, the fake would have answered -32601 (an AcpRequestError).
                await rt.fork_session(source.session_id, tmp_path)
            assert caught.value.code == "unsupported_capability"
            assert rt.sessions.keys() == {source.session_id}
            assert (await source.prompt("still here")).stop_reason == "end_turn"

    run(main())
    assert len(list(home.kiro_sessions_dir().glob("*.json"))) == 1  # no forked session exists


def test_images_are_advertised_by_default_and_reach_the_agent(tmp_path: Path) -> None:
    from acp import image_block, text_block

    recorder = Recorder()

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            assert rt.supports_images
            session = await rt.new_session(tmp_path, on_update=recorder)
            result = await session.prompt([text_block("look"), image_block("aGk=", "image/png")])
            assert result.stop_reason == "end_turn"

    run(main())
    assert recorder.texts() == ["look\n[image image/png]"]


def test_an_agent_without_image_support_says_so_and_refuses_an_image_prompt(
        fake_kiro_cli: Any, tmp_path: Path) -> None:
    from acp import image_block, text_block

    fake_kiro_cli.switch(no_images="1")
    recorder = Recorder()

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            assert not rt.supports_images
            session = await rt.new_session(tmp_path, on_update=recorder)
            with pytest.raises(AcpRequestError) as caught:
                await session.prompt([text_block("!say ran"), image_block("aGk=", "image/png")])
            assert caught.value.rpc_code == -32602
            assert (await session.prompt("text still works")).stop_reason == "end_turn"

    run(main())
    assert recorder.texts() == ["text still works"]


# -- settling updates ------------------------------------------------------------------------------


def test_settling_after_a_load_delivers_the_whole_replay_before_a_sink_is_attached(tmp_path: Path) -> None:
    async def first() -> str:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            await session.prompt("one")
            await session.prompt("two")
            return session.session_id

    session_id = run(first())
    replayed: list[str] = []

    async def slow_sink(session_id: str, update: Any) -> None:
        await asyncio.sleep(0.1)  # slower than kiro's replay, so the queue is not empty on return
        replayed.append(update.content.text)

    async def second() -> None:
        recorder = Recorder()
        async with AcpRuntime.start() as rt:
            session = await rt.load_session(session_id, tmp_path, on_update=slow_sink)
            await rt.settle_updates(session)
            assert replayed == ["one", "one", "two", "two"]  # user and agent chunks, in order
            session.on_update = recorder
            assert (await session.prompt("three")).stop_reason == "end_turn"
        assert recorder.texts() == ["three"]

    run(second())


def test_a_permission_handler_that_flushes_sees_the_tool_call_first(tmp_path: Path) -> None:
    named: dict[str, str] = {}
    seen_in_handler: list[str | None] = []

    async def slow_sink(session_id: str, update: Any) -> None:
        await asyncio.sleep(0.2)  # the tool_call is still queued when the request arrives
        if update.session_update == "tool_call":
            named[update.tool_call_id] = update.title

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            async def allow(request: PermissionRequest) -> str | None:
                await rt.sessions[request.session_id].flush_updates()
                seen_in_handler.append(named.get(request.tool_call.tool_call_id))
                await rt.settle_updates(rt.session(request.session_id))  # a no-op now, and no deadlock
                return request.option_of_kind("allow_once")

            session = await rt.new_session(tmp_path, on_update=slow_sink, on_permission=allow)
            assert (await session.prompt("!tool deploy")).stop_reason == "end_turn"

    run(main())
    assert len(seen_in_handler) == 1 and seen_in_handler[0] is not None and "deploy" in seen_in_handler[0]


# -- load, locks, teardown ----------------------------------------------------------------------


def test_a_session_loads_in_a_new_process_with_its_history_replayed(tmp_path: Path) -> None:
    async def first() -> str:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            await session.prompt("remember the walrus")
            return session.session_id

    session_id = run(first())
    lock = kiro_sessions.lock_path(session_id)
    assert not lock.exists()  # a graceful shutdown lets kiro remove its own lock
    recorder = Recorder()

    async def second() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.load_session(session_id, tmp_path, on_update=recorder)
            assert recorder.texts("user_message_chunk") == ["remember the walrus"]
            assert recorder.texts() == ["remember the walrus"]
            assert kiro_sessions.read_lock(session_id).pid == rt.pid
            assert (await session.prompt("and now?")).stop_reason == "end_turn"

    run(second())


def test_a_stale_lock_of_a_killed_kiro_is_removed_and_the_load_succeeds(tmp_path: Path) -> None:
    async def killed() -> tuple[str, int]:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            await session.prompt("before the crash")
            assert rt.pid is not None
            os.kill(rt.pid, signal.SIGKILL)  # a hard kill: kiro cannot remove its lock
            await wait_for(lambda: rt.returncode is not None)
            return session.session_id, rt.pid

    session_id, dead_pid = run(killed())
    assert kiro_sessions.read_lock(session_id).pid == dead_pid

    async def reload() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.load_session(session_id, tmp_path)
            assert kiro_sessions.read_lock(session_id).pid == rt.pid
            assert (await session.prompt("after")).stop_reason == "end_turn"

    run(reload())


def test_a_lock_whose_owner_is_alive_is_never_removed(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as owner:
            session = await owner.new_session(tmp_path)
            lock_before = kiro_sessions.lock_path(session.session_id).read_bytes()
            async with AcpRuntime.start() as intruder:
                with pytest.raises(SessionLockedError) as caught:
                    await intruder.load_session(session.session_id, tmp_path)
                assert caught.value.code == "session_locked"
                assert f"PID {owner.pid}" in str(caught.value) and "still running" in str(caught.value)
                assert intruder.sessions == {}
            assert kiro_sessions.lock_path(session.session_id).read_bytes() == lock_before
            assert (await session.prompt("still mine")).stop_reason == "end_turn"

    run(main())


def test_a_malformed_lock_is_kept_byte_identical_and_the_load_fails_clearly(tmp_path: Path) -> None:
    async def first() -> str:
        async with AcpRuntime.start() as rt:
            return (await rt.new_session(tmp_path)).session_id

    session_id = run(first())
    lock = kiro_sessions.lock_path(session_id)
    lock.write_bytes(b"{not json")

    async def reload() -> None:
        async with AcpRuntime.start() as rt:
            with pytest.raises(SessionLockedError, match="failed to re-read lock file"):
                await rt.load_session(session_id, tmp_path)

    run(reload())
    assert lock.read_bytes() == b"{not json"


def test_terminating_a_session_evicts_it_and_it_can_be_loaded_again(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            await session.prompt("keep me")
            await session.terminate()
            assert rt.sessions == {}
            assert not kiro_sessions.lock_path(session.session_id).exists()
            with pytest.raises(BadInputError):
                await session.prompt("gone")
            again = await rt.load_session(session.session_id, tmp_path)
            assert again is not session and (await again.prompt("back")).stop_reason == "end_turn"

    run(main())


def test_teardown_of_a_launcher_leaves_no_process_behind(fake_kiro_cli: Any, tmp_path: Path) -> None:
    fake_kiro_cli.switch(launcher="1")

    async def main() -> tuple[int, int, str]:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)
            chat_pid = kiro_sessions.read_lock(session.session_id).pid
            assert chat_pid is not None and chat_pid != rt.pid  # the lock is the forked child's
            assert processes.alive(chat_pid)
            turn = asyncio.ensure_future(session.prompt("!hang"))
            await asyncio.sleep(0.1)
        with pytest.raises(AcpConnectionLost, match="runtime was closed"):
            await turn
        assert rt.pid is not None
        return rt.pid, chat_pid, session.session_id

    launcher_pid, chat_pid, session_id = run(main())
    assert processes.alive(launcher_pid) is False
    assert processes.alive(chat_pid) is False
    assert not kiro_sessions.lock_path(session_id).exists()


# -- MCP through kiro ------------------------------------------------------------------------------


def test_mcp_and_tools_commands_report_the_agents_servers(tmp_path: Path) -> None:
    write_agent("crew", {"mcpServers": {"fixture": stdio_entry("--tools", "3"),
                                        "broken": stdio_entry("--exit-during-handshake")},
                         "tools": ["@builtin", "@fixture"]})

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(agent="crew")) as rt:
            session = await rt.new_session(tmp_path, mcp_servers=[])
            mcp = await session.execute_command("/mcp")
            assert mcp.success is True
            rows = {row["name"]: row for row in mcp.data["servers"]}
            assert rows["fixture"]["status"] == "running" and rows["fixture"]["toolCount"] == 3
            tools = await session.execute_command("tools")
            fixture_tools = {row["name"] for row in tools.data["tools"] if row.get("source") == "mcp:fixture"}
            assert len(fixture_tools) == 3
            settled = await session.wait_until(
                lambda s: {"fixture", "broken"} <= set(s.mcp_status) and s.available_commands is not None, 30)
            assert settled
            assert session.available_commands is not None
            assert "/mcp" in {c["name"] for c in session.available_commands["commands"]}
            assert session.mcp_status["fixture"].state in (MCP_INITIALIZED, "running")
            assert session.mcp_status["broken"].state in (MCP_FAILED, "failed")

    run(main())


def test_an_oauth_request_is_surfaced_once_and_consent_leaves_a_grant_kiro_then_uses(
    start_oauth_mcp_server: Any, tmp_path: Path
) -> None:
    server = start_oauth_mcp_server()
    write_agent("minter", {"mcpServers": {"guarded": {"url": server.mcp_url}}, "tools": ["@guarded"]})
    assert grants.grant_presence(server.mcp_url) is False

    async def mint() -> OAuthRequest:
        async with AcpRuntime.start(AcpOptions(agent="minter")) as rt:
            session = await rt.new_session(tmp_path)
            request = await asyncio.wait_for(session.oauth_requests.get(), 30)
            assert request.server_name == "guarded" and request.url.startswith("http")
            await server.aconsent(request.url)
            await wait_for(lambda: grants.grant_presence(server.mcp_url) is True)
            assert session.oauth_requests.empty()  # consent given: nothing further was asked
            return request

    run(mint())

    async def use() -> None:
        async with AcpRuntime.start(AcpOptions(agent="minter")) as rt:
            session = await rt.new_session(tmp_path)
            mcp = await session.execute_command("mcp")
            row = next(r for r in mcp.data["servers"] if r["name"] == "guarded")
            assert row["status"] == "running" and row["toolCount"] > 0
            assert session.drain_oauth_requests() == []

    run(use())


# -- what kiro says outside the turn: early, shared, unknown, repeated --------------------------------


def notify(method: str, params: dict[str, Any]) -> str:
    """A script line making the fake send ``method`` with ``params`` as they are."""
    return f"!notify {method} {json.dumps(params)}"


async def turn_delivered(session: AcpSession, script: str) -> None:
    """Run ``script`` as a turn, then wait for its closing metadata: kiro sent it after every line,
    so once it is recorded everything the script made kiro send has been routed."""
    session.metadata = None
    assert (await session.prompt(script)).stop_reason == "end_turn"
    assert await session.wait_until(lambda s: s.metadata is not None, 10)


def test_notifications_sent_before_session_new_answers_land_on_the_new_session(
    fake_kiro_cli: Any, start_oauth_mcp_server: Any, tmp_path: Path
) -> None:
    fake_kiro_cli.switch(eager_mcp="1")  # kiro reports every server before it answers session/new
    server = start_oauth_mcp_server()
    write_agent("eager", {"mcpServers": {"fixture": stdio_entry("--tools", "2"),
                                         "broken": stdio_entry("--exit-during-handshake"),
                                         "guarded": {"url": server.mcp_url}},
                          "tools": ["*"]})

    async def main() -> None:
        async with AcpRuntime.start(AcpOptions(agent="eager")) as rt:
            session = await rt.new_session(tmp_path)
            # Nothing awaited since session/new returned: all of this was held for the session.
            # (commands/available rows may have followed the init notifications: "running", "failed".)
            assert session.mcp_status["fixture"].state in (MCP_INITIALIZED, "running")
            assert session.mcp_status["broken"].state in (MCP_FAILED, "failed")
            (request,) = session.drain_oauth_requests()
            assert request.server_name == "guarded" and request.url.startswith(server.issuer.rstrip("/"))
            other = await rt.new_session(tmp_path)  # a second session gets its own, not the first's
            assert session.oauth_servers == other.oauth_servers == {"guarded"}
            assert session.drain_oauth_requests() == []

    run(main())


def test_a_recorded_notification_without_a_session_id_reaches_every_open_session(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            first = await rt.new_session(tmp_path)
            second = await rt.new_session(tmp_path)
            await turn_delivered(first, notify("_kiro.dev/mcp/server_init_failure", {"serverName": "shared"}))
            for session in (first, second):
                assert await session.wait_until(lambda s: "shared" in s.mcp_status, 10)
                assert session.mcp_status["shared"].state == MCP_FAILED

    run(main())


def test_a_subagent_list_update_without_a_session_id_is_dropped_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=acp_runtime.__name__)

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            first = await rt.new_session(tmp_path)
            second = await rt.new_session(tmp_path)
            await turn_delivered(first, notify("_kiro.dev/subagent/list_update",
                                               {"subagents": [], "pendingStages": []}))
            for session in (first, second):
                assert session.mcp_status == {} and session.oauth_servers == frozenset()
            assert (await second.prompt("still fine")).stop_reason == "end_turn"

    run(main())
    assert not [r for r in caplog.records if "subagent" in r.getMessage() and r.levelno >= logging.INFO]


def test_unknown_notifications_are_logged_and_dropped_and_the_session_carries_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=acp_runtime.__name__)
    recorder = Recorder()

    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path, on_update=recorder)
            sid = session.session_id
            await turn_delivered(session, "\n".join([
                "!say before",
                notify("_kiro.dev/x/y", {"sessionId": sid, "anything": [1, 2]}),
                notify("_kiro.dev/mcp/server_initialized", {"sessionId": sid, "serverName": 42}),
                notify("session/unheard_of", {"sessionId": sid}),  # not even an extension
                "!say after",
            ]))
            assert recorder.texts() == ["before", "after"]
            assert session.mcp_status == {}
            assert (await session.prompt("next turn")).stop_reason == "end_turn"
            assert rt.alive

    run(main())
    dropped = [r.getMessage() for r in caplog.records if r.name == acp_runtime.__name__]
    assert any("kiro.dev/x/y" in message and "dropping" in message for message in dropped)


def test_a_repeated_oauth_request_for_the_same_server_is_surfaced_once(tmp_path: Path) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)

            def request(server: str, url: str) -> str:
                return notify("_kiro.dev/mcp/oauth_request",
                              {"sessionId": session.session_id, "serverName": server, "oauthUrl": url})

            await turn_delivered(session, "\n".join([
                request("linear", "https://auth.example/authorize?try=1"),
                request("linear", "https://auth.example/authorize?try=2"),
                request("github", "http://127.0.0.1:9/authorize"),
            ]))
            assert session.drain_oauth_requests() == [
                OAuthRequest("linear", "https://auth.example/authorize?try=1"),
                OAuthRequest("github", "http://127.0.0.1:9/authorize")]
            # Draining the queue does not make kiro's repeat a new request.
            await turn_delivered(session, request("linear", "https://auth.example/authorize?try=3"))
            assert session.drain_oauth_requests() == []

    run(main())


@pytest.mark.parametrize("url", ["javascript:alert(document.cookie)", "file:///etc/passwd",
                                 "data:text/html,<script>x</script>", "https:///no-host"])
def test_an_oauth_request_whose_url_is_not_http_is_rejected(tmp_path: Path, url: str) -> None:
    async def main() -> None:
        async with AcpRuntime.start() as rt:
            session = await rt.new_session(tmp_path)

            def request(oauth_url: str) -> str:
                return notify("_kiro.dev/mcp/oauth_request",
                              {"sessionId": session.session_id, "serverName": "linear", "oauthUrl": oauth_url})

            await turn_delivered(session, request(url))
            assert session.drain_oauth_requests() == [] and session.oauth_servers == frozenset()
            # The rejected one did not use up the server's one request.
            await turn_delivered(session, request("https://auth.example/authorize"))
            assert session.drain_oauth_requests() == [OAuthRequest("linear", "https://auth.example/authorize")]

    run(main())


# -- kiro_sessions: the lock rules on their own ----------------------------------------------------


def _write_lock(session_id: str, payload: Any) -> Path:
    path = kiro_sessions.lock_path(session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))
    return path


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_pid_alive_is_true_for_us_and_false_for_a_reaped_child_or_a_zombie() -> None:
    assert processes.alive(os.getpid()) is True
    assert processes.alive(_dead_pid()) is False
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(200):  # not waited for: it stays a zombie once it has exited
            if processes.alive(zombie.pid) is False:
                break
            import time

            time.sleep(0.02)
        assert processes.alive(zombie.pid) is False
    finally:
        zombie.wait()


def test_remove_stale_lock_removes_only_a_dead_owners_lock() -> None:
    dead = _write_lock("dead-owner", {"pid": _dead_pid(), "started_at": "x"})
    live = _write_lock("live-owner", {"pid": os.getpid(), "started_at": "x"})
    junk = _write_lock("junk-owner", {"started_at": "x"})
    assert kiro_sessions.remove_stale_lock("dead-owner").outcome is kiro_sessions.StaleLockOutcome.REMOVED
    assert not dead.exists()
    assert kiro_sessions.remove_stale_lock("live-owner").outcome is kiro_sessions.StaleLockOutcome.OWNER_ALIVE
    assert live.exists()
    assert kiro_sessions.remove_stale_lock("junk-owner").outcome is kiro_sessions.StaleLockOutcome.UNKNOWN
    assert json.loads(junk.read_text()) == {"started_at": "x"}
    assert kiro_sessions.remove_stale_lock("no-lock").outcome is kiro_sessions.StaleLockOutcome.ABSENT
    with pytest.raises(BadInputError):
        kiro_sessions.remove_stale_lock("../dead-owner")


def test_remove_session_files_keeps_a_session_a_live_process_may_hold() -> None:
    sessions = home.kiro_sessions_dir()
    sessions.mkdir(parents=True, exist_ok=True)

    def files(session_id: str) -> list[Path]:
        made = [sessions / f"{session_id}{suffix}" for suffix in kiro_sessions.SESSION_FILE_SUFFIXES]
        for path in made:
            path.write_text("{}")
        return made

    held, dead, free = files("held"), files("dead"), files("free")
    _write_lock("held", {"pid": os.getpid(), "started_at": "x"})
    dead_lock = _write_lock("dead", {"pid": _dead_pid(), "started_at": "x"})
    assert kiro_sessions.remove_session_files("held") is False and all(p.exists() for p in held)
    assert kiro_sessions.remove_session_files("dead") is True
    assert not dead_lock.exists() and not any(p.exists() for p in dead)
    assert kiro_sessions.remove_session_files("free") is True and not any(p.exists() for p in free)
    assert kiro_sessions.remove_session_files("never-existed") is True
