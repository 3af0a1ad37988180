"""POST /api/connections/disconnect: purge the entry, revoke the local grant only when nobody shares it."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from kirocrew_core import home, locks
from kirocrew_core.grants import artifact_paths, grant_key
from kirocrew_connections.disconnect import UNPROVABLE, artifact_key, is_provable, normalized_endpoint

NOTION = "https://mcp.notion.com/mcp"

# Hypothesis's pytest plugin writes a constants cache while collecting, before any fixture
# runs; point it away from the checkout (the fixture below moves it under the temp root).
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / f"kirocrew-hypothesis-{os.getuid()}")
PROPERTIES = settings(database=None, deadline=None, max_examples=300,
                      suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", autouse=True)
def _hypothesis_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hypothesis caches (unicode tables, constants) under the temp root, never in the checkout.

    Not reset afterwards: Hypothesis still writes its caches after the last example runs.
    """
    set_hypothesis_home_dir(tmp_path_factory.mktemp("hypothesis"))
    yield


@pytest.fixture(autouse=True)
def _plugins(connections_plugins: Any) -> Any:
    return connections_plugins


def write_servers(path: Path, servers: Any) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"mcpServers": servers}, indent=2).encode()
    path.write_bytes(data)
    return data


def crew(servers: Any) -> bytes:
    return write_servers(home.crew_mcp_file(), servers)


def kiro_global(servers: Any) -> bytes:
    return write_servers(home.kiro_global_mcp_file(), servers)


def agent_spec(name: str, servers: Any) -> Path:
    path = home.kiro_agents_dir() / f"{name}.json"
    write_servers(path, servers)
    return path


def grant(url: str = NOTION) -> tuple[Path, Path]:
    """A grant pair as kiro-cli leaves it (the content is irrelevant: it is never read)."""
    pair = artifact_paths(url)
    for path in pair:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"{}")
    return pair


def present(pair: tuple[Path, Path]) -> bool:
    return all(os.path.lexists(p) for p in pair)


def absent(pair: tuple[Path, Path]) -> bool:
    return not any(os.path.lexists(p) for p in pair)


def disconnect(client: Any, slug: str = "notion") -> dict[str, Any]:
    response = client.post("/api/connections/disconnect", json={"slug": slug})
    assert response.status_code == 200, response.text
    return response.json()


def scope_names(path: Path) -> set[str]:
    return set(json.loads(path.read_text())["mcpServers"])


def rendered_names() -> set[str]:
    path = home.rendered_agent_file()
    return set(json.loads(path.read_text()).get("mcpServers", {})) if path.exists() else set()


def sel_events(event: str) -> list[dict[str, Any]]:
    path = home.audit_log_file()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [row for row in rows if row.get("event") == event]


# -- the ordinary case -----------------------------------------------------------------------


def test_disconnect_revokes_the_grant_and_removes_the_entry(gateway_client: Any) -> None:
    from kirocrew_mcp.render import rebuild_agent_config

    crew({"notion": {"url": NOTION}, "other": {"command": "/bin/cat"}})
    rebuild_agent_config()
    assert "notion" in rendered_names()
    pair = grant()
    assert disconnect(gateway_client) == {
        "ok": True, "slug": "notion", "grantRemoved": True, "grantSurviving": [], "entryRemoved": True,
        "grantSharedWith": [], "grantCensusIncomplete": False, "grantCensusUnreadable": [],
        "revokePageUrl": "https://app.notion.com",
    }
    assert absent(pair)
    assert scope_names(home.crew_mcp_file()) == {"other"}
    assert "notion" not in rendered_names()
    assert "other" in rendered_names()


def test_disconnect_rewrites_a_scope_file_in_its_own_formatting(gateway_client: Any) -> None:
    path = home.kiro_global_mcp_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": {"notion": {"url": NOTION}, "other": {"command": "/bin/cat"}}},
                               indent=4))
    grant()
    assert disconnect(gateway_client)["entryRemoved"] is True
    assert path.read_text() == json.dumps({"mcpServers": {"other": {"command": "/bin/cat"}}}, indent=4)


def test_disconnect_with_no_entry_still_revokes_the_registry_grant(gateway_client: Any) -> None:
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["entryRemoved"]) == (True, False)
    assert absent(pair)


def test_disconnect_with_nothing_there_claims_nothing(gateway_client: Any) -> None:
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["entryRemoved"], answer["grantSurviving"]) == (False, False, [])


def test_disconnect_is_recorded_in_the_sel_without_claiming_provider_revocation(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    grant()
    disconnect(gateway_client)
    (event,) = sel_events("connections.disconnect")
    assert (event["actor"], event["outcome"]) == ("owner", "ok")
    assert event["fields"] == {
        "slug": "notion", "grant_removed": True, "grant_surviving": [], "entry_removed": True,
        "grant_shared_with": [], "grant_census_incomplete": False, "provider_revoked": False,
    }


# -- who shares the grant --------------------------------------------------------------------


def test_a_query_string_variant_shares_the_grant_and_blocks_the_revoke(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    kiro_global({"notion-ws": {"url": NOTION + "?workspace=acme"}})
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["entryRemoved"], answer["grantSharedWith"]) == (
        False, True, ["notion-ws"])
    assert answer["grantCensusIncomplete"] is False
    assert present(pair)
    assert "notion" not in scope_names(home.crew_mcp_file())


def test_a_same_named_query_variant_is_a_sharer_not_a_purge_target(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    before = kiro_global({"notion": {"url": NOTION + "?workspace=acme"}})
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantSharedWith"]) == (False, ["notion"])
    assert present(pair)
    assert home.kiro_global_mcp_file().read_bytes() == before


def test_a_trailing_slash_variant_owns_a_different_grant_and_never_blocks(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    kiro_global({"mine": {"url": NOTION + "/"}})
    pair, slashed = grant(), grant(NOTION + "/")
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantSharedWith"]) == (True, [])
    assert absent(pair)
    assert present(slashed)


def test_an_owned_trailing_slash_entry_has_its_own_pair_revoked_too(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION + "/"}})
    pair, slashed = grant(), grant(NOTION + "/")
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["entryRemoved"]) == (True, True)
    assert absent(pair) and absent(slashed)


def test_a_sharer_of_the_registry_pair_says_nothing_about_an_owned_slash_pair(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION + "/"}})
    kiro_global({"notion-ws": {"url": NOTION + "?workspace=acme"}})
    pair, slashed = grant(), grant(NOTION + "/")
    answer = disconnect(gateway_client)
    assert answer["grantSharedWith"] == ["notion-ws"]
    assert present(pair)
    assert absent(slashed)


def test_a_disabled_entry_still_counts_as_a_grant_sharer(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    kiro_global({"notion-old": {"url": NOTION, "disabled": True}})
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantSharedWith"]) == (False, ["notion-old"])
    assert present(pair)


def test_a_custom_agent_config_sharing_the_endpoint_blocks_the_revoke(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    spec = agent_spec("research", {"notes": {"url": NOTION}})
    before = spec.read_bytes()
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantSharedWith"], answer["entryRemoved"]) == (False, ["notes"], True)
    assert present(pair)
    assert spec.read_bytes() == before


def test_a_same_named_entry_in_a_hand_written_agent_spec_is_never_purged_and_holds_the_grant(
    gateway_client: Any,
) -> None:
    crew({"notion": {"url": NOTION}})
    spec = agent_spec("research", {"notion": {"url": NOTION}})
    before = spec.read_bytes()
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantSharedWith"]) == (False, ["notion"])
    assert present(pair)
    assert spec.read_bytes() == before


def test_the_rendered_mirror_of_a_purged_entry_is_not_a_sharer(gateway_client: Any) -> None:
    from kirocrew_mcp.render import rebuild_agent_config

    kiro_global({"notion": {"url": NOTION, "disabled": True}})
    rebuild_agent_config()
    assert "notion" in rendered_names()
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["entryRemoved"], answer["grantSharedWith"]) == (True, True, [])
    assert absent(pair)
    assert "notion" not in rendered_names()


def test_with_nothing_owned_a_rendered_entry_is_a_real_holder(gateway_client: Any) -> None:
    agent = home.rendered_agent_file()
    write_servers(agent, {"notion": {"url": NOTION}})
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["entryRemoved"], answer["grantSharedWith"]) == (False, False, ["notion"])
    assert present(pair)


def test_disconnect_leaves_a_same_named_server_on_another_endpoint_alone(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    before = kiro_global({"notion": {"url": "https://notion.example.com/mcp"}})
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["entryRemoved"], answer["grantSharedWith"]) == (True, True, [])
    assert absent(pair)
    assert home.kiro_global_mcp_file().read_bytes() == before


@pytest.mark.parametrize("url", ["https://a..b/mcp", 42, None, "not a url", "https://mcp.notion.com:99999/mcp"])
def test_a_malformed_config_url_neither_crashes_nor_blocks_the_revoke(gateway_client: Any, url: Any) -> None:
    crew({"notion": {"url": NOTION}})
    kiro_global({"junk": {"url": url}})
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantCensusIncomplete"]) == (True, False)
    assert absent(pair)


# -- fail closed -------------------------------------------------------------------------------


UNREADABLE_SHAPES = {
    "malformed json": b"{not json",
    "a list document": b"[]",
    "a list of servers": b'{"mcpServers": []}',
}


@pytest.mark.parametrize("shape", sorted(UNREADABLE_SHAPES))
def test_an_unreadable_census_source_keeps_the_grant(gateway_client: Any, shape: str) -> None:
    crew({"notion": {"url": NOTION}})
    spec = home.kiro_agents_dir() / "broken.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_bytes(UNREADABLE_SHAPES[shape])
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantCensusIncomplete"], answer["grantSharedWith"]) == (
        False, True, [])
    assert answer["grantCensusUnreadable"] == [str(spec)]
    # The purge needs only positive evidence: our own entry still goes.
    assert answer["entryRemoved"] is True
    assert present(pair)
    assert spec.read_bytes() == UNREADABLE_SHAPES[shape]


def test_a_malformed_scope_is_neither_purged_nor_rewritten_and_keeps_the_grant(gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    path = home.kiro_global_mcp_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"mcpServers": {"notion": ')
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantCensusIncomplete"], answer["entryRemoved"]) == (False, True, True)
    assert present(pair)
    assert path.read_bytes() == b'{"mcpServers": {"notion": '


def test_an_agents_dir_that_cannot_be_listed_keeps_the_grant(gateway_client: Any) -> None:
    agents = home.kiro_agents_dir()
    agents.parent.mkdir(parents=True, exist_ok=True)
    agents.write_text("a file where the agents directory should be")
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantCensusIncomplete"]) == (False, True)
    assert present(pair)


# -- project agents of every workspace kirocrew knows ----------------------------------------------


def project_agent(workspace: Path, name: str, servers: Any) -> Path:
    path = workspace / ".kiro" / "agents" / f"{name}.json"
    write_servers(path, servers)
    return path


@pytest.fixture
def conversation_workspace(connections_plugins: Any, tmp_path: Path) -> Path:
    """A workspace a real conversation (in the real conversations database) works in."""
    import kirocrew_conversations.plugin
    from kirocrew_conversations.state_paths import database_file, ensure_state_dir
    from kirocrew_conversations.store import Store, Workspace

    connections_plugins.register(kirocrew_conversations.plugin, name="conversations")
    workspace = tmp_path / "checkout"
    workspace.mkdir()
    ensure_state_dir()
    store = Store.open(database_file())
    try:
        store.create_conversation(name="fix-it", workspace=Workspace("shared", str(workspace), "ws_1"))
    finally:
        store.close()
    return workspace


def test_a_project_agent_in_a_conversation_workspace_sharing_the_grant_keeps_it(
        conversation_workspace: Path, gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    pair = grant()
    project_agent(conversation_workspace, "docs-bot", {"notes": {"url": NOTION}})
    answer = disconnect(gateway_client)
    assert answer["entryRemoved"] is True and answer["grantRemoved"] is False
    assert answer["grantSharedWith"] == ["notes"] and answer["grantSurviving"] == []
    assert present(pair)


def test_a_conversation_workspace_with_no_sharer_lets_the_grant_go(
        conversation_workspace: Path, gateway_client: Any) -> None:
    crew({"notion": {"url": NOTION}})
    pair = grant()
    project_agent(conversation_workspace, "other", {"linear": {"url": "https://mcp.linear.app/mcp"}})
    answer = disconnect(gateway_client)
    assert answer["grantRemoved"] is True and answer["grantCensusIncomplete"] is False
    assert absent(pair)


def test_a_configured_project_root_is_censused_too(gateway_client: Any, tmp_path: Path) -> None:
    from kirocrew_core import config

    root = tmp_path / "project"
    project_agent(root, "helper", {"notion-copy": {"url": NOTION}})
    config.set_value("connections.project_roots", json.dumps([str(root), str(tmp_path / "gone")]))
    pair = grant()
    answer = disconnect(gateway_client)
    assert answer["grantSharedWith"] == ["notion-copy"] and present(pair)


def test_an_unreadable_project_agents_dir_keeps_the_grant(gateway_client: Any, tmp_path: Path) -> None:
    from kirocrew_core import config

    root = tmp_path / "project"
    agents = root / ".kiro" / "agents"
    agents.parent.mkdir(parents=True)
    agents.write_text("not a directory")  # os.listdir fails with ENOTDIR: the entries are unknowable
    config.set_value("connections.project_roots", json.dumps([str(root)]))
    pair = grant()
    answer = disconnect(gateway_client)
    assert answer["grantCensusIncomplete"] is True and answer["grantRemoved"] is False
    assert str(agents) in answer["grantCensusUnreadable"]
    assert present(pair)


def test_a_workspace_plugin_that_fails_keeps_the_grant(connections_plugins: Any, gateway_client: Any) -> None:
    from kirocrew_testing.plugins import register_plugin

    def broken() -> list[Path]:
        raise OSError("database is locked")

    register_plugin(connections_plugins, "broken-workspaces", known_workspaces=broken)
    register_plugin(connections_plugins, "relative-workspaces", known_workspaces=lambda: [Path("relative")])
    pair = grant()
    answer = disconnect(gateway_client)
    assert answer["grantCensusIncomplete"] is True and present(pair)
    assert answer["grantCensusUnreadable"] == ["known_workspaces() of plugin broken-workspaces",
                                               "known_workspaces() of plugin relative-workspaces"]


def test_the_conversations_database_names_every_workspace_and_worktree(tmp_path: Path) -> None:
    from kirocrew_conversations.store import Store, Workspace
    from kirocrew_conversations.workspaces import known_workspaces

    database = tmp_path / "state" / "orchestrator-v1.sqlite"
    database.parent.mkdir()
    assert known_workspaces(database) == []  # conversations never ran here: no workspaces, no error
    store = Store.open(database)
    try:
        store.create_conversation(name="a", workspace=Workspace("shared", "/w/one", "fp1"))
        store.create_conversation(name="b", workspace=Workspace("shared", "/w/one", "fp1"))
        store.create_conversation(name="c", workspace=Workspace("worktree", "/w/two", "fp2",
                                                                 worktree_path="/w/two-wt", worktree_branch="c"))
    finally:
        store.close()
    before = database.read_bytes()
    assert known_workspaces(database) == [Path("/w/one"), Path("/w/two"), Path("/w/two-wt")]
    assert database.read_bytes() == before  # a read-only reader
    database.write_bytes(b"not a database" * 100)
    with pytest.raises(Exception) as caught:
        known_workspaces(database)
    assert "database" in str(caught.value)


def test_a_spec_that_is_a_directory_keeps_the_grant(gateway_client: Any) -> None:
    (home.kiro_agents_dir() / "odd.json").mkdir(parents=True)
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantCensusIncomplete"]) == (False, True)
    assert present(pair)


@pytest.mark.parametrize("url", [
    "https://%6dcp.notion.com/mcp", "https://mcp.notion.com/a/../mcp", "https://mcp.notion.com/a\\..\\mcp",
    "https://mcp.nötion.com/mcp", "https://mcp.notion.com/m%63p",
])
def test_a_sibling_url_outside_the_provable_set_keeps_the_grant(gateway_client: Any, url: str) -> None:
    crew({"notion": {"url": NOTION}})
    kiro_global({"lookalike": {"url": url}})
    pair = grant()
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantCensusIncomplete"]) == (False, True)
    assert present(pair)


# -- the credential boundary and the lock --------------------------------------------------------


_hook: dict[str, Any] = {}


def _observe(event: str, args: tuple[Any, ...]) -> None:
    renames = _hook.get("renames")
    if event == "os.rename" and renames and len(args) > 1 and isinstance(args[1], (str, os.PathLike)):
        target = os.fspath(args[1])
        if target in renames:
            _hook.setdefault("renamed", []).append((Path(target).name, locks.held_locks()))
        return
    watched = _hook.get("dir")
    if watched is None or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    raw = os.fsdecode(args[0]) if not isinstance(args[0], os.PathLike) else os.fspath(args[0])
    if not isinstance(raw, str) or not Path(raw).is_relative_to(watched):
        return
    if event == "open":
        raise PermissionError(f"a grant artifact was opened: {raw}")
    if event == "os.remove":
        _hook.setdefault("removed", []).append((Path(raw).name, locks.held_locks()))
        if Path(raw).name.endswith(_hook.get("refuse", "\x00")):
            raise PermissionError(f"refusing to unlink {raw}")


sys.addaudithook(_observe)


@pytest.fixture
def watched_cache() -> Iterator[dict[str, Any]]:
    """The audit hook's state; ``arm(watched_cache)`` starts watching the OAuth cache dir."""
    _hook.clear()
    yield _hook
    _hook.clear()


def arm(hook: dict[str, Any]) -> None:
    hook["dir"] = str(home.oauth_cache_dir())


def test_revoke_never_opens_an_artifact(gateway_client: Any, watched_cache: dict[str, Any]) -> None:
    crew({"notion": {"url": NOTION}})
    pair = grant()
    arm(watched_cache)
    answer = disconnect(gateway_client)
    assert answer["grantRemoved"] is True
    assert absent(pair)
    assert len(watched_cache["removed"]) == 2


def test_the_revoke_runs_inside_the_lock_that_judged_ownership(
    gateway_client: Any, watched_cache: dict[str, Any]
) -> None:
    crew({"notion": {"url": NOTION}})
    grant()
    arm(watched_cache)
    disconnect(gateway_client)
    assert watched_cache["removed"]
    for _, held in watched_cache["removed"]:
        assert {"crew-mcp", "agent-file", "connections"} <= set(held)


def test_the_purge_and_the_rebuild_run_inside_the_same_lock_hold(
    gateway_client: Any, watched_cache: dict[str, Any]
) -> None:
    from kirocrew_mcp.render import rebuild_agent_config

    crew({"notion": {"url": NOTION}, "other": {"command": "/bin/cat"}})
    rebuild_agent_config()
    grant()
    watched_cache["renames"] = {str(home.crew_mcp_file()), str(home.rendered_agent_file())}
    answer = disconnect(gateway_client)
    assert (answer["entryRemoved"], answer["grantRemoved"]) == (True, True)
    written = {name for name, _ in watched_cache["renamed"]}
    assert written == {home.crew_mcp_file().name, home.rendered_agent_file().name}
    for _, held in watched_cache["renamed"]:
        assert {"crew-mcp", "agent-file", "connections"} <= set(held)


def test_a_half_removed_grant_is_reported_not_claimed_done(
    gateway_client: Any, watched_cache: dict[str, Any]
) -> None:
    watched_cache["refuse"] = ".token.json"
    crew({"notion": {"url": NOTION}})
    token, registration = grant()
    arm(watched_cache)
    answer = disconnect(gateway_client)
    assert (answer["grantRemoved"], answer["grantSurviving"]) == (True, ["token"])
    assert token.exists() and not registration.exists()
    (event,) = sel_events("connections.disconnect")
    assert event["outcome"] == "partial"


def test_revoke_leaves_the_aws_sso_single_file_form_alone(gateway_client: Any) -> None:
    pair = grant()
    sso = home.oauth_cache_dir() / f"{grant_key(NOTION)}.json"
    sso.write_bytes(b"{}")
    disconnect(gateway_client)
    assert absent(pair)
    assert sso.exists()


def test_importing_the_disconnect_handlers_does_not_import_the_mint_engine(imports_mint_engine: Any) -> None:
    assert imports_mint_engine("kirocrew_connections.disconnect_api", "kirocrew_connections.disconnect") is False


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"slug": "no-such-provider"}'])
def test_a_bad_disconnect_request_changes_nothing(gateway_client: Any, body: bytes) -> None:
    before = crew({"notion": {"url": NOTION}})
    pair = grant()
    response = gateway_client.post("/api/connections/disconnect", content=body,
                                   headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert present(pair)
    assert home.crew_mcp_file().read_bytes() == before


# -- properties of the identities ------------------------------------------------------------------

LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
HOST = st.lists(LABEL, min_size=1, max_size=4).map(".".join)
SEGMENT = st.from_regex(r"[A-Za-z0-9_~!$&'()*+,;=:@-][A-Za-z0-9._~!$&'()*+,;=:@-]{0,8}", fullmatch=True).filter(
    lambda s: s not in (".", ".."))
PATH = st.lists(SEGMENT, max_size=4).map(lambda segs: "".join(f"/{s}" for s in segs))
QUERY = st.from_regex(r"[A-Za-z0-9=&_-]{1,12}", fullmatch=True)
PORT = st.one_of(st.none(), st.integers(1, 65535).filter(lambda p: p != 80))


def _url(scheme: str, host: str, port: int | None, path: str, query: str | None = None) -> str:
    netloc = host if port is None else f"{host}:{port}"
    return f"{scheme}://{netloc}{path}" + (f"?{query}" if query else "")


@PROPERTIES
@given(scheme=st.sampled_from(["https", "http"]), host=HOST, port=PORT, path=PATH)
def test_inside_the_provable_set_the_key_is_the_runtime_formula(
    scheme: str, host: str, port: int | None, path: str
) -> None:
    url = _url(scheme, host, port, path)
    origin = f"{scheme}://{host}" + ("" if port in (None, 443) else f":{port}")
    expected = hashlib.sha256((origin + (path or "/")).encode()).hexdigest()
    assert is_provable(url) is True
    assert artifact_key(url) == grant_key(url) == expected


@PROPERTIES
@given(host=HOST, path=PATH, query=QUERY, fragment=QUERY)
def test_the_key_ignores_query_fragment_host_case_and_port_443_but_not_a_trailing_slash(
    host: str, path: str, query: str, fragment: str
) -> None:
    url = _url("https", host, None, path)
    key = grant_key(url)
    assert grant_key(f"{url}?{query}#{fragment}") == key
    assert grant_key(_url("https", host.upper(), 443, path)) == key
    if path:
        assert grant_key(url + "/") != key


@PROPERTIES
@given(host=HOST, path=PATH, bad=st.sampled_from(["%2e", "/..", "/.", "\\..", " ", "%41", "\u00e9"]))
def test_a_path_outside_the_provable_set_is_unprovable(host: str, path: str, bad: str) -> None:
    assert artifact_key(_url("https", host, None, path + bad + "/mcp")) == UNPROVABLE


@PROPERTIES
@given(host=HOST, path=PATH, bad=st.sampled_from(["%6d", "\u00fc", "xn--\u00e9"]))
def test_a_host_outside_the_provable_set_is_unprovable(host: str, path: str, bad: str) -> None:
    assert artifact_key(_url("https", bad + host, None, path)) == UNPROVABLE


@PROPERTIES
@given(host=HOST, path=PATH)
def test_http_with_an_explicit_port_80_is_unprovable(host: str, path: str) -> None:
    assert artifact_key(_url("http", host, 80, path)) == UNPROVABLE


@PROPERTIES
@given(scheme=st.sampled_from(["https", "http"]), host=HOST, port=PORT, path=PATH,
       query=st.one_of(st.none(), QUERY), slashes=st.integers(0, 3))
def test_the_endpoint_strips_trailing_slashes_keeps_the_query_and_is_idempotent(
    scheme: str, host: str, port: int | None, path: str, query: str | None, slashes: int
) -> None:
    url = _url(scheme, host, port, path + "/" * slashes, query)
    endpoint = normalized_endpoint(url)
    assert endpoint is not None
    assert normalized_endpoint(endpoint) == endpoint
    assert endpoint == normalized_endpoint(_url(scheme.upper(), host.upper(), port, path, query) + "#frag")
    parts = urlsplit(endpoint)
    assert parts.query == (query or "")
    assert not parts.path.endswith("/")
    default = 443 if scheme == "https" else 80
    assert normalized_endpoint(_url(scheme, host, default, path, query)) == normalized_endpoint(
        _url(scheme, host, None, path, query))


@PROPERTIES
@given(host=HOST, path=PATH, query=QUERY)
def test_the_two_identities_disagree_in_both_directions(host: str, path: str, query: str) -> None:
    url = _url("https", host, None, path or "/mcp")
    variant, slashed = f"{url}?{query}", url + "/"
    assert grant_key(variant) == grant_key(url) and normalized_endpoint(variant) != normalized_endpoint(url)
    assert grant_key(slashed) != grant_key(url) and normalized_endpoint(slashed) == normalized_endpoint(url)


@PROPERTIES
@given(value=st.one_of(st.none(), st.integers(), st.just(""), st.just("   "), st.from_regex(r"[a-z]{1,8}",
                                                                                        fullmatch=True)))
def test_something_that_is_not_an_absolute_url_has_no_endpoint_and_no_key(value: Any) -> None:
    assert normalized_endpoint(value) is None
    assert artifact_key(value) is None
