"""Lessons: the store's bounds and codes, the learn_* handlers (identity, governance, workspace), `kirocrew learn`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core.config import set_value
from kirocrew_core.coretools.contract import CrewSession, ToolCall
from kirocrew_core.errors import KirocrewError
from kirocrew_core.lessons import store, tools

WS = "/srv/project-a"


def session(workspace: str | None = WS, target: str = "conv-1") -> CrewSession:
    return CrewSession("kcs1-" + "0" * 32, "conversation", target, agent="kirocrew", workspace=workspace)


def call(tool: str, args: dict[str, Any], who: CrewSession | None = None) -> str:
    handler = {"learn_add": tools.learn_add, "learn_list": tools.learn_list, "learn_remove": tools.learn_remove}[tool]
    identity = "lenient" if tool == "learn_list" else "strict"
    return asyncio.run(handler(args, ToolCall(tool, who, None, identity)))  # type: ignore[arg-type]


def refused(tool: str, args: dict[str, Any], who: CrewSession | None = None) -> KirocrewError:
    with pytest.raises(KirocrewError) as caught:
        call(tool, args, who)
    return caught.value


def stored() -> bytes | None:
    return store.store_file().read_bytes() if store.store_file().exists() else None


def test_a_session_saves_lists_and_removes_a_lesson_with_the_reference_wording(isolated_homes):
    me = session()
    assert call("learn_list", {}, me) == "No lessons saved."
    assert call("learn_add", {"rule": "Run one test file with -n 0", "category": "tool"}, me) == \
        "Saved lesson (global, L1): Run one test file with -n 0"
    assert call("learn_add", {"rule": "Prefer small commits", "negative": "one giant commit"}, me) == \
        "Saved lesson (global, L2): Prefer small commits"
    assert call("learn_list", {}, me) == "[tool] Run one test file with -n 0\n" \
                                         "[knowledge] Prefer small commits (not: one giant commit)"
    assert call("learn_list", {"offset": 1, "limit": 1}, me) == \
        "[knowledge] Prefer small commits (not: one giant commit)"
    assert call("learn_remove", {"query": "GIANT"}, me) == "No lessons matched: GIANT"  # the rule, not the negative
    assert call("learn_remove", {"query": "small COMMITS"}, me) == \
        "Removed 1 lesson matching: small COMMITS\n- [knowledge] Prefer small commits (not: one giant commit)"
    assert call("learn_remove", {"query": "l1"}, me).startswith("Removed 1 lesson matching: l1")  # by id
    assert call("learn_list", {}, me) == "No lessons saved."


def test_ids_are_stable_and_never_reused_and_the_same_rule_is_not_kept_twice(isolated_homes):
    me = session()
    call("learn_add", {"rule": "alpha"}, me)
    call("learn_add", {"rule": "beta"}, me)
    call("learn_remove", {"query": "L1"}, me)
    assert call("learn_add", {"rule": "gamma"}, me) == "Saved lesson (global, L3): gamma"
    assert call("learn_add", {"rule": "BETA"}, me) == "Lesson already saved (global, L2): beta"
    assert [lesson.id for lesson in store.all_lessons()] == ["L2", "L3"]


@pytest.mark.parametrize("args, code", [
    ({"rule": "x" * 501}, "rule_too_long"),
    ({"rule": "   "}, "rule_required"),
    ({"rule": "ok", "negative": "n" * 501}, "negative_too_long"),
    ({"rule": "ok", "category": "gossip"}, "bad_category"),
    ({"rule": "ok", "scope": "galaxy"}, "bad_scope"),
    ({"rule": "ok", "scope": "workspace", "workspace": "relative/dir"}, "workspace_not_absolute"),
    ({"rule": "ok", "workspace": "/somewhere"}, "workspace_without_scope"),
])
def test_bad_input_is_refused_with_a_stable_code_and_changes_nothing(isolated_homes, args, code):
    call("learn_add", {"rule": "keep me"}, session())
    before = stored()
    assert refused("learn_add", args, session(workspace=None)).code == code
    assert stored() == before


def test_a_rule_over_the_limit_is_rejected_not_truncated(isolated_homes):
    error = refused("learn_add", {"rule": "r" * (store.RULE_MAX_CHARS + 1)}, session())
    assert "rejected, not truncated" in error.message
    assert stored() is None


def test_add_and_remove_need_a_verified_session_but_list_shows_a_plain_client_the_global_lessons(isolated_homes):
    assert refused("learn_add", {"rule": "anonymous"}, None).code == "caller_unverified"
    assert refused("learn_remove", {"query": "x"}, None).code == "caller_unverified"
    call("learn_add", {"rule": "global one"}, session())
    call("learn_add", {"rule": "only in A", "scope": "workspace"}, session())
    assert call("learn_list", {}, None) == "[knowledge] global one"
    assert call("learn_list", {}, session()) == "[knowledge] global one\n[knowledge] only in A"
    assert call("learn_list", {}, session(workspace="/srv/project-b")) == "[knowledge] global one"


def test_a_workspace_lesson_defaults_to_the_sessions_workspace_and_may_not_name_another(isolated_homes):
    assert call("learn_add", {"rule": "use make", "scope": "workspace"}, session()) == \
        "Saved lesson (workspace, L1): use make"
    assert store.all_lessons()[0].workspace == WS
    assert call("learn_add", {"rule": "sub", "scope": "workspace", "workspace": WS + "/pkg"}, session())
    assert refused("learn_add", {"rule": "x", "scope": "workspace", "workspace": "/srv/project-b"},
                   session()).code == "workspace_mismatch"
    assert refused("learn_add", {"rule": "x", "scope": "workspace"}, session(workspace=None)).code == \
        "workspace_required"
    # A session removes among what it sees: another workspace's lessons are not its to remove.
    assert call("learn_remove", {"query": "use make"}, session(workspace="/srv/project-b")) == \
        "No lessons matched: use make"


def test_a_removal_matching_too_many_lessons_is_refused_and_removes_nothing(isolated_homes):
    for n in range(store.MAX_REMOVE_AT_ONCE + 1):
        call("learn_add", {"rule": f"rule number {n}"}, session())
    before = stored()
    error = refused("learn_remove", {"query": "rule"}, session())
    assert error.code == "query_too_broad" and stored() == before
    assert call("learn_remove", {"query": "number 10"}, session()).startswith("Removed 1 lesson")


def test_the_store_is_bounded(isolated_homes, monkeypatch):
    monkeypatch.setattr(store, "MAX_LESSONS", 2)
    call("learn_add", {"rule": "one"}, session())
    call("learn_add", {"rule": "two"}, session())
    assert refused("learn_add", {"rule": "three"}, session()).code == "lessons_full"
    assert len(store.all_lessons()) == 2


def test_a_malformed_store_is_reported_and_left_as_it_is(isolated_homes):
    store.store_file().parent.mkdir(parents=True)
    store.store_file().write_text('{"lessons": "not a list", "next_id": 1}')
    assert refused("learn_add", {"rule": "x"}, session()).code == "lessons_store_malformed"
    assert refused("learn_list", {}, session()).code == "lessons_store_malformed"
    assert store.store_file().read_text() == '{"lessons": "not a list", "next_id": 1}'
    assert store.context_text(WS) == ""  # a session still starts


@pytest.mark.parametrize("tool, args", [("learn_add", {"rule": "blocked"}), ("learn_remove", {"query": "keep"})])
def test_governance_denying_memory_writes_refuses_a_sessions_add_and_remove(isolated_homes, tool, args):
    call("learn_add", {"rule": "keep me"}, session())
    before = stored()
    set_value("governance.memory_writes", "deny")
    error = refused(tool, args, session())
    assert error.code == "governance_denied"
    assert error.message.startswith("durable memory writes blocked by governance policy")
    assert stored() == before
    assert call("learn_list", {}, session()) == "[knowledge] keep me"  # reading is not a memory write


def test_an_unreadable_policy_blocks_memory_writes(isolated_homes):
    from kirocrew_core import home

    home.ensure_crew_home()
    home.config_file().write_text("governance = [broken\n")
    assert refused("learn_add", {"rule": "x"}, session()).code == "governance_denied"


def test_the_global_lessons_file_follows_every_change(isolated_homes):
    assert store.ensure_global_file().read_text().endswith("No lessons saved.\n")
    call("learn_add", {"rule": "global rule", "category": "preference"}, session())
    call("learn_add", {"rule": "workspace rule", "scope": "workspace"}, session())
    text = store.global_file().read_text()
    assert "- [preference] global rule" in text and "workspace rule" not in text
    assert "No lessons saved." not in text
    assert store.global_file().stat().st_mode & 0o777 == 0o600
    assert "- [knowledge] workspace rule" in store.context_text(WS + "/deep/inside")
    assert store.context_text("/srv/project-b") == ""


# -- the CLI twins ------------------------------------------------------------------------------------------------


def test_kirocrew_learn_add_list_remove_work_on_the_same_store_and_are_not_gated(kirocrew, tmp_path):
    set_value("governance.memory_writes", "deny")  # the owner is the authority the switch protects
    added = kirocrew("learn", "add", "Keep PRs small", "--category", "preference")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "Saved lesson L1 (global): Keep PRs small"
    here = kirocrew("learn", "add", "Use the Makefile", "--scope", "workspace", "--workspace", str(tmp_path))
    assert here.stdout.strip() == f"Saved lesson L2 (workspace {tmp_path}): Use the Makefile"
    listing = kirocrew("learn", "list")
    assert listing.stdout.splitlines() == ["L1  [preference] Keep PRs small",
                                           f"L2  [knowledge] Use the Makefile  (workspace {tmp_path})"]
    assert [x["id"] for x in json.loads(kirocrew("learn", "list", "--json").stdout)] == ["L1", "L2"]
    assert call("learn_list", {}, session(workspace=str(tmp_path))) == \
        "[preference] Keep PRs small\n[knowledge] Use the Makefile"
    gone = kirocrew("learn", "remove", "makefile")
    assert gone.stdout.splitlines()[0] == "Removed 1 lesson matching: makefile"
    assert kirocrew("learn", "remove", "nothing like it").stdout.strip() == "No lessons matched: nothing like it"


def test_kirocrew_learn_refuses_bad_input_with_its_code_and_exit_2(kirocrew):
    result = kirocrew("learn", "add", "x" * 501)
    assert result.returncode == 2 and "error[rule_too_long]" in result.stderr
    assert not store.store_file().exists()


def test_kirocrew_learn_context_prints_the_workspace_lessons_of_the_hook_events_cwd(kirocrew, tmp_path: Path):
    kirocrew("learn", "add", "workspace only", "--scope", "workspace", "--workspace", str(tmp_path))
    event = json.dumps({"hook_event_name": "agentSpawn", "cwd": str(tmp_path / "src")})
    shown = kirocrew("learn", "context", input=event)
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[1:] == ["- [knowledge] workspace only"]
    elsewhere = kirocrew("learn", "context", input=json.dumps({"cwd": "/"}))
    assert (elsewhere.returncode, elsewhere.stdout) == (0, "")


def test_a_worktree_sessions_workspace_lessons_are_its_repositorys(isolated_homes, tmp_path: Path):
    import subprocess

    repo, tree = tmp_path / "repo", tmp_path / "elsewhere" / "wt"
    (repo / "src").mkdir(parents=True)
    from kirocrew_testing.requirements import executable

    git = [executable("git", apt="git"), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    (repo / "src" / "a.txt").write_text("a")
    subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "one"], check=True)
    subprocess.run([*git, "-C", str(repo), "worktree", "add", "-q", str(tree)], check=True)

    in_tree = session(workspace=str(tree))
    assert call("learn_add", {"rule": "from the worktree", "scope": "workspace"}, in_tree)
    assert store.all_lessons()[0].workspace == str(repo.resolve())
    assert "from the worktree" in store.context_text(str(repo / "src"))
    assert "from the worktree" in store.context_text(str(tree / "src"))
    assert call("learn_list", {}, in_tree) == "[knowledge] from the worktree"
    assert store.checkout_of(str(tmp_path)) == str(tmp_path.resolve())  # not a repository: unchanged
