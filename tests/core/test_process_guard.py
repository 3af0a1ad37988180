"""The suite's process guard sees leaked children, orphans included."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kirocrew_core import proc
from kirocrew_testing.process_guard import become_subreaper, leaked_since


def test_a_child_left_running_is_reported_then_killed():
    before = set(proc.live_descendants())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    leaked = leaked_since(before, grace=0.2)
    assert child.pid in leaked and "time.sleep(60)" in leaked[child.pid]
    proc.kill_pids([child.pid])
    child.wait(timeout=10)
    assert leaked_since(before, grace=0.2) == {}


def test_an_orphaned_grandchild_is_still_seen_because_the_test_process_is_a_subreaper():
    assert become_subreaper()
    before = set(proc.live_descendants())
    launcher = subprocess.run(
        [sys.executable, "-c",
         "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
         " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL);"
         " print(p.pid)"],
        capture_output=True, text=True, timeout=30,
    )
    orphan = int(launcher.stdout)
    leaked = leaked_since(before, grace=0.2)
    assert orphan in leaked  # re-parented to us, not escaped to init
    proc.kill_pids([orphan])
    deadline = time.monotonic() + 10
    while orphan in proc.live_descendants() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.waitpid(orphan, 0)  # it is our child now: reap it
    assert orphan not in proc.live_descendants()
