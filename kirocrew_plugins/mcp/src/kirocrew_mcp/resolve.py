"""Command resolution shared by the render and the probe.

Stable API:

- ``augmented_path() -> str`` and ``search_dirs(env_path=None) -> list[str]``:
  the search path and the folders searched, in order; their owner is
  :mod:`kirocrew_core.search_path` (kiro-cli gets the same path), re-exported here.
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
never probe healthy on the dashboard while the rebuild silently drops it. The
rendered file keeps bare commands as the user wrote them, so every kiro-cli
kirocrew starts gets :func:`augmented_path` as ``PATH`` (core's ``acp_runtime``
does it), and the servers it spawns find the commands the probe found.
"""

from __future__ import annotations

import os
import shutil

from kirocrew_core.search_path import augmented_path, search_dirs

__all__ = ["augmented_path", "is_directory_qualified", "resolve_command", "resolve_command_in", "search_dirs"]


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
