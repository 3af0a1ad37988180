"""kirocrew-cron end to end: sessions' fake kiro-cli call the tools through real relays and the host.

One host for the whole scenario: two conversations (two sessions), the person's ``kirocrew``
client on the host socket, and a plain MCP client on ``kirocrew mcp-cron`` with no session.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kirocrew_core import audit
from kirocrew_testing.core_sessions import CrewHarness

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_e2e import cron_line, person, tool_outcomes

TOOLS = {"cron_add", "cron_list", "cron_update", "cron_remove", "cron_remove_all", "cron_pause", "cron_resume",
         "cron_trigger"}


def test_a_sessions_job_is_its_own_another_session_cannot_touch_it_and_an_unverified_client_sees_nothing(
        cron_crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    document = cron_crew.render_agent()
    assert document["mcpServers"]["kirocrew-cron"]["args"] == ["mcp-cron"]

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with cron_crew.conversations() as conv:
            out["a"] = await cron_crew.delegate(conv, "\n".join([
                cron_line("cron_add", name="nightly", message="check the build", every=3600),
                cron_line("cron_add", name="refused", message="m", every=3600, authority="unrestricted"),
                "!say added"]), name="owner-a")
            async with person(cron_crew) as owner:
                listed, code = await owner.call("cron_list", json=True)
                assert code is None, listed
                [job] = json.loads(listed)["jobs"]
                out["job"] = job
                out["b"] = await cron_crew.delegate(conv, "\n".join([
                    cron_line("cron_list"),
                    cron_line("cron_remove", job_id=job["id"]),
                    cron_line("cron_pause", job_id=job["id"]),
                    cron_line("cron_update", job_id=job["id"], message="do my bidding"),
                    cron_line("cron_remove_all"),
                    "!say tried"]), name="other-b")
                out["person_text"] = await owner.call("cron_list")
                out["after"] = json.loads((await owner.call("cron_list", json=True))[0])["jobs"]
            async with cron_crew.relay("mcp-cron") as anyone:
                out["tools"] = await anyone.tool_names()
                out["anyone_list"] = await anyone.call("cron_list")
                out["anyone_add"] = await anyone.call("cron_add", name="x", message="m", every=60)
                out["anyone_remove"] = await anyone.call("cron_remove", job_id=job["id"])
                out["server"] = anyone.initialize_result.server_info.name
        return out

    out = run_async(main())
    a, b, job = out["a"], out["b"], out["job"]
    assert a["status"] == "completed" and b["status"] == "completed", (a, b)
    # session A's job: its conversation owns it and it runs in A's workspace with A's authority and agent
    assert job["owner"] == f"conversation:{a['conversationId']}" and job["name"] == "nightly"
    assert (job["workspace"], job["authority"], job["agent"]) == (str(cron_crew.workspace), "unrestricted", "kirocrew")
    assert tool_outcomes(conversations_rows, a["runId"]) == [("cron_add", "completed"), ("cron_add", "failed")]
    # session B listed (nothing of A's) and every write on A's job failed: not found
    assert tool_outcomes(conversations_rows, b["runId"]) == [
        ("cron_list", "completed"), ("cron_remove", "failed"), ("cron_pause", "failed"), ("cron_update", "failed"),
        ("cron_remove_all", "completed")]
    assert [(j["id"], j["message"], j["enabled"]) for j in out["after"]] == [(job["id"], "check the build", True)]
    assert out["person_text"][0].startswith("1 cron job(s): 1 active, 0 paused\n\n• nightly ✅ [agent]")
    # a client no kirocrew session started: the server answers, but it reads nothing and writes nothing
    assert out["server"] == "kirocrew-cron" and set(out["tools"]) == TOOLS
    assert out["anyone_list"][1] is None and out["anyone_list"][0].startswith("0 cron job(s): 0 active, 0 paused")
    assert out["anyone_add"][1] == "caller_unverified" and out["anyone_remove"][1] == "caller_unverified"
    # every call is audited with the server's name and its outcome, never its arguments
    calls = [(r["fields"]["tool"], r["outcome"], r["fields"].get("code")) for r in audit.tail(400)
             if r["event"] == "coretools.call" and r["fields"].get("server") == "kirocrew-cron"]
    assert ("cron_add", "failed", "person_only_field") in calls
    assert calls.count(("cron_remove", "failed", "job_not_found")) == 1
    assert ("cron_update", "failed", "job_not_found") in calls and ("cron_add", "denied", "caller_unverified") in calls
    assert "check the build" not in json.dumps(audit.tail(400))


def test_a_session_is_capped_at_its_jobs_and_refused_control_characters_and_absurd_steps_but_the_person_is_not(
        cron_crew: CrewHarness, run_async: Any) -> None:
    """The attack: a session's kiro-cli added 10,000 minutely jobs (the page became 10 MB), with names that
    carried escapes and a step of 99999999999999999999 minutes the list described as if it were real."""
    from kirocrew_cron.model import MAX_JOBS_PER_SESSION

    script = "\n".join([
        *[cron_line("cron_add", name=f"minutely {n}", message="m", every=60) for n in range(MAX_JOBS_PER_SESSION)],
        cron_line("cron_add", name="one too many", message="m", every=60),
        cron_line("cron_add", name="x\x1b[2J\n# Owner", message="m", every=3600),
        cron_line("cron_add", name="x", message="wipe \u202etxt.exe", every=3600),
        cron_line("cron_add", name="x", message="m", cron_expr="*/99999999999999999999 * * * *"),
        "!say tried"])

    async def main() -> dict[str, Any]:
        async with cron_crew.conversations() as conv:
            run = await cron_crew.delegate(conv, script, name="flooder")
        async with person(cron_crew) as owner:
            added = await owner.call("cron_add", name="the person's", message="m", every=3600)
            listed = json.loads((await owner.call("cron_list", json=True))[0])
        return {"run": run, "added": added, "listed": listed}

    out = run_async(main())
    assert out["run"]["status"] == "completed", out["run"]
    codes = [r["fields"].get("code") for r in audit.tail(400)
             if r["event"] == "coretools.call" and r["fields"].get("tool") == "cron_add"]
    assert codes[-5:] == ["session_jobs_full", "name_control_characters", "message_control_characters",
                          "cron_step_out_of_range", None]  # the last: the person's, past the session's cap
    assert codes[:MAX_JOBS_PER_SESSION] == [None] * MAX_JOBS_PER_SESSION
    owners = [job["owner"] for job in out["listed"]["jobs"]]
    assert owners.count(f"conversation:{out['run']['conversationId']}") == MAX_JOBS_PER_SESSION
    assert owners.count("") == 1 and out["added"][1] is None
