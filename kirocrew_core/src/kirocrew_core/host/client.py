"""Reach the host of this crew home, starting one on demand (standard library only: the relay imports it).

:func:`connect` opens the host socket after checking that its directory is ours alone and
that the process listening is ours; :func:`ping` and :func:`request_stop` are one-line
exchanges; :func:`ensure_host` is what every relay and CLI twin calls first: it answers the
running host's pong, or starts ``kirocrew serve --background`` under a start lock so that
relays racing at the same instant start exactly one host.

``subprocess`` is imported only when a host has to be started: a relay whose host is up
never pays for it.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time

from kirocrew_core.errors import KirocrewError
from kirocrew_core.host import paths, protocol

TYPE_CHECKING = False  # not typing's: importing typing costs the relay milliseconds
if TYPE_CHECKING:
    from typing import Any

# Bounds on waiting for a host; none of them is a measurement.
CONNECT_TIMEOUT_SECS = 5.0
PING_TIMEOUT_SECS = 5.0
START_TIMEOUT_SECS = 60.0
STOP_TIMEOUT_SECS = 30.0
# A started host that found another holding the run lock exits 0; if none answers this long after, start again.
RESPAWN_AFTER_SECS = 2.0
# How much of host.log an error quotes when a host did not start.
LOG_TAIL_BYTES = 4096
# A host log past this size is moved aside (to host.log.1) before the next host starts.
LOG_ROTATE_BYTES = 5 * 1024 * 1024
# Variables a host must not inherit from the relay that starts it: the host serves every session
# (and the pid a session's launcher exported names that session's process, not the host's).
_NOT_INHERITED = ("KIROCREW_SESSION_KEY", "KIROCREW_HOST_PID")
# Crew-home variables made absolute for the host, which runs in its own directory.
_PATH_VARIABLES = ("HOME", "KIRO_HOME", "KIROCREW_HOME")


class HostError(KirocrewError):
    """The host could not be reached, started or trusted; ``code`` says which.

    ``host_unavailable``: nothing answers on the socket (no host, or a dead one's file).
    ``host_not_running``: none answers and ``KIROCREW_NO_HOST_START=1`` forbids starting one.
    ``host_start_failed``: a started host exited or did not answer in time (the message
    quotes ``host.log``). ``host_dir_unsafe``: the socket's directory or the listening
    process is not this user's alone. ``host_refused``: the host answered with a refusal or
    something that is not the wire format (a refusal's own code is used when it has one).
    After the welcome (:mod:`kirocrew_core.host.tool_client`): ``host_disconnected`` when the host
    closes before it answers a request, ``host_timeout`` when ``initialize`` is not answered in time.
    """

    code = "host_unavailable"
    exit_code = 1

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)


# -- connecting ------------------------------------------------------------------------------------


def check_socket_dir(directory: str) -> None:
    """Refuse a socket directory that is a symlink, not ours, or open to group or others.

    A missing directory is ``host_unavailable`` (no host has run here); anything else that
    is wrong is ``host_dir_unsafe``, because a relay would hand its client's messages (and
    the caller's session key) to whoever planted it.
    """
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        raise HostError("host_unavailable", f"no host has run here yet ({directory} does not exist)") from None
    except OSError as exc:
        raise HostError("host_dir_unsafe", f"cannot inspect the host's socket directory {directory}: {exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise HostError("host_dir_unsafe", f"{directory} is not a directory (a symlink or a file is in its place)")
    if info.st_uid != os.getuid():
        raise HostError("host_dir_unsafe", f"{directory} belongs to uid {info.st_uid}, not to this user")
    if info.st_mode & 0o077:
        raise HostError("host_dir_unsafe", f"{directory} is open to other users (mode {info.st_mode & 0o777:o}); "
                                           "it must be 0700")


# macOS (<sys/un.h>, <sys/ucred.h>): the pid and the credentials of a unix socket's peer.
_SOL_LOCAL = 0
_LOCAL_PEERCRED = getattr(socket, "LOCAL_PEERCRED", 0x001)
_LOCAL_PEERPID = 0x002
_XUCRED_BYTES = 76  # u_int version, uid_t uid, short ngroups (padded), gid_t groups[16]


def peer_credentials(sock: socket.socket) -> tuple[int, int] | None:
    """``(pid, uid)`` of a connected unix socket's peer as the kernel recorded it at ``connect``, or None.

    Linux: ``SO_PEERCRED``. macOS: ``LOCAL_PEERPID`` and ``LOCAL_PEERCRED`` (untested here: no
    macOS machine runs this suite). None on any other system, or when the kernel will not say.
    """
    option = getattr(socket, "SO_PEERCRED", None)
    if option is not None:
        raw = sock.getsockopt(socket.SOL_SOCKET, option, 12)
        return int.from_bytes(raw[0:4], sys.byteorder), int.from_bytes(raw[4:8], sys.byteorder)
    if sys.platform != "darwin":
        return None
    try:
        pid = int.from_bytes(sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID, 4)[0:4], sys.byteorder)
        cred = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERCRED, _XUCRED_BYTES)
    except OSError:
        return None
    if len(cred) < 8 or int.from_bytes(cred[0:4], sys.byteorder) != 0:  # XUCRED_VERSION
        return None
    return pid, int.from_bytes(cred[4:8], sys.byteorder)


def connect(timeout: float | None = CONNECT_TIMEOUT_SECS) -> socket.socket:
    """A connected (blocking) socket to the host, its directory and peer checked; :class:`HostError` else.

    ``timeout`` applies to every later blocking operation on the socket too (``None``: none).
    """
    path = paths.socket_path()
    check_socket_dir(os.path.dirname(path))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
        creds = peer_credentials(sock)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        raise HostError("host_unavailable", f"no host answers on {path} ({exc.strerror})") from None
    except OSError as exc:
        sock.close()
        raise HostError("host_unavailable", f"cannot connect to the host on {path}: {exc}") from None
    if creds is not None and creds[1] != os.getuid():
        sock.close()
        raise HostError("host_dir_unsafe", f"the process listening on {path} (pid {creds[0]}) belongs to uid "
                                           f"{creds[1]}, not to this user")
    return sock


def next_line(sock: socket.socket, buffer: bytearray, limit: int) -> bytes | None:
    """The next line from ``sock`` without its newline, or None when the peer closed first.

    Bytes read past the line stay in ``buffer``. A line longer than ``limit`` is
    :class:`HostError` ``host_refused`` (nothing more is read); the socket's own errors
    (``TimeoutError``, ``OSError``) leave as they are, for the caller to word.
    """
    scanned = 0
    while True:
        end = buffer.find(b"\n", scanned)
        if end > limit or (end < 0 and len(buffer) > limit):
            raise HostError("host_refused", f"the host sent a line longer than {limit} bytes")
        if end >= 0:
            line = bytes(buffer[:end])
            del buffer[:end + 1]
            return line
        scanned = len(buffer)
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk


def read_line(sock: socket.socket, buffer: bytearray, limit: int = protocol.MAX_HELLO_BYTES) -> bytes:
    """The next line from ``sock`` (:func:`next_line`) for a hello's answer.

    :class:`HostError` ``host_unavailable`` when the host closes or times out first,
    ``host_refused`` when the line is longer than ``limit``.
    """
    try:
        line = next_line(sock, buffer, limit)
    except TimeoutError:
        raise HostError("host_unavailable", "the host did not answer in time") from None
    except OSError as exc:
        raise HostError("host_unavailable", f"the host connection failed: {exc}") from None
    if line is None:
        raise HostError("host_unavailable", "the host closed the connection without answering")
    return line


def open_mcp(hello: bytes,
             timeout: float | None = CONNECT_TIMEOUT_SECS) -> tuple[socket.socket, dict[str, Any], bytearray]:
    """Connect, send an ``mcp`` hello, read the welcome: ``(socket, welcome, bytes read past it)``.

    The socket is left blocking; :class:`HostError` (the host's own refusal code, or
    ``host_unavailable`` when the connection fails) closes it.
    """
    sock = connect(timeout)
    try:
        sock.sendall(hello)
        leftover = bytearray()
        welcome = parse_answer(read_line(sock, leftover), protocol.WELCOME)
    except OSError as exc:
        sock.close()
        raise HostError("host_unavailable", f"the host connection failed: {exc}") from None
    except BaseException:
        sock.close()
        raise
    return sock, welcome, leftover


def exchange(kind: str, expect: str, timeout: float = PING_TIMEOUT_SECS, **fields: Any) -> dict[str, Any]:
    """Send one hello of ``kind`` on a fresh connection and return the host's ``expect`` answer."""
    sock = connect(timeout)
    try:
        sock.sendall(protocol.hello(kind, **fields))
        return parse_answer(read_line(sock, bytearray()), expect)
    except OSError as exc:
        raise HostError("host_unavailable", f"the host connection failed: {exc}") from None
    finally:
        sock.close()


def parse_answer(line: bytes, expect: str) -> dict[str, Any]:
    """The host's answer to a hello when it is ``expect``; :class:`HostError` for a refusal or garbage."""
    try:
        answer = json.loads(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get(protocol.TAG) not in (expect, protocol.REFUSED):
        raise HostError("host_refused", f"the host answered something that is not a kirocrew {expect!r}")
    if answer[protocol.TAG] == protocol.REFUSED:
        code = answer.get("code")
        message = answer.get("message")
        raise HostError(code if isinstance(code, str) and code.isidentifier() else "host_refused",
                        str(message) if message else "the host refused the connection")
    return answer


def ping(timeout: float = PING_TIMEOUT_SECS) -> dict[str, Any]:
    """The running host's pong (pid, fingerprint, dashboard address, connections, busy…)."""
    return exchange(protocol.KIND_PING, protocol.PONG, timeout)


def request_stop(wait: float | None = STOP_TIMEOUT_SECS) -> int:
    """Ask the host to stop gracefully and return its pid; with ``wait``, until its process is gone.

    :class:`HostError` ``host_unavailable`` when no host answers; ``host_stop_timeout`` when it
    is still running after ``wait`` seconds.
    """
    answer = exchange(protocol.KIND_STOP, protocol.STOPPING)
    pid = answer.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise HostError("host_refused", "the host's stop answer names no pid")
    if wait is not None and not wait_gone(pid, wait):
        raise HostError("host_stop_timeout", f"the host (pid {pid}) is still running {wait:g} s after it was "
                                             "asked to stop")
    return pid


def pid_gone(pid: int) -> bool:
    """True when ``pid`` runs nothing any more (gone, or a zombie waiting to be reaped); False when unsure."""
    from kirocrew_core import processes  # psutil: never on the relay's path (only ``host stop`` waits)

    return processes.alive(pid) is False


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to be gone; True when it is.

    A host this process started is reaped here, through the handle that started it: left to
    anyone else's ``waitpid``, that handle would report it running until this process exits.
    """
    deadline = time.monotonic() + timeout
    while not pid_gone(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    _reap()
    return True


# -- starting --------------------------------------------------------------------------------------

#: Set to ``1`` for a process that must use a running host and never start one (see ensure_host).
NO_HOST_START_ENV = "KIROCREW_NO_HOST_START"

# Hosts this process started and has not reaped yet (a host that exits while the relay lives
# would otherwise stay a zombie until the relay exits).
_started: list[Any] = []


def ensure_host(env: dict[str, str] | None = None, timeout: float = START_TIMEOUT_SECS) -> dict[str, Any]:
    """The pong of this crew home's host, starting one in the background when none answers.

    ``env`` is the host's environment (default: this process's) minus ``KIROCREW_SESSION_KEY``
    and ``KIROCREW_HOST_PID``.
    Relays racing here start exactly one host: the starter holds ``start.lock`` until its
    host answers, and the others find it answering when they get the lock. With
    ``KIROCREW_NO_HOST_START=1`` in this process's environment (the MCP page's probes of a
    relay, run by the host itself) none is started: ``host_not_running``.
    """
    _reap()
    try:
        return ping()
    except HostError as exc:
        if exc.code != "host_unavailable":
            raise
    if os.environ.get(NO_HOST_START_ENV) == "1":
        raise HostError("host_not_running", f"no kirocrew host answers, and {NO_HOST_START_ENV}=1 forbids starting one")
    deadline = time.monotonic() + timeout
    try:
        paths.ensure_socket_dir()
        lock_fd = _take_start_lock(deadline)
    except paths.UnsafeHostDirError as exc:
        raise HostError("host_dir_unsafe", str(exc)) from None
    except OSError as exc:
        raise HostError("host_start_failed", f"cannot prepare the host's directory: {exc}") from None
    try:
        try:
            return ping()
        except HostError as exc:
            if exc.code != "host_unavailable":
                raise
        return _start_and_wait(env, deadline, timeout)
    finally:
        os.close(lock_fd)  # closing releases the flock


def _reap() -> None:
    """Collect the exit status of hosts this process started that have exited since (no zombies)."""
    for child in list(_started):
        if child.poll() is not None:
            _started.remove(child)


def _take_start_lock(deadline: float) -> int:
    import fcntl

    path = paths.start_lock_file()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise HostError("host_start_failed", f"another process has been starting the host for too "
                                                     f"long (it holds {path})") from None
            time.sleep(0.01)


def host_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a started host gets: ``env`` (default ours), no session key, home paths absolute."""
    out = dict(os.environ if env is None else env)
    for name in _NOT_INHERITED:
        out.pop(name, None)
    for name in _PATH_VARIABLES:
        value = out.get(name, "").strip()
        if value:
            out[name] = os.path.abspath(os.path.expanduser(value))
    return out


def _rotate_log() -> None:
    """Keep ``host.log`` bounded: past :data:`LOG_ROTATE_BYTES` it becomes ``host.log.1`` (one generation)."""
    path = paths.log_file()
    try:
        if os.stat(path).st_size > LOG_ROTATE_BYTES:
            os.replace(path, f"{path}.1")
    except OSError:
        pass  # absent, or not ours to move: the host appends to what is there


def _spawn_host(env: dict[str, str] | None) -> Any:
    import subprocess

    _rotate_log()  # under start.lock: no other starter is writing it
    log = os.open(paths.log_file(), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "kirocrew_core", "serve", "--background"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            env=host_environment(env), cwd=paths.host_dir(), start_new_session=True, close_fds=True,
        )
    except OSError as exc:
        raise HostError("host_start_failed", f"cannot start the host ({sys.executable}): {exc}") from None
    finally:
        os.close(log)
    _started.append(child)
    return child


def _start_and_wait(env: dict[str, str] | None, deadline: float, timeout: float) -> dict[str, Any]:
    """Spawn a host and wait for its pong; a host that lost a race for the run lock is replaced in time.

    A background host that finds the run lock taken exits 0: another host is starting and will
    answer. If none answers for ``RESPAWN_AFTER_SECS`` after that (the lock's holder was a host
    that was dying: killed, but not yet gone), a new one is spawned.
    """
    child = _spawn_host(env)
    exited_at: float | None = None
    delay = 0.005
    while True:
        try:
            return ping()
        except HostError as exc:
            if exc.code != "host_unavailable":
                raise
        now = time.monotonic()
        code = child.poll()
        if code not in (None, 0):
            raise HostError("host_start_failed", f"the host exited with status {code} before it answered"
                                                 f"{_log_tail()}")
        if code == 0:
            if exited_at is None:
                exited_at = now
            elif now - exited_at >= RESPAWN_AFTER_SECS and now < deadline:
                child, exited_at = _spawn_host(env), None
        if now >= deadline:
            raise HostError("host_start_failed", f"the host did not answer within {timeout:g} s{_log_tail()}")
        time.sleep(delay)
        delay = min(delay * 2, 0.01)  # a refused connect costs microseconds; a coarse poll costs the start


def _log_tail() -> str:
    path = paths.log_file()
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - LOG_TAIL_BYTES))
            tail = fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f"; the end of {path}:\n{tail}" if tail else f" ({path} is empty)"
