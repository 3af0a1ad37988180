#!/usr/bin/env python3
"""What deciding a caller's identity by ancestry costs the host per call (``SessionRegistry.resolve``).

    .venv/bin/python benchmarks/identity_resolve.py [--calls 2000]

Real processes: a stand-in for a kiro-cli (``sh``) the registry binds a key to, a shell under it and a
``sleep`` under that, as a relay started from a session's shell would be. Times ``resolve`` for that
grandchild (a session, found two links up), for this process (the person: the walk reaches the top),
and, for scale, one ``psutil.Process(pid).ppid()`` read. The registry's host is set to another process,
so this one is an outsider (the person's case). Median, p90 and min in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable

from _bench import row


def _timed(fn: Callable[[], object], calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()

    import psutil
    from kirocrew_core import processes
    from kirocrew_core.coretools.identity import SessionRegistry
    from kirocrew_core.host.caller import CallerContext

    # kiro-cli stand-in (its own kernel session, as kirocrew starts kiro-cli) -> sh -> sleep
    session = subprocess.Popen(["/bin/sh", "-c", "sh -c 'sleep 600' & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            leaf = [c for c in psutil.Process(session.pid).children(recursive=True) if c.name() == "sleep"]
            if leaf or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not leaf:
            print("the process tree did not start", file=sys.stderr)
            return 1
        # The registry's "host" is another process here, so this one resolves as the person would (no session,
        # no host above it: the walk reaches the top).
        registry = SessionRegistry(host=processes.ref(leaf[0].pid))
        key = registry.issue("conversation", "c1")
        registry.bind_pid(key, session.pid)

        def caller(pid: int) -> CallerContext:
            found = processes.ref(pid)
            assert found is not None
            return CallerContext("", "relay", pid, None, {}, peer_verified=True, relay_started=found.started)

        as_session, as_person = caller(leaf[0].pid), caller(os.getpid())
        assert registry.resolve(as_session).origin == "session"
        person = registry.resolve(as_person).origin
        print(f"load average {os.getloadavg()[0]:.2f}; {args.calls} calls each; this process resolves as {person}")
        print(row("resolve: a session's grandchild", _timed(lambda: registry.resolve(as_session), args.calls),
                  fmt="7.3f"))
        print(row("resolve: this process (the person)", _timed(lambda: registry.resolve(as_person), args.calls),
                  fmt="7.3f"))
        print(row("one psutil ppid() read", _timed(lambda: psutil.Process(os.getpid()).ppid(), args.calls),
                  fmt="7.3f"))
    finally:
        os.killpg(session.pid, 9)
        session.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
