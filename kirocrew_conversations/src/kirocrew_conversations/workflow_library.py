"""Saved workflows: checked scripts the owner keeps by name, where no session can write.

``<crew home>/state/workflows/library/<name>.py``, the folder 0700 and each file 0600, written
atomically. Only the person saves (the ``workflow_save`` tool refuses a session, and the crew home
is hidden from sandboxed sessions); any caller may run a saved workflow by name. A name already
saved is replaced only when asked (``workflow_exists`` otherwise), so a script is never clobbered
by accident.
"""

from __future__ import annotations

import re
from pathlib import Path

from kirocrew_core.errors import KirocrewError

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def library_dir() -> Path:
    from kirocrew_core import home

    return home.state_dir("workflows") / "library"


def _path(name: str, directory: Path | None) -> Path:
    if not NAME.match(name):
        raise KirocrewError(f"not a workflow name: {name[:80]!r} (lowercase letters, digits, _ and -, at most 64)",
                            code="invalid_workflow_name", exit_code=2)
    return (directory or library_dir()) / f"{name}.py"


def save(name: str, source: str, *, replace: bool = False, directory: Path | None = None) -> Path:
    """Check ``source`` and keep it as ``name``; ``workflow_exists`` when the name is taken and not ``replace``."""
    from kirocrew_core.jsonfile import write_bytes_atomic

    from kirocrew_conversations.workflow_check import check_source

    path = _path(name, directory)
    check_source(source)
    if path.exists() and not replace:
        raise KirocrewError(f"a workflow named {name!r} is already saved; pass replace to overwrite it",
                            code="workflow_exists")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return write_bytes_atomic(path, source.encode("utf-8"), secret=True)


def load(name: str, directory: Path | None = None) -> str:
    """The saved script ``name``; ``workflow_not_found`` when there is none."""
    path = _path(name, directory)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KirocrewError(f"no saved workflow named {name!r} (workflow_list shows them)",
                            code="workflow_not_found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KirocrewError(f"the saved workflow {name!r} cannot be read: {type(exc).__name__}",
                            code="workflow_unreadable") from None


def names(directory: Path | None = None) -> list[str]:
    folder = directory or library_dir()
    try:
        return sorted(p.stem for p in folder.iterdir() if p.suffix == ".py" and NAME.match(p.stem))
    except FileNotFoundError:
        return []
