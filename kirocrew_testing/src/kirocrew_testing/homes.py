"""Isolated homes: every test gets its own HOME, KIRO_HOME and KIROCREW_HOME, and no host outlives it."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kirocrew_core import home

# Bounds that only stop a hung teardown; they measure nothing.
HOST_STOP_TIMEOUT_SECS = 30.0
HOST_KILL_TIMEOUT_SECS = 10.0

# Variables that would point a test at the real user's files or binaries.
_SCRUBBED_ENV = ("KIRO_CLI_PATH", "KIROCREW_KIRO_BIN", "KIROCREW_LOAD_PLUGINS",
                 "KIROCREW_DISABLE_PLUGINS", "KIROCREW_STRICT_PLUGINS", "KIROCREW_TRACE_PLUGINS",
                 "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


@dataclass(frozen=True)
class IsolatedHomes:
    """The homes a test runs under; all exist and are empty at the start."""

    root: Path
    user_home: Path
    kiro_home: Path
    crew_home: Path


def isolate_homes(monkeypatch: pytest.MonkeyPatch, root: Path) -> IsolatedHomes:
    """Point HOME, KIRO_HOME and KIROCREW_HOME under ``root`` (undone by monkeypatch)."""
    user = root / "home"
    kiro = user / ".kiro"
    crew = kiro / "crew"
    user.mkdir(parents=True, exist_ok=True)
    for name in _SCRUBBED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.setenv(home.KIRO_HOME_ENV, str(kiro))
    monkeypatch.setenv(home.CREW_HOME_ENV, str(crew))
    return IsolatedHomes(root, user, kiro, crew)


def stop_host(crew_home: Path | str, timeout: float = HOST_STOP_TIMEOUT_SECS) -> int | None:
    """Stop the host of ``crew_home`` if one runs (a relay started it in the background); its pid, else None.

    The host is asked to stop on its socket and waited for; one that does not answer (still
    starting, or wedged) gets SIGTERM, then SIGKILL. Its pid comes from the run lock it holds,
    so a host that has not written ``host.json`` yet is found too. A host that was this
    process's child (the test process adopts orphans as a subreaper) is reaped.
    """
    from kirocrew_core.host import client, paths

    with _crew_home_env(crew_home):
        lock_path = paths.run_lock_file()
        if not lock_path.exists():
            return None  # no host ever ran here: the common case costs one stat
        pid = _lock_holder(lock_path)
        if pid is None:
            _remove_short_socket_dir()
            return None
        try:
            client.request_stop(wait=timeout)
        except client.HostError:
            _signal(pid, signal.SIGTERM)
        if not client.wait_gone(pid, HOST_KILL_TIMEOUT_SECS):
            _signal(pid, signal.SIGKILL)
            client.wait_gone(pid, HOST_KILL_TIMEOUT_SECS)
        _remove_short_socket_dir()
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    return pid


def _remove_short_socket_dir() -> None:
    """The short socket directory a long crew home uses, left by a killed host: removed when empty."""
    from kirocrew_core.host import paths

    directory = paths.socket_path().parent
    if directory != paths.host_dir():
        with contextlib.suppress(OSError):
            (directory / paths.SOCKET_NAME).unlink(missing_ok=True)
            directory.rmdir()


def _lock_holder(lock_path: Path) -> int | None:
    """The pid recorded in a run lock that some process holds now, or None when nobody holds it."""
    import fcntl

    from kirocrew_core.ownership import read_owner

    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = read_owner(fd)
            return int(owner) if owner.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


@contextlib.contextmanager
def _crew_home_env(crew_home: Path | str) -> Iterator[None]:
    """``KIROCREW_HOME`` set to ``crew_home`` for the block (the host paths read it on each call)."""
    previous = os.environ.get(home.CREW_HOME_ENV)
    os.environ[home.CREW_HOME_ENV] = str(crew_home)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(home.CREW_HOME_ENV, None)
        else:
            os.environ[home.CREW_HOME_ENV] = previous
