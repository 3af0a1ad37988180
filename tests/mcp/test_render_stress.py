"""Real processes racing on the agent file: nothing registered is lost, the file always parses."""

from __future__ import annotations

import json
import os
import random
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from kirocrew_core import home, proc
from kirocrew_testing.fake_kiro.agents_dirs import parse_spec
from kirocrew_testing.plugins import installed_managed_server_names
from kirocrew_mcp.apps import registry_file

REBUILDERS = 4
REGISTRARS = 4
REBUILDS_EACH = 40
REGISTRATIONS_EACH = 15
KILL_ROUNDS = 12
CHILD_TIMEOUT_SECS = 120

_REBUILDER = """
import sys
from kirocrew_mcp.render import rebuild_agent_config
for i in range(int(sys.argv[1])):
    rebuild_agent_config(clean=(i % 3 == 0))
"""

# Registers one more server each round and checks, right after the call returns, that every
# server registered so far is in the file (a concurrent rebuild must never erase one).
_REGISTRAR = """
import json, sys
from kirocrew_core import home
from kirocrew_mcp.apps import register_app_mcp_servers
app, rounds = sys.argv[1], int(sys.argv[2])
for n in range(1, rounds + 1):
    wanted = {f"s{j}": {"command": "/bin/sh", "args": ["-c", f"exit {j}"]} for j in range(n)}
    register_app_mcp_servers(app, wanted)
    present = json.loads(home.rendered_agent_file().read_text())["mcpServers"]
    missing = [k for k in (f"{app}:{s}" for s in wanted) if k not in present]
    if missing:
        sys.exit(f"lost right after registering: {missing}")
"""

# Rewrites the agent file as fast as it can, flipping one app server between two specs.
_FLIPPER = """
import sys
from kirocrew_mcp.apps import register_app_mcp_servers
i = 0
while True:
    register_app_mcp_servers("flip", {"s": {"command": "/bin/sh", "args": [str(i % 2)]}})
    if i == 0:
        print("ready", flush=True)
    i += 1
"""


def _spawn(code: str, *args: str) -> Any:
    return proc.spawn([sys.executable, "-c", textwrap.dedent(code), *args], env=dict(os.environ),
                      stdin=proc.DEVNULL, text=True)


def _finish(children: list[Any]) -> list[str]:
    failures = []
    deadline = time.monotonic() + CHILD_TIMEOUT_SECS
    for child in children:
        try:
            _, err = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - any overrun is the finding
            proc.terminate(child, reason="stress child overran")
            failures.append(f"pid {child.pid} did not finish")
            continue
        if child.returncode != 0:
            failures.append(f"pid {child.pid} exited {child.returncode}: {err[-2000:]}")
    return failures


def _many_shared_servers(count: int) -> None:
    path = home.kiro_global_mcp_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": {f"shared-{i}": {"command": "/bin/sh", "args": ["-c", f"exit {i}"]}
                                               for i in range(count)}}))


class _Reader(threading.Thread):
    """Parses the agent file over and over while the writers run; counts what it saw."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.stop = threading.Event()
        self.parsed = 0
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                parse_spec(json.loads(data), path=self.path, source="global")
                self.parsed += 1
            except Exception as exc:  # noqa: BLE001 - any failure to parse is the finding
                self.failures.append(f"{type(exc).__name__}: {exc} ({len(data)} bytes)")


class _Checker(threading.Thread):
    """Between writers (holding the lock itself): every registered app server is in the file."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.checks = 0
        self.violations: list[str] = []

    def run(self) -> None:
        from kirocrew_core.locks import named_lock

        while not self.stop.is_set():
            with named_lock("agent-file"):
                try:
                    apps = json.loads(registry_file().read_text())["apps"]
                    present = json.loads(home.rendered_agent_file().read_text())["mcpServers"]
                except FileNotFoundError:
                    continue
                wanted = [f"{app}:{s}" for app, record in apps.items() for s in record["servers"]]
                missing = [key for key in wanted if key not in present]
                if missing:
                    self.violations.append(f"registered but not rendered: {missing}")
                self.checks += 1
            time.sleep(0.002)


def test_concurrent_rebuilds_and_registrations_lose_nothing_and_the_file_always_parses():
    _many_shared_servers(150)
    kiro_before = home.kiro_global_mcp_file().read_bytes()
    reader = _Reader(home.rendered_agent_file())
    checker = _Checker()
    reader.start()
    checker.start()
    children = [_spawn(_REBUILDER, str(REBUILDS_EACH)) for _ in range(REBUILDERS)]
    children += [_spawn(_REGISTRAR, f"app{i}", str(REGISTRATIONS_EACH)) for i in range(REGISTRARS)]
    try:
        failures = _finish(children)
    finally:
        reader.stop.set()
        checker.stop.set()
        reader.join()
        checker.join()
    assert failures == []
    assert reader.failures == [] and reader.parsed > 0
    assert checker.violations == [] and checker.checks > 0
    final = json.loads(home.rendered_agent_file().read_text())["mcpServers"]
    for i in range(REGISTRARS):
        for j in range(REGISTRATIONS_EACH):
            assert f"app{i}:s{j}" in final
    assert sum(name.startswith("shared-") for name in final) == 150
    assert home.kiro_global_mcp_file().read_bytes() == kiro_before
    json.loads(registry_file().read_text())


def test_a_writer_killed_at_a_random_moment_leaves_the_old_file_or_the_new_one():
    _many_shared_servers(400)  # a ~60 KiB file, so a kill often lands mid-write
    rng = random.Random(os.getpid())
    for _ in range(KILL_ROUNDS):
        child = _spawn(_FLIPPER)
        try:
            assert child.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.15))
        finally:
            proc.kill_pids([child.pid])
            child.communicate(timeout=CHILD_TIMEOUT_SECS)
        document = json.loads(home.rendered_agent_file().read_text())
        parse_spec(document, path=home.rendered_agent_file(), source="global")
        flip = document["mcpServers"]["flip:s"]["args"]
        assert flip in (["0"], ["1"])
        assert len(document["mcpServers"]) == 401 + len(installed_managed_server_names())
        json.loads(registry_file().read_text())
    agents = [p.name for p in home.kiro_agents_dir().iterdir() if p.suffix == ".json"]
    assert agents == ["kirocrew.json"]  # an interrupted write never leaves a second agent for kiro-cli
