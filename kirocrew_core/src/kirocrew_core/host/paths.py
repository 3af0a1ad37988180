"""Where the host keeps its socket, lock, state and log (standard library only: the relay imports it).

Everything lives in ``<crew home>/host/`` (0700), except the socket when that path is too long
for ``AF_UNIX`` (about 104 bytes on macOS, 108 on Linux): then it lives in a short owner-only
directory named after a hash of the crew home, under ``$XDG_RUNTIME_DIR`` or ``/tmp``. Both the
host and every relay compute the same place from the crew home alone.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kirocrew_core.home import crew_home

HOST_DIR_NAME = "host"
SOCKET_NAME = "host.sock"
# Room left under the smallest sun_path (104 on macOS), for the NUL byte and a safety margin.
MAX_SOCKET_PATH_BYTES = 100
PRIVATE_DIR_MODE = 0o700


class UnsafeHostDirError(OSError):
    """A host directory exists but is not ours alone (another owner, group/other access, a symlink)."""


def host_dir() -> Path:
    """``<crew home>/host``: the run lock, the state file, the start lock and the log."""
    return crew_home() / HOST_DIR_NAME


def run_lock_file() -> Path:
    """Held (``flock``) by the running host for its whole life: at most one host per crew home."""
    return host_dir() / "host.lock"


def start_lock_file() -> Path:
    """Held by a relay while it starts a host, so racing relays start exactly one."""
    return host_dir() / "start.lock"


def state_file() -> Path:
    """``host.json``: the running host's pid, fingerprint, socket and dashboard address (no token)."""
    return host_dir() / "host.json"


def log_file() -> Path:
    """Where a host started in the background writes its log."""
    return host_dir() / "host.log"


def socket_path() -> Path:
    """The host's socket for this crew home (see the module docstring for the short fallback)."""
    home = os.path.abspath(crew_home())
    preferred = Path(home) / HOST_DIR_NAME / SOCKET_NAME
    if len(os.fsencode(preferred)) <= MAX_SOCKET_PATH_BYTES:
        return preferred
    from kirocrew_core.host.fingerprint import sha256

    digest = sha256(os.fsencode(home)).hexdigest()[:16]
    return _short_base() / f"kirocrew-{os.getuid()}-{digest}" / SOCKET_NAME


def _short_base() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and len(os.fsencode(runtime)) <= 40 and os.path.isdir(runtime):
        return Path(runtime)
    return Path("/tmp")  # a 0700 directory of ours, checked by ensure_private_dir


def ensure_private_dir(path: Path, *, parents: bool = False) -> Path:
    """Create ``path`` 0700 if missing; refuse one that is a symlink, not ours, or open to others.

    A directory of ours with a looser mode is tightened. The check is on ``lstat`` so a symlink
    planted where the directory should be (in ``/tmp``, say) is refused, never followed.
    """
    try:
        os.mkdir(path, PRIVATE_DIR_MODE)
    except FileExistsError:
        pass
    except FileNotFoundError:
        if not parents:
            raise
        path.parent.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        return ensure_private_dir(path)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeHostDirError(f"{path} is not a directory (a symlink or a file is in its place)")
    if info.st_uid != os.getuid():
        raise UnsafeHostDirError(f"{path} belongs to uid {info.st_uid}, not to this user")
    if info.st_mode & 0o077:
        os.chmod(path, PRIVATE_DIR_MODE)
    return path


def ensure_socket_dir() -> Path:
    """The socket's directory, created and checked (the crew home's ``host/`` or the short one)."""
    from kirocrew_core.home import ensure_crew_home

    ensure_crew_home()
    ensure_private_dir(host_dir())
    directory = socket_path().parent
    if directory != host_dir():
        ensure_private_dir(directory)
    return directory
