"""Child processes: spawned in their own process group, torn down in bounded time.

This is the only module in kirocrew that sends signals. Every child starts in a
new session, so it leads its own process group and the whole tree it forks can
be signalled at once: ``kiro-cli`` is a launcher that forks ``kiro-cli-chat``,
and SIGTERM to the launcher alone leaves the real agent orphaned.

Teardown is graceful first, because kiro-cli removes its session ``.lock`` only
when it shuts down on its own: close stdin, wait, SIGTERM the group, wait,
SIGKILL the group, reap. Every wait is a module-level constant (tests shrink
them), so a teardown never takes longer than their sum plus a little.

Both flavours exist because the ACP runtime is asyncio and the CLI probes are
synchronous; they share the signalling and the group bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from kirocrew_core.errors import KirocrewError

log = logging.getLogger(__name__)

# Grace for a child to exit on its own once stdin hits EOF (kiro-cli cleans up its lock here).
STDIN_CLOSE_WAIT_SECS = 3.0
# Grace after SIGTERM to the group before SIGKILL.
TERM_WAIT_SECS = 3.0
# How long to wait for the kernel to reap after SIGKILL (only a process stuck in I/O outlives it).
KILL_WAIT_SECS = 2.0
# How long teardown waits for stderr drains to deliver the child's last lines.
DRAIN_JOIN_SECS = 1.0
# How often a wait re-checks the group once its leader is gone.
POLL_INTERVAL_SECS = 0.02

# ACP frames are single JSON lines and can be far larger than asyncio's 64 KiB default.
STREAM_LIMIT = 16 * 1024 * 1024
# A stderr line longer than this is cut (the rest of the line is read and dropped).
MAX_STDERR_LINE = 8 * 1024
_READ_CHUNK = 64 * 1024
_TRUNCATED = " [...truncated]"

PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

Proc = subprocess.Popen | asyncio.subprocess.Process
LineSink = Callable[[str], object]

# pgid recorded at spawn, so the group can still be signalled after its leader is gone.
_GROUPS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_DRAINS: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()


class Step(enum.Enum):
    """The teardown step after which no process of the group was left."""

    ALREADY_EXITED = "already_exited"
    EXITED_ON_EOF = "exited_on_eof"
    TERMINATED = "terminated"
    KILLED = "killed"


@dataclass(frozen=True)
class Teardown:
    """What :func:`terminate` had to do.

    ``returncode`` is the leader's (None only if even SIGKILL could not reap it);
    ``survivors`` is True when some process of the group was still there when
    teardown gave up (stuck in uninterruptible I/O: nothing more can be done).
    """

    step: Step
    returncode: int | None
    survivors: bool = False
    reason: str = ""


# -- spawning ---------------------------------------------------------------


def _spawn_failed(argv: Sequence[str], exc: OSError) -> KirocrewError:
    detail = exc.strerror or str(exc)
    if exc.filename is not None and os.fsdecode(exc.filename) != argv[0]:
        detail = f"{detail}: {os.fsdecode(exc.filename)}"
    return KirocrewError(f"cannot start {argv[0]!r}: {detail}", code="spawn_failed")


def _checked_argv(argv: Sequence[str | os.PathLike[str]], env: Mapping[str, str] | None) -> list[str]:
    if env is None:
        # Inheriting our environment silently would leak whatever the gateway runs with.
        raise TypeError("env is required: the caller decides the child's whole environment")
    args = [os.fspath(a) for a in argv]
    if not args or not args[0]:
        raise ValueError("argv must name a program")
    return args


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    stdin: int | IO[Any] | None = PIPE,
    stdout: int | IO[Any] | None = PIPE,
    stderr: int | IO[Any] | None = PIPE,
    text: bool = False,
) -> subprocess.Popen[Any]:
    """Start ``argv`` as the leader of a new process group, with exactly ``env``.

    Raises :class:`KirocrewError` (code ``spawn_failed``) naming ``argv[0]`` when
    the program cannot be started. Tear it down with :func:`terminate`.
    """
    args = _checked_argv(argv, env)
    try:
        proc = subprocess.Popen(
            args, env=dict(env), cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
            text=text, close_fds=True, start_new_session=True,
        )
    except OSError as exc:
        raise _spawn_failed(args, exc) from exc
    _GROUPS[proc] = proc.pid  # a new session's leader: pgid == pid
    return proc


def run(
    argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str], timeout: float, reason: str = "",
    stdin: int | IO[Any] = DEVNULL,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` to completion (output captured) as :func:`spawn` starts it.

    ``stdin``: none by default, or a file (descriptor) the child reads, never a pipe to feed.
    Past ``timeout`` or interrupted, the whole group is torn down before the error
    (:class:`subprocess.TimeoutExpired`, say) propagates: a short probe never leaves a child behind.
    """
    if stdin == PIPE:
        raise ValueError("run() feeds no pipe: pass a file or DEVNULL")
    child = spawn(argv, env=env, stdin=stdin)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except BaseException:
        terminate(child, reason=f"{reason or 'a short run'} did not finish")
        raise
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


async def spawn_async(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    stdin: int | IO[Any] | None = PIPE,
    stdout: int | IO[Any] | None = PIPE,
    stderr: int | IO[Any] | None = PIPE,
    limit: int = STREAM_LIMIT,
) -> asyncio.subprocess.Process:
    """The asyncio flavour of :func:`spawn`; ``limit`` bounds one line on the stream readers."""
    args = _checked_argv(argv, env)
    try:
        proc = await asyncio.create_subprocess_exec(
            *args, env=dict(env), cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
            limit=limit, close_fds=True, start_new_session=True,
        )
    except OSError as exc:
        raise _spawn_failed(args, exc) from exc
    _GROUPS[proc] = proc.pid
    return proc


# -- signalling (the only place kirocrew kills) -----------------------------


def _safe_pgid(pgid: int | None) -> int | None:
    """``pgid`` if it may be signalled: never 0/1 (everyone) nor our own group."""
    if pgid is None or pgid <= 1 or pgid == os.getpgrp():
        return None
    return pgid


def _group_of(proc: Proc) -> int | None:
    pgid = _GROUPS.get(proc)
    if pgid is None and proc.returncode is None:
        # Not spawned here: treat it as a group only if it leads one of its own.
        with contextlib.suppress(OSError):
            if os.getpgid(proc.pid) == proc.pid:
                pgid = proc.pid
    return _safe_pgid(pgid)


def _group_alive(pgid: int | None) -> bool:
    if pgid is None:
        return False
    from kirocrew_core import processes

    members = processes.group_members(pgid)
    if members is not None:
        # An orphaned zombie waits for init to reap it; it runs nothing, so it does not count.
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone is there, we just may not signal them
    return True


def _signal(proc: Proc, pgid: int | None, sig: signal.Signals) -> None:
    """Send ``sig`` to the group, and to the leader itself if it has left the group."""
    if pgid is not None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            log.warning("cannot signal process group %d with %s: %s", pgid, sig.name, exc)
    if proc.returncode is not None:
        return
    with contextlib.suppress(OSError):
        if pgid is not None and os.getpgid(proc.pid) == pgid:
            return  # already reached through the group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        proc.send_signal(sig)


# -- teardown, sync ----------------------------------------------------------


def _close_stdin(stream: IO[Any] | None) -> None:
    if stream is None:
        return
    # Non-blocking first: flushing into a full pipe nobody reads would hang the close.
    with contextlib.suppress(OSError, ValueError):
        os.set_blocking(stream.fileno(), False)
    with contextlib.suppress(OSError, ValueError):
        stream.close()


def _wait_gone(proc: subprocess.Popen[Any], pgid: int | None, timeout: float) -> bool:
    """Wait up to ``timeout`` for the leader to be reaped and the group to be empty."""
    deadline = time.monotonic() + timeout
    try:
        proc.wait(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        return False
    while _group_alive(pgid):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(POLL_INTERVAL_SECS, remaining))
    return True


def _teardown(proc: subprocess.Popen[Any], pgid: int | None) -> tuple[Step, bool]:
    if proc.poll() is not None and not _group_alive(pgid):
        _close_stdin(proc.stdin)
        return Step.ALREADY_EXITED, False
    if proc.stdin is not None:  # without a stdin pipe there is no EOF to wait on
        _close_stdin(proc.stdin)
        if _wait_gone(proc, pgid, STDIN_CLOSE_WAIT_SECS):
            return Step.EXITED_ON_EOF, False
    _signal(proc, pgid, signal.SIGTERM)
    if _wait_gone(proc, pgid, TERM_WAIT_SECS):
        return Step.TERMINATED, False
    _signal(proc, pgid, signal.SIGKILL)
    return Step.KILLED, not _wait_gone(proc, pgid, KILL_WAIT_SECS)


def terminate(proc: subprocess.Popen[Any], *, reason: str = "") -> Teardown:
    """Tear ``proc`` and its whole process group down, in bounded time.

    Close stdin, wait :data:`STDIN_CLOSE_WAIT_SECS`, SIGTERM the group, wait
    :data:`TERM_WAIT_SECS`, SIGKILL the group, reap. A group whose leader has
    already exited is still signalled while any member lives. Interrupted
    half-way (KeyboardInterrupt), the group is killed before the error propagates.
    The child's stdout and stderr pipes are closed on return: read what you need
    first, and do not call this while another thread still reads stdout.
    """
    pgid = _group_of(proc)
    try:
        step, survivors = _teardown(proc, pgid)
    except BaseException:
        _signal(proc, pgid, signal.SIGKILL)
        raise
    drains = _DRAINS.pop(proc, [])
    for drain in drains:
        drain.join(DRAIN_JOIN_SECS)
    # The group is gone, so nothing more will be read: release the pipes (a drain closes its own).
    for stream in (proc.stdout,) if drains else (proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()
    result = Teardown(step, proc.returncode, survivors, reason)
    _log_teardown(proc.pid, result)
    return result


def _log_teardown(pid: int, result: Teardown) -> None:
    why = f" ({result.reason})" if result.reason else ""
    if result.survivors:
        log.warning("process %d torn down%s: part of its group survived SIGKILL", pid, why)
    else:
        level = logging.INFO if result.step is Step.KILLED else logging.DEBUG
        log.log(level, "process %d torn down%s: %s, returncode %s", pid, why, result.step.value,
                result.returncode)


# -- teardown, asyncio -------------------------------------------------------


async def _wait_gone_async(proc: asyncio.subprocess.Process, pgid: int | None, timeout: float) -> bool:
    # Polls rather than awaiting proc.wait(): that also waits for every pipe to close,
    # and a grandchild holding stderr open would make an exited leader look alive.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while proc.returncode is None or await asyncio.to_thread(_group_alive, pgid):
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(POLL_INTERVAL_SECS, remaining))
    return True


def _close_stdin_async(proc: asyncio.subprocess.Process) -> None:
    # Not awaiting wait_closed(): a child that stopped reading would hold the flush forever.
    if proc.stdin is not None:
        with contextlib.suppress(OSError, RuntimeError):
            proc.stdin.close()


def _close_transport(proc: asyncio.subprocess.Process) -> None:
    """Close the child's pipes now, on this loop.

    asyncio closes a subprocess transport only once the child exited and every pipe reached EOF; a
    pipe that a process outside the group still holds keeps it open, and a transport still open when
    its loop closes is closed by its ``__del__`` on a closed loop, an error nobody can catch (the suite
    saw it as ``PytestUnraisableExceptionWarning`` from ``BaseSubprocessTransport.__del__``).
    ``asyncio.subprocess.Process`` names its transport only privately.
    """
    transport = getattr(proc, "_transport", None)
    if transport is not None and not transport.is_closing():
        with contextlib.suppress(RuntimeError):  # the loop is closing already: nothing left to tidy
            transport.close()


async def _transport_closed(proc: asyncio.subprocess.Process, deadline: float) -> None:
    """Wait until the child's pipes reached EOF and asyncio closed its transport; close it at ``deadline``."""
    transport = getattr(proc, "_transport", None)
    loop = asyncio.get_running_loop()
    while transport is not None and not transport.is_closing() and loop.time() < deadline:
        await asyncio.sleep(0.01)
    _close_transport(proc)


async def _leader_reported(proc: asyncio.subprocess.Process, timeout: float) -> None:
    """Wait (bounded) until the loop's child watcher has reported the killed leader's exit.

    Closing the transport before that reaps the leader behind the watcher's back (asyncio's ``close()``
    polls its ``Popen``): the watcher then reports 255 instead of the signal and logs an unknown child.
    A second cancel ends the wait at once; the caller re-raises the first.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    with contextlib.suppress(asyncio.CancelledError):
        while proc.returncode is None and loop.time() < deadline:
            await asyncio.sleep(POLL_INTERVAL_SECS)


async def _teardown_async(proc: asyncio.subprocess.Process, pgid: int | None) -> tuple[Step, bool]:
    if proc.returncode is not None and not await asyncio.to_thread(_group_alive, pgid):
        _close_stdin_async(proc)
        return Step.ALREADY_EXITED, False
    if proc.stdin is not None:
        _close_stdin_async(proc)
        if await _wait_gone_async(proc, pgid, STDIN_CLOSE_WAIT_SECS):
            return Step.EXITED_ON_EOF, False
    _signal(proc, pgid, signal.SIGTERM)
    if await _wait_gone_async(proc, pgid, TERM_WAIT_SECS):
        return Step.TERMINATED, False
    _signal(proc, pgid, signal.SIGKILL)
    return Step.KILLED, not await _wait_gone_async(proc, pgid, KILL_WAIT_SECS)


async def terminate_async(proc: asyncio.subprocess.Process, *, reason: str = "") -> Teardown:
    """The asyncio flavour of :func:`terminate`.

    Cancelled half-way, it SIGKILLs the group before re-raising, so a cancelled
    shutdown never leaves a child behind.
    """
    pgid = _group_of(proc)
    try:
        step, survivors = await _teardown_async(proc, pgid)
    except BaseException:
        _signal(proc, pgid, signal.SIGKILL)
        await _leader_reported(proc, KILL_WAIT_SECS)
        _close_transport(proc)
        raise
    # Let the pipes reach EOF, so the drains deliver the last lines and the transport closes.
    deadline = asyncio.get_running_loop().time() + DRAIN_JOIN_SECS
    closed = asyncio.ensure_future(proc.wait())
    await asyncio.wait([closed, *_DRAINS.pop(proc, [])], timeout=DRAIN_JOIN_SECS)
    closed.cancel()
    await _transport_closed(proc, deadline)
    result = Teardown(step, proc.returncode, survivors, reason)
    _log_teardown(proc.pid, result)
    return result


# -- children tied to this process's life, and groups a dead process left ------------------

# The supervisor of a tied child (POSIX sh; no preexec_fn, so it is safe from a threaded asyncio host):
# it runs the command in the background, in its own process group, and a watcher reads its stdin, a
# pipe whose write end only we hold. The kernel closes that end when we close it or when we die, even
# by SIGKILL; the watcher then sends the whole group SIGTERM, waits for the command up to {grace} s,
# and sends SIGKILL (itself included). PR_SET_PDEATHSIG would reach the supervisor alone, and only on
# Linux: the group's other processes would outlive a SIGKILLed host.
# The supervisor survives the SIGTERM (a trap, not an ignore: the command gets SIGTERM's default action)
# to reap the command at once, so the watcher sees it gone and ends the group without waiting out the grace.
# It reaps the watcher it kills before it exits: once the supervisor is gone, nothing of the tie is left in the group.
_TIE_SCRIPT = """\
trap : TERM
exec 3<&0 </dev/null
"$@" 3<&- &
job=$!
( trap '' TERM
  read -r line <&3
  kill -TERM 0
  i=0
  while [ "$i" -lt {ticks} ] && kill -0 "$job" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
  kill -KILL 0 ) >/dev/null 2>&1 &
watch=$!
exec 3<&-
while :; do
  wait "$job"
  status=$?
  kill -0 "$job" 2>/dev/null || break
done
kill -KILL "$watch" 2>/dev/null
wait "$watch" 2>/dev/null
exit "$status"
"""
TIE_NAME = "kirocrew-tied"


async def spawn_tied_async(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str] | None = None,
    stdout: int | IO[Any] | None = PIPE,
    stderr: int | IO[Any] | None = PIPE,
    limit: int = STREAM_LIMIT,
) -> asyncio.subprocess.Process:
    """:func:`spawn_async` for a child that must not outlive us: it leads its own process group under a
    small ``sh`` supervisor, and when this process dies (even by SIGKILL) or closes the child's stdin
    (:func:`terminate_async` does that first), the whole group gets SIGTERM, then SIGKILL after
    :data:`TERM_WAIT_SECS`. The command reads ``/dev/null``; its stdin is the tie, never write to it.

    The returned process is the supervisor: its pid is the group's id, its exit status the command's
    (128 + N when a signal N ended it). A process of the group that starts a session of its own
    (``setsid``) leaves the group, and neither the tie nor a teardown reaches it.
    """
    script = _TIE_SCRIPT.format(ticks=max(1, round(TERM_WAIT_SECS * 10)))
    return await spawn_async(["/bin/sh", "-c", script, TIE_NAME, *argv], env=env, cwd=cwd, stdin=PIPE,
                             stdout=stdout, stderr=stderr, limit=limit)


@dataclass(frozen=True)
class GroupRecord:
    """What tells a process group apart after the process that started it is gone: its id and its leader's
    start (the boot and the kernel's start time of the leader), so a reused pid is never taken for it."""

    pgid: int
    leader_start: str


def group_record(proc: Proc) -> GroupRecord | None:
    """The record of ``proc``'s group (spawned here, still running), or None when its start cannot be read."""
    pgid = _group_of(proc)
    start = _leader_start(pgid) if pgid is not None else None
    return None if pgid is None or start is None else GroupRecord(pgid, start)


def _leader_start(pid: int) -> str | None:
    """``<boot id>:<start time>`` of a running (not zombie) ``pid``; None when it is gone or unknowable."""
    from kirocrew_core import processes

    boot = processes.boot_id()
    started = processes.start_token(pid)
    return f"{boot}:{started}" if boot and started else None


class Recovered(enum.Enum):
    """What :func:`end_recorded_group` found and did."""

    GONE = "gone"  # nothing of the group runs
    KILLED = "killed"  # its leader still ran, the same process: the group was killed and is gone
    HELD = "held"  # something of it may still run and could not be ended (survived SIGKILL, or not provably ours)


def end_recorded_group(record: GroupRecord, *, reason: str = "") -> Recovered:
    """Kill a group a previous process recorded, if its leader still runs as the same process (same start).

    Only a leader proven to be the recorded one is signalled: a reused pid is never killed. A live
    process of that pid that started at another time means the recorded group is gone (the kernel
    gives no process the id of a group that still exists). When no process of that pid runs but the
    group id still has members (its leader died and left them, or a later group of that id lost its
    leader), nothing is signalled and the answer is ``HELD``, as it is where the start cannot be read
    (no ``/proc``) and a group of that id exists: the caller waits for it to end.
    """
    pgid = _safe_pgid(record.pgid)
    if pgid is None:
        return Recovered.GONE
    current = _leader_start(pgid)
    if current is not None and current != record.leader_start:
        return Recovered.GONE
    if current == record.leader_start:
        log.info("killing process group %d left by an earlier process%s", pgid, f" ({reason})" if reason else "")
        with contextlib.suppress(ProcessLookupError):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except PermissionError as exc:
                log.warning("cannot signal process group %d: %s", pgid, exc)
                return Recovered.HELD
        deadline = time.monotonic() + KILL_WAIT_SECS
        while _group_alive(pgid):
            if time.monotonic() >= deadline:
                return Recovered.HELD
            time.sleep(POLL_INTERVAL_SECS)
        return Recovered.KILLED
    return Recovered.HELD if _group_alive(pgid) else Recovered.GONE


def group_ended(record: GroupRecord) -> bool:
    """Whether nothing of the recorded group runs any more (a ``HELD`` group, looked at again)."""
    pgid = _safe_pgid(record.pgid)
    return pgid is None or not _group_alive(pgid)


# -- draining ----------------------------------------------------------------


class _LineSplitter:
    """Cuts a byte stream into lines for ``sink``, each at most ``max_line`` bytes."""

    def __init__(self, sink: LineSink | None, max_line: int) -> None:
        self._sink = sink
        self._max = max(1, max_line)
        self._buf = bytearray()
        self._cut = False

    def feed(self, chunk: bytes) -> None:
        if self._sink is None:
            return  # nobody listens: the bytes only had to leave the pipe
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            piece = chunk[start:] if newline < 0 else chunk[start:newline]
            if not self._cut:
                room = self._max - len(self._buf)
                self._buf += piece[:room]
                self._cut = len(piece) > room
            if newline < 0:
                return
            self._emit()
            start = newline + 1

    def finish(self) -> None:
        if self._buf or self._cut:
            self._emit()

    def _emit(self) -> None:
        line = bytes(self._buf).decode("utf-8", "replace").rstrip("\r")
        if self._cut:
            line += _TRUNCATED
        self._buf.clear()
        self._cut = False
        if self._sink is None:
            return
        try:
            self._sink(line)
        except Exception:
            # A broken sink must not stop the draining, or the child blocks on a full pipe.
            log.exception("stderr sink failed; further lines are dropped")
            self._sink = None


def _drain_sync(stream: IO[Any], splitter: _LineSplitter) -> None:
    raw = getattr(stream, "buffer", stream)  # text-mode Popen: read the bytes underneath
    read = getattr(raw, "read1", raw.read)
    try:
        while chunk := read(_READ_CHUNK):
            splitter.feed(chunk)
    except (OSError, ValueError):
        pass  # closed under us: nothing more to drain
    finally:
        splitter.finish()
        with contextlib.suppress(OSError, ValueError):
            stream.close()


def drain_stderr(
    proc: subprocess.Popen[Any], sink: LineSink | None = None, *, max_line: int = MAX_STDERR_LINE
) -> threading.Thread:
    """Read ``proc.stderr`` in a daemon thread so a chatty child never blocks on a full pipe.

    Each line (decoded as UTF-8 with replacement, at most ``max_line`` bytes) goes
    to ``sink``; pass ``collections.deque(maxlen=N).append`` to keep a tail for an
    error message, or None to discard. :func:`terminate` waits briefly for the
    drain, so the child's last lines have reached ``sink`` when it returns.
    """
    if proc.stderr is None:
        raise ValueError("stderr was not spawned as a pipe")
    thread = threading.Thread(
        target=_drain_sync, args=(proc.stderr, _LineSplitter(sink, max_line)),
        name=f"kirocrew-stderr-{proc.pid}", daemon=True,
    )
    thread.start()
    _DRAINS.setdefault(proc, []).append(thread)
    return thread


async def _drain_async(stream: asyncio.StreamReader, splitter: _LineSplitter) -> None:
    try:
        while chunk := await stream.read(_READ_CHUNK):
            splitter.feed(chunk)
    finally:
        splitter.finish()


def drain_stderr_async(
    proc: asyncio.subprocess.Process, sink: LineSink | None = None, *, max_line: int = MAX_STDERR_LINE
) -> asyncio.Task[None]:
    """The asyncio flavour of :func:`drain_stderr`: a task on the running loop."""
    if proc.stderr is None:
        raise ValueError("stderr was not spawned as a pipe")
    task = asyncio.get_running_loop().create_task(
        _drain_async(proc.stderr, _LineSplitter(sink, max_line)), name=f"kirocrew-stderr-{proc.pid}"
    )
    _DRAINS.setdefault(proc, []).append(task)
    return task


# -- descendants (for leak guards) -------------------------------------------


def live_descendants(root: int | None = None) -> dict[int, str]:
    """Live (non-zombie) descendants of ``root`` (default: this process) with their command lines.

    Read from ``/proc/<pid>/task/*/children``; empty where there is no ``/proc``.
    """
    root = os.getpid() if root is None else root
    found: dict[int, str] = {}
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    children = [int(c) for c in fh.read().split()]
            except OSError:
                continue
            for child in children:
                if child in found:
                    continue
                try:
                    with open(f"/proc/{child}/stat", "rb") as fh:
                        stat_line = fh.read()
                    with open(f"/proc/{child}/cmdline", "rb") as fh:
                        cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    continue
                if stat_line[stat_line.rfind(b")") + 2 :][:1] in (b"Z", b"X"):
                    continue
                found[child] = cmdline
                pending.append(child)
    return found


def kill_pids(pids: Sequence[int]) -> None:
    """SIGKILL each pid (leaked processes a guard found); gone or foreign pids are ignored."""
    for pid in pids:
        if pid <= 1 or pid == os.getpid():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
