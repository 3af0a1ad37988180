"""``kirocrew knowledge …`` in process (no host), and the host's ingestion pass with each source's state."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def offline(isolated_homes: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``offline(*args)``: one ``kirocrew knowledge`` command, as ``main`` reports it."""
    from click.testing import CliRunner
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.knowledge.cli import knowledge

    monkeypatch.setenv("KIROCREW_NO_HOST", "1")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = CliRunner().invoke(knowledge, list(args))
        failure = result.exception
        if isinstance(failure, KirocrewError):
            return subprocess.CompletedProcess(args, failure.exit_code, result.stdout,
                                               f"error[{failure.code}]: {failure.message}")
        assert failure is None or isinstance(failure, SystemExit), failure
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, "")

    return run


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_owner_adds_lists_searches_reindexes_and_removes(offline: Any, tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# Anchors\n\n## Chains\nanchor chains rust\n")
    (root / "b.bin").write_bytes(b"\x00\x01")
    added = _ok(offline("add", str(root)))
    assert "Added folder source 1." in added and "skipped b.bin: binary (holds NUL bytes)" in added
    assert "1 read and chunked" in added
    listed = _ok(offline("list"))
    assert "folder" in listed and "ready" in listed and str(root.resolve()) in listed
    assert '"documents": 1' in _ok(offline("list", "--json"))
    found = _ok(offline("search", "anchor chains"))
    assert "## Anchors\n**Source:** [folder] a.md — Anchors (lines 1-4)" in found
    (root / "a.md").write_text("# Anchors\nnew words\n")
    assert "1 read and chunked" in _ok(offline("reindex"))
    assert "0 read and chunked" in _ok(offline("reindex", str(root)))
    assert _ok(offline("search", "rust")).strip() == "No relevant knowledge found."
    assert "Removed source 1" in _ok(offline("remove", "1"))
    gone = offline("remove", "1")
    assert gone.returncode != 0 and "source_not_found" in gone.stderr
    assert offline("search", "x" * 501).returncode != 0
    assert offline("add").returncode != 0 and offline("add", str(root), "--lessons").returncode != 0
    assert "Added lessons source 2." in _ok(offline("add", "--lessons"))
    assert "Removed source 2 (lessons:global)" in _ok(offline("remove", "lessons:global"))


def test_the_installed_command_lists_knowledge_in_its_help(kirocrew: Any) -> None:
    done = kirocrew("--help")
    assert done.returncode == 0 and "knowledge" in done.stdout


def test_a_host_pass_reads_every_source_and_reports_its_state(isolated_homes: Any, tmp_path: Path) -> None:
    from kirocrew_core.knowledge import service
    from kirocrew_core.knowledge.store import shared

    good, broken = tmp_path / "good", tmp_path / "broken"
    good.mkdir()
    broken.mkdir()
    (good / "a.md").write_text("words\n")
    library = shared()
    library.add(good)
    library.add(broken)
    assert [s["progress"]["state"] for s in service.source_states()] == ["waiting", "waiting"]
    broken.rmdir()
    service.index_all(threading.Event())
    states = {Path(s["location"]).name: s for s in service.source_states()}
    assert states["good"]["progress"] == {"state": "ready", "done": 1, "total": 1,
                                          "detail": "1 file(s) read again, 0 skipped"}
    assert states["good"]["chunks"] == 1
    assert states["broken"]["problem"].startswith("cannot be read")
    assert states["broken"]["progress"]["state"] == "failed"
    assert states["broken"]["progress"]["detail"] == states["broken"]["problem"]


def test_the_owner_removes_one_document_and_includes_it_again(offline: Any, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "keep.md").write_text("# Keep\nlighthouse keeper\n")
    (root / "sub" / "drop.md").write_text("# Drop\nlighthouse lamp\n")
    _ok(offline("add", str(root)))
    shown = _ok(offline("show", str(root)))
    assert shown.splitlines()[1:] == ["  keep.md  (1 chunk(s), 25 bytes)", "  sub/drop.md  (1 chunk(s), 23 bytes)"]
    assert _ok(offline("show", "1", "--named", "DROP")).splitlines()[1:] == ["  sub/drop.md  (1 chunk(s), 23 bytes)"]
    removed = _ok(offline("remove", str(root), "--document", "sub/drop.md"))
    assert "Removed sub/drop.md from source 1; it stays out at every reindex" in removed
    _ok(offline("reindex"))
    assert "sub/drop.md" not in _ok(offline("search", "lighthouse"))
    assert "1 excluded" in _ok(offline("list"))
    assert _ok(offline("show", "1")).splitlines()[-1].startswith("removed sub/drop.md (since ")
    missing = offline("remove", "1", "--document", "../etc/passwd")
    assert missing.returncode != 0 and "document_not_found" in missing.stderr
    assert "Included sub/drop.md in source 1 again" in _ok(offline("include", "1", "sub/drop.md"))
    _ok(offline("reindex", "1"))
    assert "sub/drop.md" in _ok(offline("search", "lighthouse"))
    again = offline("include", "1", "sub/drop.md")
    assert again.returncode != 0 and "excluded_not_found" in again.stderr
