"""A warm process's private generation directory: its specs, its owner marker, the boot scavenge.

Each warm kiro-cli runs with its cwd in ``<crew home>/state/connections/warm/
generation-<hex>/`` (owner-only at every level), so ``--agent`` and
``set_mode`` resolve the specs in that directory's ``.kiro/agents`` before any
global one, and nothing else on the machine publishes or reads them.

A spec is activated *by name*, so ownership is checked twice: the writer never
writes through a path whose contents it did not write, and before spawn every
planned spec is re-read and must still be ours (a stranger's spec at that name
would have its ``mcpServers`` initialized). Ownership is content-based and
fails closed: unreadable, oversized, non-object or symlinked reads as foreign.

The owner marker names the host and the runtime by pid *and* start id; the
boot scavenge removes a generation only when both are provably dead, so a
live gateway's tree (or one whose process could not be identified) is kept.
Everything here is synchronous filesystem work, run off the event loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core import processes

from kirocrew_connections.warm_plan import SPEC_SENTINEL, WARM_PREFIX

log = logging.getLogger(__name__)

GENERATION_PREFIX = "generation-"
MARKER_NAME = ".owner.json"
MARKER_SENTINEL = "kirocrew.connections.warm.generation"
MARKER_VERSION = 1
MAX_SPEC_BYTES = 64 * 1024
MAX_MARKER_BYTES = 4096
_PRIVATE = 0o700


class ForeignSpecError(Exception):
    """A planned spec path holds a file this module did not write (never written through, never removed)."""


def generations_root() -> Path:
    return home.state_dir("connections") / "warm"


def agents_dir(generation_dir: Path) -> Path:
    return generation_dir / ".kiro" / "agents"


# -- process identity -----------------------------------------------------------------


def identity_live(pid: object, started: object) -> bool | None:
    """Tri-state: False when ``pid`` is dead or now names another process, True when it is that one.

    None when it cannot be proven either way (unreadable, a malformed marker, a marker of an older format).
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not isinstance(started, str):
        return None
    return processes.same_process(pid, started)


# -- the generation directory ------------------------------------------------------


def _private_dir(path: Path) -> None:
    """Create (or re-tighten) ``path`` owner-only; raise if it is not a plain directory we can make private."""
    path.mkdir(mode=_PRIVATE, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(str(path))
    if stat.S_IMODE(st.st_mode) != _PRIVATE:
        os.chmod(path, _PRIVATE)
        if stat.S_IMODE(os.lstat(path).st_mode) != _PRIVATE:
            raise PermissionError(f"cannot make {path} owner-only")


def create_generation_dir() -> Path:
    """A fresh private ``generation-<hex>`` with its ``.kiro/agents`` and a provisional marker."""
    root = generations_root()
    root.parent.mkdir(parents=True, exist_ok=True, mode=_PRIVATE)
    _private_dir(root)
    path = root / f"{GENERATION_PREFIX}{uuid.uuid4().hex}"
    _private_dir(path)
    try:
        for part in (path / ".kiro", agents_dir(path)):
            _private_dir(part)
        write_marker(path, runtime_pid=0)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def write_marker(path: Path, *, runtime_pid: int) -> None:
    """``.owner.json``: the host's and the runtime's pid and start id (runtime 0 before spawn)."""
    from kirocrew_core.jsonfile import write_json_atomic

    host = os.getpid()
    write_json_atomic(path / MARKER_NAME, {
        "sentinel": MARKER_SENTINEL, "version": MARKER_VERSION,
        "host_pid": host, "host_started": processes.start_token(host),
        "runtime_pid": runtime_pid, "runtime_started": processes.start_token(runtime_pid) if runtime_pid else None,
    }, secret=True)


def remove_generation_dir(path: Path) -> bool:
    """Remove a generation tree of ours (a plain ``generation-*`` child of the root); False if refused."""
    if path.parent != generations_root() or not path.name.startswith(GENERATION_PREFIX):
        return False
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
    except FileNotFoundError:
        return True
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


def _read_private_json(path: Path, max_bytes: int) -> dict[str, Any] | None:
    """The JSON object in a regular file at ``path`` (never through a symlink, at most ``max_bytes``).

    None for anything else: missing, a link, not a regular file, too big, not JSON, not an object.
    Every caller fails closed on None.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            raw = fh.read(max_bytes + 1)
    except OSError:
        return None
    if len(raw) > max_bytes:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _read_marker(path: Path) -> dict[str, Any] | None:
    doc = _read_private_json(path / MARKER_NAME, MAX_MARKER_BYTES)
    if doc is None or doc.get("sentinel") != MARKER_SENTINEL or doc.get("version") != MARKER_VERSION:
        return None
    return doc


def generation_provably_dead(path: Path) -> bool:
    """Both the host and the runtime the marker names are proven gone (a provisional marker never is)."""
    marker = _read_marker(path)
    if marker is None or marker.get("runtime_pid") in (0, None):
        return False
    return (identity_live(marker.get("host_pid"), marker.get("host_started")) is False
            and identity_live(marker.get("runtime_pid"), marker.get("runtime_started")) is False)


def scavenge_generations() -> int:
    """Remove every provably dead generation tree under the root (boot); how many were removed."""
    root = generations_root()
    try:
        children = sorted(os.listdir(root))
    except OSError:
        return 0
    removed = 0
    for name in children:
        path = root / name
        try:
            plain_dir = name.startswith(GENERATION_PREFIX) and stat.S_ISDIR(os.lstat(path).st_mode)
        except OSError:
            continue
        if plain_dir and generation_provably_dead(path) and remove_generation_dir(path):
            removed += 1
    return removed


# -- the specs ------------------------------------------------------------------------


def spec_is_ours(path: Path) -> bool:
    """The file at ``path`` is a warm spec this module wrote (content-based; fails closed)."""
    from kirocrew_connections.mint import spec_body

    doc = _read_private_json(path, MAX_SPEC_BYTES)
    if doc is None or doc.get("name") != path.stem:
        return False
    defaults = spec_body(path.stem, "-", {})
    marks = ("model", "includeMcpJson", "prompt", "allowedTools")
    description = doc.get("description")
    return (all(doc.get(key) == defaults[key] for key in marks)
            and isinstance(description, str) and description.startswith(SPEC_SENTINEL))


def write_specs(generation_dir: Path, specs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Write every planned spec; the names refused because a foreign file holds the path.

    A refused name is skipped, never written through (and never removed).
    """
    from kirocrew_core.jsonfile import write_json_atomic

    folder = agents_dir(generation_dir)
    refused = []
    for name, body in specs.items():
        if not name.startswith(WARM_PREFIX):
            raise ValueError(f"not a warm spec name: {name!r}")
        path = folder / f"{name}.json"
        if os.path.lexists(path) and not spec_is_ours(path):
            refused.append(name)
            continue
        write_json_atomic(path, body, secret=True)
    return refused


def unowned_specs(generation_dir: Path, names: list[str]) -> list[str]:
    """The planned specs that are missing or not ours (the second check, just before spawn)."""
    folder = agents_dir(generation_dir)
    return [name for name in names if not spec_is_ours(folder / f"{name}.json")]


def remove_specs(generation_dir: Path) -> list[str]:
    """Unlink the warm specs of ours in the generation; the names refused (foreign)."""
    folder = agents_dir(generation_dir)
    refused: list[str] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return refused
    for name in names:
        if not (name.startswith(WARM_PREFIX) and name.endswith(".json")):
            continue
        path = folder / name
        if spec_is_ours(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        else:
            refused.append(name[:-5])
    return refused
