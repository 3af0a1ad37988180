"""kirocrew-core end to end: conversations' fake kiro-cli call kirocrew-core through real relays and the host."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.host import paths
from kirocrew_testing.core_sessions import CrewHarness

RECORD_PID = "!shell echo $PPID >> kiro.pids\n"


def kiro_environ(pid: int) -> dict[str, str]:
    """What any process of the same user can read of a running kiro-cli: its environment."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def recorded_pids(workspace: Path) -> list[int]:
    return [int(line) for line in (workspace / "kiro.pids").read_text().split()]


def derived_agent(crew: CrewHarness, name: str, **changes: Any) -> None:
    """An agent file ``name``: the rendered ``kirocrew`` agent with ``changes`` applied."""
    document = copy.deepcopy(crew.render_agent())
    document["name"] = name
    if "core_env" in changes:
        document["mcpServers"]["kirocrew-core"].setdefault("env", {}).update(changes["core_env"])
    if "exclude" in changes:  # per server: kiro-cli refuses an agent file with a managedToolPolicy field
        document["mcpServers"]["kirocrew-core"]["disabledTools"] = changes["exclude"]
    crew.write_agent(name, document)


def test_a_conversations_kiro_cli_calls_kirocrew_core_as_itself_and_its_copied_key_works_nowhere_else(
        crew: CrewHarness, run_async: Any) -> None:
    document = crew.render_agent()
    assert document["mcpServers"]["kirocrew-core"]["args"] == ["mcp-core"]

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with crew.conversations() as conv:
            out["started"] = started = await crew.spawn(
                conv, RECORD_PID + "!mcp kirocrew-core probe_whoami {}\n!mcp kirocrew-core probe_lenient {}\n"
                "!say done", name="caller")
            out["run"] = await crew.wait(conv, started)
            # The worker stays open (idle): its key is live. Read it as any same-user process could.
            [pid] = recorded_pids(crew.workspace)
            out["pid"], out["environ"] = pid, kiro_environ(pid)
            async with crew.core(session_key=out["environ"]["KIROCREW_SESSION_KEY"]) as thief:
                out["stolen_strict"] = await thief.call("probe_whoami")
                out["stolen_lenient"] = await thief.call("probe_lenient")
        return out

    out = run_async(main())
    assert out["run"]["status"] == "completed" and out["run"]["reply"]["text"] == "done", out["run"]
    conversation = out["started"]["conversationId"]
    expected = {"kind": "conversation", "targetId": conversation, "agent": "kirocrew", "workspace": str(crew.workspace)}
    assert [(r["tool"], r["session"]) for r in crew.probe_records()][:2] == [("probe_whoami", expected),
                                                                            ("probe_lenient", expected)]
    key = out["environ"]["KIROCREW_SESSION_KEY"]
    assert key.startswith("kcs1-") and conversation not in key
    assert out["environ"]["KIROCREW_HOST_PID"] == str(out["pid"])  # the launched process exported its own pid
    # The same key from a process that is not the kiro-cli's descendant proves nothing: it is the person's.
    assert out["stolen_strict"][1] == "caller_unverified"
    assert out["stolen_lenient"] == ("session: none", None)
    assert [r["tool"] for r in crew.probe_records()][2:] == ["probe_lenient"]


def test_three_sessions_share_one_server_at_once_and_each_sees_only_itself(crew: CrewHarness, run_async: Any) -> None:
    """A slow call and fast ones interleave; one session has only KIROCREW_HOST_PID (no key) to go on.

    kiro-cli runs as a launcher with a chat child here (as 2.x does), so each relay is a grandchild
    of the process its key is bound to. Each conversation is its own kiro-cli with its own key, as a
    sub-agent's child conversation is: it resolves to itself.
    """
    crew.env["KIRO_FAKE_LAUNCHER"] = "1"
    derived_agent(crew, "hostpid", core_env={"KIROCREW_SESSION_KEY": ""})

    async def main() -> list[dict[str, Any]]:
        async with crew.conversations() as conv:
            slow = await crew.spawn(conv, '!mcp kirocrew-core probe_sleep {"seconds": 3}\n!say slow', name="slow")
            fast = await crew.spawn(conv, "!mcp kirocrew-core probe_whoami {}\n!say fast", name="fast")
            bare = await crew.spawn(conv, "!mcp kirocrew-core probe_whoami {}\n!say bare", name="bare", mode="hostpid")
            runs = await asyncio.gather(*(crew.wait(conv, s) for s in (slow, fast, bare)))
            assert [r["status"] for r in runs] == ["completed"] * 3, runs
            return [slow, fast, bare]

    slow, fast, bare = run_async(main())
    records = crew.probe_records()
    seen = {(r["tool"], r["session"]["targetId"], r["session"]["agent"]) for r in records}
    assert seen == {("probe_sleep", slow["conversationId"], "kirocrew"),
                    ("probe_whoami", fast["conversationId"], "kirocrew"),
                    ("probe_whoami", bare["conversationId"], "hostpid")}
    assert records[-1]["tool"] == "probe_sleep"  # the fast calls finished while the slow one was in flight
    assert len({r["pid"] for r in records}) == 1  # one server process (the host) served all three


def test_a_sessions_agent_policy_hides_a_tool_from_that_session_and_the_route_answers_it(
        crew: CrewHarness, run_async: Any) -> None:
    import httpx

    derived_agent(crew, "limited", exclude=["probe_lenient"])

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv:
            started = await crew.spawn(conv, RECORD_PID + "!mcp kirocrew-core probe_lenient {}\n"
                                       "!mcp kirocrew-core probe_whoami {}\n!say done", name="limited", mode="limited")
            run = await crew.wait(conv, started)
            [pid] = recorded_pids(crew.workspace)
            key = kiro_environ(pid)["KIROCREW_SESSION_KEY"]
            state = json.loads(paths.state_file().read_text())
            token = (home.crew_home() / "gateway.token").read_text().strip()
            async with httpx.AsyncClient(base_url=state["url"], headers={"Authorization": f"Bearer {token}"}) as web:
                policy = await web.get("/api/session-tool-policy", headers={"X-Session-Key": key})
                stranger = await web.get("/api/session-tool-policy", headers={"X-Session-Key": "kcs1-" + "1" * 32})
            return {"run": run, "policy": policy, "stranger": stranger}

    out = run_async(main())
    assert out["run"]["status"] == "completed"
    assert [r["tool"] for r in crew.probe_records()] == ["probe_whoami"]  # probe_lenient never reached its handler
    assert out["policy"].status_code == 200
    assert out["policy"].json() == {"agent": "limited", "exclude": ["probe_lenient"]}
    assert out["stranger"].status_code == 404 and out["stranger"].json()["code"] == "session_not_found"
