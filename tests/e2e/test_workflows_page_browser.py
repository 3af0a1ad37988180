"""The Workflows page in headless Chromium, against one real ``kirocrew serve`` whose host runs workflows.

A run is started with the real ``kirocrew workflow run`` (its process sandboxed by bubblewrap); the page lists
it with a Cancel button, Cancel stops it, and the redrawn table says so; a failed run shows where and why.
A saved workflow started from the page draws its phases, agent calls (answered by the fake kiro-cli) and log
lines as a tree; "Rerun from here" starts a new run whose earlier calls replay. Screenshots land in the
module's ``screenshots`` folder (run with ``--basetemp`` to keep them; docs/images has copies).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kirocrew_testing.browser import Dashboard, ServedGateway, pages_for_a_test
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.homes import IsolatedHomes
from kirocrew_testing.requirements import executable
from playwright.sync_api import expect

TIMEOUT_MS = 30_000
FIRST_PAGE = "/workflows"  # the test kit's module_dashboard opens it first


@pytest.fixture(scope="module")
def module_served_homes(module_hosted_homes: tuple[ServedGateway, IsolatedHomes]) -> tuple[ServedGateway,
                                                                                          IsolatedHomes]:
    return module_hosted_homes


@pytest.fixture
def dashboard(module_dashboard: Dashboard) -> Iterator[Dashboard]:
    with pages_for_a_test(module_dashboard) as pages:
        yield pages


def _workflow(homes: IsolatedHomes, *args: str) -> subprocess.CompletedProcess[str]:
    """``kirocrew workflow …`` as the owner, in the served homes (so on the module's host)."""
    env = {**os.environ, "HOME": str(homes.user_home), "KIRO_HOME": str(homes.kiro_home),
           "KIROCREW_HOME": str(homes.crew_home)}
    return subprocess.run(kirocrew_argv("workflow", *args), env=env, cwd=homes.root, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_workflows_page_lists_runs_and_cancel_stops_a_running_one(
        dashboard: Dashboard, module_homes: IsolatedHomes, module_owner: httpx.Client, tmp_path: Path) -> None:
    executable("bwrap", apt="bubblewrap")
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text('META = {"name": "sleeper"}\n\nasync def workflow(ctx):\n    ctx.log("waiting")\n'
                       '    await ctx.agent("!sleep 600", label="slow", phase="wait")\n')
    raiser = tmp_path / "raiser.py"
    raiser.write_text('META = {"name": "raiser"}\n\nasync def workflow(ctx):\n    raise ValueError("no good")\n')
    # The module's host is shared: other tests' runs may be listed too, in whatever order the tests ran.
    listed = len(module_owner.get("/api/workflows/runs").json()["runs"]) + 2
    failed = _workflow(module_homes, "run", str(raiser), "--wait")
    assert failed.returncode == 1, failed.stderr
    started = _workflow(module_homes, "run", str(sleeper))
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()

    opened = dashboard.open("/workflows")
    page = opened.page
    rows = page.locator("#workflows tbody tr")
    expect(rows).to_have_count(listed)
    running = page.locator(f"#workflows tbody tr[data-id='{run_id}']")
    expect(running.locator("td[data-label='Status']")).to_have_text("running")
    expect(page.locator("#workflows tbody tr", has_text="raiser").locator("td[data-label='Status']")).to_contain_text(
        "where: exec: ValueError: no good")
    dashboard.screenshot(opened, "workflows-page-light")
    busy = module_owner.post(f"/api/workflows/runs/{run_id}/rerun", json={"from_index": 0})
    assert (busy.status_code, busy.json()["code"]) == (409, "workflow_not_rerunnable")
    # the running run's tree: its call is running and offers no rerun; the page follows it to its end
    running.get_by_role("button", name=f"Details of {run_id}").click()
    detail = page.locator("#run-detail")
    slow = detail.locator(".wf-phase", has_text="wait").locator(".wf-call")
    expect(slow.locator(".status")).to_have_text("running", timeout=TIMEOUT_MS)
    expect(detail.locator(".wf-log")).to_have_text("log: waiting")
    expect(slow.get_by_role("button", name=re.compile("^Rerun"))).to_be_hidden()
    running.get_by_role("button", name=f"Cancel {run_id}").click()
    expect(detail.locator(".run-end")).to_have_text("Cancelled.", timeout=TIMEOUT_MS)
    expect(detail.locator(".run-state")).to_contain_text("cancelled")
    expect(slow.get_by_role("button", name=re.compile("^Rerun"))).to_be_visible()
    expect(running.locator("td[data-label='Status']")).to_have_text("cancelled", timeout=TIMEOUT_MS)
    expect(page.get_by_role("button", name=f"Cancel {run_id}")).to_have_count(0)
    assert module_owner.get(f"/api/workflows/runs/{run_id}").json()["status"] == "cancelled"
    assert opened.csp_violations() == [] and opened.console_errors == []
    for scheme, width in (("dark", 1280), ("light", 400)):
        shown = dashboard.open("/workflows", color_scheme=scheme, width=width)  # type: ignore[arg-type]
        expect(shown.page.locator("#workflows tbody tr")).to_have_count(listed)
        assert shown.page.evaluate("document.documentElement.scrollWidth") <= width  # nothing scrolls sideways
        dashboard.screenshot(shown, f"workflows-page-{scheme}-{width}px")


FAN_OUT = '''META = {"name": "fan-out", "wall_secs": 120}

async def workflow(ctx):
    ctx.log("reviewing " + ctx.args["who"])
    both = await ctx.parallel([
        ctx.agent("!say one", label="a review whose label is long enough that it has to wrap on a narrow screen",
                  phase="review"),
        ctx.agent("!say <b>not bold</b>", label="markup", phase="review")])
    wrong = await ctx.agent('!say {"m": 3}', label="count", schema={"type": "object", "required": ["n"]})
    return {"both": both, "wrong": wrong}
'''


def test_a_saved_workflow_started_from_the_page_shows_its_tree_and_reruns_from_a_step(
        dashboard: Dashboard, module_homes: IsolatedHomes, module_owner: httpx.Client, tmp_path: Path) -> None:
    executable("bwrap", apt="bubblewrap")
    flow = tmp_path / "fan.py"
    flow.write_text(FAN_OUT)
    saved = _workflow(module_homes, "save", str(flow), "fan-out")
    assert saved.returncode == 0, saved.stderr
    before = {r["run_id"] for r in module_owner.get("/api/workflows/runs").json()["runs"]}

    opened = dashboard.open("/workflows")
    page = opened.page
    form = page.locator("#start-form")
    form.get_by_label("Workflow").select_option("fan-out")
    form.get_by_label("Arguments").fill("not an argument")  # refused in the page: nothing is posted
    form.get_by_role("button", name="Start").click()
    expect(page.locator("#start-args-error")).to_have_text("Line 1 is not key=value.")
    form.get_by_label("Arguments").fill("who=the page")
    form.get_by_label("Working folder").fill("relative/path")  # refused by the route, at its field
    form.get_by_role("button", name="Start").click()
    expect(page.locator("#start-cwd-error")).to_contain_text("invalid_cwd")
    assert {r["run_id"] for r in module_owner.get("/api/workflows/runs").json()["runs"]} == before
    form.get_by_label("Working folder").fill("")
    form.get_by_role("button", name="Start").click()

    detail = page.locator("#run-detail")
    expect(detail.locator(".run-state")).to_contain_text("finished", timeout=TIMEOUT_MS)
    run_id = detail.locator(".run-id").inner_text()
    assert run_id not in before and run_id.startswith("wf_")
    expect(detail.locator(".run-name")).to_have_text("fan-out")
    expect(page.locator(f"#workflows tbody tr[data-id='{run_id}']")).to_have_count(1)
    phase = detail.locator(".wf-phase")
    expect(phase).to_have_count(1)
    expect(phase.locator(".wf-label").first).to_have_text("review")
    calls = phase.locator(".wf-call")
    expect(calls).to_have_count(2)
    expect(calls.nth(0).locator(".status")).to_have_text("ok")
    expect(calls.nth(0).locator(".wf-excerpt")).to_have_text("one")
    assert re.fullmatch(r"\d+\.\d s", calls.nth(0).locator(".wf-took").inner_text())
    # an agent's reply is untrusted: its markup shows as text, never as elements
    expect(calls.nth(1).locator(".wf-excerpt")).to_have_text("<b>not bold</b>")
    expect(detail.locator(".wf-tree b")).to_have_count(0)
    counted = detail.locator(".wf-tree > .wf-call")
    expect(counted.locator(".wf-label")).to_have_text("count")
    expect(counted.locator(".status")).to_have_text("failed")
    expect(counted.locator(".wf-excerpt")).to_contain_text("schema_mismatch")
    expect(detail.locator(".wf-log")).to_have_text("log: reviewing the page")
    expect(detail.locator(".run-end")).to_contain_text('Finished. Result: {"both":["one","<b>not bold</b>"]')
    refused = "Failed to load resource: the server responded with a status of 400 (Bad Request)"
    assert opened.csp_violations() == [] and opened.console_errors == [refused]  # only the cwd's refusal
    dashboard.screenshot(opened, "workflows-run-light")

    # rerun from the third call: the first two replay their recorded results, the third runs again
    counted.get_by_role("button", name=re.compile(f"^Rerun {run_id} from agent call 2 ")).click()
    expect(detail.locator(".run-id")).not_to_have_text(run_id, timeout=TIMEOUT_MS)
    rerun_id = detail.locator(".run-id").inner_text()
    expect(detail.locator(".run-state")).to_contain_text("finished", timeout=TIMEOUT_MS)
    expect(detail.locator(".run-state")).to_contain_text(f"a rerun of {run_id}")
    replayed = detail.locator(".wf-phase .wf-call .status", has_text="replayed")  # in their phase, as first run
    expect(replayed).to_have_count(2)
    expect(detail.locator(".wf-tree > .wf-call", has_text="count").locator(".status")).to_have_text("failed")
    rerun = module_owner.get(f"/api/workflows/runs/{rerun_id}").json()
    assert rerun["rerun_of"] == run_id and rerun["agent_calls"] == 1 and rerun["result"]["both"] == [
        "one", "<b>not bold</b>"]
    # only the events after the one asked for
    assert [e["seq"] for e in module_owner.get(f"/api/workflows/runs/{rerun_id}?since=3").json()["events"]][
        :1] == [4]
    assert opened.csp_violations() == [] and opened.console_errors == [refused]

    for scheme, width in (("dark", 1280), ("light", 400)):
        shown = dashboard.open(f"/workflows?run={run_id}", color_scheme=scheme, width=width)  # type: ignore[arg-type]
        expect(shown.page.locator("#run-detail .wf-call")).to_have_count(3)
        assert shown.page.evaluate("document.documentElement.scrollWidth") <= width  # nothing scrolls sideways
        dashboard.screenshot(shown, f"workflows-run-{scheme}-{width}px")

    # a stale address naming an unknown run shows no tree, and says why
    stale = dashboard.open("/workflows?run=wf_0000000000000000")
    expect(stale.page.locator("#alerts")).to_contain_text("workflow_run_not_found", timeout=TIMEOUT_MS)
    expect(stale.page.locator("#run-detail")).to_be_hidden()

    # bad bodies and unknown runs answer their codes and start nothing
    runs = module_owner.get("/api/workflows/runs").json()["runs"]
    unknown = "wf_0000000000000000"
    json_body = {"Content-Type": "application/json"}
    refusals = [
        (module_owner.post(f"/api/workflows/runs/{unknown}/rerun", json={"from_index": 0}), 404,
         "workflow_run_not_found"),
        (module_owner.post(f"/api/workflows/runs/{run_id}/rerun", json={"from_index": 4}), 400, "invalid_index"),
        (module_owner.post(f"/api/workflows/runs/{run_id}/rerun", json={"from_index": "1"}), 400, "bad_request"),
        (module_owner.post(f"/api/workflows/runs/{run_id}/rerun", json={}), 400, "bad_request"),
        (module_owner.post("/api/workflows/run", json={"workflow": "no-such-flow"}), 400, "workflow_not_found"),
        (module_owner.post("/api/workflows/run", json={"workflow": "../x"}), 400, "invalid_name"),
        (module_owner.post("/api/workflows/run", json={"workflow": "fan-out", "args": []}), 400, "bad_request"),
        (module_owner.post("/api/workflows/run", json={"workflow": "fan-out", "budget": 0}), 400, "invalid_budget"),
        (module_owner.post("/api/workflows/run", json={"workflow": "fan-out", "budget": 1001}), 400,
         "invalid_budget"),
        (module_owner.post("/api/workflows/run", json={"workflow": "fan-out", "budget": True}), 400, "bad_request"),
        (module_owner.post("/api/workflows/run", json={"workflow": "fan-out", "source": FAN_OUT}), 400,
         "workflow_or_source"),
        (module_owner.post("/api/workflows/run", json={"args": {}}), 400, "workflow_or_source"),
        (module_owner.post("/api/workflows/run", json={"source": 'META = {}\nimport os\n'}), 400,
         "workflow_import_forbidden"),
        (module_owner.post("/api/workflows/run", json={"source": FAN_OUT.replace("ctx.log(", "ctx.memory.get(")}),
         400, "workflow_port_unavailable"),
        (module_owner.post("/api/workflows/run", json={"workflow": "fan-out", "note": 1}), 400, "bad_request"),
        (module_owner.post("/api/workflows/run", content=b"{", headers=json_body), 400, "bad_json"),
        (module_owner.post("/api/workflows/run", json={"source": "x" * 700_000}), 400, "body_too_large"),
        (module_owner.get(f"/api/workflows/runs/{run_id}?since=-1"), 400, "invalid_since"),
        (module_owner.get(f"/api/workflows/runs/{run_id}?since=²"), 400, "invalid_since"),
        (module_owner.get(f"/api/workflows/runs/{run_id}?since={'9' * 5000}"), 400, "invalid_since"),
    ]
    for answer, status, code in refusals:
        assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text
    assert module_owner.get("/api/workflows/runs").json()["runs"] == runs
    assert refusals[7][0].json()["field"] == "budget" and refusals[12][0].json()["field"] == "source"


GATED = '''META = {"name": "gated", "wall_secs": 300}

async def workflow(ctx):
    said = await ctx.agent("!tool deploy\\n!say deployed", label="ship", phase="release")
    more = await ctx.agent("!say one more", label="over budget")
    return [said, more]
'''


def test_a_pasted_script_runs_within_the_budget_given_and_a_call_waiting_for_approval_shows_where_to_answer(
        dashboard: Dashboard, module_homes: IsolatedHomes, module_owner: httpx.Client) -> None:
    executable("bwrap", apt="bubblewrap")
    added = module_owner.post("/api/policy/rules", json={"decision": "ask", "tool": "deploy",
                                                          "reason": "deploys are the owner's call"})
    assert added.status_code == 200, added.text
    try:
        opened = dashboard.open("/workflows")
        page = opened.page
        form = page.locator("#script-form")
        form.get_by_label("Script").fill("META = {}\nimport os\n")  # refused by the check, at the script
        form.get_by_label("Budget").fill("1")
        form.get_by_role("button", name="Start").click()
        expect(page.locator("#script-source-error")).to_contain_text("workflow_import_forbidden")
        form.get_by_label("Script").fill(GATED)
        form.get_by_role("button", name="Start").click()

        detail = page.locator("#run-detail")
        expect(detail.locator(".run-name")).to_have_text("gated", timeout=TIMEOUT_MS)
        run_id = detail.locator(".run-id").inner_text()
        ship = detail.locator(".wf-phase", has_text="release").locator(".wf-call")
        expect(ship.locator(".status")).to_have_text("waiting for approval", timeout=TIMEOUT_MS)
        link = ship.get_by_role("link", name="Answer on its conversation (tool deploy)")
        asked = next(e["data"] for e in module_owner.get(f"/api/workflows/runs/{run_id}").json()["events"]
                     if e["type"] == "approval_requested")
        expect(link).to_have_attribute("href", f"/conversations/{asked['conversation_id']}")
        dashboard.screenshot(opened, "workflows-approval-light")
        answer = module_owner.post(f"/api/conversations/{asked['conversation_id']}/runs/"
                                   f"{asked['conversation_run_id']}/permissions/{asked['permission_id']}",
                                   json={"decision": "allow_once"})
        assert answer.status_code == 200, answer.text
        expect(ship.locator(".status")).to_have_text("ok", timeout=TIMEOUT_MS)
        expect(link).to_have_count(0)
        # the budget of one agent call: the second call ends the run at its ceiling
        expect(detail.locator(".run-end")).to_contain_text(
            "Failed (where: ceiling): agent call 2 passes the run's ceiling of 1 agent calls", timeout=TIMEOUT_MS)
        record = module_owner.get(f"/api/workflows/runs/{run_id}").json()
        assert record["ceilings"]["agent_calls"] == 1 and record["owner"] == "person"
        refused = "Failed to load resource: the server responded with a status of 400 (Bad Request)"
        assert opened.csp_violations() == [] and opened.console_errors == [refused]
    finally:
        rule = added.json()["rule"]["id"]
        assert module_owner.delete(f"/api/policy/rules/{rule}").status_code == 200

