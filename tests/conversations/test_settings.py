"""A run's model, mode and effort really reach its Kiro session: new, continued, reloaded and forked.

The real server over stdio drives the fake kiro-cli, whose ``!settings`` directive answers what the
session is really running on. kiro-cli's ``session/load`` restores the agent and model a session was
saved with (the fake does the same), so every case below that reopens a session would run on the
saved settings if the server only passed them as spawn flags.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kirocrew_core import home

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversation_calls import expect_error, ref

HAIKU, OPUS, SONNET = "claude-haiku-4.5", "claude-opus-4.5", "claude-sonnet-4.5"


def write_agent(name: str) -> Path:
    path = home.kiro_agents_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "description": f"the {name} agent"}))
    return path


def said(model: str, mode: str, effort: str | None) -> str:
    return f"settings: model={model} mode={mode} effort={effort or 'none'}"


def reply(out: dict[str, Any]) -> str:
    run = out.get("run", out)
    assert run["status"] == "completed", run
    text = (run["reply"] or {}).get("text")
    assert isinstance(text, str), run
    return text


async def settings_now(client: Any, conversation_id: str, **overrides: Any) -> str | None:
    return reply(await client.call("kiro_delegate", conversation=conversation_id, message="!settings", **overrides))


def test_a_new_conversation_runs_on_the_settings_it_asked_for_and_events_say_so(conversations_client, run_async,
                                                                                tmp_path):
    write_agent("reviewer")

    async def main() -> None:
        async with conversations_client() as client:
            out = await client.call("kiro_delegate", conversation="new", name="fresh", workspace=str(tmp_path),
                                    model=HAIKU, mode="reviewer", effort="high", message="!settings")
            assert reply(out) == said(HAIKU, "reviewer", "high")
            settings = out["run"]["settings"]
            assert (settings["model"], settings["mode"], settings["effort"]) == (HAIKU, "reviewer", "high")
            events = (await client.call("kiro_events", **ref(out["run"])))["events"]
            config = [e for e in events if e["kind"] == "config" and "settings" in e]
            assert config and config[-1]["settings"] == {"model": HAIKU, "mode": "reviewer", "effort": "high"}
            usage = [e["usage"] for e in events if e["kind"] == "usage"]
            assert usage and set(usage[0]) == {"contextPercent", "credits", "turnDurationMs"}
            assert all(isinstance(v, (int, float)) for v in usage[0].values())
            text = json.dumps(events)
            assert str(tmp_path) not in text and "!settings" not in text

    run_async(main())


def test_a_run_without_a_mode_runs_on_the_kirocrew_agent_and_says_which(conversations_client, run_async,
                                                                        tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            caps = await client.call("kiro_capabilities")
            out = await client.call("kiro_delegate", conversation="new", name="plain", workspace=str(tmp_path),
                                    message="!settings")
            assert caps["defaultMode"] == "kiro_default" and caps["defaults"]["mode"] == "kirocrew"
            assert out["run"]["settings"]["mode"] == caps["defaults"]["mode"]
            assert reply(out) == said(caps["defaultModel"], "kirocrew", None)

    run_async(main())


def test_a_continued_conversation_runs_on_changed_defaults_and_per_run_overrides(conversations_client, run_async,
                                                                                 tmp_path):
    write_agent("reviewer")

    async def main() -> None:
        async with conversations_client() as client:
            first = await client.call("kiro_delegate", conversation="new", name="cont", workspace=str(tmp_path),
                                      model=HAIKU, mode="reviewer", message="!say hi")
            cid = first["run"]["conversationId"]
            await client.call("kiro_configure", conversationId=cid, model=OPUS, mode="kiro_default", effort="low")
            assert await settings_now(client, cid) == said(OPUS, "kiro_default", "low")
            # One run's overrides, through kiro_delegate and kiro_send, then the defaults again.
            assert await settings_now(client, cid, model=SONNET, mode="reviewer", effort="max") == said(
                SONNET, "reviewer", "max")
            sent = await client.call("kiro_send", conversationId=cid, message="!settings", model=HAIKU)
            done = await client.call("kiro_wait", targets=[ref(sent)], mode="all")
            assert reply(done["runs"][0]) == said(HAIKU, "kiro_default", "low")
            assert await settings_now(client, cid) == said(OPUS, "kiro_default", "low")

    run_async(main())


def test_a_conversation_reloaded_after_a_server_restart_runs_on_its_own_settings(conversations_client, run_async,
                                                                                 tmp_path):
    write_agent("reviewer")

    async def before_restart() -> str:
        async with conversations_client() as client:
            first = await client.call("kiro_delegate", conversation="new", name="reload", workspace=str(tmp_path),
                                      model=HAIKU, mode="reviewer", effort="medium", message="!say hi")
            cid = first["run"]["conversationId"]
            # The last run leaves kiro's saved session on other settings than the conversation's defaults.
            assert await settings_now(client, cid, model=OPUS, mode="kiro_default", effort="max") == said(
                OPUS, "kiro_default", "max")
            return cid

    async def after_restart(cid: str) -> None:
        async with conversations_client() as client:
            assert await settings_now(client, cid) == said(HAIKU, "reviewer", "medium")
            recall = await client.call("kiro_delegate", conversation=cid, message="!recall")
            assert "hi" in reply(recall), "the reloaded session kept its context"

    cid = run_async(before_restart())
    run_async(after_restart(cid))


def test_a_forked_conversation_runs_on_the_settings_it_inherited(conversations_client, run_async, tmp_path):
    write_agent("reviewer")

    async def main() -> None:
        async with conversations_client(extra_env={"KIRO_FAKE_ADVERTISE_FORK": "1"}) as client:
            src = await client.call("kiro_delegate", conversation="new", name="src", workspace=str(tmp_path),
                                    model=HAIKU, mode="reviewer", effort="high", message="!say the secret is quince")
            cid = src["run"]["conversationId"]
            assert await settings_now(client, cid, model=OPUS, mode="kiro_default") == said(
                OPUS, "kiro_default", "high")
            fork = await client.call("kiro_fork", conversationId=cid, name="copy")
            assert await settings_now(client, fork["conversationId"]) == said(HAIKU, "reviewer", "high")
            recall = await client.call("kiro_delegate", conversation=fork["conversationId"], message="!recall")
            assert "quince" in reply(recall)

    run_async(main())


def test_a_mode_kiro_cannot_apply_fails_the_run_with_settings_not_applied(conversations_client, run_async, tmp_path,
                                                                         conversations_state_dir):
    agent = write_agent("reviewer")

    async def main() -> None:
        async with conversations_client() as client:
            caps = await client.call("kiro_capabilities")
            assert "reviewer" in caps["modes"]
            agent.unlink()  # gone after the (cached) catalog was read: kiro-cli no longer knows it
            out = await client.call("kiro_delegate", conversation="new", name="gone", workspace=str(tmp_path),
                                    mode="reviewer", message="!say must not run")
            run = out["run"]
            assert run["status"] == "failed" and run["error"]["code"] == "settings_not_applied", run
            assert "Mode 'reviewer' not found" in run["error"]["message"] and run["reply"] is None
            events = (await client.call("kiro_events", **ref(run)))["events"]
            assert any("did not apply mode=reviewer" in e["summary"] for e in events)
            assert not {"started a Kiro session", "resumed the saved Kiro session"} & {e["summary"] for e in events}, \
                "nothing was prompted"
            await client.call("kiro_configure", conversationId=run["conversationId"], mode="kiro_default")
            assert await settings_now(client, run["conversationId"]) == said(caps["defaultModel"], "kiro_default",
                                                                              None)

    run_async(main())
    kiro_files = [p for p in home.kiro_sessions_dir().iterdir() if p.is_file()]
    state_files = list(conversations_state_dir.glob("orchestrator-v1.sqlite*"))
    assert kiro_files and state_files
    for path in kiro_files + state_files:  # kiro never saw the prompt, and the server erased it
        assert b"must not run" not in path.read_bytes(), path.name


def test_unknown_models_and_modes_are_refused_listing_what_exists_and_change_nothing(conversations_client,
                                                                                    run_async, tmp_path):
    async def main() -> str:
        async with conversations_client() as client:
            message = await expect_error(client, "unknown_model", "kiro_spawn", conversation="new", name="bad",
                                         workspace=str(tmp_path), model="gpt-9", message="!say x")
            assert "gpt-9" in message and HAIKU in message and "auto" in message
            message = await expect_error(client, "unknown_mode", "kiro_delegate", conversation="new", name="bad",
                                         workspace=str(tmp_path), mode="ghost", message="!say x")
            assert "ghost" in message and "kiro_default" in message
            assert (await client.call("kiro_status"))["conversations"] == []
            out = await client.call("kiro_delegate", conversation="new", name="ok", workspace=str(tmp_path),
                                    model=OPUS, message="!say x")
            cid = out["run"]["conversationId"]
            await expect_error(client, "unknown_model", "kiro_send", conversationId=cid, model="gpt-9",
                               message="!say x")
            await expect_error(client, "unknown_mode", "kiro_delegate", conversation=cid, mode="ghost",
                               message="!say x")
            await expect_error(client, "unknown_mode", "kiro_configure", conversationId=cid, mode="ghost")
            await expect_error(client, "unknown_model", "kiro_configure", conversationId=cid, model="gpt-9")
            status = (await client.call("kiro_status"))["conversations"]
            assert [c["defaults"]["model"] for c in status] == [OPUS]
            assert [c["latestRun"]["runId"] for c in status] == [out["run"]["runId"]]
            return cid

    cid = run_async(main())

    async def catalog_shrank() -> None:
        async with conversations_client(extra_env={"KIRO_FAKE_MODELS": f"auto,{SONNET}"}) as client:
            message = await expect_error(client, "unknown_model", "kiro_send", conversationId=cid, message="!say x")
            assert "conversation's default" in message and SONNET in message

    run_async(catalog_shrank())


def test_capabilities_list_kiros_agents_before_any_session_and_leave_no_session_behind(conversations_client,
                                                                                       run_async):
    write_agent("reviewer")

    async def main() -> dict[str, Any]:
        async with conversations_client() as client:
            return await client.call("kiro_capabilities")

    caps = run_async(main())
    assert {"kiro_default", "reviewer"} <= set(caps["modes"]) and caps["defaultMode"] == "kiro_default"
    sessions = home.kiro_sessions_dir()
    assert not sessions.exists() or not any(sessions.iterdir()), "the probe's session files were removed"
