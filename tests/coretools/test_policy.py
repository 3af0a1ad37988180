"""The session tool policy: ``GET /api/session-tool-policy`` and the server's filter, over real agent files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import audit, home
from kirocrew_core.coretools.contract import CrewSession
from kirocrew_core.coretools.identity import registry
from kirocrew_core.coretools.policy import ExclusionCache, ToolPolicy, policy_for_session


def write_agent(directory: Path, name: str, document: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def policy(exclude: Any) -> dict[str, Any]:
    return {"name": "x", "managedToolPolicy": {"exclude": exclude}}


@pytest.fixture
def live_key() -> Iterator[Any]:
    """``live_key(agent, workspace=None)``: a key issued by this process's registry, revoked afterwards."""
    issued: list[str] = []

    def issue(agent: str | None, workspace: str | None = None) -> str:
        key = registry().issue("conversation", "conv-policy", agent=agent, workspace=workspace)
        issued.append(key)
        return key

    yield issue
    for key in issued:
        registry().revoke(key)


# -- the route -------------------------------------------------------------------------------------


def test_the_route_answers_the_live_sessions_exclusions(gateway_client: Any, live_key: Any) -> None:
    write_agent(home.kiro_agents_dir(), "reviewer", policy(["learn_add", "@kirocrew-core/spawn_run",
                                                            "@other-server/tool", 7]))
    answer = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("reviewer")})
    assert answer.status_code == 200
    assert answer.json() == {"agent": "reviewer", "exclude": ["learn_add", "spawn_run"]}


def test_the_workspace_agent_takes_precedence_over_the_global_one(
        gateway_client: Any, live_key: Any, tmp_path: Path) -> None:
    write_agent(home.kiro_agents_dir(), "reviewer", policy(["global_only"]))
    write_agent(tmp_path / "ws" / ".kiro" / "agents", "reviewer", policy(["local_only"]))
    key = live_key("reviewer", str(tmp_path / "ws"))
    assert gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": key}).json()["exclude"] == [
        "local_only"]


def test_a_caller_that_cannot_name_a_live_session_never_gets_a_policy(gateway_client: Any, live_key: Any) -> None:
    missing = gateway_client.get("/api/session-tool-policy")
    assert (missing.status_code, missing.json()["code"]) == (400, "session_key_required")
    unknown = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": "kcs1-" + "0" * 32})
    assert (unknown.status_code, unknown.json()["code"]) == (404, "session_not_found")
    key = live_key("reviewer")
    registry().revoke(key)
    revoked = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": key})
    assert (revoked.status_code, revoked.json()["code"]) == (404, "session_not_found")
    unsafe = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("../etc")})
    assert (unsafe.status_code, unsafe.json()["code"]) == (400, "invalid_agent_name")
    denied = [r["fields"]["code"] for r in audit.tail(20) if r["event"] == "coretools.session_tool_policy"]
    assert denied == ["session_key_required", "session_not_found", "session_not_found", "invalid_agent_name"]


def test_the_kirocrew_core_entrys_disabled_tools_apply_when_the_agent_file_has_no_policy(
        gateway_client: Any, live_key: Any) -> None:
    # kiro-cli 2.x refuses an agent file with a field it does not know: an agent it runs keeps the policy
    # in the form kirocrew-mcp renders managedToolPolicy into, disabledTools per server.
    write_agent(home.kiro_agents_dir(), "reviewer", {"name": "reviewer", "tools": ["*"], "mcpServers": {
        "kirocrew-core": {"command": "kirocrew", "args": ["mcp-core"], "disabledTools": ["learn_remove"]},
        "other": {"command": "x", "disabledTools": ["not_ours"]}}})
    answer = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("reviewer")})
    assert answer.json() == {"agent": "reviewer", "exclude": ["learn_remove"]}
    write_agent(home.kiro_agents_dir(), "plain", {"name": "plain", "tools": ["*"]})
    plain = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("plain")})
    assert plain.json() == {"agent": "plain", "exclude": []}  # no policy at all: nothing to warn about


def test_a_missing_or_malformed_agent_file_answers_an_empty_policy_with_a_warning(
        gateway_client: Any, live_key: Any) -> None:
    absent = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("nobody")})
    assert absent.status_code == 200 and absent.json()["exclude"] == [] and "no agent file" in absent.json()["warning"]
    write_agent(home.kiro_agents_dir(), "broken", "{not json")
    broken = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("broken")})
    assert broken.status_code == 200 and broken.json()["exclude"] == [] and "malformed" in broken.json()["warning"]
    write_agent(home.kiro_agents_dir(), "odd", policy("shell"))
    odd = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("odd")})
    assert odd.json()["exclude"] == [] and "no exclude list" in odd.json()["warning"]
    write_agent(home.kiro_agents_dir(), "array", "[1, 2]")
    array = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("array")})
    assert array.json()["exclude"] == [] and "not an object" in array.json()["warning"]
    assert (home.kiro_agents_dir() / "broken.json").read_text() == "{not json"  # read only, never repaired


def test_the_route_needs_the_owner(gateway_client: Any, live_key: Any) -> None:
    gateway_client.cookies.clear()
    answer = gateway_client.get("/api/session-tool-policy", headers={"X-Session-Key": live_key("reviewer")})
    assert answer.status_code == 401


# -- the filter ------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def session(agent: str = "reviewer", key: str = "kcs1-a") -> CrewSession:
    return CrewSession(key, "conversation", "conv", agent, None)


def test_a_changed_agent_file_is_seen_after_the_window_not_before() -> None:
    path = write_agent(home.kiro_agents_dir(), "reviewer", policy(["probe_echo"]))
    clock = Clock()
    cache = ExclusionCache(30.0, clock=clock)
    assert cache.policy(session()).exclude == frozenset({"probe_echo"})  # type: ignore[union-attr]
    path.write_text(json.dumps(policy(["probe_whoami"])))
    clock.now += 29.0
    assert cache.policy(session()).exclude == frozenset({"probe_echo"})  # type: ignore[union-attr]
    clock.now += 1.5
    assert cache.policy(session()).exclude == frozenset({"probe_whoami"})  # type: ignore[union-attr]


def test_a_failed_lookup_fails_open_and_is_kept_for_the_window() -> None:
    calls: list[str] = []

    def failing(s: CrewSession) -> ToolPolicy:
        calls.append(s.key)
        raise OSError("the agents directory is on a stalled mount")

    clock = Clock()
    cache = ExclusionCache(30.0, lookup=failing, clock=clock)
    first = cache.policy(session())
    assert first is not None and first.exclude == frozenset() and "OSError" in (first.warning or "")
    assert cache.policy(session()) == first and calls == ["kcs1-a"]  # one lookup per window, not per call
    clock.now += 31
    cache.policy(session())
    assert calls == ["kcs1-a", "kcs1-a"]


def test_an_unreadable_agent_file_excludes_nothing() -> None:
    (home.kiro_agents_dir() / "reviewer.json").mkdir(parents=True)  # unreadable as a file, for root too
    found = ExclusionCache(30.0).policy(session())
    assert found is not None and found.exclude == frozenset() and "cannot be read" in (found.warning or "")


def test_a_caller_without_a_session_is_not_filtered_and_nothing_is_cached() -> None:
    calls: list[str] = []

    def lookup(s: CrewSession) -> ToolPolicy:
        calls.append(s.key)
        return ToolPolicy(s.agent, frozenset({"x"}))

    cache = ExclusionCache(30.0, lookup=lookup)
    assert cache.policy(None) is None and calls == []
    assert cache.policy(session()).excludes("x") and calls == ["kcs1-a"]  # type: ignore[union-attr]


def test_the_cache_keeps_a_bounded_number_of_sessions_first_in_first_out() -> None:
    calls: list[str] = []

    def lookup(s: CrewSession) -> ToolPolicy:
        calls.append(s.key)
        return ToolPolicy(s.agent, frozenset())

    cache = ExclusionCache(30.0, max_sessions=2, lookup=lookup)
    for key in ("k1", "k2", "k3", "k2", "k1"):
        cache.policy(session(key=key))
    assert calls == ["k1", "k2", "k3", "k1"]  # k1 was evicted by k3; k2 was still kept


def test_a_whole_server_exclusion_hides_every_tool() -> None:
    write_agent(home.kiro_agents_dir(), "locked", policy(["@kirocrew-core"]))
    found = policy_for_session(session("locked"))
    assert found.excludes("anything") and found.as_dict()["exclude"] == ["*"]


def test_a_tool_the_policy_excludes_is_hidden_from_the_list_and_refused_at_call_time(
        plugin_manager: Any, process_tree: Any, tmp_path: Path) -> None:
    """Through the server's own dispatch, for a caller whose session resolves (a real bound process tree)."""
    import asyncio

    from kirocrew_core.coretools.identity import SessionRegistry
    from kirocrew_core.coretools.server import CoreToolsServer
    from kirocrew_testing.core_sessions import verified_caller
    from kirocrew_testing.plugins import register_plugin
    from kirocrew_testing.servers import core_probe

    register_plugin(plugin_manager, "core-probe", core_mcp_tools=core_probe.core_mcp_tools)
    tree, elsewhere = process_tree(), process_tree()
    reg = SessionRegistry()
    key = reg.issue("conversation", "conv", agent="limited")
    reg.bind_pid(key, tree.parent)
    write_agent(home.kiro_agents_dir(), "limited", {"name": "limited", "mcpServers": {
        "kirocrew-core": {"command": "kirocrew", "args": ["mcp-core"], "disabledTools": ["probe_lenient"]}}})
    core = CoreToolsServer(plugin_manager, registry=reg, exclusions=ExclusionCache(30.0))
    caller = verified_caller(tree.child)
    stranger = verified_caller(elsewhere.child, key)  # a process outside the session, holding its key

    assert "probe_lenient" not in [t.name for t in core.listed(caller)]
    assert "probe_lenient" in [t.name for t in core.listed(stranger)]  # no session: nothing filtered
    assert asyncio.run(core.call("probe_lenient", {}, caller)) == (
        "tool 'probe_lenient' is not available for this agent", "tool_excluded")
    assert asyncio.run(core.call("probe_lenient", {}, stranger)) == ("session: none", None)
    assert asyncio.run(core.call("probe_whoami", {}, caller))[1] is None
