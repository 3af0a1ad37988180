"""jsonfile.py: honest tri-state reads and atomic writes, on real files."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kirocrew_core.errors import MalformedFileError, UnreadableFileError
from kirocrew_core.jsonfile import ReadState, read_json, write_bytes_atomic, write_json_atomic


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def umask() -> Iterator[object]:
    """Set the process umask for one test and put the old one back."""
    saved: list[int] = []

    def set_umask(value: int) -> None:
        saved.append(os.umask(value))

    yield set_umask
    if saved:
        os.umask(saved[0])


# -- reads -------------------------------------------------------------------


def test_a_missing_file_reads_as_absent_and_as_an_empty_object(tmp_path: Path) -> None:
    read = read_json(tmp_path / "mcp.json")
    assert read.state is ReadState.ABSENT
    assert read.known
    assert read.object_or_empty() == {}


def test_a_file_under_a_file_reads_as_absent(tmp_path: Path) -> None:
    (tmp_path / "settings").write_text("not a folder")
    assert read_json(tmp_path / "settings" / "mcp.json").state is ReadState.ABSENT


@pytest.mark.parametrize("content", [b"", b"  \n\t\n", b"\xef\xbb\xbf\n"])
def test_an_empty_or_blank_file_reads_as_empty(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(content)
    read = read_json(path)
    assert read.state is ReadState.EMPTY
    assert read.object_or_empty() == {}


def test_a_document_is_returned_as_parsed(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"git": {"command": "uvx"}}}')
    read = read_json(path)
    assert read.state is ReadState.DOCUMENT
    assert read.object_or_empty() == {"mcpServers": {"git": {"command": "uvx"}}}


def test_a_byte_order_mark_does_not_make_a_document_malformed(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert read_json(path).document == {"a": 1}


def test_malformed_json_is_reported_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{\n  "a": 1,\n  oops\n}\n')
    read = read_json(path)
    assert read.state is ReadState.MALFORMED
    assert not read.known
    assert read.line == 3
    with pytest.raises(MalformedFileError) as caught:
        read.object_or_empty()
    assert caught.value.code == "malformed_file"
    assert caught.value.exit_code == 2
    assert caught.value.line == 3
    assert f"{path}:3" in caught.value.message


def test_a_document_that_is_not_an_object_is_malformed_for_object_readers(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text("[1, 2]")
    read = read_json(path)
    assert read.state is ReadState.DOCUMENT
    with pytest.raises(MalformedFileError, match="JSON object") as caught:
        read.object_or_empty()
    assert caught.value.code == "malformed_file"


def test_a_file_larger_than_the_limit_is_malformed_not_truncated(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"a": "' + "x" * 100 + '"}')
    read = read_json(path, max_bytes=64)
    assert read.state is ReadState.MALFORMED
    assert "larger than 64 bytes" in read.error


def test_a_non_utf8_file_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    read = read_json(path)
    assert read.state is ReadState.MALFORMED
    assert "not UTF-8" in read.error


def test_absurdly_deep_nesting_is_malformed_rather_than_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text("[" * 200_000)
    assert read_json(path).state is ReadState.MALFORMED


def test_a_directory_at_the_path_is_unreadable_not_empty(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.mkdir()
    read = read_json(path)
    assert read.state is ReadState.UNREADABLE
    assert not read.known
    assert read.error == "is a directory"
    with pytest.raises(UnreadableFileError) as caught:
        read.object_or_empty()
    assert caught.value.code == "unreadable_file"
    assert str(path) in caught.value.message


def test_a_file_without_read_permission_is_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"a": 1}')
    path.chmod(0)
    read = read_json(path)
    if os.geteuid() != 0:
        assert read.state is ReadState.UNREADABLE
        with pytest.raises(UnreadableFileError):
            read.object_or_empty()
        return
    # root reads a mode-000 file anyway: ask in a child process for which file permissions apply.
    import subprocess
    import sys

    from kirocrew_testing.requirements import without_file_privileges

    probe = (
        "import sys; from kirocrew_core.jsonfile import read_json\n"
        "r = read_json(sys.argv[1]); print(r.state.value, r.error)"
    )
    done = subprocess.run(without_file_privileges([sys.executable, "-c", probe, str(path)]),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "unreadable"
    assert "Permission denied" in done.stdout


def test_a_fifo_at_the_path_is_unreadable_instead_of_hanging(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    os.mkfifo(path)
    reads: list = []
    reader = threading.Thread(target=lambda: reads.append(read_json(path)), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # let the stuck reader go
        pytest.fail("read_json blocked on a FIFO")
    assert reads[0].state is ReadState.UNREADABLE
    assert reads[0].error == "not a regular file"


# -- writes ------------------------------------------------------------------


def test_a_written_document_reads_back_with_a_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "agent.json"
    assert write_json_atomic(path, {"name": "kirocrew", "tools": ["é"]}) == path
    assert path.read_text(encoding="utf-8") == '{\n  "name": "kirocrew",\n  "tools": [\n    "é"\n  ]\n}\n'
    assert read_json(path).document == {"name": "kirocrew", "tools": ["é"]}
    assert leftovers(path.parent) == []


def test_rewriting_a_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text("{}")
    path.chmod(0o640)
    write_json_atomic(path, {"a": 1})
    assert mode_of(path) == 0o640
    assert json.loads(path.read_text()) == {"a": 1}


def test_a_secret_file_is_created_owner_only(tmp_path: Path, umask) -> None:
    umask(0)
    path = tmp_path / "gateway.token"
    write_bytes_atomic(path, b"token", secret=True)
    assert mode_of(path) == 0o600


def test_rewriting_a_loose_secret_file_tightens_it(tmp_path: Path) -> None:
    path = tmp_path / "gateway.token"
    path.write_text("old")
    path.chmod(0o644)
    write_bytes_atomic(path, b"new", secret=True)
    assert mode_of(path) == 0o600
    assert path.read_bytes() == b"new"


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_a_new_ordinary_file_honours_the_umask(tmp_path: Path, umask, mask: int, expected: int) -> None:
    umask(mask)
    path = tmp_path / "agent.json"
    write_json_atomic(path, {})
    assert mode_of(path) == expected


def test_an_explicit_mode_applies_to_a_new_file_whatever_the_umask(tmp_path: Path, umask) -> None:
    umask(0o077)
    path = tmp_path / "agent.json"
    write_json_atomic(path, {}, mode=0o644)
    assert mode_of(path) == 0o644


def test_writing_through_a_symlink_keeps_the_link_and_updates_its_target(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "mcp.json"
    real.write_text('{"old": true}')
    real.chmod(0o600)
    link = tmp_path / "mcp.json"
    link.symlink_to(real)

    write_json_atomic(link, {"new": True})

    assert link.is_symlink()
    assert os.readlink(link) == str(real)
    assert json.loads(real.read_text()) == {"new": True}
    assert mode_of(real) == 0o600
    assert leftovers(tmp_path) == [] and leftovers(dotfiles) == []


def test_an_unserialisable_document_leaves_the_old_file_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    original = b'{\n  "keep": "me"  \n}'
    path.write_bytes(original)
    with pytest.raises(TypeError):
        write_json_atomic(path, {"bad": object()})
    assert path.read_bytes() == original
    assert leftovers(tmp_path) == []


def test_a_failed_replace_leaves_the_target_alone_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "mcp.json"
    target.mkdir()
    (target / "inside").write_text("still here")
    with pytest.raises(OSError):
        write_bytes_atomic(target, b"{}")
    assert target.is_dir()
    assert (target / "inside").read_text() == "still here"
    assert leftovers(tmp_path) == []


def test_a_temp_file_left_by_a_killed_writer_is_swept_by_a_later_write_once_stale(tmp_path: Path) -> None:
    import time

    from kirocrew_core.jsonfile import STALE_TEMP_SECS, write_json_atomic

    target = tmp_path / "kirocrew.json"
    old = tmp_path / ".kirocrew.json.abc123.tmp"
    fresh = tmp_path / ".kirocrew.json.def456.tmp"
    unrelated = tmp_path / ".other.json.abc123.tmp"
    for leftover in (old, fresh, unrelated):
        leftover.write_text("{half")
    long_ago = time.time() - STALE_TEMP_SECS - 60
    os.utime(old, (long_ago, long_ago))
    os.utime(unrelated, (long_ago, long_ago))
    write_json_atomic(target, {"ok": True})
    assert not old.exists()
    assert fresh.exists()  # may belong to a write still in flight
    assert unrelated.exists()  # another file's temp is not ours to judge
