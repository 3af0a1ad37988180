"""The ``kirocrew`` root command's cached index of plugin commands: ``--help`` without importing a plugin.

Listing the plugins' commands means building the plugin manager (pluggy, ``importlib.metadata``,
every plugin module and what it imports): most of what a ``kirocrew --help`` spent. The index
keeps what one such listing found (each command's name, one-line help and whether it is hidden,
which plugin's ``register_commands`` added it, and the warnings loading printed) in
:func:`kirocrew_core.home.cli_index_file`, with what decided it:

* the installed distributions: every ``*.dist-info`` and ``*.egg-info`` folder on ``sys.path``
  with its modification time (the folder's name carries the version; an install, an upgrade or a
  reinstall makes a new folder);
* the source files of the plugins that listing loaded (an edited editable install);
* the plugin switches in the environment (:mod:`kirocrew_core.plugin_env`).

If any differs, the root command loads the plugins as before and writes a new index. A cache is
not worth a doubt: a missing, corrupt, unreadable or foreign-owned index is ignored and rebuilt,
and a failed write leaves the next listing to try again. Running a plugin command imports only the
module of the implementation the index names as its owner (when that is a module-level function),
and loads every plugin as before whenever that is in doubt. Standard library only; the read path
does not import :mod:`kirocrew_core.jsonfile` (its imports cost more than the read), the write
path goes through it.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from kirocrew_core import home
from kirocrew_core.plugin_env import DISABLE_ENV, LOAD_ENV, STRICT_ENV, TRACE_ENV, truthy

#: Bumped when the document's shape changes, so an older index is rebuilt rather than misread.
FORMAT = 2
#: A few hundred commands fit in a few KiB; anything this big is not an index we wrote.
MAX_INDEX_BYTES = 1 << 20
_METADATA_SUFFIXES = (".dist-info", ".egg-info")
_SWITCHES = (LOAD_ENV, DISABLE_ENV, STRICT_ENV)


class CommandOwner(NamedTuple):
    """The ``register_commands`` implementation that added a command: a module-level function of a plugin."""

    plugin: str
    module: str
    function: str


class IndexedCommand(NamedTuple):
    """One plugin command as the root's help lists it, and who added it (``None``: not importable alone)."""

    name: str
    short_help: str
    hidden: bool = False
    owner: CommandOwner | None = None


class CommandIndex(NamedTuple):
    """A current index: the plugin commands, and the warnings the listing that built it printed."""

    commands: tuple[IndexedCommand, ...]
    warnings: tuple[str, ...]


def usable(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether listing from the index saves anything here.

    Not when this process already imported the plugin machinery (a test, the host: the truth is
    already paid for), nor under ``KIROCREW_TRACE_PLUGINS``, whose point is to watch the hook calls.
    """
    return "kirocrew_core.plugins" not in sys.modules and not truthy(environ.get(TRACE_ENV))


def signature(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """What decides the listing, apart from the plugins' source files (which the index names itself)."""
    return {
        "format": FORMAT,
        "switches": {name: environ.get(name) for name in _SWITCHES},
        "distributions": _installed_distributions(),
    }


def _installed_distributions() -> list[str]:
    """``"<folder> <mtime_ns>"`` for every distribution's metadata folder on ``sys.path``, in path order."""
    found: list[str] = []
    for entry in sys.path:
        where = os.path.abspath(entry or os.curdir)
        try:
            with os.scandir(where) as items:
                names = sorted(item.name for item in items if item.name.endswith(_METADATA_SUFFIXES))
        except NotADirectoryError:  # a zip archive on sys.path: its own time stands for its contents
            names = [""]
        except OSError:
            continue
        for name in names:
            path = os.path.join(where, name) if name else where
            try:
                found.append(f"{path} {os.stat(path).st_mtime_ns}")
            except OSError:
                continue
    return found


def read(expected: Mapping[str, Any]) -> CommandIndex | None:
    """The index if it was built under ``expected`` (see :func:`signature`) and its sources are unchanged.

    ``None`` for anything else: absent, unreadable, not owned by this user or readable by others,
    malformed, of another signature, or naming a source file that changed.
    """
    document = _read_document(str(home.cli_index_file()))
    if not isinstance(document, dict) or document.get("signature") != expected:
        return None
    sources = document.get("sources")
    commands = document.get("commands")
    printed = document.get("warnings")
    if not (isinstance(sources, dict) and isinstance(commands, list) and isinstance(printed, list)):
        return None
    if not _sources_unchanged(sources):
        return None
    parsed = []
    for row in commands:
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str) and row[0]
                and isinstance(row[1], str) and isinstance(row[2], bool)):
            return None
        owner = _parse_owner(row[3])
        if owner is None and row[3] is not None:
            return None
        parsed.append(IndexedCommand(row[0], row[1], row[2], owner))
    if not all(isinstance(text, str) for text in printed):
        return None
    return CommandIndex(tuple(parsed), tuple(printed))


def _parse_owner(value: Any) -> CommandOwner | None:
    if (isinstance(value, list) and len(value) == 3
            and all(isinstance(part, str) and part for part in value)):
        return CommandOwner(value[0], value[1], value[2])
    return None


def _read_document(path: str) -> Any:
    """The JSON in ``path`` if this user alone can write and read it; ``None`` when in any doubt."""
    try:
        # O_NOFOLLOW: a link planted in place of the index is not followed; O_NONBLOCK: nor does a FIFO hang us.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077
                or info.st_size > MAX_INDEX_BYTES):
            return None
        with open(fd, "rb", closefd=False) as handle:
            raw = handle.read(MAX_INDEX_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    import json  # here, not at the top: only a listing that found an index pays for it

    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # ValueError covers bad JSON and bad UTF-8 alike
        return None


def _sources_unchanged(sources: Mapping[Any, Any]) -> bool:
    for path, mtime_ns in sources.items():
        if not isinstance(mtime_ns, int):
            return False
        try:
            if os.stat(path).st_mtime_ns != mtime_ns:
                return False
        except (OSError, TypeError, ValueError):
            return False
    return True


def write(built_under: Mapping[str, Any], commands: Iterable[IndexedCommand], printed: Iterable[str],
          modules: Iterable[str]) -> bool:
    """Replace the index atomically; ``modules`` are the plugin modules whose files it depends on.

    Returns whether it was written: a read-only or full crew home is not an error here, the
    help was listed all the same and the next listing tries again.
    """
    from kirocrew_core import jsonfile

    document = {
        "signature": dict(built_under),
        "sources": _source_files(modules),
        "commands": [[command.name, command.short_help, command.hidden,
                      list(command.owner) if command.owner is not None else None]
                     for command in sorted(commands, key=lambda command: command.name)],
        "warnings": list(printed),
    }
    target = home.cli_index_file()
    try:
        home.ensure_crew_home()
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        jsonfile.write_json_atomic(target, document, secret=True)
    except OSError:
        return False
    return True


def _source_files(modules: Iterable[str]) -> dict[str, int]:
    """``{file: mtime_ns}`` of each module, imported or not (a plugin that failed to import counts too)."""
    from importlib.util import find_spec

    files: dict[str, int] = {}
    for name in sorted(set(modules)):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path is None:
            try:
                spec = find_spec(name)
            except Exception:  # noqa: BLE001 - finding a broken plugin's parent package may raise anything
                spec = None
            path = spec.origin if spec is not None and spec.has_location else None
        if not path:
            continue
        try:
            files[path] = os.stat(path).st_mtime_ns
        except OSError:
            continue
    return files
