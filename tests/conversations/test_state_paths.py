"""The state directory: its location, its modes, and its one process-lifetime owner."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from kirocrew_core import proc
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations import state_paths
from kirocrew_conversations.store import Workspace, open_state

# A second process that tries to own the state dir and reports what happened.
_CONTENDER = """
from kirocrew_conversations.store import open_state
from kirocrew_core.errors import KirocrewError
try:
    state = open_state()
except KirocrewError as exc:
    print(exc.code, exc.message, flush=True)
else:
    print("owned", flush=True)
"""

# An owner that holds the state dir until killed.
_OWNER = """
import os, sys
from kirocrew_conversations.store import open_state
state = open_state()
print(os.getpid(), flush=True)
sys.stdin.read()
"""


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "conv-state"
    monkeypatch.setenv(state_paths.STATE_DIR_ENV, str(directory))
    return directory


def _run_contender() -> str:
    child = proc.spawn([sys.executable, "-c", _CONTENDER], env=dict(os.environ), stdin=proc.DEVNULL)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    return out.decode().strip()


def test_the_default_state_dir_is_under_the_users_local_state(isolated_homes, monkeypatch) -> None:
    monkeypatch.delenv(state_paths.STATE_DIR_ENV, raising=False)
    expected = isolated_homes.user_home / ".local" / "state" / "kiro-conversations-mcp"
    assert state_paths.state_dir() == expected
    assert state_paths.database_file() == expected / "orchestrator-v1.sqlite"


def test_the_env_variable_relocates_the_state_dir(state_dir: Path) -> None:
    assert state_paths.state_dir() == state_dir
    assert state_paths.database_file() == state_dir / "orchestrator-v1.sqlite"


def test_an_existing_loose_state_dir_is_tightened_to_owner_only(state_dir: Path) -> None:
    state_dir.mkdir(mode=0o755)
    os.chmod(state_dir, 0o755)
    state_paths.ensure_state_dir()
    assert state_dir.stat().st_mode & 0o777 == 0o700


def test_a_second_server_is_refused_with_the_owners_pid_and_the_first_keeps_working(state_dir: Path) -> None:
    state = open_state()
    try:
        conv = state.store.create_conversation(name="a", workspace=Workspace("shared", "/w", "fp"))
        reply = _run_contender()
        assert reply.startswith("state_dir_in_use ")
        assert f"pid {os.getpid()}" in reply
        # The first owner still holds the lock, still names itself, and still writes.
        assert (state_dir / state_paths.LOCK_NAME).read_text().strip() == str(os.getpid())
        run = state.store.enqueue_run(conv.id, "hello")
        assert state.store.get_run(run.id).status == "queued"
        with pytest.raises(KirocrewError) as refused:
            state_paths.acquire_ownership(state_dir)
        assert refused.value.code == "state_dir_in_use"
        assert state.ownership.held
    finally:
        state.close()


def test_ownership_is_free_again_once_the_owner_is_killed(state_dir: Path) -> None:
    owner = proc.spawn([sys.executable, "-c", _OWNER], env=dict(os.environ))
    try:
        assert owner.stdout is not None
        owner_pid = owner.stdout.readline().decode().strip()
        assert owner_pid == str(owner.pid)
        with pytest.raises(KirocrewError) as refused:
            state_paths.acquire_ownership(state_dir)
        assert refused.value.code == "state_dir_in_use"
        assert f"pid {owner_pid}" in refused.value.message
    finally:
        proc.kill_pids([owner.pid])
        owner.wait(timeout=30)
        proc.terminate(owner)
    ownership = state_paths.acquire_ownership(state_dir)
    try:
        assert (state_dir / state_paths.LOCK_NAME).read_text().strip() == str(os.getpid())
    finally:
        ownership.release()


def test_a_released_state_dir_can_be_owned_again_in_the_same_process(state_dir: Path) -> None:
    first = state_paths.acquire_ownership()
    first.release()
    second = state_paths.acquire_ownership()
    assert second.held
    second.release()
    assert not second.held
