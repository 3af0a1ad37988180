"""Command resolution shared by the render and the probe.

Stable API:

- ``augmented_path() -> str``: the search path kirocrew resolves MCP commands
  on: the process ``PATH``, then the folder of the running interpreter (where
  ``kirocrew`` itself is installed), then the usual per-user and package-manager
  bin folders that a gateway started from a desktop launcher or a service
  manager does not inherit. Existing folders only, duplicates removed, order kept.
- ``search_dirs(env_path=None) -> list[str]``: the folders searched, in order.
  ``env_path`` is a server's own declared ``env.PATH``: its folders come first
  (a ``$PATH`` / ``${PATH}`` part stands for the augmented path and is dropped).
- ``resolve_command(command, env_path=None) -> str | None``: the absolute path
  ``command`` runs as, or ``None`` when it does not resolve. A command with a
  folder in it (absolute or ``~/``) must exist and be executable; a relative
  one with a folder never resolves, because it would depend on the cwd of
  whatever spawns it. A bare name is looked up in :func:`search_dirs`.
- ``resolve_command_in(command, dirs) -> str | None``: the same, with the
  folders already computed by :func:`search_dirs` (for callers resolving many
  commands at once; the answer is identical).
- ``is_directory_qualified(command) -> bool``: whether a search path applies
  at all (the probe says "no search path" for these in its error).

The render and the probe both call :func:`resolve_command`, so a server can
never probe healthy on the dashboard while the rebuild silently drops it.
Whoever spawns kiro-cli should give it :func:`augmented_path` as ``PATH``,
because the rendered file keeps bare commands as the user wrote them.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from kirocrew_core import home

# Per-user bin folders, relative to the user's home, that installers put tools in.
_USER_BIN_DIRS = (
    ".local/bin",
    "bin",
    ".cargo/bin",
    ".bun/bin",
    ".deno/bin",
    ".npm-global/bin",
    ".volta/bin",
    ".nix-profile/bin",
)
_SYSTEM_BIN_DIRS = (
    "/opt/homebrew/bin",
    "/opt/homebrew/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/bin",
    "/bin",
    "/usr/sbin",
    "/sbin",
)
_PATH_TOKENS = frozenset({"$PATH", "${PATH}", "${env:PATH}"})


def _candidate_dirs() -> list[str]:
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    dirs.append(str(Path(sys.executable).parent))
    user = home.user_home()
    dirs.extend(str(user / rel) for rel in _USER_BIN_DIRS)
    dirs.extend(_SYSTEM_BIN_DIRS)
    return dirs


def _existing_unique(dirs: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for d in dirs:
        d = os.path.expanduser(d)
        if d in seen:
            continue
        seen.add(d)
        if os.path.isdir(d):
            out.append(d)
    return out


def augmented_path() -> str:
    """The ``PATH`` MCP commands are resolved on (see the module docstring)."""
    return os.pathsep.join(_existing_unique(_candidate_dirs()))


def search_dirs(env_path: str | None = None) -> list[str]:
    """The folders a bare command is looked up in: the server's own ``PATH`` first."""
    declared: list[str] = []
    if isinstance(env_path, str) and env_path:
        declared = [d for d in env_path.split(os.pathsep) if d and d not in _PATH_TOKENS]
    return _existing_unique(declared + _candidate_dirs())


def is_directory_qualified(command: str) -> bool:
    """True for ``/usr/bin/x``, ``~/bin/x``, ``./x``: a search path does not apply."""
    return os.sep in command or (os.altsep is not None and os.altsep in command) or command.startswith("~")


def _executable_file(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def resolve_command(command: object, env_path: str | None = None) -> str | None:
    """The absolute executable ``command`` runs as, or ``None`` (see the module docstring)."""
    if not isinstance(command, str) or not command.strip():
        return None
    if is_directory_qualified(command.strip()):
        return resolve_command_in(command, [])
    return resolve_command_in(command, search_dirs(env_path))


def resolve_command_in(command: object, dirs: list[str]) -> str | None:
    """:func:`resolve_command` with the search folders given (``search_dirs(env_path)``)."""
    if not isinstance(command, str) or not command.strip():
        return None
    command = command.strip()
    if is_directory_qualified(command):
        expanded = os.path.expanduser(command)
        if os.path.isabs(expanded) and _executable_file(expanded):
            return expanded
        return None
    found = shutil.which(command, path=os.pathsep.join(dirs))
    return os.path.abspath(found) if found else None
