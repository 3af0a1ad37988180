"""proc.py against real children: process groups, bounded teardown, drained stderr."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import proc
from kirocrew_core.errors import KirocrewError

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="inspects /proc")

SLEEPER = "import time; time.sleep(600)"
IGNORE_TERM = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
READY = "print('ready', flush=True); "

# Starts a grandchild in the launcher's group, prints its pid, and leaves it behind.
LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"ready\\n"
    print(child.pid, flush=True)
    if sys.argv[2] == "stay":
        import time; time.sleep(600)
    """
)

FLOOD_LINES = 100_000  # x ~100 bytes = ~10 MB of stderr
FLOOD = textwrap.dedent(
    f"""
    import sys
    line = "x" * 99 + "\\n"
    for i in range({FLOOD_LINES}):
        sys.stderr.write(line)
    sys.stderr.write("last line\\n")
    sys.stderr.flush()
    print("done", flush=True)
    sys.stdin.read()
    """
)


def py(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def live_members(pgid: int) -> list[int]:
    """Non-zombie pids in process group ``pgid`` (a zombie runs nothing, and some inits never reap)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rfind(b")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def is_running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def read_line(stream: Any, timeout: float = 60) -> bytes:
    """One stdout line, failing the test instead of hanging when the child never writes it."""
    ready, _, _ = select.select([stream], [], [], timeout)
    assert ready, "child wrote nothing on stdout"
    return stream.readline()


@pytest.fixture(autouse=True)
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 0.3)
    monkeypatch.setattr(proc, "TERM_WAIT_SECS", 0.5)
    monkeypatch.setattr(proc, "KILL_WAIT_SECS", 10.0)


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[Any]]]:
    """Children a test started; anything still running at the end is torn down."""
    children: list[subprocess.Popen[Any]] = []
    yield children
    for child in children:
        proc.terminate(child, reason="test cleanup")


def start(spawned: list[subprocess.Popen[Any]], argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    child = proc.spawn(argv, env=dict(os.environ), **kwargs)
    spawned.append(child)
    return child


# -- spawning ----------------------------------------------------------------


def test_a_spawned_child_leads_its_own_session_and_process_group(spawned: list) -> None:
    child = start(spawned, py(READY + SLEEPER))
    assert read_line(child.stdout) == b"ready\n"
    assert os.getpgid(child.pid) == child.pid
    assert os.getsid(child.pid) == child.pid
    assert os.getpgid(child.pid) != os.getpgrp()


def test_a_spawned_child_sees_exactly_the_environment_it_was_given(spawned: list, tmp_path: Path) -> None:
    child = proc.spawn(py("import json, os; print(json.dumps(sorted(os.environ)))"),
                       env={"ONLY_THIS": "1"}, cwd=tmp_path)
    spawned.append(child)
    out, _ = child.communicate(timeout=60)
    names = json.loads(out)
    assert "ONLY_THIS" in names
    assert "HOME" not in names and "KIROCREW_HOME" not in names


def test_spawning_without_an_environment_is_refused() -> None:
    with pytest.raises(TypeError, match="env is required"):
        proc.spawn(py("pass"), env=None)  # type: ignore[arg-type]


def test_a_missing_executable_is_a_spawn_failed_error_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-kiro-cli")
    with pytest.raises(KirocrewError) as caught:
        proc.spawn([missing, "acp"], env={})
    assert caught.value.code == "spawn_failed"
    assert missing in caught.value.message


def test_a_missing_working_directory_is_a_spawn_failed_error(tmp_path: Path) -> None:
    with pytest.raises(KirocrewError) as caught:
        proc.spawn(py("pass"), env={}, cwd=tmp_path / "gone")
    assert caught.value.code == "spawn_failed"
    assert "gone" in caught.value.message


# -- teardown ------------------------------------------------------------------


def test_a_child_that_exits_on_stdin_eof_is_never_signalled(spawned: list, monkeypatch) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 30.0)
    child = start(spawned, py(READY + "import sys; sys.stdin.read()"))
    assert read_line(child.stdout) == b"ready\n"
    result = proc.terminate(child, reason="done")
    assert result.step is proc.Step.EXITED_ON_EOF
    assert result.returncode == 0
    assert not result.survivors
    assert result.reason == "done"


def test_a_child_that_ignores_eof_is_terminated(spawned: list) -> None:
    child = start(spawned, py(READY + SLEEPER))
    assert read_line(child.stdout) == b"ready\n"
    result = proc.terminate(child)
    assert result.step is proc.Step.TERMINATED
    assert result.returncode == -15


def test_a_child_that_ignores_sigterm_is_killed(spawned: list) -> None:
    child = start(spawned, py(IGNORE_TERM + READY + SLEEPER))
    assert read_line(child.stdout) == b"ready\n"
    result = proc.terminate(child)
    assert result.step is proc.Step.KILLED
    assert result.returncode == -9
    assert not result.survivors
    assert live_members(child.pid) == []


def test_tearing_down_an_exited_child_reports_it_already_exited(spawned: list) -> None:
    child = start(spawned, py("raise SystemExit(3)"))
    child.wait(timeout=60)
    result = proc.terminate(child)
    assert result.step is proc.Step.ALREADY_EXITED
    assert result.returncode == 3


def test_grandchildren_of_an_exited_launcher_are_torn_down_with_the_group(spawned: list) -> None:
    launcher = start(spawned, py(LAUNCHER, READY + SLEEPER, "leave"))
    grandchild = int(read_line(launcher.stdout))
    assert launcher.wait(timeout=60) == 0
    assert is_running(grandchild)
    assert live_members(launcher.pid) == [grandchild]

    result = proc.terminate(launcher)

    assert result.step is proc.Step.TERMINATED
    assert result.returncode == 0
    assert not is_running(grandchild)
    assert live_members(launcher.pid) == []


def test_a_grandchild_ignoring_sigterm_is_killed_after_its_launcher_exits(spawned: list) -> None:
    launcher = start(spawned, py(LAUNCHER, IGNORE_TERM + READY + SLEEPER, "leave"))
    grandchild = int(read_line(launcher.stdout))
    launcher.wait(timeout=60)
    result = proc.terminate(launcher)
    assert result.step is proc.Step.KILLED
    assert not result.survivors
    assert live_members(launcher.pid) == []
    assert not is_running(grandchild)


def test_a_running_launcher_and_its_grandchild_die_together(spawned: list) -> None:
    launcher = start(spawned, py(LAUNCHER, IGNORE_TERM + READY + SLEEPER, "stay"))
    grandchild = int(read_line(launcher.stdout))
    result = proc.terminate(launcher)
    # The launcher died of the SIGTERM; the step says the group needed SIGKILL for the grandchild.
    assert result.step is proc.Step.KILLED
    assert result.returncode == -15
    assert not is_running(grandchild)
    assert live_members(launcher.pid) == []


def test_a_group_leader_started_elsewhere_is_torn_down_with_its_group() -> None:
    launcher = subprocess.Popen(py(LAUNCHER, READY + SLEEPER, "stay"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, start_new_session=True)
    try:
        grandchild = int(read_line(launcher.stdout))
    finally:
        result = proc.terminate(launcher)
    assert result.step is proc.Step.TERMINATED
    assert not is_running(grandchild)
    assert live_members(launcher.pid) == []


def test_a_child_sharing_our_process_group_is_signalled_alone(tmp_path: Path) -> None:
    # Run in a throwaway session: if the guard failed, the group SIGTERM would kill the script.
    script = textwrap.dedent(
        """
        import subprocess, sys
        from kirocrew_core import proc
        proc.STDIN_CLOSE_WAIT_SECS = 0.2
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 stdin=subprocess.PIPE)
        result = proc.terminate(child)
        print(result.step.value, result.returncode, "and the caller survived", flush=True)
        """
    )
    done = subprocess.run(py(script), capture_output=True, text=True, timeout=120,
                          start_new_session=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "terminated -15 and the caller survived"


# -- draining ----------------------------------------------------------------


def test_a_drained_ten_megabyte_stderr_flood_does_not_block_the_child(spawned: list, monkeypatch) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 30.0)
    child = start(spawned, py(FLOOD))
    lines: list[str] = []
    proc.drain_stderr(child, lines.append)
    assert read_line(child.stdout, timeout=120) == b"done\n"
    result = proc.terminate(child)
    assert result.step is proc.Step.EXITED_ON_EOF
    # terminate() waited for the drain, so every line has reached the sink.
    assert len(lines) == FLOOD_LINES + 1
    assert lines[0] == "x" * 99
    assert lines[-1] == "last line"


def test_an_overlong_stderr_line_is_cut_and_the_next_line_still_arrives(spawned: list, monkeypatch) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 30.0)
    code = ("import sys; sys.stderr.write('y' * 5_000_000 + '\\nafter\\n'); sys.stderr.flush(); "
            "print('done', flush=True); sys.stdin.read()")
    child = start(spawned, py(code))
    lines: list[str] = []
    proc.drain_stderr(child, lines.append, max_line=100)
    assert read_line(child.stdout, timeout=120) == b"done\n"
    proc.terminate(child)
    assert lines == ["y" * 100 + " [...truncated]", "after"]


def test_a_sink_that_raises_does_not_stop_the_draining(spawned: list, monkeypatch) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 30.0)
    child = start(spawned, py(FLOOD))

    def broken_sink(line: str) -> None:
        raise RuntimeError("sink is broken")

    proc.drain_stderr(child, broken_sink)
    assert read_line(child.stdout, timeout=120) == b"done\n"
    assert proc.terminate(child).step is proc.Step.EXITED_ON_EOF


def test_a_text_mode_child_is_drained_too(spawned: list) -> None:
    child = start(spawned, py("import sys; print('oops: caf\\u00e9', file=sys.stderr)"), text=True)
    lines: list[str] = []
    proc.drain_stderr(child, lines.append)
    assert proc.terminate(child).returncode == 0
    assert lines == ["oops: café"]


def test_draining_a_child_without_a_stderr_pipe_is_refused(spawned: list) -> None:
    child = start(spawned, py("pass"), stderr=subprocess.DEVNULL)
    with pytest.raises(ValueError, match="stderr"):
        proc.drain_stderr(child, None)


# -- a short run to completion ------------------------------------------------


def test_a_short_run_returns_its_exit_code_and_output_without_stdin() -> None:
    code = "import sys; print(sys.stdin.read() == ''); sys.stderr.write('err'); sys.exit(3)"
    done = proc.run(py(code), env=dict(os.environ), timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, b"True\n", b"err")


def test_a_short_run_past_its_timeout_takes_its_whole_group_down() -> None:
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        proc.run(py(LAUNCHER, READY + SLEEPER, "stay"), env=dict(os.environ), timeout=5)
    grandchild = int(expired.value.output.split()[0])
    assert not is_running(grandchild)


# -- asyncio flavour -----------------------------------------------------------


def run(scenario: Any) -> Any:
    """Run ``scenario(children)`` on a fresh loop; children it started are torn down after."""

    async def main() -> Any:
        children: list[asyncio.subprocess.Process] = []
        try:
            return await scenario(children)
        finally:
            for child in children:
                await proc.terminate_async(child, reason="test cleanup")

    return asyncio.run(main())


async def start_async(children: list, argv: list[str], **kwargs: Any) -> asyncio.subprocess.Process:
    child = await proc.spawn_async(argv, env=dict(os.environ), **kwargs)
    children.append(child)
    return child


def stdout_of(child: asyncio.subprocess.Process) -> asyncio.StreamReader:
    """The child's stdout pipe: every async child here is spawned with one."""
    assert child.stdout is not None
    return child.stdout


async def ready(child: asyncio.subprocess.Process) -> None:
    assert await asyncio.wait_for(stdout_of(child).readline(), 60) == b"ready\n"


async def exited(child: asyncio.subprocess.Process) -> int:
    # Not child.wait(): on 3.11 it also waits for the pipes a grandchild still holds.
    for _ in range(6000):
        if child.returncode is not None:
            return child.returncode
        await asyncio.sleep(0.01)
    raise AssertionError("child did not exit")


def test_async_a_child_that_exits_on_stdin_eof_is_never_signalled(monkeypatch) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 30.0)

    async def scenario(children: list) -> proc.Teardown:
        child = await start_async(children, py(READY + "import sys; sys.stdin.read()"))
        await ready(child)
        return await proc.terminate_async(child)

    result = run(scenario)
    assert result.step is proc.Step.EXITED_ON_EOF
    assert result.returncode == 0


def test_async_a_child_that_ignores_sigterm_is_killed() -> None:
    async def scenario(children: list) -> tuple[proc.Teardown, int]:
        child = await start_async(children, py(IGNORE_TERM + READY + SLEEPER))
        await ready(child)
        return await proc.terminate_async(child), child.pid

    result, pid = run(scenario)
    assert result.step is proc.Step.KILLED
    assert result.returncode == -9
    assert live_members(pid) == []


def test_async_grandchildren_of_an_exited_launcher_are_torn_down() -> None:
    async def scenario(children: list) -> tuple[proc.Teardown, int, int]:
        launcher = await start_async(children, py(LAUNCHER, READY + SLEEPER, "leave"))
        grandchild = int(await asyncio.wait_for(stdout_of(launcher).readline(), 60))
        assert await exited(launcher) == 0
        assert is_running(grandchild)
        return await proc.terminate_async(launcher), launcher.pid, grandchild

    result, pgid, grandchild = run(scenario)
    assert result.step is proc.Step.TERMINATED
    assert result.returncode == 0
    assert not is_running(grandchild)
    assert live_members(pgid) == []


def test_async_a_child_whose_pipes_outlive_its_group_leaves_no_open_transport(monkeypatch) -> None:
    monkeypatch.setattr(proc, "DRAIN_JOIN_SECS", 0.3)
    # A grandchild that left the group (setsid) keeps the child's stdout and stderr open after the teardown.
    script = "setsid sleep 60 & echo $!; exec cat"

    async def scenario(children: list) -> tuple[proc.Teardown, int]:
        child = await start_async(children, ["/bin/sh", "-c", script])
        escaped = int(await asyncio.wait_for(stdout_of(child).readline(), 60))
        proc.drain_stderr_async(child)
        return await proc.terminate_async(child), escaped

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        try:
            result, escaped = run(scenario)
        finally:
            gc.collect()  # what would close a transport left open, after its loop is gone
    try:
        assert result.step is proc.Step.EXITED_ON_EOF
        unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert unclosed == []
    finally:
        os.kill(escaped, signal.SIGKILL)  # not in the child's group: its teardown never reached it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(escaped, 0)  # adopted by this process when it is a subreaper, as under the suite


def test_async_a_missing_executable_is_a_spawn_failed_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-kiro-cli")
    with pytest.raises(KirocrewError) as caught:
        asyncio.run(proc.spawn_async([missing], env={}))
    assert caught.value.code == "spawn_failed"
    assert missing in caught.value.message


def test_async_a_cancelled_teardown_still_kills_the_group(monkeypatch) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 600.0)

    async def scenario(children: list) -> tuple[int, int]:
        child = await start_async(children, py(IGNORE_TERM + READY + SLEEPER))
        await ready(child)
        teardown = asyncio.create_task(proc.terminate_async(child))
        assert child.stdin is not None
        while not child.stdin.is_closing():  # teardown has begun its wait on EOF
            await asyncio.sleep(0)
        teardown.cancel()
        with pytest.raises(asyncio.CancelledError):
            await teardown
        monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 0.3)  # a quick cleanup if this failed
        return await exited(child), child.pid

    returncode, pid = run(scenario)
    assert returncode == -9
    assert live_members(pid) == []


def test_async_a_drained_stderr_flood_does_not_block_the_child(monkeypatch) -> None:
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 30.0)
    lines: list[str] = []

    async def scenario(children: list) -> proc.Teardown:
        # A small reader limit: undrained, asyncio would stop reading the pipe and the child would block.
        child = await start_async(children, py(FLOOD), limit=64 * 1024)
        proc.drain_stderr_async(child, lines.append)
        assert await asyncio.wait_for(stdout_of(child).readline(), 120) == b"done\n"
        return await proc.terminate_async(child)

    result = run(scenario)
    assert result.step is proc.Step.EXITED_ON_EOF
    assert len(lines) == FLOOD_LINES + 1
    assert lines[-1] == "last line"


# -- children tied to our life, and groups a dead process left -----------------------------------

# A host in miniature: it starts a tied command whose group ignores SIGTERM, prints the group's id, and waits.
TYING_HOST = textwrap.dedent(
    """
    import asyncio, os, sys
    from kirocrew_core import proc

    async def main():
        child = await proc.spawn_tied_async(["/bin/sh", "-c", sys.argv[1]], env=dict(os.environ),
                                            stdout=proc.DEVNULL, stderr=proc.DEVNULL)
        print(child.pid, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def _within(seconds: float, condition: Callable[[], bool]) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _gone_within(pgid: int, seconds: float) -> bool:
    return _within(seconds, lambda: not live_members(pgid))


def test_a_tied_childs_whole_group_dies_when_the_process_that_started_it_is_killed_by_sigkill(spawned: list) -> None:
    host = start(spawned, py(TYING_HOST, "trap '' TERM; sleep 600 & sleep 600"), stdin=subprocess.DEVNULL)
    pgid = int(read_line(host.stdout))
    # The supervisor, the command's shell, its two sleeps (and the watcher), once the shells have forked them.
    assert _within(10, lambda: len(live_members(pgid)) >= 4), live_members(pgid)
    proc.kill_pids([host.pid])  # SIGKILL: nothing of the host runs any more, no handler, no finally
    host.wait(30)
    # The group ignores SIGTERM: the tie's SIGKILL after the grace (proc.TERM_WAIT_SECS, 3 s there) ends it.
    assert _gone_within(pgid, 20), live_members(pgid)


def test_a_tied_child_reports_its_commands_exit_status_and_its_output() -> None:
    async def scenario(children: list) -> tuple[bytes, int, proc.Teardown]:
        child = await proc.spawn_tied_async(["/bin/sh", "-c", "read x; echo got=$x; exit 3"], env=dict(os.environ),
                                            stdout=proc.PIPE, stderr=proc.DEVNULL)
        children.append(child)
        output = await asyncio.wait_for(stdout_of(child).read(), 60)  # the command reads /dev/null, not the tie
        return output, await asyncio.wait_for(child.wait(), 60), await proc.terminate_async(child)

    output, code, teardown = run(scenario)
    assert (output, code, teardown.step) == (b"got=\n", 3, proc.Step.ALREADY_EXITED)


def test_tearing_a_tied_child_down_ends_its_group_through_the_tie(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tie's watcher forks a few short processes on its way; on a loaded machine that can outlast the usual
    # wait for an exit on EOF, and the teardown would signal the group itself. What is tested is the tie.
    monkeypatch.setattr(proc, "STDIN_CLOSE_WAIT_SECS", 20.0)

    async def scenario(children: list) -> tuple[int, proc.Teardown]:
        child = await proc.spawn_tied_async(["/bin/sh", "-c", "sleep 600 & sleep 600"], env=dict(os.environ),
                                            stdout=proc.DEVNULL, stderr=proc.DEVNULL)
        children.append(child)
        return child.pid, await proc.terminate_async(child)

    pgid, teardown = run(scenario)
    assert teardown.step is proc.Step.EXITED_ON_EOF and live_members(pgid) == []


def test_a_recorded_group_is_killed_only_while_its_leader_is_the_same_process(spawned: list) -> None:
    leader = start(spawned, ["/bin/sh", "-c", "sleep 600 & sleep 600"], stdin=subprocess.DEVNULL)
    record = proc.group_record(leader)
    assert record is not None and record.pgid == leader.pid
    # Another process under the same pid (a reused pid): it is not ours, and it is never signalled.
    stranger = proc.GroupRecord(record.pgid, record.leader_start + "0")
    assert proc.end_recorded_group(stranger) is proc.Recovered.GONE and live_members(leader.pid)
    assert proc.end_recorded_group(record, reason="test") is proc.Recovered.KILLED
    assert live_members(leader.pid) == [] and proc.group_ended(record)
    leader.wait(30)
    assert proc.end_recorded_group(record) is proc.Recovered.GONE


def test_a_recorded_group_whose_leader_died_and_left_members_is_held_not_killed(spawned: list) -> None:
    leader = start(spawned, ["/bin/sh", "-c", "sleep 600 & echo $!; read line"])
    straggler = int(read_line(leader.stdout))
    record = proc.group_record(leader)
    assert record is not None and leader.stdin is not None
    leader.stdin.close()
    leader.wait(30)  # the leader is gone; its sleep still runs in the group
    assert proc.end_recorded_group(record) is proc.Recovered.HELD and is_running(straggler)
    assert not proc.group_ended(record)
    proc.kill_pids([straggler])
    assert _gone_within(record.pgid, 10) and proc.group_ended(record)
