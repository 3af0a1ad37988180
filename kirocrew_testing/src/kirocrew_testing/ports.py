"""Fixed ports a test must hold alone: a pre-registered provider's OAuth callback port is registered, not chosen.

Tests run in parallel workers; two of them letting kiro-cli listen on GitHub's
48101 at once would fail each other. :func:`exclusive_port` serialises them
with an advisory lock shared by every worker on the machine.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def exclusive_port(port: int) -> Iterator[int]:
    """Hold ``port`` for this test alone (blocks while another worker holds it); yields the port."""
    path = os.path.join(tempfile.gettempdir(), f"kirocrew-test-port-{port}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield port
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
