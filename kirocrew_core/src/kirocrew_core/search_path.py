"""The search path kirocrew finds executables on, and gives every kiro-cli it starts.

A host started from a desktop launcher or a service manager does not inherit the user's
shell ``PATH``: ``~/.local/bin`` (where kiro-cli and many MCP servers install) and the
package managers' folders are missing from it. kirocrew-mcp resolves and probes MCP
commands on :func:`augmented_path`, and the rendered agent file keeps bare commands as
the user wrote them, so kiro-cli must get the same path: otherwise a server probes
healthy on the dashboard and then fails to start in every session.

- ``augmented_path(path=None) -> str``: ``path`` (default: this process's ``PATH``), then
  the folder of the running interpreter (where ``kirocrew`` itself is installed), then
  the usual per-user and package-manager bin folders. Existing folders only,
  duplicates removed, order kept.
- ``search_dirs(env_path=None) -> list[str]``: the folders a bare command is looked up
  in. ``env_path`` is a server's own declared ``env.PATH``: its folders come first (a
  ``$PATH`` / ``${PATH}`` part stands for the augmented path and is dropped).
- ``with_search_path(env) -> dict[str, str]``: a copy of ``env`` whose ``PATH`` is the
  augmented form of its own; what a kiro-cli process is started with.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from kirocrew_core import home

# Per-user bin folders, relative to the user's home, that installers put tools in.
USER_BIN_DIRS = (
    ".local/bin",
    "bin",
    ".cargo/bin",
    ".bun/bin",
    ".deno/bin",
    ".npm-global/bin",
    ".volta/bin",
    ".nix-profile/bin",
)
SYSTEM_BIN_DIRS = (
    "/opt/homebrew/bin",
    "/opt/homebrew/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/bin",
    "/bin",
    "/usr/sbin",
    "/sbin",
)
PATH_TOKENS = frozenset({"$PATH", "${PATH}", "${env:PATH}"})


def _candidate_dirs(path: str | None = None) -> list[str]:
    base = os.environ.get("PATH", "") if path is None else path
    dirs = [d for d in base.split(os.pathsep) if d]
    dirs.append(str(Path(sys.executable).parent))
    user = home.user_home()
    dirs.extend(str(user / rel) for rel in USER_BIN_DIRS)
    dirs.extend(SYSTEM_BIN_DIRS)
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


def augmented_path(path: str | None = None) -> str:
    """The ``PATH`` commands are resolved on (see the module docstring)."""
    return os.pathsep.join(_existing_unique(_candidate_dirs(path)))


def search_dirs(env_path: str | None = None) -> list[str]:
    """The folders a bare command is looked up in: the server's own ``PATH`` first."""
    declared: list[str] = []
    if isinstance(env_path, str) and env_path:
        declared = [d for d in env_path.split(os.pathsep) if d and d not in PATH_TOKENS]
    return _existing_unique(declared + _candidate_dirs())


def with_search_path(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with its ``PATH`` augmented: the environment a kiro-cli process is started with."""
    out = dict(env)
    out["PATH"] = augmented_path(env.get("PATH", ""))
    return out
