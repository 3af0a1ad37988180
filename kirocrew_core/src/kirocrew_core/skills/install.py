"""Install a registry skill into the owner's crew skills folder: the owner's act, never a session's.

The files are fetched (:func:`.registry.fetch`), checked as a skill (its ``SKILL.md`` must parse),
written into a fresh folder beside the target and renamed into place, so a skill appears whole
or not at all. An installed skill is never replaced: remove its folder first.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kirocrew_core.errors import KirocrewError
from kirocrew_core.skills.registry import SkillFile

#: A registry skill with more files, or more bytes in all, is refused.
MAX_FILES = 64
MAX_TOTAL_BYTES = 4 * 1024 * 1024


class InstallError(KirocrewError):
    """The skill was not installed; nothing was written."""

    code = "install_refused"


def target_dir(skill_id: str) -> Path:
    from kirocrew_core.skills.discovery import crew_skills_dir

    return crew_skills_dir() / skill_id.rsplit("/", 1)[1]


def check(skill_id: str, files: list[SkillFile]) -> None:
    """Refuse a skill that is too big or whose SKILL.md does not parse (``broken``)."""
    from kirocrew_core.skills.discovery import SkillFileError, parse_skill

    if len(files) > MAX_FILES:
        raise InstallError(f"{skill_id} has {len(files)} files, over the {MAX_FILES}-file limit")
    total = sum(len(f.content.encode("utf-8")) for f in files)
    if total > MAX_TOTAL_BYTES:
        raise InstallError(f"{skill_id} is {total} bytes, over the {MAX_TOTAL_BYTES}-byte limit")
    skill_md = next(f for f in files if f.path == "SKILL.md")
    try:
        parse_skill(skill_md.content, skill_id.rsplit("/", 1)[1])
    except SkillFileError as exc:
        raise InstallError(f"{skill_id}'s SKILL.md is broken: {exc}") from exc


def install(skill_id: str, files: list[SkillFile]) -> Path:
    """Write ``files`` as the crew skill for ``skill_id``; :class:`InstallError` when one is there already."""
    check(skill_id, files)
    target = target_dir(skill_id)
    if os.path.lexists(target):
        raise InstallError(f"a skill is already installed at {target.name}; remove that folder to reinstall")
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for entry in files:
            path = staging / entry.path
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "x", encoding="utf-8") as handle:
                handle.write(entry.content)
        os.chmod(staging, 0o755)
        os.rename(staging, target)
    except OSError as exc:  # two files at one path, a file where a folder must go, a full disk
        shutil.rmtree(staging, ignore_errors=True)
        raise InstallError(f"{skill_id} could not be written ({exc.strerror or exc}); nothing was installed") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def preview(skill_id: str, files: list[SkillFile]) -> str:
    """What the owner is shown before confirming: every file's path and size, then SKILL.md in full."""
    lines = [f"Skill {skill_id}: {len(files)} file(s), installed as {target_dir(skill_id)}"]
    lines += [f"  {f.path} ({len(f.content.encode('utf-8'))} bytes)" for f in files]
    lines += ["", "--- SKILL.md ---", next(f for f in files if f.path == "SKILL.md").content.rstrip()]
    return "\n".join(lines)
