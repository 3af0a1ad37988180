"""MCP fixture servers on the mcp SDK, run as real subprocesses.

* :mod:`.stdio_server` — stdio, N tools; ``--hang`` (``--until PATH`` ends it), ``--exit-during-handshake``,
  ``--banner N``.
* :mod:`.http_server` — streamable HTTP on 127.0.0.1; ``--require-header NAME=VALUE``.
* :mod:`.oauth_server` — streamable HTTP behind the SDK's OAuth authorization server,
  with a consent page a test clicks through and a control API.

Every tool answers with JSON naming the server ``--label``, the tool and its
arguments. :func:`launch` starts an HTTP one and waits for its ``READY`` line;
the pytest fixtures in :mod:`kirocrew_testing.mcp_fixtures` wrap it.
"""

from __future__ import annotations

import collections
import os
import select
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from kirocrew_core import proc
from kirocrew_testing.servers._common import READY_PREFIX

READY_TIMEOUT_SECS = 30.0
STDIO_MODULE = "kirocrew_testing.servers.stdio_server"
HTTP_MODULE = "kirocrew_testing.servers.http_server"
OAUTH_MODULE = "kirocrew_testing.servers.oauth_server"


def module_argv(module: str, *options: str) -> list[str]:
    """The command line running fixture ``module`` with this interpreter."""
    return [sys.executable, "-m", module, *options]


@dataclass
class LaunchedServer:
    """A fixture server subprocess that said READY; :meth:`stop` tears its group down."""

    process: Any
    ready: str  # what followed "READY " on its stdout
    stderr_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=50))

    def stop(self) -> None:
        if self.process is not None:
            proc.terminate(self.process, reason="fixture server teardown")
            self.process = None


def launch(module: str, *options: str, env: dict[str, str] | None = None,
           timeout: float = READY_TIMEOUT_SECS) -> LaunchedServer:
    """Start fixture ``module`` (its own process group) and wait for its READY line.

    Raises RuntimeError with the server's last stderr lines if it exits or stays
    silent past ``timeout``; nothing is left running then.
    """
    child = proc.spawn(module_argv(module, *options), env=dict(os.environ if env is None else env),
                       stdin=proc.DEVNULL)
    tail: collections.deque[str] = collections.deque(maxlen=50)
    proc.drain_stderr(child, tail.append)
    assert child.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    try:
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{module} not READY after {timeout:g}s")
            readable, _, _ = select.select([child.stdout], [], [], min(left, 0.2))
            if readable:
                chunk = os.read(child.stdout.fileno(), 4096)
                if not chunk:
                    raise RuntimeError(f"{module} exited before READY (code {child.wait()})")
                buffer += chunk
        line = buffer.split(b"\n", 1)[0].decode("utf-8", "replace")
        if not line.startswith(READY_PREFIX):
            raise RuntimeError(f"{module} printed {line!r} instead of READY")
    except BaseException as exc:
        proc.terminate(child, reason="fixture server failed to start")
        if isinstance(exc, RuntimeError):
            raise RuntimeError(f"{exc}; stderr:\n" + "\n".join(tail)) from None
        raise
    return LaunchedServer(child, line[len(READY_PREFIX):], tail)
