"""Agent Skills folders for tests: write a ``SKILL.md`` where kirocrew's skill discovery looks."""

from __future__ import annotations

from pathlib import Path


def project_skills(workspace: Path) -> Path:
    """A workspace's project skills folder (the first source by precedence)."""
    return workspace / ".kirocrew" / "skills"


def write_skill(root: Path, key: str, description: str, *, name: str | None = None, always: bool = False,
                body: str = "Body.\n") -> Path:
    """The folder ``root/key`` holding a well-formed ``SKILL.md``; ``name`` defaults to the key's last part."""
    folder = root / key
    folder.mkdir(parents=True, exist_ok=True)
    meta = f"name: {name or key.rsplit('/', 1)[-1]}\ndescription: {description}\n"
    meta += "always: true\n" if always else ""
    (folder / "SKILL.md").write_text(f"---\n{meta}---\n{body}")
    return folder
