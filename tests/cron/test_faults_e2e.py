"""A host killed with SIGKILL during a command job: a real ``kirocrew serve``, a real ``sh -c sleep 90``.

The job's process group dies with the host (the tie: :func:`kirocrew_core.proc.spawn_tied_async`);
where the tie was cut, the next host kills the group from the record kept with the running
history row. Either way the row says what happened, and a trigger after the restart never starts
a second run beside a survivor.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import proc
from kirocrew_testing.browser import serving_gateway
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_e2e import person

BOUND_SECS = 150.0
#: The tie's grace (proc.TERM_WAIT_SECS) and then some: a sleep ends on the first SIGTERM anyway.
TIE_SECS = 15.0

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(),
                                reason="the test reads the host's process groups from /proc (Linux)")


def _rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
    from kirocrew_core import home
    from kirocrew_testing.browser import sqlite_rows

    return sqlite_rows(home.state_dir("cron") / "cron.db", sql, *params)


async def _until(what: str, found: Any, bound: float = BOUND_SECS) -> Any:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


async def _running_group(job_id: str) -> tuple[int, Any]:
    """The job's running row and the process group recorded with it, once the command runs."""
    from kirocrew_core.proc import GroupRecord

    [(record_id, pgid, start)] = await _until("the run's process group in its row", lambda: _rows(
        "SELECT id, pgid, leader_start FROM history WHERE job_id = ? AND status = 'running' AND pgid IS NOT NULL",
        job_id))
    return record_id, GroupRecord(pgid, start)


async def _add_and_trigger(crew: CrewHarness) -> str:
    async with person(crew) as owner:
        added, code = await owner.call("cron_add", name="sleeper", command="sleep 90", timeout=60, every=3600,
                                       cwd=str(crew.workspace), json=True)
        assert code is None, added
        job_id = str(json.loads(added)["id"])
        _, code = await owner.call("cron_trigger", job_id=job_id)
        assert code is None
        return job_id


async def _trigger_after_restart(crew: CrewHarness, job_id: str, old: int) -> tuple[int, Any]:
    """Trigger the job on the next host (started on demand); its new run's group, checked against the old one."""
    async with person(crew) as owner:
        _, code = await owner.call("cron_trigger", job_id=job_id)
        assert code is None
        await _until("the new run", lambda: _rows(
            "SELECT 1 FROM history WHERE job_id = ? AND status = 'running'", job_id))
        assert _ended(old)  # the new run does not run beside the old one
        new = await _sleeping_group(_host_pid())
        assert new != old
        listed = json.loads((await owner.call("cron_list", json=True))[0])["jobs"]
        return new, listed


async def _sleeping_group(host_pid: int) -> int:
    """The process group of the job's ``sleep 90``, found in the host's process tree (whatever the host recorded)."""
    import os

    [pid] = await _until("the job's sleep 90", lambda: [
        pid for pid, cmdline in proc.live_descendants(host_pid).items() if cmdline == "sleep 90"])
    return os.getpgid(pid)


def _ended(pgid: int) -> bool:
    """Whether no process of group ``pgid`` runs (a zombie runs nothing), read from ``/proc``."""
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_bytes() if entry.name.isdigit() else b""
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return False
    return True


def _host_pid() -> int:
    from kirocrew_core.host import client

    return int(client.ping()["pid"])


def _kill_host(gateway: Any) -> None:
    proc.kill_pids([gateway.process.pid])  # SIGKILL: no handler, no finally, no stop of anything
    gateway.process.wait(30)


def test_a_command_jobs_group_dies_with_a_sigkilled_host_and_the_next_host_records_the_run_interrupted(
        cron_crew: CrewHarness, tmp_path: Path) -> None:
    from kirocrew_cron.store import INTERRUPTED_ERROR

    with serving_gateway(cron_crew.env, [], kirocrew_argv(), tmp_path / "logs") as gateway:
        job_id = asyncio.run(asyncio.wait_for(_add_and_trigger(cron_crew), BOUND_SECS))
        group = asyncio.run(asyncio.wait_for(_sleeping_group(gateway.process.pid), BOUND_SECS))
        [(record_id,)] = _rows("SELECT id FROM history WHERE job_id = ?", job_id)
        _kill_host(gateway)
        asyncio.run(_until("the job's group ended with its host", lambda: _ended(group), TIE_SECS))

    new, listed = asyncio.run(asyncio.wait_for(_trigger_after_restart(cron_crew, job_id, group), BOUND_SECS))
    assert _rows("SELECT status, error FROM history WHERE id = ?", record_id) == [("failure", INTERRUPTED_ERROR)]
    assert [job["running"] for job in listed] == [True]


def test_a_group_whose_tie_was_cut_is_killed_by_the_next_host_before_the_job_runs_again(
        cron_crew: CrewHarness, tmp_path: Path) -> None:
    from kirocrew_cron.service import KILLED_ERROR

    with serving_gateway(cron_crew.env, [], kirocrew_argv(), tmp_path / "logs") as gateway:
        job_id = asyncio.run(asyncio.wait_for(_add_and_trigger(cron_crew), BOUND_SECS))
        record_id, group = asyncio.run(asyncio.wait_for(_running_group(job_id), BOUND_SECS))
        assert asyncio.run(asyncio.wait_for(_sleeping_group(gateway.process.pid), BOUND_SECS)) == group.pgid
        # The watcher of the tie is the group's other supervisor shell: without it, nothing ends the group
        # when the host dies (the machine suspended at the wrong moment, say, or the watcher killed).
        [watcher] = [pid for pid, cmdline in proc.live_descendants(gateway.process.pid).items()
                     if proc.TIE_NAME in cmdline and pid != group.pgid]
        proc.kill_pids([watcher])
        _kill_host(gateway)
        time.sleep(2)
        assert not _ended(group.pgid)  # the sleep and its supervisor outlived the host

    new, listed = asyncio.run(asyncio.wait_for(_trigger_after_restart(cron_crew, job_id, group.pgid), BOUND_SECS))
    assert _rows("SELECT status, error FROM history WHERE id = ?", record_id) == [("failure", KILLED_ERROR)]
    assert [job["running"] for job in listed] == [True]
