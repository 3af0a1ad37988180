"""The MCP HTTP API through the real gateway app: auth, listing, probing, apply, restart, and the hook page."""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.plugins import BlockingServerSource

from kirocrew_core import hookimpl, home
from kirocrew_core.hookdocs import hook_functions, render_hook_reference
from kirocrew_testing.mcp_fixtures import stdio_server_argv
from kirocrew_mcp import hookspecs as mcp_hookspecs
from kirocrew_mcp.apply import MAX_CHANGES
from kirocrew_mcp.probe_cache import default_cache

REPO = Path(__file__).resolve().parents[2]
HOOK_PAGE = REPO / "docs" / "plugins" / "mcp-hooks.md"
HOOK_PAGE_TITLE = "kirocrew-mcp hook reference"
MCP_HOOKS = [name for name, _ in hook_functions(mcp_hookspecs)]
ROUTES = [("GET", "/api/mcp"), ("POST", "/api/mcp/probe"), ("GET", "/api/mcp/probe"), ("GET", "/api/mcp/scopes"),
          ("POST", "/api/mcp/apply"), ("POST", "/api/mcp/cleanup"), ("POST", "/api/sessions/restart")]
WAIT_SECS = 60.0
CAT = {"command": "/bin/cat", "args": ["-u"]}


@pytest.fixture(autouse=True)
def _mcp(plugin_manager: Any) -> Any:
    """The mcp plugin on the test's manager before the gateway app is built; an empty probe cache."""
    import kirocrew_mcp.plugin

    plugin_manager.register(kirocrew_mcp.plugin, name="mcp")
    default_cache().clear()
    yield plugin_manager
    default_cache().clear()


def register_companion(pm: Any) -> None:
    import kirocrew_companion.plugin

    pm.register(kirocrew_companion.plugin, name="companion")


def stdio_spec(*options: str, **extra: Any) -> dict[str, Any]:
    argv = stdio_server_argv(*options)
    return {"command": argv[0], "args": argv[1:], **extra}


def write(path: Path, servers: dict[str, Any]) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"mcpServers": servers}, indent=2).encode()
    path.write_bytes(data)
    return data


def kiro_global(servers: dict[str, Any]) -> bytes:
    return write(home.kiro_global_mcp_file(), servers)


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def rows(response: Any) -> dict[str, dict[str, Any]]:
    assert response.status_code == 200, response.text
    return {row["name"]: row for row in response.json()["servers"]}


def wait_for_settled_probes(client: Any) -> dict[str, dict[str, Any]]:
    """GET /api/mcp until no row is probing (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + WAIT_SECS
    while True:
        answer = client.get("/api/mcp").json()
        if not answer["backgroundProbe"]["inFlight"]:
            return {row["name"]: row for row in answer["servers"]}
        assert time.monotonic() < deadline, f"the background probe did not finish: {answer}"
        time.sleep(0.05)


# -- authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize("method, path", ROUTES)
def test_every_mcp_route_refuses_a_request_without_the_owner_token(gateway_client, method, path):
    from starlette.testclient import TestClient

    kiro_global({"srv": CAT})
    before = digest(home.kiro_global_mcp_file())
    with TestClient(gateway_client.app, base_url="http://127.0.0.1") as anonymous:
        response = anonymous.request(method, path, json={"changes": [{"name": "srv", "uninstall": True}]})
    assert (response.status_code, response.json()["code"]) == (401, "unauthenticated")
    assert digest(home.kiro_global_mcp_file()) == before


def test_a_bearer_token_works_for_scripts(gateway_client):
    from starlette.testclient import TestClient

    with TestClient(gateway_client.app, base_url="http://127.0.0.1") as script:
        response = script.get("/api/mcp/scopes", headers={"Authorization": f"Bearer {gateway_client.owner_token}"})
    assert response.status_code == 200


def test_an_apply_from_a_foreign_origin_is_refused_and_changes_nothing(gateway_client):
    kiro_global({"srv": CAT})
    before = digest(home.kiro_global_mcp_file())
    response = gateway_client.post("/api/mcp/apply", json={"changes": [{"name": "srv", "uninstall": True}]},
                                   headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert digest(home.kiro_global_mcp_file()) == before


# -- kirocrew's own servers left in a shared global ----------------------------------------------------


def test_the_listing_names_managed_servers_left_in_the_kiro_global_and_cleanup_removes_only_them(gateway_client):
    write(home.kiro_global_mcp_file(), {"kirocrew-core": {"command": "old-kirocrew", "args": ["mcp-core"]},
                                        "kirocrew-cron": {"command": "old-kirocrew"}, "mine": CAT})
    stale = gateway_client.get("/api/mcp").json()["staleManaged"]
    assert stale == [{"scope": "kiro", "label": "Kiro", "path": str(home.kiro_global_mcp_file()),
                      "names": ["kirocrew-core", "kirocrew-cron"]}]
    answer = gateway_client.post("/api/mcp/cleanup", json={})
    assert answer.status_code == 200, answer.text
    assert [s["removed"] for s in answer.json()["scopes"] if s["state"] == "cleaned"] == [["kirocrew-core",
                                                                                          "kirocrew-cron"]]
    assert json.loads(home.kiro_global_mcp_file().read_text())["mcpServers"] == {"mine": CAT}
    assert gateway_client.get("/api/mcp").json()["staleManaged"] == []
    assert [r["fields"]["names"] for r in audit_log() if r.get("event") == "mcp_stale_managed_purged"] == [
        ["kirocrew-core", "kirocrew-cron"]]


def test_a_cleanup_from_a_foreign_origin_or_with_a_body_is_refused_and_changes_nothing(gateway_client):
    write(home.kiro_global_mcp_file(), {"kirocrew-core": CAT})
    before = digest(home.kiro_global_mcp_file())
    foreign = gateway_client.post("/api/mcp/cleanup", json={}, headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert gateway_client.post("/api/mcp/cleanup", json={"all": True}).json()["code"] == "bad_request"
    assert digest(home.kiro_global_mcp_file()) == before


def test_a_shared_global_that_cannot_be_parsed_is_left_alone_and_the_cleanup_says_so(gateway_client):
    home.kiro_global_mcp_file().parent.mkdir(parents=True, exist_ok=True)
    home.kiro_global_mcp_file().write_text('{"mcpServers": {"kirocrew-core": ')
    before = digest(home.kiro_global_mcp_file())
    answer = gateway_client.post("/api/mcp/cleanup", json={})
    assert (answer.status_code, answer.json()["code"]) == (500, "cleanup_incomplete")
    assert digest(home.kiro_global_mcp_file()) == before


# -- GET /api/mcp ----------------------------------------------------------------------------------


def test_the_list_has_a_row_per_server_with_presence_for_every_scope(gateway_client):
    kiro_global({"a": CAT})
    write(home.crew_mcp_file(), {"b": CAT})

    answer = gateway_client.get("/api/mcp").json()

    assert sorted(r["name"] for r in answer["servers"]) == ["a", "b"]
    assert all(list(r["presence"]) == ["kirocrew", "kiro"] for r in answer["servers"])
    assert [s["id"] for s in answer["scopes"]] == ["kirocrew", "kiro"]
    assert answer["problems"] == []


def test_a_source_that_cannot_be_read_is_reported_not_hidden(gateway_client):
    home.kiro_global_mcp_file().parent.mkdir(parents=True)
    home.kiro_global_mcp_file().write_text("{ nope")
    answer = gateway_client.get("/api/mcp").json()
    assert [(p["source"], p["state"]) for p in answer["problems"]] == [("kiro", "malformed")]


def test_header_and_env_values_never_leave_the_gateway(gateway_client):
    kiro_global({"remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer s3cr3t-value"}},
                 "local": {**CAT, "env": {"API_TOKEN": "hunter2-value"}}})
    text = gateway_client.get("/api/mcp").text
    assert "s3cr3t-value" not in text and "hunter2-value" not in text


def test_unprobed_rows_start_one_background_probe_and_the_results_come_back(gateway_client):
    kiro_global({"one": stdio_spec("--tools", "2"), "two": stdio_spec("--names", "alpha"),
                 "off": stdio_spec(disabled=True)})

    first = gateway_client.get("/api/mcp").json()

    assert first["backgroundProbe"]["started"] is True
    assert {r["name"]: r["status"] for r in first["servers"]}["off"] == "disabled"
    settled = wait_for_settled_probes(gateway_client)
    assert (settled["one"]["status"], len(settled["one"]["tools"])) == ("ok", 2)
    assert (settled["two"]["status"], settled["two"]["tools"]) == ("ok", ["alpha"])
    assert settled["off"]["status"] == "disabled", "a disabled server is never probed"

    again = gateway_client.get("/api/mcp").json()
    assert again["backgroundProbe"]["started"] is False, "everything is cached: nothing to probe"


def test_never_more_than_one_background_probe_is_in_flight(gateway_client):
    home.config_file().parent.mkdir(parents=True, exist_ok=True)
    home.config_file().write_text("[dashboard]\nmcp_probe_timeout_secs = 60\n")
    kiro_global({"slow": stdio_spec("--hang")})

    first = gateway_client.get("/api/mcp").json()
    kiro_global({"slow": stdio_spec("--hang"), "newcomer": stdio_spec()})
    second = gateway_client.get("/api/mcp").json()

    assert first["backgroundProbe"] == {"started": True, "inFlight": True}
    assert second["backgroundProbe"] == {"started": False, "inFlight": True}
    statuses = {r["name"]: r["status"] for r in second["servers"]}
    assert statuses == {"slow": "probing", "newcomer": "unknown"}


# -- POST /api/mcp/probe ------------------------------------------------------------------------------


def test_probing_one_server_answers_its_fresh_row(gateway_client):
    kiro_global({"srv": stdio_spec("--names", "a,b"), "other": stdio_spec()})

    response = gateway_client.post("/api/mcp/probe", json={"name": "srv"})

    [row] = response.json()["servers"]
    assert (row["name"], row["status"], row["tools"]) == ("srv", "ok", ["a", "b"])
    listed = rows(gateway_client.get("/api/mcp"))
    assert listed["srv"]["status"] == "ok", "the result is cached for the next page load"


def test_probing_all_reports_failures_per_server(gateway_client):
    kiro_global({"good": stdio_spec(), "crashes": stdio_spec("--exit-during-handshake")})

    probed = rows(gateway_client.post("/api/mcp/probe", json={"all": True}))

    assert probed["good"]["status"] == "ok"
    assert probed["crashes"]["status"] == "error"
    assert "exiting during the handshake" in probed["crashes"]["error"]


def test_probing_an_unknown_server_is_400_like_every_unknown_name_in_a_body(gateway_client):
    response = gateway_client.post("/api/mcp/probe", json={"name": "nope"})
    assert (response.status_code, response.json()["code"]) == (400, "unknown_server")


@pytest.mark.parametrize("body", ['{"name": 3}', '{"name": "a", "all": true}', '{"every": 1}', "[1]", "{"])
def test_a_malformed_probe_request_is_400(gateway_client, body):
    response = gateway_client.post("/api/mcp/probe", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["code"] in ("bad_request", "bad_json")


# -- GET /api/mcp/scopes --------------------------------------------------------------------------------


def test_the_scopes_are_the_core_ones_without_the_companion(gateway_client):
    scopes = gateway_client.get("/api/mcp/scopes").json()["scopes"]
    assert [(s["id"], s["kind"], s["state"]) for s in scopes] == [("kirocrew", "crew", "absent"),
                                                                  ("kiro", "kiro", "absent")]


def test_with_the_companion_its_scope_is_listed_with_its_files_state(gateway_client, plugin_manager):
    register_companion(plugin_manager)
    (home.user_home() / ".claude.json").write_text("{ nope")
    scopes = {s["id"]: s for s in gateway_client.get("/api/mcp/scopes").json()["scopes"]}
    assert scopes["cc"]["label"] == "Claude"
    assert (scopes["cc"]["state"], scopes["cc"]["usable"]) == ("malformed", False)


def test_a_crew_store_whose_mcp_servers_is_a_list_is_malformed_in_the_scopes_and_the_listing(gateway_client):
    home.crew_mcp_file().parent.mkdir(parents=True, exist_ok=True)
    home.crew_mcp_file().write_text(json.dumps({"mcpServers": [CAT]}))
    scopes = {s["id"]: s for s in gateway_client.get("/api/mcp/scopes").json()["scopes"]}
    assert (scopes["kirocrew"]["state"], scopes["kirocrew"]["usable"]) == ("malformed", False)
    assert "mcpServers is not a JSON object" in scopes["kirocrew"]["error"]
    problems = gateway_client.get("/api/mcp").json()["problems"]
    assert any("mcpServers is not a JSON object" in str(problem) for problem in problems)


# -- POST /api/mcp/apply ----------------------------------------------------------------------------------


def test_apply_writes_the_scopes_and_rebuilds_the_agent_file(gateway_client):
    kiro_global({"srv": CAT, "gone": CAT})

    response = gateway_client.post("/api/mcp/apply", json={"changes": [
        {"name": "srv", "kirocrew": True, "kiro": False}, {"name": "gone", "uninstall": True}]})

    answer = response.json()
    assert response.status_code == 200 and answer["ok"] is True and answer["applied"] == 2
    assert [r["actions"] for r in answer["results"]] == [
        {"kirocrew": "preserved", "kiro": "removed"},
        {"kirocrew": "noop", "kiro": "removed", "agent": "noop"},
    ]
    assert json.loads(home.kiro_global_mcp_file().read_text())["mcpServers"] == {}
    assert json.loads(home.rendered_agent_file().read_text())["mcpServers"] == {"srv": CAT}


def test_per_change_results_carry_stable_codes(gateway_client):
    kiro_global({"srv": CAT})
    answer = gateway_client.post("/api/mcp/apply", json={"changes": [
        {"name": "../etc/passwd", "uninstall": True}, {"name": "srv", "kirocrew": False}]}).json()
    assert [(r["ok"], r.get("code")) for r in answer["results"]] == [(False, "invalid_name"), (True, None)]
    assert answer["ok"] is False and answer["applied"] == 1


@pytest.mark.parametrize("body, code", [
    ("{not json", "bad_json"),
    (b"\xff\xfe", "bad_json"),
    ("", "bad_changes"),
    ('{"changes": "all"}', "bad_changes"),
    (json.dumps({"changes": [{"name": f"s{i}", "kirocrew": False} for i in range(MAX_CHANGES + 1)]}),
     "too_many_changes"),
    ('{"changes": [{"name": "srv", "cc": true}]}', "unknown_scope"),
])
def test_a_bad_apply_request_is_400_with_a_code_and_nothing_changed(gateway_client, body, code):
    kiro_global({"srv": CAT})
    before = digest(home.kiro_global_mcp_file())

    response = gateway_client.post("/api/mcp/apply", content=body, headers={"Content-Type": "application/json"})

    assert (response.status_code, response.json()["code"]) == (400, code)
    assert digest(home.kiro_global_mcp_file()) == before
    assert not home.crew_mcp_file().exists() and not home.rendered_agent_file().exists()


def test_an_oversized_apply_body_is_refused_before_it_is_read_whole(gateway_client):
    kiro_global({"srv": CAT})
    before = digest(home.kiro_global_mcp_file())
    padding = " " * (1024 * 1024)
    response = gateway_client.post("/api/mcp/apply", content='{"changes": []}' + padding,
                                   headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()["code"]) == (400, "body_too_large")

    def chunks():  # no Content-Length: the limit holds while streaming
        yield b'{"changes": ['
        for _ in range(2048):
            yield b" " * 1024
        yield b"]}"

    streamed = gateway_client.post("/api/mcp/apply", content=chunks(), headers={"Content-Type": "application/json"})
    assert (streamed.status_code, streamed.json()["code"]) == (400, "body_too_large")
    assert digest(home.kiro_global_mcp_file()) == before


def test_with_the_companion_cc_is_an_apply_target(gateway_client, plugin_manager):
    register_companion(plugin_manager)
    kiro_global({"srv": CAT})

    answer = gateway_client.post("/api/mcp/apply", json={"changes": [{"name": "srv", "cc": True}]}).json()

    assert answer["results"][0]["actions"] == {"cc": "added"}
    claude = json.loads((home.user_home() / ".claude.json").read_text())
    assert claude["mcpServers"] == {"srv": CAT}
    listed = rows(gateway_client.get("/api/mcp"))
    assert listed["srv"]["presence"] == {"kirocrew": True, "kiro": True, "cc": True}


def test_the_kiro_global_is_byte_identical_after_listing_probing_and_an_apply_that_does_not_name_it(gateway_client):
    kiro_global({"srv": stdio_spec()})
    before = digest(home.kiro_global_mcp_file())

    gateway_client.get("/api/mcp")
    wait_for_settled_probes(gateway_client)
    gateway_client.post("/api/mcp/probe", json={"all": True})
    gateway_client.post("/api/mcp/apply", json={"changes": [{"name": "srv", "kirocrew": False,
                                                              "toolOverrides": {"t": False}}]})

    assert digest(home.kiro_global_mcp_file()) == before


# -- POST /api/sessions/restart and the restart_sessions hook -----------------------------------------------


class Restarter:
    def __init__(self, count: Any, *, fail: bool = False, is_async: bool = False) -> None:
        self.count, self.fail, self.is_async = count, fail, is_async
        self.reasons: list[str] = []

    @hookimpl
    def restart_sessions(self, reason: str) -> Any:
        self.reasons.append(reason)
        if self.fail:
            raise RuntimeError("pool is wedged")
        if self.is_async:
            async def later() -> Any:
                return self.count
            return later()
        return self.count


SYNCED_NOTHING = {"mcpSynced": 0, "mcpSyncOk": True, "mcpSyncError": None}


def test_a_restart_with_no_implementation_says_nothing_was_restarted(gateway_client):
    answer = gateway_client.post("/api/sessions/restart").json()
    assert answer == {"ok": True, "restarted": 0, "handledBy": [], "failed": [], **SYNCED_NOTHING}


def audit_log() -> list[dict[str, Any]]:
    from kirocrew_core import audit

    return audit.tail(100)


class AgentFileWitness:
    """A ``restart_sessions`` implementation that records the agent file's servers when it is called."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    @hookimpl
    def restart_sessions(self, reason: str) -> int:
        self.seen.append(sorted(json.loads(home.rendered_agent_file().read_text())["mcpServers"]))
        return 1


def test_a_restart_renders_the_agent_file_before_any_session_is_restarted(gateway_client, plugin_manager):
    write(home.crew_mcp_file(), {"srv": CAT, "other": CAT})
    witness = AgentFileWitness()
    plugin_manager.register(witness, name="pool")

    response = gateway_client.post("/api/sessions/restart")

    assert response.status_code == 200
    assert response.json() == {"ok": True, "restarted": 1, "handledBy": ["pool"], "failed": [],
                               "mcpSynced": 2, "mcpSyncOk": True, "mcpSyncError": None}
    assert witness.seen == [["other", "srv"]]
    (record,) = [r for r in audit_log() if r["event"] == "sessions_restart"]
    assert (record["fields"]["mcp_synced"], record["fields"]["mcp_sync_ok"]) == (2, True)


def test_a_failed_render_is_reported_and_the_restart_still_goes_ahead(gateway_client, plugin_manager):
    home.rendered_agent_file().mkdir(parents=True)  # a directory where the file should be: unreadable
    witness = Restarter(3)
    plugin_manager.register(witness, name="pool")

    response = gateway_client.post("/api/sessions/restart")

    answer = response.json()
    assert response.status_code == 200 and answer["ok"] is True and answer["restarted"] == 3
    assert (answer["mcpSynced"], answer["mcpSyncOk"]) == (0, False)
    assert answer["mcpSyncError"]["code"] == "agent_file_unreadable"
    assert witness.reasons == ["owner_request"]
    (record,) = [r for r in audit_log() if r["event"] == "sessions_restart"]
    assert (record["fields"]["mcp_sync_ok"], record["fields"]["mcp_sync_code"]) == (False, "agent_file_unreadable")


def test_a_render_that_overruns_its_cap_is_reported_and_the_restart_does_not_wait(gateway_client, plugin_manager,
                                                                                     monkeypatch):
    from kirocrew_mcp import sync

    monkeypatch.setattr(sync, "SYNC_TIMEOUT_SECS", 0.2)
    slow, witness = BlockingServerSource({"late": CAT}, WAIT_SECS), Restarter(1)
    plugin_manager.register(slow, name="slow-source")
    plugin_manager.register(witness, name="pool")
    try:
        answer = gateway_client.post("/api/sessions/restart").json()
        assert slow.entered.is_set() and witness.reasons == ["owner_request"]
        assert (answer["ok"], answer["restarted"], answer["mcpSyncOk"]) == (True, 1, False)
        assert answer["mcpSyncError"]["code"] == "mcp_sync_timeout"
    finally:
        slow.release.set()
    # The overrunning render finishes on its own (the test waits for it so nothing outlives it).
    deadline = time.monotonic() + WAIT_SECS
    while not (home.rendered_agent_file().exists()
               and "late" in json.loads(home.rendered_agent_file().read_text())["mcpServers"]):
        assert time.monotonic() < deadline, "the overrunning render never finished"
        time.sleep(0.05)


def test_hook_restart_sessions(gateway_client, plugin_manager):
    first, second = Restarter(2), Restarter(3, is_async=True)
    plugin_manager.register(first, name="pool-a")
    plugin_manager.register(second, name="pool-b")
    plugin_manager.register(Restarter(None), name="pool-c")

    answer = gateway_client.post("/api/sessions/restart", json={"reason": "mcp_apply"}).json()

    assert answer == {"ok": True, "restarted": 5, "handledBy": ["pool-a", "pool-b", "pool-c"], "failed": [],
                      **SYNCED_NOTHING}
    assert first.reasons == second.reasons == ["mcp_apply"]


def test_a_failing_restart_implementation_is_reported_and_never_stops_the_others(gateway_client, plugin_manager):
    survivor = Restarter(1)
    plugin_manager.register(Restarter(0, fail=True), name="broken")
    plugin_manager.register(survivor, name="pool")

    response = gateway_client.post("/api/sessions/restart")

    answer = response.json()
    assert response.status_code == 500 and answer["code"] == "restart_failed"
    assert answer["restarted"] == 1 and answer["handledBy"] == ["pool"]
    assert answer["failed"] == [{"plugin": "broken", "error": "RuntimeError: pool is wedged"}]
    assert survivor.reasons == ["owner_request"]


class Managers:
    """An ``mcp_server_managers`` implementation answering ``answer`` (or raising it) and recording its calls."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.seen: list[list[str]] = []

    @hookimpl
    def mcp_server_managers(self, servers):
        self.seen.append(sorted(row["name"] for row in servers))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _row(html: str, name: str) -> str:
    start = html.index(f'<tr data-name="{name}"')
    return html[start:html.index("</tr>", start)]


class RenamedTools:
    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases

    @hookimpl
    def agent_tool_aliases(self, servers):
        return self.aliases


def test_hook_agent_tool_aliases(gateway_client, plugin_manager):
    from kirocrew_mcp.render import rebuild_agent_config

    write(home.kiro_global_mcp_file(), {"a": CAT, "b": CAT})
    plugin_manager.register(RenamedTools({"@a/list": "a_list", "@b/list": "first"}), name="a-renames")
    plugin_manager.register(RenamedTools({"@b/list": "second", "@ghost/list": "x"}), name="b-renames")
    rebuild_agent_config(pm=plugin_manager)
    rendered = json.loads(home.rendered_agent_file().read_text())
    assert rendered["toolAliases"] == {"@a/list": "a_list", "@b/list": "first"}  # first wins; no ghost


class AgentContext:
    def __init__(self, resources, commands) -> None:
        self.resources, self.commands = resources, commands

    @hookimpl
    def agent_resources(self):
        return self.resources

    @hookimpl
    def agent_spawn_hooks(self):
        return self.commands


def _agent() -> dict:
    return json.loads(home.rendered_agent_file().read_text())


def test_hook_agent_resources(gateway_client, plugin_manager, tmp_path):
    from kirocrew_mcp.render import rebuild_agent_config

    notes, extra = (tmp_path / "notes.md").as_uri(), (tmp_path / "extra.md").as_uri()
    plugin_manager.register(AgentContext([notes, extra], None), name="a-context")
    plugin_manager.register(AgentContext([notes], None), name="b-context")
    plugin_manager.register(AgentContext(["https://example.com/x"], None), name="c-junk")
    report = rebuild_agent_config(pm=plugin_manager)
    resources = _agent()["resources"]
    assert resources[0] == "file://.kiro/steering/**/*.md"  # the template's own stays first
    assert resources.count(notes) == 1 and extra in resources and "https://example.com/x" not in resources
    assert any("c-junk" in w and "agent_resources" in w for w in report.warnings)

    # The user's own entries survive a render; a URI no plugin names any more leaves.
    agent = _agent()
    agent["resources"].append("file://mine.md")
    home.rendered_agent_file().write_text(json.dumps(agent))
    plugin_manager.unregister(name="a-context")
    rebuild_agent_config(pm=plugin_manager)
    resources = _agent()["resources"]
    assert "file://mine.md" in resources and notes in resources and extra not in resources


def test_hook_agent_spawn_hooks(gateway_client, plugin_manager):
    from kirocrew_mcp.managed import kirocrew_executable
    from kirocrew_mcp.render import rebuild_agent_config

    plugin_manager.register(AgentContext(None, [["kirocrew", "learn", "context"], ["echo", "a b"]]), name="a-hooks")
    rebuild_agent_config(pm=plugin_manager)
    spawn = _agent()["hooks"]["agentSpawn"]
    commands = [entry["command"] for entry in spawn]
    # "kirocrew" is the live executable, as for managed servers; words are shell-quoted.
    assert f"{kirocrew_executable()} learn context" in commands and "echo 'a b'" in commands

    agent = _agent()
    agent["hooks"]["agentSpawn"].append({"command": "git status"})
    agent["hooks"]["stop"] = [{"command": "true"}]
    home.rendered_agent_file().write_text(json.dumps(agent))
    plugin_manager.unregister(name="a-hooks")
    rebuild_agent_config(pm=plugin_manager)
    hooks = _agent()["hooks"]
    commands = [entry["command"] for entry in hooks["agentSpawn"]]
    assert "git status" in commands and "echo 'a b'" not in commands and hooks["stop"] == [{"command": "true"}]


def test_hook_mcp_server_managers(gateway_client, plugin_manager, caplog):
    from kirocrew_mcp.public import ServerManager

    write(home.kiro_global_mcp_file(), {"synced": CAT, "shared": CAT, "mine": CAT})
    first = Managers({"synced": ServerManager("Sync", "/sync"), "shared": ServerManager("Sync"),
                      "not-a-row": ServerManager("Ghost")})
    plugin_manager.register(first, name="a-sync")
    plugin_manager.register(Managers({"shared": ServerManager("Later", "/later")}), name="b-later")
    plugin_manager.register(Managers(RuntimeError("registry unreadable")), name="c-broken")
    plugin_manager.register(Managers(["synced"]), name="d-junk")
    plugin_manager.register(Managers({"mine": ServerManager("Evil", "javascript:alert(1)")}), name="e-evil")

    html = gateway_client.get("/mcp").text

    assert first.seen == [["mine", "shared", "synced"]]
    synced, shared, mine = _row(html, "synced"), _row(html, "shared"), _row(html, "mine")
    assert '<a class="badge managed" href="/sync">Managed by Sync</a>' in synced
    assert "Uninstall" not in synced and "data-scope=" not in synced
    assert '<span class="badge managed">Managed by Sync</span>' in shared  # the first implementation wins
    assert "Managed by" not in mine and "Uninstall" in mine  # a failed or refused answer marks nothing
    assert "Ghost" not in html and "javascript:" not in html
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "c-broken" in warned and "d-junk" in warned and "e-evil" in warned


@pytest.mark.parametrize("body, code", [('{"reason": "Has Spaces"}', "bad_request"), ('{"why": "x"}', "bad_request"),
                                        ("[]", "bad_json")])
def test_a_restart_with_a_bad_reason_is_400(gateway_client, body, code):
    response = gateway_client.post("/api/sessions/restart", content=body,
                                   headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()["code"]) == (400, code)


# -- the plugin's own hooks: documented, typed, tested ----------------------------------------------------------


def test_the_mcp_hook_reference_page_is_generated_from_the_docstrings():
    expected = render_hook_reference(mcp_hookspecs, title=HOOK_PAGE_TITLE)
    assert HOOK_PAGE.read_text() == expected, (
        "docs/plugins/mcp-hooks.md is stale: regenerate it with "
        "render_hook_reference(kirocrew_mcp.hookspecs, title=\"kirocrew-mcp hook reference\")"
    )


@pytest.mark.parametrize("name", MCP_HOOKS)
def test_every_mcp_hook_is_typed_says_who_calls_it_and_has_a_test(name):
    fn = getattr(mcp_hookspecs, name)
    signature = inspect.signature(fn)
    assert signature.return_annotation is not inspect.Signature.empty
    assert all(p.annotation is not inspect.Parameter.empty for p in signature.parameters.values())
    doc = inspect.getdoc(fn) or ""
    assert "Called " in doc and "Every implementation" in doc
    assert callable(getattr(sys.modules[__name__], f"test_hook_{name}", None)), f"write test_hook_{name}"


def test_the_plugin_adds_its_hookspecs_to_any_manager_it_joins():
    from kirocrew_core.plugins import make_plugin_manager

    pm = make_plugin_manager(env={})
    assert pm.hook.restart_sessions.spec is not None


# -- the user docs keep up ----------------------------------------------------------------------------------------

USER_DOCS = (REPO / "docs" / "mcp.md").read_text()


@pytest.mark.parametrize("method, path", ROUTES)
def test_every_route_is_in_the_user_docs(method, path):
    assert f"`{method} {path}" in USER_DOCS


def test_every_error_code_the_api_and_apply_raise_is_in_the_user_docs():
    import re

    source = "".join((REPO / "kirocrew_plugins" / "mcp" / "src" / "kirocrew_mcp" / name).read_text()
                     for name in ("apply.py", "api.py"))
    source += (REPO / "kirocrew_core" / "src" / "kirocrew_core" / "gateway" / "body.py").read_text()  # its body reader
    codes = set(re.findall(r'code="([a-z_]+)"', source)) | set(re.findall(r'fail\("([a-z_]+)"', source))
    codes |= {"scope_file_malformed", "scope_file_unreadable", "missing_spec"}
    assert {"bad_json", "unknown_scope", "invalid_name"} <= codes, "the patterns no longer find the codes"
    assert [code for code in sorted(codes) if f"`{code}`" not in USER_DOCS] == []
