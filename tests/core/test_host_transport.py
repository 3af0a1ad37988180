"""The owner-only unix listener the host and the conversations control socket share, on real sockets."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import anyio
import pytest

from kirocrew_core.host.transport import owner_only_listener


def _private_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "sock"
    directory.mkdir(mode=0o700)
    return directory


async def _bind_and_close(path: Path) -> int:
    listener = await owner_only_listener(path)
    async with listener:
        with socket.socket(socket.AF_UNIX) as peer:
            peer.connect(str(path))  # the socket really listens
        return stat.S_IMODE(path.stat().st_mode)


def test_the_socket_is_owner_only_and_replaces_a_dead_servers_file(tmp_path: Path) -> None:
    path = _private_dir(tmp_path) / "host.sock"
    path.write_text("left over")
    assert anyio.run(_bind_and_close, path) == 0o600


def test_binding_never_touches_the_process_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The umask is shared by every thread: a narrowed one during the bind once made another
    # thread's folder unsearchable (the sandbox preflight's), so the listener must not set it at all.
    def refuse(mask: int) -> int:
        raise AssertionError(f"os.umask({mask:#o}) called while binding")

    monkeypatch.setattr(os, "umask", refuse)
    assert anyio.run(_bind_and_close, _private_dir(tmp_path) / "host.sock") == 0o600


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701])
def test_a_directory_others_can_enter_is_refused_and_nothing_is_bound(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(PermissionError, match="not private"):
        anyio.run(owner_only_listener, directory / "host.sock")
    assert not (directory / "host.sock").exists()


def test_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    real = _private_dir(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(PermissionError, match="not private"):
        anyio.run(owner_only_listener, link / "host.sock")
    assert not (real / "host.sock").exists()
