"""``kirocrew_core.host.client`` against real hosts: a real ``kirocrew serve --background`` and real sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kirocrew_core.host import client, paths
from kirocrew_testing.homes import stop_host

# Bounds that only stop a hung test; they measure nothing.
RACE_TIMEOUT_SECS = 120


@pytest.fixture
def host_env(echo_host_env: dict[str, str]) -> dict[str, str]:
    """The host's environment: core plus the echo test server only (fast to start), a session key to drop."""
    return {**echo_host_env, "KIROCREW_LOAD_PLUGINS": "echo-host", "KIROCREW_SESSION_KEY": "relay-session",
            "KIROCREW_HOST_PID": "12345"}


def _error(call: object) -> client.HostError:
    with pytest.raises(client.HostError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_without_a_host_connect_and_ping_say_host_unavailable(isolated_homes) -> None:
    assert _error(client.connect).code == "host_unavailable"
    assert _error(client.ping).code == "host_unavailable"
    assert _error(client.request_stop).code == "host_unavailable"


@pytest.fixture
def short_crew_home(isolated_homes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A crew home short enough that its socket lives in its own ``host/`` directory."""
    monkeypatch.setenv("KIROCREW_HOME", str(tmp_path / "c"))
    assert paths.socket_path().parent == paths.host_dir()
    return tmp_path / "c"


def test_a_socket_directory_open_to_other_users_is_refused(short_crew_home) -> None:
    directory = paths.ensure_socket_dir()
    os.chmod(directory, 0o755)
    error = _error(client.connect)
    assert error.code == "host_dir_unsafe"
    assert "0700" in error.message


def test_a_symlink_in_place_of_the_socket_directory_is_refused(short_crew_home, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    short_crew_home.mkdir(mode=0o700)
    paths.host_dir().symlink_to(elsewhere)
    assert _error(client.connect).code == "host_dir_unsafe"
    assert _error(client.ensure_host).code == "host_dir_unsafe"


def test_a_listener_of_another_uid_is_refused(short_crew_home) -> None:
    from kirocrew_testing.requirements import as_another_user

    as_other = as_another_user([sys.executable, "-c"])
    paths.ensure_socket_dir()
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(paths.socket_path()))
    # The other uid calls listen(): SO_PEERCRED reports the credentials in effect at listen time.
    script = ("import socket, sys\ns = socket.socket(fileno=int(sys.argv[1]))\ns.listen()\nprint('ready', flush=True)\n"
              "conn, _ = s.accept()\nconn.recv(1)\n")
    other = subprocess.Popen([*as_other, script, str(bound.fileno())], pass_fds=[bound.fileno()],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline() == "ready\n"
        error = _error(client.connect)
        assert error.code == "host_dir_unsafe"
        assert "uid 65534" in error.message
    finally:
        other.kill()
        other.communicate()  # reaps it and closes its stdout pipe
        bound.close()


def test_ensure_host_starts_a_background_host_once_and_then_reuses_it(isolated_homes, host_env) -> None:
    first = client.ensure_host(env=host_env)
    second = client.ensure_host(env=host_env)
    assert first["pid"] == second["pid"] == client.ping()["pid"]
    assert first["background"] is True
    # core's own servers (the sessions' tools, the owner's artifact decisions, hooks, library changes, messaging
    # decisions and skill install), and the test's
    assert first["servers"] == ["kirocrew-artifacts-admin", "kirocrew-core", "kirocrew-echo", "kirocrew-hooks-admin",
                                "kirocrew-knowledge-admin", "kirocrew-messages-admin", "kirocrew-skills-admin"]
    assert len(client._started) == 1
    log = paths.log_file()
    assert log.exists() and log.stat().st_mode & 0o777 == 0o600
    # The host serves every session: it never inherits the session key of the relay that started it.
    environ = Path(f"/proc/{first['pid']}/environ").read_bytes().split(b"\0")
    assert not any(entry.startswith((b"KIROCREW_SESSION_KEY=", b"KIROCREW_HOST_PID=")) for entry in environ)
    assert f"KIROCREW_HOME={isolated_homes.crew_home}".encode() in environ


def test_a_stale_socket_file_left_by_a_dead_host_is_replaced_by_a_fresh_host(isolated_homes, host_env) -> None:
    paths.ensure_socket_dir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(paths.socket_path()))
    dead.close()  # the file stays, nobody listens: what a SIGKILLed host leaves
    assert paths.socket_path().exists()
    assert _error(client.connect).code == "host_unavailable"
    pong = client.ensure_host(env=host_env)
    assert client.ping()["pid"] == pong["pid"]


def test_a_host_that_exits_before_answering_is_host_start_failed_quoting_its_log(isolated_homes, host_env) -> None:
    error = _error(lambda: client.ensure_host(env={**host_env, "KIROCREW_HOST_IDLE_SECS": "soon"}))
    assert error.code == "host_start_failed"
    assert "exited with status 2" in error.message
    assert "KIROCREW_HOST_IDLE_SECS must be a positive number" in error.message


def test_request_stop_stops_the_host_and_waits_until_its_process_is_gone(isolated_homes, host_env) -> None:
    pid = client.ensure_host(env=host_env)["pid"]
    assert client.request_stop() == pid
    assert client.pid_gone(pid)
    assert _error(client.ping).code == "host_unavailable"
    assert not paths.state_file().exists()


def test_a_host_this_process_started_and_stopped_is_reaped_at_once(isolated_homes, host_env) -> None:
    pid = client.ensure_host(env=host_env)["pid"]
    assert [child.pid for child in client._started] == [pid]
    assert client.request_stop() == pid
    assert not Path(f"/proc/{pid}").exists()  # no zombie waiting for this process to exit
    # Nor a handle that would claim, when this process exits, that the host is still running.
    assert client._started == []


def test_stop_host_stops_the_host_of_a_crew_home_and_ignores_one_without(isolated_homes, host_env,
                                                                        tmp_path: Path) -> None:
    assert stop_host(tmp_path / "never-a-crew-home") is None
    pid = client.ensure_host(env=host_env)["pid"]
    assert stop_host(isolated_homes.crew_home) == pid
    assert client.pid_gone(pid)
    assert stop_host(isolated_homes.crew_home) is None


RACER = """
import sys
from kirocrew_core.host import client
sys.stdin.readline()  # the barrier: every racer is up before any of them looks for a host
pong = client.ensure_host()
print(pong["pid"], len(client._started), flush=True)
"""


def test_processes_racing_to_start_a_host_start_exactly_one(isolated_homes, host_env) -> None:
    racers = [subprocess.Popen([sys.executable, "-c", RACER], env=host_env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for _ in range(4)]
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    answers = [racer.communicate(timeout=RACE_TIMEOUT_SECS)[0].split() for racer in racers]
    assert all(racer.returncode == 0 for racer in racers)
    assert len({pid for pid, _ in answers}) == 1
    assert sum(int(started) for _, started in answers) == 1
    assert int(answers[0][0]) == client.ping()["pid"]


def test_a_host_log_past_its_bound_is_moved_aside_before_the_next_host_starts(isolated_homes, host_env) -> None:
    paths.ensure_socket_dir()
    old = b"an old host's line\n" * (client.LOG_ROTATE_BYTES // 19 + 1)
    paths.log_file().write_bytes(old)
    client.ensure_host(env=host_env)
    assert Path(f"{paths.log_file()}.1").read_bytes() == old
    assert paths.log_file().stat().st_size < client.LOG_ROTATE_BYTES
    assert paths.log_file().stat().st_mode & 0o777 == 0o600
