"""The spec's live-smoke scenarios, offline: the real server over stdio, driving the fake kiro-cli.

Each test starts ``kirocrew mcp-conversations`` through the mcp SDK client and speaks only MCP to it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kirocrew_testing.distributions import make_plugin_distribution
from kirocrew_testing.requirements import executable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversation_calls import expect_error, ref, until_status

def workspace(tmp_path: Path, name: str = "project") -> Path:
    path = tmp_path / name
    path.mkdir(exist_ok=True)
    return path


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run([executable("git", apt="git"), *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout


def make_repo(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README").write_text("hello\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "init")
    return path


# -- parallel work, follow-ups, results --------------------------------------------------------


def test_parallel_conversations_overlap_and_wait_any_returns_first_then_all(conversations_client, run_async,
                                                                            tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            quick = await client.call("kiro_spawn", conversation="new", name="quick", workspace=str(tmp_path),
                                      message="!sleep 0.3\n!say quick done")
            slow = await client.call("kiro_spawn", conversation="new", name="slow", workspace=str(tmp_path),
                                     message="!sleep 2\n!say slow done")
            assert quick["createdConversation"] and quick["queuePosition"] == 0
            assert quick["settings"]["authority"] == "unrestricted"
            assert quick["settings"]["workspace"] == {
                "mode": "shared", "fingerprint": quick["settings"]["workspace"]["fingerprint"],
                "label": tmp_path.name, "branch": None, "baseRef": None, "baseCommit": None}
            first = await client.call("kiro_wait", targets=[ref(quick), ref(slow)], mode="any")
            statuses = {r["runId"]: r["status"] for r in first["runs"]}
            assert first["waitExpired"] is False
            assert statuses[quick["runId"]] == "completed" and statuses[slow["runId"]] == "running"
            both = await client.call("kiro_wait", targets=[ref(quick), ref(slow)], mode="all")
            runs = {r["runId"]: r for r in both["runs"]}
            assert [runs[x["runId"]]["reply"]["text"] for x in (quick, slow)] == ["quick done", "slow done"]
            a, b = runs[quick["runId"]], runs[slow["runId"]]
            assert a["startedAt"] < b["endedAt"] and b["startedAt"] < a["endedAt"], "the two runs overlapped"

    run_async(main())


def test_a_queued_follow_up_runs_after_the_first_with_its_context_and_results_are_idempotent(
        conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            first = await client.call("kiro_spawn", conversation="new", name="ctx", workspace=str(tmp_path),
                                      message="!sleep 0.5\n!say remember the word tangerine")
            follow = await client.call("kiro_send", conversationId=first["conversationId"], message="!recall")
            assert follow["delivery"] == "queue" and follow["queuePosition"] == 1 and follow["status"] == "queued"
            done = await client.call("kiro_wait", targets=[ref(first), ref(follow)], mode="all")
            first_run, follow_run = done["runs"]
            assert first_run["endedAt"] <= follow_run["startedAt"], "runs of one conversation are serialized"
            assert "tangerine" in follow_run["reply"]["text"]
            again = [await client.call("kiro_result", **ref(follow)) for _ in range(2)]
            # kiro_result is the run kiro_wait returned plus what session directives left on the conversation
            assert again[0] == again[1] == {**follow_run, "session": again[0]["session"]}

    run_async(main())


def test_defaults_change_only_while_idle_and_runs_keep_their_resolved_settings(conversations_client, run_async,
                                                                                tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            caps = await client.call("kiro_capabilities")
            other = next(m["id"] for m in caps["models"] if m["id"] != caps["defaultModel"])
            busy = await client.call("kiro_spawn", conversation="new", name="cfg", workspace=str(tmp_path),
                                     message="!hang")
            assert busy["settings"]["model"] == caps["defaultModel"]
            await until_status(client, ref(busy), "running")
            await expect_error(client, "conversation_busy", "kiro_configure",
                               conversationId=busy["conversationId"], model=other)
            await client.call("kiro_cancel", **ref(busy))
            changed = await client.call("kiro_configure", conversationId=busy["conversationId"], model=other,
                                        effort="high")
            assert changed["defaults"]["model"] == other and changed["defaults"]["effort"] == "high"
            later = await client.call("kiro_delegate", conversation=busy["conversationId"], message="!say ok")
            assert later["run"]["settings"]["model"] == other and later["run"]["settings"]["effort"] == "high"
            assert (await client.call("kiro_result", **ref(busy)))["settings"]["model"] == caps["defaultModel"]

    run_async(main())


def test_an_idle_conversation_takes_a_restricted_default_authority_and_keeps_its_other_defaults(
        conversations_client, run_async, tmp_path):
    executable("bwrap", apt="bubblewrap")  # read_only is only offered where its sandbox works

    async def main() -> None:
        async with conversations_client() as client:
            caps = await client.call("kiro_capabilities")
            other = next(m["id"] for m in caps["models"] if m["id"] != caps["defaultModel"])
            made = await client.call("kiro_delegate", conversation="new", name="cfg", workspace=str(tmp_path),
                                     message="!say ok", model=other)
            restricted = await client.call("kiro_configure", conversationId=made["run"]["conversationId"],
                                           authority="read_only")
            assert restricted["defaults"]["authority"] == "read_only" and restricted["defaults"]["model"] == other

    run_async(main())


def test_interrupt_cancels_the_active_run_and_superseded_follow_ups_then_runs_the_replacement(
        conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            active = await client.call("kiro_spawn", conversation="new", name="steer", workspace=str(tmp_path),
                                       message="!hang")
            await until_status(client, ref(active), "running")
            queued = await client.call("kiro_send", conversationId=active["conversationId"], message="!say stale")
            replacement = await client.call("kiro_send", conversationId=active["conversationId"],
                                            message="!say replacement", delivery="interrupt")
            assert replacement["interruptedRunId"] == active["runId"]
            assert replacement["supersededRunCount"] == 1
            done = await client.call("kiro_wait", targets=[ref(replacement)], mode="all")
            assert done["runs"][0]["reply"]["text"] == "replacement"
            cancelled = await client.call("kiro_result", **ref(active))
            superseded = await client.call("kiro_result", **ref(queued))
            assert (cancelled["status"], cancelled["error"]["code"]) == ("cancelled", "run_replaced")
            assert (superseded["status"], superseded["error"]["code"]) == ("cancelled", "run_superseded")
            assert superseded["reply"] is None

    run_async(main())


def test_cancel_is_explicit_durable_and_a_second_cancel_changes_nothing(conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            run = await client.call("kiro_spawn", conversation="new", name="stop", workspace=str(tmp_path),
                                    message="!hang")
            await until_status(client, ref(run), "running")
            first = await client.call("kiro_cancel", **ref(run))
            assert (first["status"], first["changed"]) == ("cancelled", True)
            second = await client.call("kiro_cancel", **ref(run))
            assert (second["status"], second["changed"]) == ("cancelled", False)
            # The conversation is usable again: the next run resumes the saved session.
            after = await client.call("kiro_delegate", conversation=run["conversationId"], message="!say back")
            assert after["run"]["status"] == "completed"

    run_async(main())


def test_a_wait_without_progress_token_returns_wait_expired_without_cancelling(conversations_client, run_async,
                                                                             tmp_path):
    async def main() -> None:
        async with conversations_client("--wait-call-secs", "0.5") as client:
            run = await client.call("kiro_spawn", conversation="new", name="long", workspace=str(tmp_path),
                                    message="!hang")
            waited = await client.call("kiro_wait", targets=[ref(run)], mode="any")
            assert waited["waitExpired"] is True and waited["runs"][0]["status"] in ("queued", "running")
            delegated = await client.call("kiro_delegate", conversation=run["conversationId"], message="!say x")
            assert delegated["waitExpired"] is True and delegated["run"]["status"] == "queued"
            assert (await client.call("kiro_result", **ref(run)))["status"] == "running"
            await client.call("kiro_cancel", **ref(run))

    run_async(main())


def test_a_run_reaching_its_deadline_times_out(conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client("--run-deadline-secs", "1") as client:
            out = await client.call("kiro_delegate", conversation="new", name="slowpoke", workspace=str(tmp_path),
                                    message="!hang")
            assert out["run"]["status"] == "timed_out"
            assert out["run"]["error"]["code"] == "run_deadline_exceeded"

    run_async(main())


# -- restart -----------------------------------------------------------------------------------


def _server_pids() -> list[int]:
    """Our direct children running ``mcp-conversations``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"mcp-conversations" in cmdline:
            found.append(int(entry.name))
    return found


def test_a_hard_killed_server_restarts_with_unfinished_runs_interrupted_and_results_kept(
        conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            done = await client.call("kiro_delegate", conversation="new", name="durable", workspace=str(tmp_path),
                                     message="!say kept forever")
            cid = done["run"]["conversationId"]
            active = await client.call("kiro_send", conversationId=cid, message="!hang")
            queued = await client.call("kiro_send", conversationId=cid, message="!say never")
            await until_status(client, ref(active), "running")
            (pid,) = _server_pids()
            os.kill(pid, signal.SIGKILL)
        async with conversations_client() as client:
            kept = await client.call("kiro_result", conversationId=cid, runId=done["run"]["runId"])
            assert kept == {**done["run"], "session": kept["session"]}
            for lost in (active, queued):
                run = await client.call("kiro_result", **ref(lost))
                assert (run["status"], run["error"]["code"]) == ("interrupted", "server_restarted")
            listed = await client.call("kiro_status")
            assert [c["conversationId"] for c in listed["conversations"]] == [cid]
            resumed = await client.call("kiro_delegate", conversation=cid, message="!recall")
            assert "kept forever" in resumed["run"]["reply"]["text"], "the saved Kiro session was loaded"

    run_async(main())


# -- status, events, archive, delete -----------------------------------------------------------


def test_status_and_events_are_paginated_redacted_and_archives_are_filtered(conversations_client, run_async,
                                                                           tmp_path):
    project = workspace(tmp_path, "secret-project")

    async def main() -> None:
        async with conversations_client() as client:
            busy = await client.call(
                "kiro_delegate", conversation="new", name="alpha", workspace=str(project),
                message="!think PRIVATE-THOUGHT\n!plan one; two\n!write notes/a.txt SECRET-CONTENT\n"
                        "!shell echo SECRET-ARGUMENT\n!say the end")
            assert busy["run"]["status"] == "completed"
            for name in ("beta", "gamma"):
                await client.call("kiro_delegate", conversation="new", name=name, workspace=str(tmp_path),
                                  message="!say hi")
            page1 = await client.call("kiro_status", limit=2)
            page2 = await client.call("kiro_status", limit=2, cursor=page1["nextCursor"])
            assert len(page1["conversations"]) == 2 and len(page2["conversations"]) == 1
            assert page2["nextCursor"] is None and page1["counts"]["idle"] == 3
            names = [c["name"] for c in page1["conversations"] + page2["conversations"]]
            assert sorted(names) == ["alpha", "beta", "gamma"]
            await expect_error(client, "bad_cursor", "kiro_status", limit=1, archive="all",
                               cursor=page1["nextCursor"])

            ids = {c["name"]: c["conversationId"] for c in page1["conversations"] + page2["conversations"]}
            fingerprint = busy["run"]["settings"]["workspace"]["fingerprint"]
            only = await client.call("kiro_status", workspaceFingerprint=fingerprint)
            assert [c["name"] for c in only["conversations"]] == ["alpha"]

            events, cursor = [], None
            while True:
                page = await client.call("kiro_events", **ref(busy["run"]), limit=3,
                                         **({"cursor": cursor} if cursor else {}))
                events += page["events"]
                cursor = page["nextCursor"]
                if cursor is None:
                    break
            kinds = {e["kind"] for e in events}
            assert {"phase", "plan", "tool", "message"} <= kinds
            assert any(e.get("locations") == ["notes/a.txt"] for e in events)
            assert [e["seq"] for e in events] == sorted({e["seq"] for e in events})
            dumped = json.dumps([events, page1, page2, busy])
            for secret in ("PRIVATE-THOUGHT", "SECRET-CONTENT", "SECRET-ARGUMENT", str(tmp_path)):
                assert secret not in dumped

            archived = await client.call("kiro_archive", conversationId=ids["beta"])
            assert archived["state"] == "archived"
            active_only = await client.call("kiro_status")
            assert sorted(c["name"] for c in active_only["conversations"]) == ["alpha", "gamma"]
            shelf = await client.call("kiro_status", archive="archived")
            assert [c["name"] for c in shelf["conversations"]] == ["beta"] and shelf["counts"]["archived"] == 1
            await expect_error(client, "conversation_archived", "kiro_send", conversationId=ids["beta"],
                               message="!say no")
            await expect_error(client, "conversation_not_archived", "kiro_delete", conversationId=ids["gamma"],
                               confirmName="gamma")
            await expect_error(client, "confirmation_mismatch", "kiro_delete", conversationId=ids["beta"],
                               confirmName="gamma")
            assert (await client.call("kiro_delete", conversationId=ids["beta"], confirmName="beta"))["deleted"]
            everything = await client.call("kiro_status", archive="all")
            assert sorted(c["name"] for c in everything["conversations"]) == ["alpha", "gamma"]

    run_async(main())


def test_idle_conversations_are_archived_after_thirty_days(conversations_client, run_async, tmp_path,
                                                          conversations_state_dir):
    async def main(step: int) -> None:
        async with conversations_client() as client:
            if step == 0:
                await client.call("kiro_delegate", conversation="new", name="old", workspace=str(tmp_path),
                                  message="!say hi")
                await client.call("kiro_delegate", conversation="new", name="recent", workspace=str(tmp_path),
                                  message="!say hi")
            else:
                listed = await client.call("kiro_status", archive="all")
                states = {c["name"]: c["state"] for c in listed["conversations"]}
                assert states == {"old": "archived", "recent": "idle"}

    run_async(main(0))
    with sqlite3.connect(conversations_state_dir / "orchestrator-v1.sqlite") as db:
        db.execute("UPDATE conversations SET updated_at = '2020-01-01T00:00:00.000+00:00' WHERE name = 'old'")
    run_async(main(1))


# -- images ------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 56


def test_images_are_delivered_when_advertised_and_erased_after_delivery(conversations_client, run_async, tmp_path,
                                                                       conversations_state_dir):
    image = tmp_path / "shot.png"
    image.write_bytes(PNG)
    attached = [{"path": str(image), "mimeType": "image/png", "sizeBytes": len(PNG)}]

    async def main() -> None:
        async with conversations_client() as client:
            assert (await client.call("kiro_capabilities"))["prompt"]["images"] is True
            out = await client.call("kiro_delegate", conversation="new", name="pics", workspace=str(tmp_path),
                                    message="!say seen", images=attached)
            assert out["run"]["status"] == "completed"
            recall = await client.call("kiro_delegate", conversation=out["run"]["conversationId"],
                                       message="!recall")
            assert "[image image/png]" in recall["run"]["reply"]["text"]
            await expect_error(client, "invalid_image", "kiro_spawn", conversation="new", name="bad",
                               workspace=str(tmp_path), message="x",
                               images=[{**attached[0], "sizeBytes": len(PNG) + 1}])
            text_file = tmp_path / "notes.txt"
            text_file.write_text("not an image")
            await expect_error(client, "invalid_image", "kiro_spawn", conversation="new", name="bad",
                               workspace=str(tmp_path), message="x",
                               images=[{"path": str(text_file), "mimeType": "image/png", "sizeBytes": 12}])
            await expect_error(client, "invalid_arguments", "kiro_spawn", conversation="new", name="bad",
                               workspace=str(tmp_path), message="x", images=attached * 5)
            await expect_error(client, "invalid_arguments", "kiro_spawn", conversation="new", name="bad",
                               workspace=str(tmp_path), message="x", images=[{**attached[0], "path": "shot.png"}])

    run_async(main())
    with sqlite3.connect(conversations_state_dir / "orchestrator-v1.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM prompt_images").fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM prompt_images WHERE data IS NOT NULL").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM prompts WHERE text IS NOT NULL").fetchone()[0] == 0


def test_images_are_refused_when_kiro_does_not_advertise_them(conversations_client, run_async, tmp_path):
    image = tmp_path / "shot.png"
    image.write_bytes(PNG)

    async def main() -> None:
        async with conversations_client(extra_env={"KIRO_FAKE_NO_IMAGES": "1"}) as client:
            assert (await client.call("kiro_capabilities", refresh=True))["prompt"]["images"] is False
            await expect_error(client, "unsupported_capability", "kiro_spawn", conversation="new", name="pics",
                               workspace=str(tmp_path), message="!say seen",
                               images=[{"path": str(image), "mimeType": "image/png", "sizeBytes": len(PNG)}])
            assert (await client.call("kiro_status", archive="all"))["conversations"] == []

    run_async(main())


# -- fork --------------------------------------------------------------------------------------


def test_fork_is_refused_unless_kiro_advertises_it(conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            caps = await client.call("kiro_capabilities")
            assert caps["acp"]["sessionFork"] is False
            out = await client.call("kiro_delegate", conversation="new", name="src", workspace=str(tmp_path),
                                    message="!say hi")
            await expect_error(client, "unsupported_capability", "kiro_fork",
                               conversationId=out["run"]["conversationId"], name="copy")
            assert len((await client.call("kiro_status"))["conversations"]) == 1

    run_async(main())


def test_fork_copies_the_conversation_context_when_kiro_advertises_it(conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client(extra_env={"KIRO_FAKE_ADVERTISE_FORK": "1"}) as client:
            assert (await client.call("kiro_capabilities"))["acp"]["sessionFork"] is True
            out = await client.call("kiro_delegate", conversation="new", name="src", workspace=str(tmp_path),
                                    message="!say the secret is quince")
            fork = await client.call("kiro_fork", conversationId=out["run"]["conversationId"], name="copy")
            assert fork["forkedFrom"] == out["run"]["conversationId"] and fork["name"] == "copy"
            recall = await client.call("kiro_delegate", conversation=fork["conversationId"], message="!recall")
            assert "quince" in (recall["run"]["reply"] or {}).get("text", ""), recall
            await expect_error(client, "conversation_name_taken", "kiro_fork",
                               conversationId=out["run"]["conversationId"], name="copy")

    run_async(main())


# -- worktrees ---------------------------------------------------------------------------------


def test_worktree_create_inspect_and_cleanup_with_every_refusal(conversations_client, run_async, tmp_path,
                                                                conversations_state_dir):
    repo = make_repo(tmp_path / "repo")

    async def main() -> None:
        async with conversations_client() as client:
            out = await client.call("kiro_delegate", conversation="new", name="feature-x", workspace=str(repo),
                                    workspaceMode="worktree", message="!write feature.txt hello")
            run = out["run"]
            cid = run["conversationId"]
            branch = run["settings"]["workspace"]["branch"]
            assert branch.startswith("kiro/feature-x-") and run["settings"]["workspace"]["mode"] == "worktree"
            assert not (repo / "feature.txt").exists(), "kiro worked in the worktree, not the source"
            (tree,) = (conversations_state_dir / "worktrees").iterdir()
            assert (tree / "feature.txt").read_text() == "hello"

            seen = await client.call("kiro_worktree_inspect", conversationId=cid)
            assert seen["branch"] == branch and seen["baseRef"] == "HEAD" and seen["activeRuns"] == 0
            assert seen["baseCommit"] == git(repo, "rev-parse", "HEAD").strip()
            assert seen["clean"] is False and {"path": "feature.txt", "status": "?"} in seen["changedFiles"]
            await expect_error(client, "worktree_dirty", "kiro_worktree_cleanup", conversationId=cid)

            git(tree, "add", "feature.txt")
            git(tree, "commit", "-q", "-m", "feature")
            seen = await client.call("kiro_worktree_inspect", conversationId=cid)
            assert seen["clean"] and seen["mergeState"] == "unintegrated" and seen["diffStats"]["files"] == 1
            await expect_error(client, "worktree_unintegrated", "kiro_worktree_cleanup", conversationId=cid)

            hanging = await client.call("kiro_spawn", conversation=cid, message="!hang")
            await until_status(client, ref(hanging), "running")
            await expect_error(client, "worktree_active", "kiro_worktree_cleanup", conversationId=cid)
            await client.call("kiro_cancel", **ref(hanging))

            git(repo, "merge", "-q", "--ff-only", branch)
            assert (await client.call("kiro_worktree_inspect", conversationId=cid))["mergeState"] == "integrated"
            cleaned = await client.call("kiro_worktree_cleanup", conversationId=cid)
            assert cleaned == {"conversationId": cid, "removedBranch": branch, "state": "retired"}
            assert not tree.exists() and branch not in git(repo, "branch", "--list")
            await expect_error(client, "worktree_not_found", "kiro_worktree_cleanup", conversationId=cid)
            await expect_error(client, "conversation_retired", "kiro_send", conversationId=cid, message="x")
            retired = await client.call("kiro_status", state=["retired"], archive="all")
            assert [c["conversationId"] for c in retired["conversations"]] == [cid]

            shared = await client.call("kiro_delegate", conversation="new", name="plain", workspace=str(repo),
                                       message="!say hi")
            await expect_error(client, "not_a_worktree_conversation", "kiro_worktree_inspect",
                               conversationId=shared["run"]["conversationId"])

    run_async(main())


def test_worktree_mode_needs_a_clean_repository_root(conversations_client, run_async, tmp_path):
    repo = make_repo(tmp_path / "repo")
    (repo / "sub").mkdir()
    plain = workspace(tmp_path, "plain")

    async def main() -> None:
        async with conversations_client() as client:
            common = {"conversation": "new", "workspaceMode": "worktree", "message": "!say hi"}
            await expect_error(client, "not_a_git_repository", "kiro_spawn", name="a", workspace=str(plain),
                               **common)
            await expect_error(client, "not_repository_root", "kiro_spawn", name="b", workspace=str(repo / "sub"),
                               **common)
            await expect_error(client, "base_ref_not_found", "kiro_spawn", name="c", workspace=str(repo),
                               baseRef="no-such-branch", **common)
            (repo / "untracked.txt").write_text("wip")
            await expect_error(client, "repository_dirty", "kiro_spawn", name="d", workspace=str(repo), **common)
            assert (await client.call("kiro_status", archive="all"))["conversations"] == []

    run_async(main())


# -- attention (a test authority that trusts no tool) ------------------------------------------

ASKING_AUTHORITY = '''
import dataclasses
from kirocrew_core import hookimpl
from kirocrew_core.contributions import AuthorityBackend


def _options(options, *, workspace):
    return dataclasses.replace(options, trust_all_tools=False, trust_tools=())


@hookimpl(tryfirst=True)  # replaces the built-in workspace_write whatever the plugin names
def authority_backends():
    return [AuthorityBackend("workspace_write", "test: trusts no tool", lambda: (True, ""), _options)]
'''


@pytest.fixture
def asking_env(fake_kiro_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    root = make_plugin_distribution(tmp_path / "plugins", distribution="kirocrew-asking", module="asking_authority",
                                    source=ASKING_AUTHORITY)
    return {**fake_kiro_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}


def test_a_permission_request_needs_attention_and_decisions_fail_closed(conversations_client, run_async, tmp_path,
                                                                       asking_env):
    async def main() -> None:
        async with conversations_client(env=asking_env) as client:
            out = await client.call("kiro_delegate", conversation="new", name="ask", workspace=str(tmp_path),
                                    authority="workspace_write", message="!tool fs_write {}\n!say wrote it")
            run = out["run"]
            assert run["status"] == "needs_attention" and out["waitExpired"] is False
            attention = run["attention"]
            assert attention["toolName"] == "fs_write" and set(attention["options"]) == {"allow_once", "reject_once"}
            events = (await client.call("kiro_events", **ref(run)))["events"]
            assert any(e["kind"] == "permission" and e.get("permissionRequestId") == attention["permissionRequestId"]
                       for e in events)
            common = {**ref(run), "decision": "allow_once"}
            await expect_error(client, "permission_not_found", "kiro_permission_decide",
                               permissionRequestId="perm_unknown", **common)
            decided = await client.call("kiro_permission_decide",
                                        permissionRequestId=attention["permissionRequestId"], **common)
            assert decided["decision"] == "allow_once"
            done = await client.call("kiro_wait", targets=[ref(run)], mode="all")
            assert done["runs"][0]["status"] == "completed" and done["runs"][0]["reply"]["text"] == "wrote it"
            await expect_error(client, "permission_not_pending", "kiro_permission_decide",
                               permissionRequestId=attention["permissionRequestId"], **common)

            rejected = await client.call("kiro_delegate", conversation=run["conversationId"],
                                         message="!tool fs_write {}\n!say after")
            assert rejected["run"]["attention"], rejected
            perm = rejected["run"]["attention"]["permissionRequestId"]
            await client.call("kiro_permission_decide", **ref(rejected["run"]), permissionRequestId=perm,
                              decision="reject_once")
            finished = await client.call("kiro_wait", targets=[ref(rejected["run"])], mode="all")
            assert finished["runs"][0]["status"] in ("completed", "cancelled")

            pending = await client.call("kiro_delegate", conversation=run["conversationId"],
                                        message="!tool fs_write {}")
            assert pending["run"]["status"] == "needs_attention"
            cancelled = await client.call("kiro_cancel", **ref(pending["run"]))
            assert cancelled["status"] == "cancelled"
            await expect_error(client, "permission_not_pending", "kiro_permission_decide", **ref(pending["run"]),
                               permissionRequestId=pending["run"]["attention"]["permissionRequestId"],
                               decision="allow_once")

    run_async(main())


# -- negative paths ----------------------------------------------------------------------------


def test_bad_input_fails_with_stable_codes_and_changes_nothing(conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            base = {"conversation": "new", "workspace": str(tmp_path)}
            await expect_error(client, "invalid_arguments", "kiro_spawn", name="x", message="a" * 200_001, **base)
            await expect_error(client, "invalid_arguments", "kiro_spawn", name="Bad Name", message="x", **base)
            await expect_error(client, "invalid_arguments", "kiro_spawn", name="x", message="x", extra=1, **base)
            await expect_error(client, "invalid_arguments", "kiro_spawn", name="x", message="x", effort="huge",
                               **base)
            await expect_error(client, "workspace_not_found", "kiro_spawn", conversation="new", name="x",
                               workspace=str(tmp_path / "missing"), message="x")
            await expect_error(client, "conversation_not_found", "kiro_send", conversationId="conv_nope",
                               message="x")
            targets = [{"conversationId": f"c{i}", "runId": f"r{i}"} for i in range(9)]
            await expect_error(client, "invalid_arguments", "kiro_wait", targets=targets, mode="any")
            await expect_error(client, "run_not_found", "kiro_wait", targets=targets[:1], mode="any")
            first = await client.call("kiro_delegate", name="x", message="!say hi", **base)
            await expect_error(client, "conversation_name_taken", "kiro_spawn", name="x", message="x", **base)
            other = await client.call("kiro_delegate", name="y", message="!say hi", **base)
            await expect_error(client, "conversation_mismatch", "kiro_result",
                               conversationId=other["run"]["conversationId"], runId=first["run"]["runId"])
            await expect_error(client, "invalid_arguments", "kiro_events", **ref(first["run"]), limit=101)
            await expect_error(client, "bad_cursor", "kiro_events", **ref(first["run"]), cursor="AAAA")
            listed = await client.call("kiro_status")
            assert sorted(c["name"] for c in listed["conversations"]) == ["x", "y"]

    run_async(main())


def test_a_conversation_whose_kiro_session_is_gone_starts_afresh_and_says_so(conversations_client, run_async,
                                                                             tmp_path):
    from kirocrew_core import home

    async def main(step: int, cid: str = "") -> str:
        async with conversations_client() as client:
            if step == 0:
                out = await client.call("kiro_delegate", conversation="new", name="amnesia", workspace=str(tmp_path),
                                        message="!say before")
                return out["run"]["conversationId"]
            out = await client.call("kiro_delegate", conversation=cid, message="!recall")
            run = out["run"]
            assert run["status"] == "completed" and run["reply"]["text"] == "recall: "
            events = (await client.call("kiro_events", **ref(run)))["events"]
            assert any("could not load the saved session" in e["summary"] for e in events)
            return cid

    cid = run_async(main(0))
    sessions = home.kiro_sessions_dir()
    assert any(sessions.iterdir()), "the fake kept the session on disk"
    for entry in sessions.iterdir():  # kiro lost its session store (a reinstall, a cleanup)
        entry.unlink()
    run_async(main(1, cid))


def test_prompt_text_is_gone_from_the_database_files_once_runs_end(conversations_client, run_async, tmp_path,
                                                                  conversations_state_dir):
    async def main() -> None:
        async with conversations_client() as client:
            out = await client.call("kiro_delegate", conversation="new", name="private", workspace=str(tmp_path),
                                    message="!say ok\n!think PROMPT-ONLY-TOKEN-41")
            assert out["run"]["status"] == "completed"
            hung = await client.call("kiro_spawn", conversation=out["run"]["conversationId"],
                                     message="!hang")
            queued = await client.call("kiro_send", conversationId=out["run"]["conversationId"],
                                       message="!say QUEUED-ONLY-TOKEN-42")
            await until_status(client, ref(hung), "running")
            await client.call("kiro_cancel", **ref(queued))
            await client.call("kiro_cancel", **ref(hung))

    run_async(main())
    for path in conversations_state_dir.glob("orchestrator-v1.sqlite*"):
        data = path.read_bytes()
        assert b"PROMPT-ONLY-TOKEN-41" not in data and b"QUEUED-ONLY-TOKEN-42" not in data, path.name


def test_capabilities_report_the_live_kiro_cli_and_refresh_bypasses_the_cache(conversations_client, run_async,
                                                                              tmp_path):
    async def main() -> None:
        async with conversations_client(extra_env={"KIRO_FAKE_VERSION": "2.15.7"}) as client:
            first = await client.call("kiro_capabilities")
            again = await client.call("kiro_capabilities")
            fresh = await client.call("kiro_capabilities", refresh=True)
            assert (first["cached"], again["cached"], fresh["cached"]) == (False, True, False)
            assert first["kiroCli"]["version"] == "2.15.7" and first["acp"]["loadSession"] is True
            assert first["defaultModel"] in [m["id"] for m in first["models"]]
            sandbox = sys.platform.startswith("linux") and shutil.which("bwrap") is not None
            assert {a["name"]: a["available"] for a in first["authorities"]} == {
                "unrestricted": True, "read_only": sandbox, "workspace_write": sandbox}
            assert first["defaults"] == {"authority": "unrestricted", "workspaceMode": "shared", "mode": "kirocrew",
                                         "maxWorkers": 4}
            assert first["limits"]["waitMaxTargets"] == 8 and first["limits"]["maxImages"] == 4
            # kiro's built-in agent and the rendered one (the lean kirocrew.json); kiro's own default is its built-in
            assert first["modes"] == ["kiro_default", "kirocrew"] and first["defaultMode"] == "kiro_default"
            assert "/compact" in first["slashCommands"], "kiro's commands are known before any run"
            await client.call("kiro_delegate", conversation="new", name="m", workspace=str(tmp_path),
                              message="!say hi")
            after = await client.call("kiro_capabilities")
            assert after["modes"] == ["kiro_default", "kirocrew"] and after["slashCommands"]

    run_async(main())


# -- slash commands -----------------------------------------------------------------------------


def test_a_message_starting_with_a_slash_is_refused_unless_the_conversation_allows_that_command(
        conversations_client, run_async, tmp_path):
    async def main() -> None:
        async with conversations_client() as client:
            new = {"conversation": "new", "workspace": str(tmp_path)}
            refused = await expect_error(client, "slash_command_refused", "kiro_spawn", name="a", message="/clear",
                                         **new)
            assert "'clear'" in refused and "allowed: none" in refused, refused
            await expect_error(client, "slash_command_refused", "kiro_delegate", name="a",
                               message=" \n\t/model other-model", **new)
            before_any_run = await client.call("kiro_spawn", name="early", message="/compact",
                                               allowedSlashCommands=["/compact"], **new)
            done = await client.call("kiro_wait", targets=[ref(before_any_run)], mode="all")
            assert done["runs"][0]["reply"]["text"] == "/compact done", "allowed before any run had started"
            assert [c["name"] for c in (await client.call("kiro_status", archive="all"))["conversations"]] \
                == ["early"], "nothing was created by the refused messages"

            first = await client.call("kiro_delegate", name="a", message="!say hi", **new)
            cid = first["run"]["conversationId"]
            for tool, args in (("kiro_send", {"conversationId": cid}),
                               ("kiro_send", {"conversationId": cid, "delivery": "interrupt"}),
                               ("kiro_spawn", {"conversation": cid}),
                               ("kiro_delegate", {"conversation": cid})):
                await expect_error(client, "slash_command_refused", tool, message="/clear", **args)
            caps = await client.call("kiro_capabilities")
            assert "/compact" in caps["slashCommands"]
            unknown = await expect_error(client, "unknown_slash_command", "kiro_configure", conversationId=cid,
                                         allowedSlashCommands=["/no-such-command"])
            assert "no-such-command" in unknown and "compact" in unknown, unknown
            configured = await client.call("kiro_configure", conversationId=cid, allowedSlashCommands=["compact"])
            assert configured["defaults"]["allowedSlashCommands"] == ["/compact"]

            allowed = await client.call("kiro_delegate", conversation=cid, message="/compact")
            assert allowed["run"]["status"] == "completed", allowed
            assert allowed["run"]["reply"]["text"] == "/compact done"
            events = (await client.call("kiro_events", **ref(allowed["run"])))["events"]
            assert any(e["kind"] == "config" and e["summary"] == "slash command /compact" for e in events)
            await expect_error(client, "slash_command_refused", "kiro_send", conversationId=cid, message="/clear")
            recall = await client.call("kiro_delegate", conversation=cid, message="!recall")
            assert "hi" in recall["run"]["reply"]["text"], "the refused /clear never reached kiro"

            # A new conversation may allow a command kiro has announced, from its first message on.
            other = await client.call("kiro_delegate", name="b", message="/compact",
                                      allowedSlashCommands=["/compact"], **new)
            assert other["run"]["status"] == "completed"
            listed = await client.call("kiro_status")
            defaults = {c["name"]: c["defaults"]["allowedSlashCommands"] for c in listed["conversations"]}
            assert defaults == {"a": ["/compact"], "b": ["/compact"], "early": ["/compact"]}

    run_async(main())


def test_an_allowed_slash_command_waits_for_a_fresh_sessions_announcement_before_it_is_checked(
        conversations_client, run_async, tmp_path):
    async def main() -> None:
        # kiro announces a session's commands only after answering session/new: here a second later.
        async with conversations_client(extra_env={"KIRO_FAKE_COMMANDS_DELAY": "1"}) as client:
            out = await client.call("kiro_delegate", conversation="new", name="late", workspace=str(tmp_path),
                                    message="/compact", allowedSlashCommands=["/compact"])
            assert out["run"]["status"] == "completed", out["run"]["error"]
            assert out["run"]["reply"]["text"] == "/compact done"

    run_async(main())


# -- unanswered permission requests ---------------------------------------------------------------


def test_an_unanswered_permission_request_expires_and_the_queue_moves_on(conversations_client, run_async, tmp_path,
                                                                         asking_env):
    async def main() -> None:
        env = {**asking_env, "KIRO_CONVERSATIONS_ATTENTION_DEADLINE_SECS": "3"}
        async with conversations_client(env=env) as client:
            asking = await client.call("kiro_spawn", conversation="new", name="ask", workspace=str(tmp_path),
                                       authority="workspace_write", message="!tool fs_write {}\n!say wrote it")
            follow_up = await client.call("kiro_send", conversationId=asking["conversationId"], message="!say next")
            other = await client.call("kiro_spawn", conversation="new", name="slow", workspace=str(tmp_path),
                                      message="!sleep 1\n!say slow done")
            await until_status(client, ref(asking), "needs_attention")

            # While the request is open, `all` returns at once, on every call (deliberately: decide or cancel).
            for _ in range(2):
                woke = await client.call("kiro_wait", targets=[ref(asking), ref(other)], mode="all")
                assert woke["waitExpired"] is False
                assert woke["runs"][0]["status"] == "needs_attention" and woke["runs"][0]["attention"]
            permission = woke["runs"][0]["attention"]["permissionRequestId"]

            expired = await until_status(client, ref(asking), "needs_attention_expired")
            assert expired["error"]["code"] == "attention_deadline_exceeded" and expired["attention"] is None
            assert expired["reply"] is None or "wrote it" not in expired["reply"]["text"]
            await expect_error(client, "permission_not_pending", "kiro_permission_decide", **ref(asking),
                               permissionRequestId=permission, decision="allow_once")
            events = (await client.call("kiro_events", **ref(asking)))["events"]
            assert any(e["kind"] == "permission" and "expired" in e["summary"] for e in events)
            assert any(e["kind"] == "error" and "needs_attention_expired" in e["summary"] for e in events)

            # The expired run is terminal: `all` now waits for the others, and the queue moved on.
            done = await client.call("kiro_wait", targets=[ref(asking), ref(follow_up), ref(other)], mode="all")
            assert done["waitExpired"] is False
            assert [r["status"] for r in done["runs"]] == ["needs_attention_expired", "completed", "completed"]
            assert done["runs"][1]["reply"]["text"] == "next"
            listed = await client.call("kiro_status", runStatus=["needs_attention_expired"])
            assert [c["name"] for c in listed["conversations"]] == []  # its latest run is the follow-up
            assert (await client.call("kiro_status", state=["idle"]))["counts"]["idle"] == 2
            assert (await client.call("kiro_capabilities"))["limits"]["attentionDeadlineSeconds"] == 3

    run_async(main())


def test_the_attention_deadline_is_a_server_option(conversations_client, run_async):
    async def main() -> None:
        async with conversations_client("--attention-deadline-secs", "42") as client:
            assert (await client.call("kiro_capabilities"))["limits"]["attentionDeadlineSeconds"] == 42

    run_async(main())


# -- worktree cleanup and deletion --------------------------------------------------------------


def _ignoring_repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore logs")
    return repo


def test_cleanup_refuses_while_ignored_files_would_be_lost(conversations_client, run_async, tmp_path,
                                                           conversations_state_dir):
    repo = _ignoring_repo(tmp_path)

    async def main() -> None:
        async with conversations_client() as client:
            out = await client.call("kiro_delegate", conversation="new", name="wt", workspace=str(repo),
                                    workspaceMode="worktree", message="!write build/out.log result")
            cid = out["run"]["conversationId"]
            (tree,) = (conversations_state_dir / "worktrees").iterdir()
            (tree / "notes.log").write_text("only copy")
            seen = await client.call("kiro_worktree_inspect", conversationId=cid)
            assert seen["clean"] is True and seen["mergeState"] == "integrated" and seen["ignoredFiles"] == 2
            message = await expect_error(client, "worktree_ignored_files", "kiro_worktree_cleanup",
                                         conversationId=cid)
            assert "2 ignored file(s)" in message
            assert (tree / "notes.log").read_text() == "only copy" and (tree / "build" / "out.log").exists()

            (tree / "notes.log").unlink()
            shutil.rmtree(tree / "build")
            assert (await client.call("kiro_worktree_inspect", conversationId=cid))["ignoredFiles"] == 0
            assert (await client.call("kiro_worktree_cleanup", conversationId=cid))["state"] == "retired"
            assert not tree.exists()

    run_async(main())


GIT_WRAPPER = """#!/bin/sh
# Real git, but `git worktree remove` first says so and pauses: a window to race a send against.
case " $* " in
  *" worktree remove "*) touch "{marker}"; sleep 2 ;;
esac
exec "{git}" "$@"
"""


def test_a_send_racing_a_worktree_cleanup_is_refused_and_nothing_is_lost(conversations_client, run_async, tmp_path,
                                                                        fake_kiro_env, conversations_state_dir):
    repo = make_repo(tmp_path / "repo")
    bin_dir = tmp_path / "slow-git"
    bin_dir.mkdir()
    marker = tmp_path / "removing"
    wrapper = bin_dir / "git"
    wrapper.write_text(GIT_WRAPPER.format(marker=marker, git=shutil.which("git")))
    wrapper.chmod(0o755)
    env = {**fake_kiro_env, "PATH": f"{bin_dir}{os.pathsep}{fake_kiro_env['PATH']}"}

    async def main() -> None:
        async with conversations_client(env=env) as client:
            out = await client.call("kiro_delegate", conversation="new", name="race", workspace=str(repo),
                                    workspaceMode="worktree", message="!say hi")
            cid = out["run"]["conversationId"]
            cleanup = asyncio.ensure_future(client.call("kiro_worktree_cleanup", conversationId=cid))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while not marker.exists():
                assert loop.time() < deadline and not cleanup.done(), "cleanup never reached git worktree remove"
                await asyncio.sleep(0.02)
            await expect_error(client, "conversation_retiring", "kiro_send", conversationId=cid, message="!say late")
            await expect_error(client, "conversation_retiring", "kiro_spawn", conversation=cid, message="!say late")
            assert (await cleanup)["state"] == "retired"
            status = await client.call("kiro_status", archive="all")
            assert status["conversations"][0]["queuedRuns"] == 0
            assert status["conversations"][0]["latestRun"]["runId"] == out["run"]["runId"]

    run_async(main())


def test_deleting_an_archived_worktree_conversation_refuses_while_its_worktree_or_branch_exists(
        conversations_client, run_async, tmp_path, conversations_state_dir):
    repo = make_repo(tmp_path / "repo")

    async def main() -> None:
        async with conversations_client() as client:
            out = await client.call("kiro_delegate", conversation="new", name="keep", workspace=str(repo),
                                    workspaceMode="worktree", message="!write wip.txt unfinished")
            cid = out["run"]["conversationId"]
            branch = out["run"]["settings"]["workspace"]["branch"]
            (tree,) = (conversations_state_dir / "worktrees").iterdir()
            await client.call("kiro_archive", conversationId=cid)
            await expect_error(client, "worktree_not_cleaned_up", "kiro_delete", conversationId=cid,
                               confirmName="keep")
            assert (tree / "wip.txt").read_text() == "unfinished"

            git(repo, "worktree", "remove", "--force", str(tree))  # the user removes the worktree, not the branch
            await expect_error(client, "worktree_not_cleaned_up", "kiro_delete", conversationId=cid,
                               confirmName="keep")
            git(repo, "branch", "-D", branch)
            assert (await client.call("kiro_delete", conversationId=cid, confirmName="keep"))["deleted"] is True

    run_async(main())


# -- redaction -----------------------------------------------------------------------------------


def test_git_failures_reach_the_client_without_absolute_paths(conversations_client, run_async, tmp_path,
                                                             conversations_state_dir):
    repo = make_repo(tmp_path / "repo")

    async def main() -> None:
        async with conversations_client() as client:
            out = await client.call("kiro_delegate", conversation="new", name="broken", workspace=str(repo),
                                    workspaceMode="worktree", message="!say hi")
            (tree,) = (conversations_state_dir / "worktrees").iterdir()
            (tree / ".git").write_text("not a gitfile\n")  # git now fails naming the absolute path
            for tool in ("kiro_worktree_inspect", "kiro_worktree_cleanup"):
                result = await client.call_result(tool, {"conversationId": out["run"]["conversationId"]})
                assert result.is_error
                text = result.content[0].text
                assert "git_failed" in text and "<path>" in text, text
                assert str(tmp_path) not in json.dumps(result.model_dump(mode="json")), text

    run_async(main())


# -- kiro-cli's own session files on delete ------------------------------------------------------


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _files_of(session_dir: Path) -> set[str]:
    return {p.name for p in session_dir.iterdir()} if session_dir.exists() else set()


def test_delete_removes_the_conversations_kiro_session_files_under_kiros_lock_rules(
        conversations_client, run_async, tmp_path, conversations_state_dir):
    from kirocrew_core import home

    sessions = home.kiro_sessions_dir()

    async def main() -> None:
        async with conversations_client(extra_env={"KIRO_FAKE_ADVERTISE_FORK": "1"}) as client:
            gone = await client.call("kiro_delegate", conversation="new", name="gone", workspace=str(tmp_path),
                                     message="!say PROMPT-IN-KIRO-TRANSCRIPT\n!subagent SUBAGENT-PROMPT")
            before = _files_of(sessions)
            kept = await client.call("kiro_delegate", conversation="new", name="kept", workspace=str(tmp_path),
                                     message="!say other")
            kept_files = _files_of(sessions) - before
            fork = await client.call("kiro_fork", conversationId=gone["run"]["conversationId"], name="copy")
            fork_files = _files_of(sessions) - before - kept_files
            assert fork_files, "the fork is its own kiro session"
            # The conversation's session and its sub-agent's, which kiro links by parent_session_id.
            (child_id,) = {n.split(".")[0] for n in before
                           if n.endswith(".json") and "parent_session_id" in (sessions / n).read_text()}
            (session_id,) = {n.split(".")[0] for n in before} - {child_id}
            assert "PROMPT-IN-KIRO-TRANSCRIPT" in (sessions / f"{session_id}.jsonl").read_text()
            assert "SUBAGENT-PROMPT" in (sessions / f"{child_id}.jsonl").read_text()

            cid = gone["run"]["conversationId"]
            await client.call("kiro_archive", conversationId=cid)
            (sessions / f"{session_id}.lock").write_text(json.dumps({"pid": os.getpid(), "started_at": "now"}))
            await expect_error(client, "kiro_session_in_use", "kiro_delete", conversationId=cid, confirmName="gone")
            assert (sessions / f"{session_id}.jsonl").exists(), "nothing is removed while a live pid holds the lock"
            assert (await client.call("kiro_status", archive="all"))["counts"]["archived"] == 1

            (sessions / f"{session_id}.lock").write_text(json.dumps({"pid": _dead_pid(), "started_at": "then"}))
            assert (await client.call("kiro_delete", conversationId=cid, confirmName="gone"))["deleted"] is True
            left = _files_of(sessions)
            assert not any(name.startswith((session_id, child_id)) for name in left), left
            assert {n for n in kept_files if not n.endswith(".lock")} <= left, "other conversations keep theirs"
            assert {n for n in fork_files if not n.endswith(".lock")} <= left, "the fork keeps its own session"
            assert not any("PROMPT-IN-KIRO-TRANSCRIPT" in (sessions / n).read_text(errors="replace")
                           or "SUBAGENT-PROMPT" in (sessions / n).read_text(errors="replace")
                           for n in left - fork_files if (sessions / n).is_file())

            await client.call("kiro_archive", conversationId=fork["conversationId"])
            await client.call("kiro_delete", conversationId=fork["conversationId"], confirmName="copy")
            assert not (fork_files & _files_of(sessions)), "deleting the fork removes the fork's session"
            assert kept["run"]["status"] == "completed"

    run_async(main())
