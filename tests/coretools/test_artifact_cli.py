"""``kirocrew artifact …`` and ``kirocrew deploy …``, working in process (no host).

The commands run through click's runner (a subprocess only where the installed ``kirocrew`` itself is
the point: one per group). Without a host the twins run the same tools as the person (source ``cli``);
the run through a real host, where a session's shell is refused the owner's decisions, is
``test_artifacts_e2e.py``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import config
from kirocrew_core.artifacts import deploy, names, store
from kirocrew_core.artifacts.access import OWNER, Actor


@pytest.fixture
def offline(isolated_homes: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``offline(group, *args)``: one command of ``kirocrew artifact``/``deploy``, as ``main`` reports it."""
    from click.testing import CliRunner
    from kirocrew_core.artifacts.cli import artifact, deploy
    from kirocrew_core.errors import KirocrewError

    monkeypatch.setenv("KIROCREW_NO_HOST", "1")

    def run(group: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        result = CliRunner().invoke({"artifact": artifact, "deploy": deploy}[group], list(args), input=input)
        failure = result.exception
        if isinstance(failure, KirocrewError):
            return subprocess.CompletedProcess(args, failure.exit_code, result.stdout,
                                               f"kirocrew: error[{failure.code}]: {failure.message}")
        assert failure is None or isinstance(failure, SystemExit), failure
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, "")

    return run


@pytest.fixture
def real(kirocrew: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``real(*args)``: the installed ``kirocrew`` in a subprocess, without a host."""
    monkeypatch.setenv("KIROCREW_NO_HOST", "1")
    return lambda *args: kirocrew(*args, env=dict(os.environ))


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_owner_saves_lists_shows_revises_and_deletes_from_the_shell(offline: Any, tmp_path: Path) -> None:
    source = tmp_path / "note.md"
    source.write_text("# Plan\nship it")
    saved = _ok(offline("artifact", "save", "Release plan", str(source), "--tag", "release", "--folder", "Plans"))
    assert saved.splitlines()[0] == "Saved artifact: slug=release-plan version=1"
    meta = store.get("release-plan", OWNER)[0]
    assert (meta["source"], meta["created_by"], meta["tree"]) == ("cli", "owner", None)
    assert _ok(offline("artifact", "list")) == "release-plan  v1  markdown  [release]  Release plan\n"
    assert _ok(offline("artifact", "show", "release-plan")).endswith("--- content ---\n# Plan\nship it\n")
    assert _ok(offline("artifact", "save", "Stdin", "-", "--slug", "from-stdin", input="piped")).startswith(
        "Saved artifact: slug=from-stdin version=1")
    store.update("release-plan", OWNER, content="# Plan\nship it friday")
    assert _ok(offline("artifact", "versions", "release-plan")) == "release-plan: versions v1, v2\n"
    assert _ok(offline("artifact", "revert", "release-plan", "1")).startswith("Reverted release-plan to v1's")
    taken = offline("artifact", "save", "Again", str(source), "--slug", "release-plan")
    assert taken.returncode == 1 and "error[slug_taken]" in taken.stderr
    assert _ok(offline("artifact", "delete", "from-stdin", "--yes")) == "Deleted artifact: from-stdin\n"
    assert offline("artifact", "delete", "release-plan", input="n\n").returncode == 1  # asked, and kept
    assert [m["slug"] for m in store.listing(OWNER)] == ["release-plan"]


def test_a_file_over_25_mib_is_refused_while_it_is_read(offline: Any, tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(names.CONTENT_MAX_BYTES + 1)
    done = offline("artifact", "save", "Big", str(big), "--kind", "text")
    assert done.returncode == 2 and "error[content_too_large]" in done.stderr
    assert store.listing(OWNER) == []


def test_content_too_large_for_one_host_message_goes_as_an_upload_that_is_removed_once_saved(
        offline: Any, tmp_path: Path) -> None:
    from kirocrew_core import home
    from kirocrew_core.artifacts.cli import INLINE_MAX_BYTES

    big = tmp_path / "big.md"
    big.write_text("line of text\n" * (INLINE_MAX_BYTES // 13 + 10))
    assert _ok(offline("artifact", "save", "Big", str(big), "--slug", "big")).startswith(
        "Saved artifact: slug=big version=1\nsource=cli")
    assert store.get("big", OWNER)[1] == big.read_text()
    assert list(home.artifact_uploads_dir().iterdir()) == []
    taken = offline("artifact", "save", "Big", str(big), "--slug", "big")
    assert taken.returncode == 1 and "error[slug_taken]" in taken.stderr
    assert list(home.artifact_uploads_dir().iterdir()) == []  # removed whatever the outcome


def test_the_owner_comments_and_resolves_and_shares(offline: Any) -> None:
    session = Actor(tree="conv-a", conversation="conv-a")
    store.save(store.NewArtifact("Report", "Revenue grew 5%.", "markdown", slug="report"), session)
    posted = _ok(offline("artifact", "comment", "report", "source for 5%?", "--quote", "grew 5%"))
    comment_id = posted.split("id=", 1)[1].split(",", 1)[0]
    store.mark_review("report", session, comment_id)
    assert "[review]" in _ok(offline("artifact", "comments", "report"))
    assert _ok(offline("artifact", "resolve", "report", comment_id)) == f"Comment {comment_id} resolved.\n"
    assert _ok(offline("artifact", "comments", "report", "--open")) == "No comments on report.\n"
    assert store.comments("report", OWNER)[0]["status"] == "resolved"
    assert _ok(offline("artifact", "share", "report")) == "report is shared with every session.\n"
    assert store.get("report", Actor(tree="conv-b"))[0]["shared"] is True


def test_the_installed_command_has_both_groups(real: Any) -> None:
    assert _ok(real("artifact", "list")) == "No artifacts saved.\n"
    assert _ok(real("deploy", "list")) == "No deploys wait for confirmation.\n"
    refused = real("artifact", "show", "Not-A-Slug")
    assert refused.returncode == 2 and "kirocrew: error[invalid_arguments]: slug: " in refused.stderr


def test_the_deploy_commands_confirm_discard_and_list(offline: Any, tmp_path: Path) -> None:
    web_root = tmp_path / "www"
    web_root.mkdir()
    config.set_value(deploy.DEPLOY_DIR_KEY, str(web_root))
    session = Actor(tree="conv-a", conversation="conv-a")
    store.save(store.NewArtifact("Page", "<p>hi</p>", "html", slug="page"), session)
    first, _ = deploy.request(session, "page", "hello", "local", 72)
    second, _ = deploy.request(session, "page", "other", "local", 72)
    assert _ok(offline("deploy", "list")).count("page v1 -> local:") == 2
    assert '"site_id": "hello"' in _ok(offline("deploy", "list", "--json"))
    assert "into the local web root" in _ok(offline("deploy", "confirm", first.id))
    assert (web_root / "hello" / "index.html").read_text() == "<p>hi</p>"
    assert _ok(offline("deploy", "discard", second.id)).startswith(f"Discarded deploy {second.id}")
    again = offline("deploy", "confirm", second.id)
    assert again.returncode == 1 and "error[deploy_not_found]" in again.stderr
    assert not (web_root / "other").exists()


def test_through_a_real_host_a_large_save_arrives_as_an_upload_and_a_small_one_inside_the_call(
        kirocrew: Any, tmp_path: Path) -> None:
    """The host reads a message of at most 4 MiB: a 5 MiB file still saves, from the owner's own shell."""
    from kirocrew_core import home

    env = {k: v for k, v in os.environ.items() if k != "KIROCREW_NO_HOST"}
    big = tmp_path / "big.txt"
    big.write_text("x" * (5 * 1024 * 1024))
    saved = kirocrew("artifact", "save", "Big", str(big), "--kind", "text", env=env)
    assert saved.returncode == 0 and saved.stdout.startswith("Saved artifact: slug=big version=1"), saved.stderr
    small = kirocrew("artifact", "save", "Small", "-", env=env, input="tiny")
    assert small.returncode == 0 and small.stdout.startswith("Saved artifact: slug=small version=1"), small.stderr
    assert store.get("big", OWNER)[0]["size"] == 5 * 1024 * 1024 and store.get("small", OWNER)[1] == "tiny"
    assert list(home.artifact_uploads_dir().iterdir()) == []
