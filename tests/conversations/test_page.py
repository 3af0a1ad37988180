"""The dashboard's conversations routes and pages, without a browser.

Most tests share one real ``kirocrew serve`` (the host, with the fake kiro-cli and the module's
state directory) and talk HTTP to it with the owner's Bearer token, so every route reaches
the same orchestrator the MCP tools use. The store is checked on disk (read-only SQLite). Each
test works in a workspace of its own and asserts on what it changed: the conversations it
started, and the security event log's records since it began.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kirocrew_testing.browser import ServedGateway
from kirocrew_testing.homes import IsolatedHomes, isolate_homes
from kirocrew_testing.requirements import executable

from kirocrew_core.gateway.markdown import render_markdown
from kirocrew_conversations.state_paths import DATABASE_NAME


@pytest.fixture(scope="module")
def module_served_homes(module_hosted_homes: tuple[ServedGateway, IsolatedHomes]) -> tuple[ServedGateway,
                                                                                          IsolatedHomes]:
    """The module's one ``kirocrew serve``: its host runs conversations on the fake kiro-cli."""
    return module_hosted_homes


@pytest.fixture
def owner_client(module_owner: httpx.Client, module_homes: IsolatedHomes) -> Iterator[httpx.Client]:
    """The owner's client, with this process in the served homes (the audit log and stores the host writes)."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        yield module_owner


@pytest.fixture
def gateway_env(module_served: ServedGateway) -> dict[str, str]:
    """The served host's environment: a ``kirocrew`` command run with it asks that host."""
    return module_served.env


@pytest.fixture
def conversations_state_dir(module_root: Path) -> Path:
    """The served host's state directory (``module_hosted_homes``)."""
    return module_root / "conversations-state"


def audit_since(mark: int, event: str) -> list[dict[str, Any]]:
    """The security event log's ``event`` records written after the record numbered ``mark``."""
    from kirocrew_core import audit

    return [r for r in audit.tail(500) if r.get("seq", 0) > mark and r.get("event") == event]


def audit_mark() -> int:
    """The newest record's number in the security event log (0 when empty): :func:`audit_since` reads past it."""
    from kirocrew_core import audit

    return max((r.get("seq", 0) for r in audit.tail(1)), default=0)


def conversation_ids(owner: httpx.Client, archive: str = "active") -> set[str]:
    return {c["conversationId"] for c in owner.get(f"/api/conversations?archive={archive}").json()["conversations"]}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def start(owner: httpx.Client, workspace: Path, name: str, message: str, **settings: Any) -> dict[str, Any]:
    answer = owner.post("/api/conversations", json={"name": name, "workspace": str(workspace), "message": message,
                                                    **settings})
    assert answer.status_code == 200, answer.text
    return answer.json()


def detail_when(owner: httpx.Client, conversation_id: str, ready: Any, timeout: float = 60) -> dict[str, Any]:
    """``GET /api/conversations/{id}`` once ``ready(detail)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        detail = owner.get(f"/api/conversations/{conversation_id}").json()
        if ready(detail):
            return detail
        assert detail.get("live", True) or ready is settled, f"settled without being ready: {detail}"
        assert time.monotonic() < deadline, f"never ready: {detail}"
        time.sleep(0.2)


def settled(detail: dict[str, Any]) -> bool:
    return not detail["live"]


def error_of(answer: httpx.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["code"]


# -- without a host -------------------------------------------------------------------------------


@pytest.fixture
def plugin_manager(plugin_manager: Any) -> Any:
    import kirocrew_conversations.plugin

    plugin_manager.register(kirocrew_conversations.plugin, name="conversations")
    return plugin_manager


def test_without_a_host_the_routes_answer_host_not_running_and_the_page_says_so(gateway_client: Any) -> None:
    overview = gateway_client.get("/")
    assert '<a href="/conversations">Conversations</a>' in overview.text
    assert '<a href="/conversations/{conversation_id}">' not in overview.text  # a page per id is not listed
    answer = gateway_client.get("/api/conversations")
    assert (answer.status_code, answer.json()["code"]) == (500, "host_not_running")
    page = gateway_client.get("/conversations")
    assert page.status_code == 503
    assert 'role="alert"' in page.text and "<code>host_not_running</code>" in page.text
    assert "<style" not in page.text and "<script>" not in page.text
    assert gateway_client.get("/conversations/conv_x").status_code == 503


# -- safe Markdown --------------------------------------------------------------------------------


def test_hostile_markdown_renders_as_text_and_web_links_only() -> None:
    html = render_markdown(
        "<script>alert(1)</script>\n\n<img src=x onerror=alert(1)>\n\n"
        "[a](javascript:alert(1)) [b](JaVaScRiPt:alert(2)) [c](data:text/html,x) [d](vbscript:x) [e](/relative)\n\n"
        "[web](https://example.com/?a=1&b=2) [mail](mailto:me@example.com) ![pic](https://tracker.example/p.png)\n\n"
        "**bold** `<b>code</b>`")
    assert "<script" not in html and "<img" not in html and "onerror=alert(1)>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'href="javascript' not in html.lower() and 'href="data:' not in html and 'href="vbscript' not in html
    assert 'href="/relative"' not in html
    assert '<a href="https://example.com/?a=1&amp;b=2" rel="noopener noreferrer nofollow">web</a>' in html
    assert '<a href="mailto:me@example.com" rel="noopener noreferrer nofollow">mail</a>' in html
    assert '<a href="https://tracker.example/p.png" rel="noopener noreferrer nofollow">[image: pic]</a>' in html
    assert "<strong>bold</strong>" in html and "<code>&lt;b&gt;code&lt;/b&gt;</code>" in html
    assert render_markdown("# a\n\n###### b", heading_offset=3) == "<h4>a</h4>\n<h6>b</h6>\n"


# -- through the host -------------------------------------------------------------------------------


def test_a_conversation_started_over_the_routes_runs_and_its_page_renders_the_reply_safely(
        owner_client: httpx.Client, workspace: Path, conversations_rows: Any) -> None:
    reply = "# Done\n\n<script>alert(1)</script> **safe** [x](javascript:alert(1)) ![i](https://e.example/i.png)"
    before = conversation_ids(owner_client)
    started = start(owner_client, workspace, "first", "!say " + reply.replace("\n", "\\n"), effort="low")
    assert started["createdConversation"] is True and started["settings"]["effort"] == "low"
    detail = detail_when(owner_client, started["conversationId"], settled)
    (run,) = detail["runs"]
    assert run["status"] == "completed" and run["reply"]["text"] == reply
    assert [e["kind"] for e in run["events"]][:1] == ["phase"] and detail["attention"] is None

    page = owner_client.get(f"/conversations/{started['conversationId']}")
    assert page.status_code == 200
    html = page.text
    assert "<h1>first</h1>" in html and "<h4>Done</h4>" in html and "<strong>safe</strong>" in html
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'href="javascript' not in html and "<img" not in html
    assert "erased once Kiro received it" in html
    assert "script-src 'self'" in page.headers["content-security-policy"]

    listing = owner_client.get("/api/conversations").json()
    assert [(c["name"], c["state"], c["latestRun"]["status"]) for c in listing["conversations"]
            if c["conversationId"] not in before] == [("first", "idle", "completed")]
    listed = owner_client.get("/conversations").text
    assert '<a href="/conversations/' + started["conversationId"] + '">first</a>' in listed
    assert conversations_rows("SELECT status FROM runs WHERE id = ?", started["runId"]) == [("completed",)]


def test_a_conversations_page_shows_the_agent_each_run_uses_and_warns_about_another_agent(
        owner_client: httpx.Client, workspace: Path) -> None:
    mine = start(owner_client, workspace, "mine", "!say on kirocrew")
    other = start(owner_client, workspace, "other", "!say elsewhere", mode="kiro_default")
    assert mine["warnings"] == [] and [w["code"] for w in other["warnings"]] == ["kirocrew_servers_not_mounted"]
    for started in (mine, other):
        detail_when(owner_client, started["conversationId"], settled)

    html = owner_client.get(f"/conversations/{mine['conversationId']}").text
    assert "<dt>Agent</dt><dd>kirocrew <span class=\"hint\">(kirocrew's own, the default)</span></dd>" in html
    assert "agent kirocrew, effort" in html and 'class="warn"' not in html
    html = owner_client.get(f"/conversations/{other['conversationId']}").text
    assert "<dt>Agent</dt><dd>kiro_default</dd>" in html and "agent kiro_default, effort" in html
    assert '<p class="warn">This run runs as the agent &#39;kiro_default&#39;' in html
    assert "<code>kirocrew_servers_not_mounted</code>" in html


def test_a_permission_is_answered_over_the_routes_and_the_run_goes_on(
        owner_client: httpx.Client, workspace: Path, conversations_rows: Any) -> None:
    executable("bwrap", apt="bubblewrap")  # read_only runs in its sandbox
    mark = audit_mark()
    started = start(owner_client, workspace, "asks", '!tool fs_write {"path": "notes.txt"}\n!say after the tool',
                    authority="read_only")
    cid, rid = started["conversationId"], started["runId"]
    waiting = detail_when(owner_client, cid, lambda d: d["attention"] is not None)
    attention = waiting["attention"]
    # read_only's default asked (no rule of the owner's matched), so an "allow always" rule could change the answer.
    assert attention["toolName"] == "fs_write"
    assert set(attention["options"]) == {"allow_once", "reject_once", "allow_always"}
    assert attention["rule"]["id"] == "default:read_only" and attention["subject"] == "write notes.txt"
    html = owner_client.get(f"/conversations/{cid}").text
    assert 'role="alert"' in html and "Kiro asks to use fs_write" in html
    assert ">Allow once</button>" in html and ">Reject once</button>" in html and ">Allow always</button>" in html
    assert "default:read_only" in html and 'id="always-scope"' in html

    path = f"/api/conversations/{cid}/runs/{rid}/permissions/{attention['permissionRequestId']}"
    assert error_of(owner_client.post(path, json={"decision": "allow_forever"})) == (400, "invalid_arguments")
    assert error_of(owner_client.post(path.replace(attention["permissionRequestId"], "perm_nope"),
                               json={"decision": "allow_once"}))[0] == 400
    decided = owner_client.post(path, json={"decision": "allow_once"})
    assert decided.status_code == 200 and decided.json()["decision"] == "allow_once"
    done = detail_when(owner_client, cid, settled)
    assert done["runs"][0]["status"] == "completed" and done["runs"][0]["reply"]["text"] == "after the tool"
    assert conversations_rows("SELECT state, decided_option FROM permission_requests WHERE run_id = ?", rid) == [
        ("decided", "allow_once")]
    assert error_of(owner_client.post(path, json={"decision": "allow_once"})) == (409, "permission_not_pending")

    records = audit_since(mark, "conversations.dashboard")
    assert [(r["actor"], r["outcome"], r["fields"]["tool"], r["fields"]["code"]) for r in records] == [
        ("owner", "ok", "kiro_spawn", "ok"),
        ("owner", "refused", "kiro_permission_decide", "invalid_arguments"),
        ("owner", "refused", "kiro_permission_decide", "permission_not_found"),
        ("owner", "ok", "kiro_permission_decide", "ok"),
        ("owner", "refused", "kiro_permission_decide", "permission_not_pending"),
    ]


def test_follow_up_cancel_archive_and_delete_with_the_exact_name(
        owner_client: httpx.Client, workspace: Path, conversations_rows: Any) -> None:
    active_before, archived_before = conversation_ids(owner_client), conversation_ids(owner_client, "archived")
    started = start(owner_client, workspace, "chain", "!say one")
    cid = started["conversationId"]
    detail_when(owner_client, cid, settled)
    base = f"/api/conversations/{cid}"
    sent = owner_client.post(f"{base}/messages", json={"message": "!hang", "delivery": "queue"})
    assert sent.status_code == 200 and sent.json()["delivery"] == "queue"
    hanging = sent.json()["runId"]
    detail_when(owner_client, cid, lambda d: d["runs"][-1]["status"] == "running")
    assert error_of(owner_client.post(f"{base}/archive")) == (409, "conversation_busy")
    assert error_of(owner_client.post(f"{base}/runs/{hanging}/cancel", json={"why": 1})) == (400, "invalid_arguments")
    cancelled = owner_client.post(f"{base}/runs/{hanging}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    detail = detail_when(owner_client, cid, settled)
    assert [r["status"] for r in detail["runs"]] == ["completed", "cancelled"]

    assert error_of(owner_client.request("DELETE", base, json={"confirmName": "chain"})) == (
        409, "conversation_not_archived")
    configured = owner_client.patch(f"{base}/settings", json={"effort": "high", "authority": "unrestricted"})
    assert configured.status_code == 200 and configured.json()["defaults"]["effort"] == "high"
    assert error_of(owner_client.patch(f"{base}/settings", json={"effort": "huge"})) == (400, "invalid_arguments")
    assert conversations_rows("SELECT effort FROM conversations WHERE id = ?", cid) == [("high",)]
    assert error_of(owner_client.get(f"{base}/worktree")) == (400, "not_a_worktree_conversation")
    assert error_of(owner_client.post(f"{base}/worktree/cleanup")) == (400, "not_a_worktree_conversation")
    assert owner_client.post(f"{base}/archive").json()["state"] == "archived"
    assert error_of(owner_client.post(f"{base}/messages", json={"message": "x", "delivery": "queue"})) == (
        409, "conversation_archived")
    archived = owner_client.get("/api/conversations?archive=archived").json()["conversations"]
    assert [c["name"] for c in archived if c["conversationId"] not in archived_before] == ["chain"]
    assert conversation_ids(owner_client) == active_before
    archived_page = owner_client.get(f"/conversations/{cid}").text
    assert "Delete permanently" in archived_page and 'id="send-form"' not in archived_page

    assert error_of(owner_client.request("DELETE", base, json={"confirmName": "chain2"})) == (
        400, "confirmation_mismatch")
    assert conversations_rows("SELECT name FROM conversations WHERE id = ?", cid) == [("chain",)]
    deleted = owner_client.request("DELETE", base, json={"confirmName": "chain"})
    assert deleted.json() == {"conversationId": cid, "deleted": True}
    assert conversations_rows("SELECT name FROM conversations WHERE id = ?", cid) == []
    assert error_of(owner_client.get(base)) == (400, "conversation_not_found")
    assert owner_client.get(f"/conversations/{cid}").status_code == 404


def test_an_interrupting_follow_up_replaces_the_running_run(owner_client: httpx.Client, workspace: Path) -> None:
    started = start(owner_client, workspace, "busy", "!hang")
    cid = started["conversationId"]
    detail_when(owner_client, cid, lambda d: d["runs"][0]["status"] == "running")
    messages = f"/api/conversations/{cid}/messages"
    queued = owner_client.post(messages, json={"message": "!say queued", "delivery": "queue"})
    assert queued.json()["queuePosition"] == 1
    sent = owner_client.post(messages, json={"message": "!say instead", "delivery": "interrupt"})
    assert sent.status_code == 200, sent.text
    assert sent.json()["interruptedRunId"] == started["runId"] and sent.json()["supersededRunCount"] == 1
    done = detail_when(owner_client, cid, settled)
    assert [(r["status"], (r["error"] or {}).get("code")) for r in done["runs"]] == [
        ("cancelled", "run_replaced"), ("cancelled", "run_superseded"), ("completed", None)]
    assert done["runs"][-1]["reply"]["text"] == "instead"


def test_bad_input_is_refused_with_stable_codes_and_changes_nothing(
        owner_client: httpx.Client, workspace: Path, conversations_rows: Any, conversations_state_dir: Path) -> None:
    def stored() -> list[Any]:
        if not (conversations_state_dir / DATABASE_NAME).exists():
            return []
        return conversations_rows("SELECT * FROM conversations ORDER BY id") + conversations_rows(
            "SELECT * FROM runs ORDER BY id")

    before = stored()
    refusals = [
        (owner_client.post("/api/conversations", content=b"{nope", headers={"Content-Type": "application/json"}),
         (400, "bad_json")),
        (owner_client.post("/api/conversations", json=[1]), (400, "bad_json")),
        (owner_client.post("/api/conversations", json={"name": "<script>x</script>", "workspace": str(workspace),
                                                "message": "hi"}), (400, "invalid_arguments")),
        (owner_client.post("/api/conversations", json={"name": "ok", "workspace": str(workspace / "missing"),
                                                "message": "hi"}), (400, "workspace_not_found")),
        (owner_client.post("/api/conversations", json={"name": "ok", "workspace": str(workspace), "message": "hi",
                                                "conversation": "conv_other"}), (400, "invalid_arguments")),
        (owner_client.post("/api/conversations", json={"name": "ok", "workspace": str(workspace), "message": "hi",
                                                "authority": "root"}), (400, "invalid_arguments")),
        (owner_client.get("/api/conversations?archive=<x>"), (400, "invalid_arguments")),
        (owner_client.get("/api/conversations/conv_doesnotexist"), (400, "conversation_not_found")),
        (owner_client.get("/api/conversations/<script>"), (400, "invalid_arguments")),
        (owner_client.post("/api/conversations/conv_doesnotexist/messages", json={"message": "x", "delivery": "queue"}),
         (400, "conversation_not_found")),
        (owner_client.patch("/api/conversations/conv_doesnotexist/settings", json={"effort": "low"}),
         (400, "conversation_not_found")),
        (owner_client.post("/api/conversations/conv_doesnotexist/archive"), (400, "conversation_not_found")),
        (owner_client.request("DELETE", "/api/conversations/conv_doesnotexist", json={"confirmName": "x"}),
         (400, "conversation_not_found")),
        (owner_client.get("/api/conversations/conv_doesnotexist/worktree"), (400, "conversation_not_found")),
    ]
    for answer, expected in refusals:
        assert error_of(answer) == expected, answer.request.url
    assert stored() == before
    page = owner_client.get("/conversations/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    assert page.status_code == 404 and "<script>alert(1)" not in page.text


def test_hostile_strings_from_a_model_and_the_store_are_escaped_on_both_pages(
        owner_client: httpx.Client, workspace: Path) -> None:
    executable("bwrap", apt="bubblewrap")  # read_only runs in its sandbox
    started = start(owner_client, workspace, "esc", "!tool <img/src=x/onerror=alert(1)>\n!say ok",
                    authority="read_only")
    cid = started["conversationId"]
    detail_when(owner_client, cid, lambda d: d["attention"] is not None)
    html = owner_client.get(f"/conversations/{cid}").text
    assert "<img/src" not in html and "&lt;img/src=x/onerror=alert(1)&gt;" in html
    rid = started["runId"]
    assert owner_client.post(f"/api/conversations/{cid}/runs/{rid}/cancel").status_code == 200
    detail_when(owner_client, cid, settled)
    listing = owner_client.get("/conversations").text
    assert "<img" not in listing


def _git(cwd: Path, *args: str) -> str:
    """The test's own git (no user or system config), its output."""
    import os
    import subprocess

    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run([executable("git", apt="git"), *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


def test_a_worktree_keeps_the_commit_its_base_ref_named_when_the_branch_moves_later(
        owner_client: httpx.Client, tmp_path: Path, conversations_rows: Any) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("one\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "one")
    based_on = _git(repo, "rev-parse", "main")
    started = start(owner_client, repo, "based", "!say hi", workspaceMode="worktree", baseRef="main")
    cid = started["conversationId"]
    assert started["settings"]["workspace"] | {"fingerprint": ""} == {
        "mode": "worktree", "fingerprint": "", "label": "repo", "branch": started["settings"]["workspace"]["branch"],
        "baseRef": "main", "baseCommit": based_on}
    detail_when(owner_client, cid, settled)

    (repo / "README").write_text("two\n")  # main moves on after the worktree was made
    _git(repo, "commit", "-q", "-am", "two")
    assert _git(repo, "rev-parse", "main") != based_on

    report = owner_client.get(f"/api/conversations/{cid}/worktree").json()  # kiro_worktree_inspect's answer
    assert (report["baseRef"], report["baseCommit"], report["mergeState"]) == ("main", based_on, "integrated")
    workspace = owner_client.get(f"/api/conversations/{cid}").json()["defaults"]["workspace"]
    assert (workspace["baseRef"], workspace["baseCommit"]) == ("main", based_on)
    page = owner_client.get(f"/conversations/{cid}").text
    assert f'based on <code>main</code> at <code title="{based_on}">{based_on[:12]}</code>' in page
    assert conversations_rows("SELECT worktree_base_ref, worktree_base_commit FROM conversations WHERE id = ?",
                              cid) == [("main", based_on)]


def test_the_kiro_session_routes_release_and_repair_for_the_owner_and_refuse_unknown_ids(
        owner_client: httpx.Client, workspace: Path, kirocrew: Any, gateway_env: dict[str, str]) -> None:
    from kirocrew_core import kiro_sessions

    mark = audit_mark()
    started = start(owner_client, workspace, "by-hand", "!say ready")
    detail_when(owner_client, started["conversationId"], settled)
    base = f"/api/conversations/{started['conversationId']}"
    opened = owner_client.post(base + "/open")
    assert opened.status_code == 200, opened.text
    out = opened.json()
    assert out["cwd"] == str(workspace) and out["argv"][1:] == ["chat", "--resume-id", out["sessionId"]]
    assert out["command"].startswith(f"cd {workspace} && ")
    assert not kiro_sessions.session_in_use(out["sessionId"])
    repaired = owner_client.post(base + "/repair")
    assert repaired.status_code == 200 and repaired.json()["backups"] == []
    assert error_of(owner_client.post("/api/conversations/conv_nope/open")) == (400, "conversation_not_found")
    assert error_of(owner_client.post("/api/conversations/conv_nope/repair")) == (400, "conversation_not_found")
    # The CLI asks the running host (whose worker it is), not a state directory of its own.
    done = kirocrew("conversations", "open", started["conversationId"], "--json", env=gateway_env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == out
    records = [r for r in audit_since(mark, "conversations.dashboard")
               if r["fields"]["tool"] in ("hand_over", "repair_session")]
    assert [(r["fields"]["tool"], r["outcome"]) for r in records] == [
        ("hand_over", "ok"), ("repair_session", "ok"), ("hand_over", "refused"), ("repair_session", "refused"),
        ("hand_over", "ok")]


def test_a_conversations_page_links_the_artifacts_its_sessions_saved(owner_client: httpx.Client,
                                                                    workspace: Path) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER, Actor

    started = start(owner_client, workspace, "reporter", "!say saved")
    detail_when(owner_client, started["conversationId"], settled)
    cid = started["conversationId"]
    mine = Actor(tree=cid, conversation=cid, source="chat")
    store.save(store.NewArtifact(name="Weekly <b>report</b>", content="# hi", kind="markdown", slug="cv-weekly"), mine)
    store.save(store.NewArtifact(name="Someone else's", content="x", kind="text", slug="cv-other"), OWNER)

    html = owner_client.get(f"/conversations/{cid}").text
    assert '<h2 id="artifacts-heading">Artifacts</h2>' in html
    assert '<a href="/artifacts/cv-weekly">Weekly &lt;b&gt;report&lt;/b&gt;</a>' in html
    assert "/artifacts/cv-other" not in html
