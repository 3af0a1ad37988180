"""The Cron page's JSON routes and server-rendered pages, without a browser.

One real ``kirocrew serve`` (its host runs the cron service and the scheduler) is shared by the
module; each test makes its own jobs and asserts on those. Scripts reach it with the owner's Bearer
token, as the page's own script does with its cookie. Command jobs (``echo``) need no kiro-cli; the
one agent job runs on the fake kiro-cli in a host of its own (its kiro-cli lives as long as that host).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from kirocrew_testing.browser import owner_http_client, serving_gateway
from kirocrew_testing.fixtures import kirocrew_argv
from kirocrew_testing.homes import isolate_homes

WAIT_SECS = 60


@pytest.fixture(scope="module")
def module_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cron-page-api")


@pytest.fixture(scope="module")
def workspace(module_root: Path) -> Path:
    path = module_root / "work"
    path.mkdir(exist_ok=True)
    return path


def add(owner: httpx.Client, workspace: Path, **arguments: Any) -> dict[str, Any]:
    schedule = {} if {"every", "cron_expr", "at", "delay", "at_time"} & set(arguments) else {"every": 7200}
    payload = {} if "message" in arguments else {"command": "echo hi"}
    body = {"name": "job", "cwd": str(workspace), **payload, **schedule, **arguments}
    answer = owner.post("/api/cron/jobs", json=body)
    assert answer.status_code == 200, answer.text
    job: dict[str, Any] = answer.json()["job"]
    return job


def ids(owner: httpx.Client) -> set[str]:
    return {job["id"] for job in owner.get("/api/cron/jobs").json()["jobs"]}


def refusal(answer: httpx.Response) -> tuple[int, str, str | None]:
    body = answer.json()
    return answer.status_code, body["code"], body.get("field")


# -- reading and adding ------------------------------------------------------------------------------


def test_a_job_added_over_the_route_is_listed_with_its_schedule_in_words_and_its_next_run(
        owner: httpx.Client, workspace: Path) -> None:
    before = time.time()
    job = add(owner, workspace, name="nightly-report", cron_expr="30 2 * * *", timezone="Europe/Paris",
              strict_schedule=True)
    listing = owner.get("/api/cron/jobs").json()
    (listed,) = [j for j in listing["jobs"] if j["id"] == job["id"]]
    assert listed["name"] == "nightly-report" and listed["owner"] == "" and listed["command"] == "echo hi"
    assert listed["schedule"]["kind"] == "cron" and listed["schedule"]["cron_expr"] == "30 2 * * *"
    assert "02:30" in listed["schedule_text"] and "Europe/Paris" in listed["schedule_text"]
    assert before < listed["next_run"] <= before + 86_400 + 3_600
    assert listed["running"] is False and listing["scheduler_on"] is True
    assert listing["active"] + listing["paused"] == len(listing["jobs"])

    shown = owner.get(f"/api/cron/jobs/{job['id']}").json()
    assert shown["job"] == listed and shown["history"] == []


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"name": "x", "command": "echo hi", "every": 3600, "bogus": 1}, (400, "invalid_arguments", "bogus")),
    ({"name": "x", "command": "echo hi", "every": 10}, (400, "invalid_arguments", "every")),
    ({"name": "x" * 501, "command": "echo hi", "every": 3600}, (400, "invalid_arguments", "name")),
    ({"name": "x", "command": "echo hi"}, (400, "no_schedule", "schedule")),
    ({"name": "x", "command": "echo hi", "every": 3600, "cron_expr": "* * * * *"},
     (400, "conflicting_schedule", "schedule")),
    ({"name": "x", "command": "echo hi", "cron_expr": "61 * * * *"}, (400, "invalid_schedule", "schedule")),
    ({"name": "x", "command": "echo hi", "every": 3600, "timezone": "Mars/Base"},
     (400, "invalid_timezone", "timezone")),
    ({"name": "x", "command": "echo hi", "every": 3600, "skip_dates": ["2026-02-30"]},
     (400, "invalid_skip_date", "skip_dates")),
    ({"name": "x", "command": "echo hi", "at_time": "whenever"}, (400, "unparseable_time", "at_time")),
    ({"name": "x", "command": "echo hi", "at": 1_000_000}, (400, "time_in_past", "schedule")),
    ({"name": "x", "every": 3600}, (400, "no_payload", "message")),
    ({"name": "x", "command": "cat ~/.ssh/id_rsa", "every": 3600}, (400, "command_refused", "command")),
    ({"name": "x", "command": "echo hi", "cron_expr": "*/99999999999999999999 * * * *"},
     (400, "cron_step_out_of_range", "schedule")),
    ({"name": "x\n# y", "command": "echo hi", "every": 3600}, (400, "name_control_characters", "name")),
    ({"name": "x", "message": "m\x1b[2J", "every": 3600}, (400, "message_control_characters", "message")),
])
def test_the_add_route_refuses_what_cron_add_refuses_with_its_code_and_field_and_stores_nothing(
        owner: httpx.Client, workspace: Path, arguments: dict[str, Any], expected: tuple[int, str, str]) -> None:
    before = ids(owner)
    answer = owner.post("/api/cron/jobs", json={"cwd": str(workspace), **arguments})
    assert refusal(answer) == expected, answer.text
    assert answer.json()["error"]
    assert ids(owner) == before


def test_bodies_that_are_not_a_json_object_or_too_large_are_refused_and_change_nothing(owner: httpx.Client) -> None:
    before = ids(owner)
    for content in (b"{not json", b"[1, 2]", b"", b"\xff\xfe"):
        answer = owner.post("/api/cron/jobs", content=content, headers={"Content-Type": "application/json"})
        assert refusal(answer)[:2] == (400, "bad_json"), content
    huge = json.dumps({"name": "x", "message": "m" * 600_000, "every": 3600})
    answer = owner.post("/api/cron/jobs", content=huge, headers={"Content-Type": "application/json"})
    assert refusal(answer)[:2] == (400, "body_too_large")
    assert ids(owner) == before


def test_an_unknown_job_is_404_job_not_found_and_a_malformed_id_400_on_every_route(owner: httpx.Client) -> None:
    for job_id, expected in (("deadbeef", (404, "job_not_found")), ("NOT-HEX", (400, "invalid_job_id"))):
        one = f"/api/cron/jobs/{job_id}"
        answers = [owner.get(one), owner.patch(one, json={"name": "y"}), owner.delete(one),
                   owner.post(one + "/pause", json={}), owner.post(one + "/resume", json={}),
                   owner.post(one + "/trigger", json={})]
        assert [refusal(a)[:2] for a in answers] == [expected] * len(answers)
    assert "job not found: deadbeef" in owner.get("/api/cron/jobs/deadbeef").json()["error"]


# -- changing ----------------------------------------------------------------------------------------


def test_pause_resume_update_and_remove_change_the_job_refuse_bad_input_and_are_audited(
        owner: httpx.Client, workspace: Path, module_root: Path) -> None:
    job = add(owner, workspace, name="changes")
    one = f"/api/cron/jobs/{job['id']}"

    paused = owner.post(one + "/pause").json()["job"]
    assert paused["user_paused"] is True and paused["next_run"] is None
    assert refusal(owner.post(one + "/resume", json={"now": True}))[:2] == (400, "bad_request")
    resumed = owner.post(one + "/resume", json={}).json()["job"]
    assert resumed["user_paused"] is False and resumed["next_run"] is not None

    updated = owner.patch(one, json={"name": "renamed", "every": 3600, "skip_dates": ["2030-01-01"]})
    assert updated.status_code == 200, updated.text
    view = updated.json()["job"]
    assert (view["name"], view["schedule"]["every_secs"], view["skip_dates"]) == ("renamed", 3600, ["2030-01-01"])
    assert refusal(owner.patch(one, json={}))[:2] == (400, "no_fields")
    assert refusal(owner.patch(one, json={"job_id": "abc"}))[:2] == (400, "invalid_arguments")
    assert refusal(owner.patch(one, json={"every": 5})) == (400, "invalid_arguments", "every")
    assert refusal(owner.patch(one, json={"timezone": "Nowhere/Land"})) == (400, "invalid_timezone", "timezone")
    assert owner.get(one).json()["job"]["name"] == "renamed"

    assert owner.delete(one).json() == {"ok": True, "id": job["id"]}
    assert refusal(owner.get(one))[:2] == (404, "job_not_found")
    assert refusal(owner.delete(one))[:2] == (404, "job_not_found")

    from kirocrew_core import audit

    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_root)  # the served host's homes: its security event log
        records = [r for r in audit.tail(200) if r["event"] == "cron.dashboard"
                   and r["fields"].get("job_id") == job["id"]]
    assert [(r["actor"], r["outcome"], r["fields"]["tool"], r["fields"]["code"]) for r in records] == [
        ("owner", "ok", "cron_add", "ok"),
        ("owner", "ok", "cron_pause", "ok"),
        ("owner", "ok", "cron_resume", "ok"),
        ("owner", "ok", "cron_update", "ok"),
        ("owner", "refused", "cron_update", "no_fields"),
        ("owner", "refused", "cron_update", "invalid_arguments"),
        ("owner", "refused", "cron_update", "invalid_arguments"),
        ("owner", "refused", "cron_update", "invalid_timezone"),
        ("owner", "ok", "cron_remove", "ok"),
        ("owner", "refused", "cron_remove", "job_not_found"),
    ]


def test_run_now_runs_a_command_job_and_its_history_row_appears_with_result_and_duration(
        owner: httpx.Client, workspace: Path) -> None:
    job = add(owner, workspace, name="echoes", command="echo hello-from-cron")
    one = f"/api/cron/jobs/{job['id']}"
    started = owner.post(one + "/trigger", json={})
    assert started.status_code == 200, started.text
    run = started.json()["run"]
    assert run["trigger"] == "manual" and run["job_id"] == job["id"] and run["url"] == ""

    deadline = time.monotonic() + WAIT_SECS
    while True:
        shown = owner.get(one).json()
        if shown["history"] and shown["history"][0]["status"] != "running" and shown["job"]["last_status"]:
            break
        assert time.monotonic() < deadline, shown
        time.sleep(0.1)
    (row,) = shown["history"]
    assert row["status"] == "success" and "hello-from-cron" in row["summary"]
    assert row["duration_ms"] is not None and row["finished_at"] >= row["started_at"]
    assert shown["job"]["last_status"] == "ok" and "hello-from-cron" in shown["job"]["last_result"]


@pytest.fixture
def gateway_env(hosted_gateway_env: dict[str, str]) -> dict[str, str]:
    """The agent test's own ``kirocrew serve``: the fake kiro-cli, conversations in the test's state directory."""
    return hosted_gateway_env


def test_an_agent_jobs_history_links_to_its_run_on_the_conversations_page(
        owner_client: httpx.Client, tmp_path: Path) -> None:
    owner = owner_client
    job = add(owner, tmp_path, name="agent-run", message="!say cron says hi")
    one = f"/api/cron/jobs/{job['id']}"
    assert owner.post(one + "/trigger", json={}).status_code == 200
    deadline = time.monotonic() + WAIT_SECS
    while not (history := owner.get(one).json()["history"]) or history[0]["status"] == "running":
        assert time.monotonic() < deadline, history
        time.sleep(0.2)
    (row,) = history
    assert row["status"] == "success", row
    assert row["conversation_id"] and row["run_id"]
    assert row["url"] == f"/conversations/{row['conversation_id']}#run-{row['run_id']}-heading"
    conversation = owner.get(row["url"].split("#")[0])
    assert conversation.status_code == 200 and f'id="run-{row["run_id"]}-heading"' in conversation.text
    page = owner.get(f"/cron/{job['id']}").text
    assert f'href="{row["url"]}"' in page and f'href="/conversations/{row["conversation_id"]}"' in page


def test_import_reads_a_crons_json_as_the_persons_jobs_and_reports_what_it_skipped(
        owner: httpx.Client, module_root: Path) -> None:
    source = module_root / "crons.json"
    source.write_text(json.dumps({"version": 2, "jobs": [
        {"id": "abc123", "name": "imported-one", "message": "check the queue", "schedule": {"kind": "every",
                                                                                          "every_secs": 3600}},
        {"name": "broken"},
    ]}))
    answer = owner.post("/api/cron/import", json={"path": str(source)})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["imported"] == ["abc123"] and [s["index"] for s in report["skipped"]] == [1]
    assert owner.get("/api/cron/jobs/abc123").json()["job"]["owner"] == ""
    assert json.loads(source.read_text())["jobs"][1] == {"name": "broken"}, "the file is never written"

    assert refusal(owner.post("/api/cron/import", json={"path": "crons.json"}))[:2] == (400, "invalid_arguments")
    assert refusal(owner.post("/api/cron/import", json={"path": str(source), "x": 1}))[:2] == \
        (400, "invalid_arguments")
    assert refusal(owner.post("/api/cron/import", json={"path": str(module_root / "missing.json")}))[:2] == \
        (400, "import_unreadable")


# -- the pages ---------------------------------------------------------------------------------------


def test_the_cron_page_lists_jobs_and_its_add_form_offers_every_cron_add_argument(
        owner: httpx.Client, workspace: Path) -> None:
    from kirocrew_cron.tools import tools_by_name

    job = add(owner, workspace, name="on-the-page")
    page = owner.get("/cron")
    assert page.status_code == 200
    html = page.text
    assert f'id="job-{job["id"]}"' in html and job["schedule_text"] in html
    assert "<style" not in html and "<script>" not in html and 'style="' not in html

    form = html.split('id="add-form"', 1)[1].split("</form>", 1)[0]
    names = set(re.findall(r'name="([a-z_]+)"', form)) - {"payload", "schedule", "every_unit"}
    # json only shapes a tool's answer
    assert names == set(tools_by_name()["cron_add"].input_schema["properties"]) - {"json"}


def test_a_jobs_page_shows_its_history_and_an_unknown_job_is_a_404_page(
        owner: httpx.Client, workspace: Path) -> None:
    job = add(owner, workspace, name="with-history", command="echo on-its-page")
    owner.post(f"/api/cron/jobs/{job['id']}/trigger", json={})
    deadline = time.monotonic() + WAIT_SECS
    while not (h := owner.get(f"/api/cron/jobs/{job['id']}").json()["history"]) or h[0]["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    page = owner.get(f"/cron/{job['id']}")
    assert page.status_code == 200
    assert "<h1>with-history</h1>" in page.text and "on-its-page" in page.text and ">success<" in page.text
    assert 'id="edit-form"' in page.text
    for address in ("/cron/deadbeef", "/cron/NOT-HEX"):
        missing = owner.get(address)
        assert missing.status_code == 404 and "<code>job_not_found</code>" in missing.text


def test_with_no_crons_jobs_can_be_added_but_run_now_is_refused_and_the_page_says_why(
        isolated_homes: Any, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "KIROCREW_NO_HOST"}
    with serving_gateway(env, ["--no-crons"], kirocrew_argv(), tmp_path / "logs") as gateway, \
            owner_http_client(gateway) as owner:
        job = add(owner, tmp_path, name="held")
        assert owner.get("/api/cron/jobs").json()["scheduler_on"] is False
        assert refusal(owner.post(f"/api/cron/jobs/{job['id']}/trigger", json={}))[:2] == (409, "scheduler_off")
        assert owner.get(f"/api/cron/jobs/{job['id']}").json()["history"] == []
        page = owner.get("/cron").text
        assert "kirocrew serve --no-crons" in page and 'data-off title="The scheduler is off"' in page


# -- without a host -------------------------------------------------------------------------------------


@pytest.fixture
def plugin_manager(plugin_manager: Any) -> Any:
    import kirocrew_cron.plugin

    plugin_manager.register(kirocrew_cron.plugin, name="cron")
    return plugin_manager


def test_without_a_host_the_routes_answer_host_required_and_the_page_says_so(gateway_client: Any) -> None:
    assert '<a href="/cron">Cron</a>' in gateway_client.get("/").text
    answer = gateway_client.get("/api/cron/jobs")
    assert (answer.status_code, answer.json()["code"]) == (503, "host_required")
    added = gateway_client.post("/api/cron/jobs", json={"name": "x", "command": "echo", "every": 60})
    assert (added.status_code, added.json()["code"]) == (503, "host_required")
    page = gateway_client.get("/cron")
    assert page.status_code == 503 and "<code>host_required</code>" in page.text and 'role="alert"' in page.text
    assert gateway_client.get("/cron/abc").status_code == 503


def test_a_one_shot_that_ran_and_removed_itself_still_shows_its_history(owner: httpx.Client,
                                                                        workspace: Path) -> None:
    job = add(owner, workspace, name="once-only", command="echo ran-once", delay=1)
    one = f"/api/cron/jobs/{job['id']}"
    deadline = time.monotonic() + WAIT_SECS
    while (shown := owner.get(one).json()).get("job") is not None:
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)
    assert job["id"] not in ids(owner)
    assert shown["removed"]["id"] == job["id"] and shown["removed"]["name"] == "once-only"
    assert [(r["status"], r["summary"]) for r in shown["history"]] == [("success", "ran-once")]
    page = owner.get(f"/cron/{job['id']}")
    assert page.status_code == 200
    assert "<h1>once-only</h1>" in page.text and "ran and removed itself; its history is kept" in page.text
    assert "ran-once" in page.text and 'data-do="trigger"' not in page.text
    assert refusal(owner.get("/api/cron/jobs/ffffffff")) == (404, "job_not_found", None)
