"""Identity attacks against a real host: a session's processes are that session by ancestry, whatever they claim.

Each test runs the real host that the harness's relays start, conversations whose fake kiro-cli
runs the attacker's commands (``!shell``), real relays and the real ``kirocrew`` CLI twins. Each
reproduces an attack of issue 27 that worked before identity was decided by process ancestry:

* a CLI twin run from a session's shell with ``KIROCREW_SESSION_KEY`` and ``KIROCREW_HOST_PID``
  dropped was the person, and paused another session's cron job;
* a relay started by a session with another live session's key claimed was refused, never
  resolved to the session it runs in (and the forged claim went unrecorded);
* a process that connected with a victim's key, handed the socket to a child and exited had its
  pid handed to a descendant of the victim: the child then acted as the victim.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kirocrew_core import audit, processes
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv, run_kirocrew

RECORD_PID = "!shell echo $PPID >> kiro.pids\n"
# Bounds that only stop a hung test.
WAIT_SECS = 60.0


def kiro_environ(pid: int) -> dict[str, str]:
    """What any process of the same user can read of a running kiro-cli: its environment."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def workspace(crew: CrewHarness, name: str) -> Path:
    path = crew.root / name
    path.mkdir(exist_ok=True)
    return path


def until_file(path: Path, timeout: float = WAIT_SECS) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)
    return path.read_text()


def cron_job(crew: CrewHarness) -> dict[str, Any]:
    listed = run_kirocrew("cron", "list", "--json", env=crew.env)
    assert listed.returncode == 0, listed.stderr
    [job] = json.loads(listed.stdout)["jobs"]
    return dict(job)


def test_a_cli_twin_run_from_a_sessions_shell_without_its_key_is_still_that_session(
        crew: CrewHarness, run_async: Any) -> None:
    add = json.dumps({"name": "nightly", "message": "check the build", "every": 3600})

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv:
            owner = await crew.delegate(conv, f"!mcp kirocrew-cron cron_add {add}\n!say added", name="owner-a")
            job = cron_job(crew)
            pause = shlex.join(kirocrew_argv("cron", "pause", job["id"]))
            other = await crew.delegate(conv, (
                f"!shell env -u KIROCREW_SESSION_KEY -u KIROCREW_HOST_PID {pause} > twin.txt 2>&1; "
                'echo "exit $?" >> twin.txt\n!say tried'), name="other-b", workspace=workspace(crew, "b"))
            return {"owner": owner, "other": other, "job": job}

    out = run_async(main())
    assert out["owner"]["status"] == "completed" and out["other"]["status"] == "completed"
    twin = (crew.root / "b" / "twin.txt").read_text()
    assert "error[job_not_found]" in twin and twin.rstrip().endswith("exit 1"), twin
    assert cron_job(crew)["enabled"] is True  # session B could not pause session A's job
    # The person's own CLI, outside every session, is still the person.
    paused = run_kirocrew("cron", "pause", out["job"]["id"], env=crew.env)
    assert paused.returncode == 0 and "Paused job" in paused.stdout, paused.stderr
    assert cron_job(crew)["enabled"] is False


def test_a_relay_a_session_starts_with_another_sessions_key_resolves_to_its_own_session(
        crew: CrewHarness, run_async: Any) -> None:
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "forger", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "probe_whoami", "arguments": {}}},
    ]
    lines = " ".join(shlex.quote(json.dumps(request)) for request in requests)
    relay = shlex.join(kirocrew_argv("mcp-core"))

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv:
            victim_ws = workspace(crew, "victim")
            victim = await crew.delegate(conv, RECORD_PID + "!say idle", name="victim", workspace=victim_ws)
            [pid] = [int(line) for line in (victim_ws / "kiro.pids").read_text().split()]
            stolen = kiro_environ(pid)["KIROCREW_SESSION_KEY"]  # the victim's worker stays open: its key is live
            forger = await crew.delegate(conv, (
                f"!shell printf '%s\\n' {lines} | env KIROCREW_SESSION_KEY={stolen} KIROCREW_HOST_PID={pid} "
                f"{relay} > forged.jsonl 2> forged.err\n!say forged"), name="forger", workspace=workspace(crew, "f"))
            return {"victim": victim, "forger": forger, "stolen": stolen}

    out = run_async(main())
    assert out["forger"]["status"] == "completed", out["forger"]
    answers = [json.loads(line) for line in (crew.root / "f" / "forged.jsonl").read_text().splitlines()]
    [called] = [answer for answer in answers if answer.get("id") == 2]
    assert called["result"]["isError"] is False, called
    seen = json.loads(called["result"]["content"][0]["text"])
    assert seen["targetId"] == out["forger"]["conversationId"] != out["victim"]["conversationId"]
    [record] = [r for r in crew.probe_records() if r["tool"] == "probe_whoami"]
    assert record["session"]["targetId"] == out["forger"]["conversationId"] and record["origin"] == "session"
    contradicted = [r for r in audit.tail(200) if r["event"] == "host.caller_claim_contradicted"]
    assert contradicted and contradicted[-1]["fields"]["origin"] == "session"
    assert out["stolen"] not in json.dumps(audit.tail(200))  # named by fingerprint, never the key


ATTACKER = '''
import json, os, sys, time
from pathlib import Path
from kirocrew_core.host import client, protocol
from kirocrew_core.host.fingerprint import code_fingerprint

key, work = sys.argv[1], Path(sys.argv[2])
block = protocol.caller_block(key, "relay", os.getpid(), os.getppid(), None)
sock, welcome, buffer = client.open_mcp(protocol.hello("mcp", server="mcp-core", fingerprint=code_fingerprint(),
                                                      caller=block), 30)
sock.settimeout(60)

def send(message):
    sock.sendall(json.dumps(message).encode() + b"\\n")

def answer(request_id):
    while True:
        line = json.loads(client.read_line(sock, buffer, 1 << 26))
        if line.get("id") == request_id and "method" not in line:
            return line

send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "a", "version": "0"}}})
answer(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
opener = os.getpid()
if os.fork():
    (work / "a.pid").write_text(str(opener))
    os._exit(0)
while not (work / "go").exists():  # B: holds the socket A opened, and waits for A's pid to be reused
    time.sleep(0.05)
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "probe_whoami", "arguments": {}}})
(work / "b.json").write_text(json.dumps(answer(2)))
'''

# Run by the victim's kiro-cli: give a child of it the pid the attacker's opener had, and hold it.
GRAB = '''
import os, sys, time
from pathlib import Path

work = Path(sys.argv[1])
while not (work / "target").exists():
    time.sleep(0.05)
target = int((work / "target").read_text())

def hold():
    (work / "holding").write_text(str(os.getpid()))
    while not (work / "done").exists():
        time.sleep(0.05)
    os._exit(0)

def attempt():
    pid = os.fork()
    if pid == 0:
        if os.getpid() == target:
            hold()
        os._exit(0)
    if pid == target:
        return True
    os.waitpid(pid, 0)
    return False

deadline = time.monotonic() + 45
got = False
while not got and time.monotonic() < deadline:
    try:  # where we may (root, or CAP_CHECKPOINT_RESTORE), ask the kernel for the pid before it
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(target - 1))
    except OSError:
        pass
    got = attempt()
if got:
    os.wait()
else:
    (work / "failed").write_text("could not get the pid")
'''


def test_a_connection_handed_to_a_child_after_its_opener_exits_keeps_no_identity_when_the_pid_is_reused(
        crew: CrewHarness, run_async: Any, tmp_path: Path) -> None:
    from kirocrew_testing.requirements import unavailable

    attack = tmp_path / "attack"
    attack.mkdir()
    (attack / "attacker.py").write_text(ATTACKER)
    victim_ws = workspace(crew, "victim")
    (victim_ws / "grab.py").write_text(GRAB)
    grab = shlex.join([sys.executable, "grab.py", str(victim_ws)])

    async def main() -> dict[str, Any]:
        import asyncio

        async with crew.conversations() as conv:
            started = await crew.spawn(conv, f"{RECORD_PID}!shell {grab}\n!say held", name="victim",
                                       workspace=victim_ws)
            kiro = int(await asyncio.to_thread(until_file, victim_ws / "kiro.pids"))
            key = kiro_environ(kiro)["KIROCREW_SESSION_KEY"]
            opener = subprocess.Popen([sys.executable, str(attack / "attacker.py"), key, str(attack)], env=crew.env)
            result, descendant, a_pid = None, False, 0
            try:
                a_pid = int(await asyncio.to_thread(until_file, attack / "a.pid"))
                assert opener.wait(WAIT_SECS) == 0  # A exited and is reaped: its pid is free
                (victim_ws / "target").write_text(str(a_pid))
                deadline = time.monotonic() + WAIT_SECS
                while not (victim_ws / "holding").exists() and not (victim_ws / "failed").exists():
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                reused = (victim_ws / "holding").exists()
                descendant = reused and processes.is_ancestor(kiro, a_pid)
                if reused:
                    (attack / "go").write_text("go")
                    result = json.loads(await asyncio.to_thread(until_file, attack / "b.json"))
            finally:
                if not (victim_ws / "target").exists():
                    (victim_ws / "target").write_text("0")
                (victim_ws / "done").write_text("done")
                (attack / "go").write_text("go")
            run = await crew.wait(conv, started)
            return {"reused": reused, "descendant": descendant, "result": result, "run": run, "a_pid": a_pid}

    out = run_async(main(), 150)
    if not out["reused"]:
        unavailable("this machine would not hand the attacker's pid to the victim's process in time")
    assert out["descendant"], "the reused pid is a descendant of the victim's kiro-cli"
    result = out["result"]["result"]
    assert result["isError"] is True and result["content"][0]["text"].startswith("error[caller_gone]: "), result
    assert [r for r in crew.probe_records() if r["tool"] == "probe_whoami"] == []  # nothing ran as the victim
    assert out["run"]["status"] == "completed"
