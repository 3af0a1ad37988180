"""Where an app's backend listens now: the port a ``{port}`` URL is bound to, or None.

A port counts only when something accepts a connection on it. kiro-cli connects
to every server of its agent on each request and one dead URL fails them all, so
a manifest's fixed port, or a port file a crashed backend left behind, must not
be written while nothing listens: the server is left out until the next enable
or host start finds the backend up.
"""

from __future__ import annotations

import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path

from kirocrew_mcp.app_manifest import AppManifest

#: How long a connect to the backend may take before it counts as not listening.
CONNECT_TIMEOUT_SECS = 0.5
_MAX_PORT_FILE_BYTES = 64


@dataclass(frozen=True)
class PortLookup:
    """The live port (None: not known) and, when None, why, in words for the user."""

    port: int | None
    reason: str = ""


def _read_port_file(path: Path) -> tuple[int | None, str]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None, f"the backend's port file {path} does not exist (is the backend running?)"
    except OSError as exc:
        return None, f"cannot read the backend's port file {path}: {exc.strerror or exc}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, f"the backend's port file {path} is not a regular file"
        raw = os.read(fd, _MAX_PORT_FILE_BYTES + 1)
    except OSError as exc:
        return None, f"cannot read the backend's port file {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    text = raw.decode("ascii", "replace").strip()
    if len(raw) > _MAX_PORT_FILE_BYTES or not text.isdigit() or not 1 <= int(text) <= 65535:
        return None, f"the backend's port file {path} does not hold a port number"
    return int(text), ""


def listening(host: str, port: int, timeout: float = CONNECT_TIMEOUT_SECS) -> bool:
    """True when a TCP connect to ``host:port`` is accepted within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def live_port(manifest: AppManifest) -> PortLookup:
    """The backend's port when a ``{port}`` URL needs one and the backend accepts connections on it."""
    host = manifest.backend_host()
    backend = manifest.backend
    if host is None or backend is None:
        return PortLookup(None, "no server of this app needs the backend's port")
    if backend.port_file is not None:
        port, reason = _read_port_file(backend.port_file)
        if port is None:
            return PortLookup(None, reason)
    else:
        port = backend.port
    if port is None:
        return PortLookup(None, "the manifest names no backend port")
    if not listening(host, port):
        return PortLookup(None, f"nothing listens on {host}:{port} (is the backend running?)")
    return PortLookup(port)
