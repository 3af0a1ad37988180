"""Isolated Git worktrees for conversations in ``worktree`` mode.

The server never commits, merges, pushes or deploys: it creates a dedicated
``kiro/<slug>-<short-id>`` branch and worktree under its state area, reports
on it, and removes it only when that loses nothing. Every refusal has a
stable code and changes nothing.

Git runs as a real subprocess with a fixed argument list (never a shell), a
timeout, and an explicit minimal environment, so neither the user's global or
system config nor inherited ``GIT_DIR``-style variables can redirect it. Hooks
and fsmonitor are disabled per call: creating a worktree must not execute
repository-supplied programs behind the caller's back.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError
from kirocrew_core.home import user_home

from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.limits import CATALOG_MAX_ITEMS, COUNT_MAX, GIT_REF_MAX_CHARS, NAME_MAX_CHARS
from kirocrew_conversations.redact import redact_text
from kirocrew_conversations.state_paths import ensure_state_dir

if TYPE_CHECKING:
    from kirocrew_conversations.store import Workspace

GIT_TIMEOUT_SECONDS = 60
BRANCH_PREFIX = "kiro/"
WORKTREES_DIR = "worktrees"
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SHORT_ID = re.compile(r"[a-z0-9]{4,32}")
_UNMERGED = frozenset({"DD", "AU", "UD", "UA", "DU", "AA", "UU"})
# Present in a worktree's git dir while an operation waits for the user.
_IN_PROGRESS = ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "rebase-merge", "rebase-apply")


@dataclass(frozen=True)
class WorktreeInfo:
    """One conversation's worktree. ``base_ref`` is the name it was given; ``base_sha`` the commit that name
    resolved to when the worktree was made, which later moves of the name never change."""

    repo: Path  # the source repository root
    path: Path  # the worktree directory under the state area
    branch: str
    base_ref: str
    base_sha: str | None = None  # None when rebuilt from state that kept only the ref


def stored_info(workspace: Workspace) -> WorktreeInfo:
    """The worktree a conversation's stored ``workspace`` names (its strategy is ``worktree``)."""
    return WorktreeInfo(repo=Path(workspace.path), path=Path(workspace.worktree_path or ""),
                        branch=workspace.worktree_branch or "", base_ref=workspace.worktree_base_ref or "HEAD",
                        base_sha=workspace.worktree_base_commit)


def _git_env() -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(user_home()),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",  # status must not take index.lock while Kiro works in the tree
    }


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    argv = ["git", "-c", "core.hooksPath=" + os.devnull, "-c", "core.fsmonitor=false",
            "-c", "core.quotePath=false", *args]
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=_git_env(), stdin=subprocess.DEVNULL, capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS, check=False,
        )
    except FileNotFoundError as exc:
        raise conversation_error("git_failed", "git is not installed or not on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        raise conversation_error("git_failed", f"git {args[0]} timed out after {GIT_TIMEOUT_SECONDS}s") from exc
    except NotADirectoryError as exc:
        raise conversation_error("not_a_git_repository", "the workspace is not a directory") from exc
    if check and done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        # git's stderr names absolute paths (the repository, the worktree): never pass it through raw.
        raise conversation_error(
            "git_failed", redact_text(f"git {args[0]} failed: {(detail[-1] if detail else 'no message')}", 200)
        )
    return done


def _out(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stdout.decode("utf-8", "replace").strip()


def _z_fields(done: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [f for f in done.stdout.decode("utf-8", "replace").split("\0") if f]


def slugify(name: str) -> str:
    """A branch-safe slug from a conversation name (``My Task!`` → ``my-task``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:NAME_MAX_CHARS].strip("-")
    return slug or "conversation"


def _repo_root(repo: Path) -> Path:
    """``repo`` resolved, refusing anything but the top of a non-bare repository."""
    if not repo.is_dir():
        raise conversation_error("not_a_git_repository", "the workspace is not an existing directory")
    done = _git(repo, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0 or not _out(done):
        raise conversation_error("not_a_git_repository", "the workspace is not inside a Git work tree")
    if Path(_out(done)).resolve() != repo.resolve():
        raise conversation_error(
            "not_repository_root", "the workspace is a subdirectory; pass the repository root"
        )
    return repo.resolve()


def _resolve_commit(repo: Path, ref: str) -> str:
    done = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
    sha = _out(done)
    if done.returncode != 0 or not sha:
        raise conversation_error("base_ref_not_found", "the base ref does not resolve to a commit")
    return sha


def _check_base_ref(ref: str) -> None:
    # Refs reach git as arguments; an option-looking one (``--upload-pack=…``) must never be parsed as one.
    if (not isinstance(ref, str) or not ref or len(ref) > GIT_REF_MAX_CHARS or ref.startswith("-")
            or any(ch.isspace() or ord(ch) < 0x20 or ch == "\x7f" for ch in ref)):
        raise conversation_error("invalid_base_ref", "the base ref is empty, too long, or not a plain ref")


def create_worktree(repo: Path, *, slug: str, short_id: str, base_ref: str, state_dir: Path) -> WorktreeInfo:
    """Branch ``kiro/<slug>-<short_id>`` from ``base_ref`` into ``<state_dir>/worktrees/<slug>-<short_id>``.

    ``repo`` must be the root of a clean repository: a worktree started from a
    dirty tree would silently leave the user's uncommitted work behind.
    """
    if not _SLUG.fullmatch(slug or "") or len(slug) > NAME_MAX_CHARS:
        raise conversation_error("invalid_arguments", "slug must be lowercase letters, digits and single hyphens")
    if not _SHORT_ID.fullmatch(short_id or ""):
        raise conversation_error("invalid_arguments", "short id must be 4-32 lowercase letters or digits")
    _check_base_ref(base_ref)
    root = _repo_root(Path(repo))
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignore-submodules=none")
    if status.stdout.strip(b"\0"):
        raise conversation_error(
            "repository_dirty", "the repository has staged, unstaged or untracked changes; commit or stash them"
        )
    base_sha = _resolve_commit(root, base_ref)
    name = f"{slug}-{short_id}"
    branch = BRANCH_PREFIX + name
    if _git(root, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False).returncode == 0:
        raise conversation_error("worktree_exists", f"branch {branch} already exists")
    parent = ensure_state_dir(Path(state_dir)) / WORKTREES_DIR
    ensure_state_dir(parent)
    path = parent / name
    if os.path.lexists(path):
        raise conversation_error("worktree_exists", f"worktree directory {name} already exists")
    _git(root, "worktree", "add", "--quiet", "-b", branch, str(path), base_sha)
    return WorktreeInfo(repo=root, path=path, branch=branch, base_ref=base_ref, base_sha=base_sha)


def _in_progress(path: Path) -> bool:
    for marker in _IN_PROGRESS:
        done = _git(path, "rev-parse", "--git-path", marker)
        marker_path = Path(_out(done))
        if (marker_path if marker_path.is_absolute() else path / marker_path).exists():
            return True
    return False


def _worktree_state(info: WorktreeInfo) -> dict[str, Any]:
    path = Path(info.path)
    if not path.is_dir():
        raise conversation_error("worktree_not_found", "the worktree directory no longer exists")
    entries = _z_fields(_git(path, "status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all"))
    codes = [e[:2] for e in entries if len(e) > 3 and e[2] == " "]
    conflicted = any(code in _UNMERGED for code in codes) or _in_progress(path)
    head = _out(_git(path, "rev-parse", "--verify", "HEAD"))
    head_branch = _git(path, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    branch_tip = _git(info.repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{info.branch}", check=False)
    if branch_tip.returncode != 0:
        raise conversation_error("worktree_not_found", f"branch {info.branch} no longer exists")
    try:
        base_tip: str | None = _resolve_commit(Path(info.repo), info.base_ref)
    except KirocrewError as exc:
        if exc.code != "base_ref_not_found":
            raise
        base_tip = None  # unknowable: inspect says so, cleanup keeps everything
    # `git worktree remove` deletes ignored files without asking; status (even --ignored) skips their contents.
    ignored = _z_fields(_git(path, "ls-files", "--others", "--ignored", "--exclude-standard", "-z"))
    return {
        "path": path, "dirty": bool(entries), "ignored": len(ignored), "conflicted": conflicted, "head": head,
        "head_branch": _out(head_branch) if head_branch.returncode == 0 else None,
        "branch_tip": _out(branch_tip), "base_tip": base_tip,
    }


def _count(repo: Path, spec: str) -> int:
    return int(_out(_git(repo, "rev-list", "--count", spec)) or 0)


def inspect_worktree(info: WorktreeInfo) -> dict[str, Any]:
    """What a reviewer needs before integrating or cleaning up; paths are workspace-relative.

    ``integrated`` means neither the branch nor the worktree's HEAD has a commit
    outside the base's current tip; ``None`` when the base ref no longer resolves.
    """
    state = _worktree_state(info)
    path, base_tip = state["path"], state["base_tip"]
    ahead = behind = None
    integrated: bool | None = None
    if base_tip is not None:
        behind = _count(path, f"{state['branch_tip']}..{base_tip}")
        ahead = _count(path, f"{base_tip}..{state['branch_tip']}")
        integrated = ahead == 0 and _count(path, f"{base_tip}..{state['head']}") == 0
    # Changes are measured from where the work forked, so later base commits do not show as ours.
    fork_point = info.base_sha or state["head"]
    if base_tip is not None:
        mb = _git(path, "merge-base", base_tip, state["head"], check=False)
        fork_point = _out(mb) or fork_point
    changed: list[dict[str, str]] = []
    fields = _z_fields(_git(path, "diff", "--no-renames", "--name-status", "-z", fork_point, "--"))
    for status, file in zip(fields[0::2], fields[1::2], strict=False):
        changed.append({"path": file, "status": status[:1]})
    for file in _z_fields(_git(path, "ls-files", "--others", "--exclude-standard", "-z")):
        changed.append({"path": file, "status": "?"})
    changed.sort(key=lambda item: item["path"])
    insertions = deletions = files = 0
    numstat = _z_fields(_git(path, "diff", "--no-renames", "--numstat", "-z", fork_point, "--"))
    for line in numstat:
        added, removed, _file = (line.split("\t", 2) + ["", ""])[:3]
        files += 1
        insertions += int(added) if added.isdigit() else 0  # "-" marks a binary file
        deletions += int(removed) if removed.isdigit() else 0
    return {
        "branch": info.branch,
        "headBranch": state["head_branch"],
        "base": {"ref": info.base_ref, "createdFrom": info.base_sha, "currentTip": base_tip},
        "dirty": state["dirty"],
        "ignoredFiles": min(state["ignored"], COUNT_MAX),
        "changedFiles": changed[:CATALOG_MAX_ITEMS],
        "changedFilesTotal": min(len(changed), COUNT_MAX),
        "changedFilesTruncated": len(changed) > CATALOG_MAX_ITEMS,
        "mergeState": {"integrated": integrated, "ahead": ahead, "behind": behind,
                       "conflicted": state["conflicted"]},
        "diffStats": {"files": min(files, COUNT_MAX), "insertions": min(insertions, COUNT_MAX),
                      "deletions": min(deletions, COUNT_MAX)},
    }


def cleanup_worktree(info: WorktreeInfo, *, active_runs: int) -> None:
    """Remove an idle, clean, integrated worktree and its branch; otherwise refuse and change nothing.

    There is no force: anything cleanup would lose (uncommitted files, ignored
    files, commits the base lacks, a half-done merge) is a refusal, and it never
    merges. ``active_runs`` is the caller's count, taken atomically with blocking
    new runs (see ``Store.begin_retiring``).
    """
    if active_runs > 0:
        raise conversation_error("worktree_active", f"{active_runs} run(s) are active or queued")
    state = _worktree_state(info)
    if state["conflicted"]:
        raise conversation_error("worktree_conflicted", "resolve or abort the conflicted operation first")
    if state["dirty"]:
        raise conversation_error("worktree_dirty", "commit or discard the worktree's changes first")
    if state["ignored"]:
        raise conversation_error("worktree_ignored_files",
                                 f"{state['ignored']} ignored file(s) in the worktree would be deleted; "
                                 "move or delete them first")
    if state["base_tip"] is None:
        raise conversation_error("base_ref_not_found", "the base ref no longer resolves; integration is unknown")
    for tip in (state["branch_tip"], state["head"]):
        if _count(state["path"], f"{state['base_tip']}..{tip}"):
            raise conversation_error("worktree_unintegrated", "the branch has commits the base does not have")
    # Without --force git itself re-checks cleanliness, closing the race with a last-moment edit.
    _git(Path(info.repo), "worktree", "remove", str(state["path"]))
    # Compare-and-delete: the branch goes only if it still points at the commit we verified as integrated.
    _git(Path(info.repo), "update-ref", "-d", f"refs/heads/{info.branch}", state["branch_tip"])


def worktree_remains(info: WorktreeInfo) -> bool:
    """True while the worktree directory or its branch still exists (deleting the conversation would orphan it)."""
    if os.path.lexists(info.path):
        return True
    if not Path(info.repo).is_dir():
        return False
    found = _git(Path(info.repo), "show-ref", "--verify", "--quiet", f"refs/heads/{info.branch}", check=False)
    return found.returncode == 0
