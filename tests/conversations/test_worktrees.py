"""Conversation worktrees against real Git repositories in the test's tmp dir."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kirocrew_core.errors import KirocrewError
from kirocrew_testing.requirements import executable
from kirocrew_conversations.errors import CATALOGUE
from kirocrew_conversations.worktrees import (
    WorktreeInfo,
    cleanup_worktree,
    create_worktree,
    inspect_worktree,
    slugify,
    worktree_remains,
)


@pytest.fixture(autouse=True)
def _git_installed() -> None:
    """Every test here runs git, through the product or directly."""
    executable("git", apt="git")


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The test's own git: identity from the environment, never from any config file."""
    env = {
        "PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Committer", "GIT_COMMITTER_EMAIL": "committer@example.invalid",
    }
    return subprocess.run([executable("git", apt="git"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=check, timeout=60)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "--quiet", "--initial-branch=main")
    (root / "README.md").write_text("hello\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('a')\n")
    git(root, "add", "-A")
    git(root, "commit", "--quiet", "-m", "initial")
    return root


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def make(repo: Path, state_dir: Path, base_ref: str = "main", short_id: str = "ab12") -> WorktreeInfo:
    return create_worktree(repo, slug="fix-bug", short_id=short_id, base_ref=base_ref, state_dir=state_dir)


def assert_code(excinfo: pytest.ExceptionInfo[KirocrewError], code: str) -> None:
    assert code in CATALOGUE
    assert excinfo.value.code == code


def commit_in(path: Path, name: str, text: str) -> None:
    (path / name).write_text(text)
    git(path, "add", "--", name)
    git(path, "commit", "--quiet", "-m", f"change {name}")


def test_a_worktree_is_created_on_its_own_branch_under_the_state_area(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)

    assert info.branch == "kiro/fix-bug-ab12"
    assert info.path == state_dir / "worktrees" / "fix-bug-ab12"
    assert (info.path / "src" / "app.py").read_text() == "print('a')\n"
    assert info.base_ref == "main"
    assert info.base_sha == git(repo, "rev-parse", "main").stdout.strip()
    assert git(info.path, "symbolic-ref", "--short", "HEAD").stdout.strip() == info.branch
    assert (state_dir / "worktrees").stat().st_mode & 0o777 == 0o700
    # the user's checkout stays on its own branch
    assert git(repo, "symbolic-ref", "--short", "HEAD").stdout.strip() == "main"


def test_a_worktree_can_start_from_an_older_commit(repo: Path, state_dir: Path) -> None:
    first = git(repo, "rev-parse", "HEAD").stdout.strip()
    commit_in(repo, "later.txt", "later\n")
    info = make(repo, state_dir, base_ref="HEAD~1")
    assert info.base_sha == first
    assert not (info.path / "later.txt").exists()


def test_a_second_worktree_with_the_same_name_is_refused(repo: Path, state_dir: Path) -> None:
    make(repo, state_dir)
    with pytest.raises(KirocrewError) as excinfo:
        make(repo, state_dir)
    assert_code(excinfo, "worktree_exists")


def test_a_subdirectory_of_a_repository_is_refused(repo: Path, state_dir: Path) -> None:
    with pytest.raises(KirocrewError) as excinfo:
        make(repo / "src", state_dir)
    assert_code(excinfo, "not_repository_root")
    assert not state_dir.exists()


def test_a_directory_outside_any_repository_is_refused(tmp_path: Path, state_dir: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(KirocrewError) as excinfo:
        make(plain, state_dir)
    assert_code(excinfo, "not_a_git_repository")


@pytest.mark.parametrize("change", ["unstaged", "staged", "untracked"])
def test_a_repository_with_uncommitted_work_is_refused(repo: Path, state_dir: Path, change: str) -> None:
    if change == "untracked":
        (repo / "new.txt").write_text("new\n")
    else:
        (repo / "README.md").write_text("edited\n")
        if change == "staged":
            git(repo, "add", "README.md")
    with pytest.raises(KirocrewError) as excinfo:
        make(repo, state_dir)
    assert_code(excinfo, "repository_dirty")
    assert git(repo, "branch", "--list", "kiro/*").stdout.strip() == ""


def test_a_ref_that_resolves_to_nothing_is_refused(repo: Path, state_dir: Path) -> None:
    with pytest.raises(KirocrewError) as excinfo:
        make(repo, state_dir, base_ref="no-such-branch")
    assert_code(excinfo, "base_ref_not_found")


@pytest.mark.parametrize("ref", ["--upload-pack=x", "-b", "", "main branch", "a" * 300])
def test_an_option_looking_or_malformed_ref_is_refused_before_git_sees_it(
    repo: Path, state_dir: Path, ref: str
) -> None:
    with pytest.raises(KirocrewError) as excinfo:
        make(repo, state_dir, base_ref=ref)
    assert_code(excinfo, "invalid_base_ref")
    assert git(repo, "branch", "--list", "kiro/*").stdout.strip() == ""


def test_a_slug_that_is_not_branch_safe_is_refused(repo: Path, state_dir: Path) -> None:
    with pytest.raises(KirocrewError) as excinfo:
        create_worktree(repo, slug="../escape", short_id="ab12", base_ref="main", state_dir=state_dir)
    assert_code(excinfo, "invalid_arguments")
    assert slugify("  My Task!! v2 ") == "my-task-v2"


def test_a_fresh_worktree_inspects_as_clean_and_integrated(repo: Path, state_dir: Path) -> None:
    report = inspect_worktree(make(repo, state_dir))
    assert report["branch"] == "kiro/fix-bug-ab12"
    assert report["dirty"] is False
    assert report["changedFiles"] == []
    assert report["mergeState"] == {"integrated": True, "ahead": 0, "behind": 0, "conflicted": False}
    assert report["diffStats"] == {"files": 0, "insertions": 0, "deletions": 0}
    assert str(state_dir) not in repr(report)  # no absolute paths leave the server


def test_a_commit_in_the_worktree_shows_as_unintegrated_and_ahead(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    commit_in(info.path, "feature.txt", "one\ntwo\n")
    (info.path / "scratch.txt").write_text("x\n")

    report = inspect_worktree(info)

    assert report["mergeState"]["integrated"] is False
    assert report["mergeState"]["ahead"] == 1
    assert report["mergeState"]["behind"] == 0
    assert report["dirty"] is True
    assert report["changedFiles"] == [
        {"path": "feature.txt", "status": "A"}, {"path": "scratch.txt", "status": "?"},
    ]
    assert report["diffStats"] == {"files": 1, "insertions": 2, "deletions": 0}


def test_merging_into_the_base_from_the_main_checkout_makes_it_integrated(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    commit_in(info.path, "feature.txt", "one\n")
    commit_in(repo, "other.txt", "base moved on\n")
    git(repo, "merge", "--quiet", "--no-edit", info.branch)

    report = inspect_worktree(info)

    assert report["mergeState"]["integrated"] is True
    assert report["mergeState"]["ahead"] == 0
    assert report["mergeState"]["behind"] == 2  # the base's own commit and the merge commit


def test_cleanup_is_refused_while_runs_are_active(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    with pytest.raises(KirocrewError) as excinfo:
        cleanup_worktree(info, active_runs=1)
    assert_code(excinfo, "worktree_active")
    assert info.path.is_dir()


def test_cleanup_is_refused_for_a_dirty_worktree(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    (info.path / "README.md").write_text("agent edit\n")
    with pytest.raises(KirocrewError) as excinfo:
        cleanup_worktree(info, active_runs=0)
    assert_code(excinfo, "worktree_dirty")
    assert (info.path / "README.md").read_text() == "agent edit\n"


def test_cleanup_is_refused_for_an_untracked_file_in_the_worktree(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    (info.path / "notes.txt").write_text("keep me\n")
    with pytest.raises(KirocrewError) as excinfo:
        cleanup_worktree(info, active_runs=0)
    assert_code(excinfo, "worktree_dirty")
    assert (info.path / "notes.txt").exists()


def test_cleanup_is_refused_while_ignored_files_would_be_deleted_and_inspect_counts_them(
        repo: Path, state_dir: Path) -> None:
    (repo / ".gitignore").write_text(".env\nbuild/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "--quiet", "-m", "ignore")
    info = make(repo, state_dir)
    (info.path / ".env").write_text("API_KEY=only-copy\n")
    (info.path / "build").mkdir()
    (info.path / "build" / "a.o").write_text("obj\n")
    report = inspect_worktree(info)
    assert report["dirty"] is False and report["ignoredFiles"] == 2
    with pytest.raises(KirocrewError) as excinfo:
        cleanup_worktree(info, active_runs=0)
    assert_code(excinfo, "worktree_ignored_files")
    assert "2 ignored file(s)" in excinfo.value.message
    assert (info.path / ".env").read_text() == "API_KEY=only-copy\n" and (info.path / "build" / "a.o").exists()


def test_a_git_failure_names_no_absolute_path(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    (info.path / ".git").write_text("gitdir: nowhere\n")
    with pytest.raises(KirocrewError) as excinfo:
        inspect_worktree(info)
    assert_code(excinfo, "git_failed")
    assert str(state_dir) not in excinfo.value.message and "<path>" in excinfo.value.message


def test_worktree_remains_while_its_directory_or_its_branch_exists(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    assert worktree_remains(info)
    git(repo, "worktree", "remove", str(info.path))
    assert worktree_remains(info), "the branch is still there"
    git(repo, "branch", "-D", info.branch)
    assert not worktree_remains(info)


def test_cleanup_is_refused_for_unintegrated_commits_and_never_merges(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    commit_in(info.path, "feature.txt", "one\n")
    main_before = git(repo, "rev-parse", "main").stdout.strip()
    with pytest.raises(KirocrewError) as excinfo:
        cleanup_worktree(info, active_runs=0)
    assert_code(excinfo, "worktree_unintegrated")
    assert git(repo, "rev-parse", "main").stdout.strip() == main_before
    assert git(repo, "rev-parse", "--verify", info.branch).returncode == 0
    assert info.path.is_dir()


def test_cleanup_is_refused_for_a_worktree_in_a_conflicted_merge(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    commit_in(info.path, "README.md", "worktree side\n")
    commit_in(repo, "README.md", "base side\n")
    merge = git(info.path, "merge", "--no-edit", "main", check=False)
    assert merge.returncode != 0  # a real conflict

    assert inspect_worktree(info)["mergeState"]["conflicted"] is True
    with pytest.raises(KirocrewError) as excinfo:
        cleanup_worktree(info, active_runs=0)
    assert_code(excinfo, "worktree_conflicted")
    assert info.path.is_dir()


def test_cleanup_of_an_integrated_worktree_removes_directory_and_branch(repo: Path, state_dir: Path) -> None:
    info = make(repo, state_dir)
    commit_in(info.path, "feature.txt", "one\n")
    git(repo, "merge", "--quiet", "--ff-only", info.branch)

    cleanup_worktree(info, active_runs=0)

    assert not info.path.exists()
    assert git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{info.branch}", check=False).returncode != 0
    assert info.branch not in git(repo, "worktree", "list").stdout
    assert (repo / "feature.txt").read_text() == "one\n"  # the user's merged work is untouched


def test_cleanup_refuses_when_the_base_ref_no_longer_resolves(repo: Path, state_dir: Path) -> None:
    git(repo, "branch", "topic")
    info = make(repo, state_dir, base_ref="topic")
    git(repo, "branch", "-D", "topic")
    assert inspect_worktree(info)["mergeState"]["integrated"] is None
    with pytest.raises(KirocrewError) as excinfo:
        cleanup_worktree(info, active_runs=0)
    assert_code(excinfo, "base_ref_not_found")
    assert info.path.is_dir()


def test_creating_a_worktree_runs_no_repository_hook(repo: Path, state_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\n")
    hook.chmod(0o755)
    make(repo, state_dir)
    assert not marker.exists()
    git(repo, "checkout", "--quiet", "-b", "probe")  # the hook is real: plain git does run it
    assert marker.exists()
