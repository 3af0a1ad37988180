"""Find skills in their sources and parse each ``SKILL.md``, never following a link out of a source.

A skill is a folder holding ``SKILL.md``: Markdown with YAML front matter (``name``,
``description``, optional ``always`` and ``triggers``), parsed with a YAML safe load. Its key is
the folder's path relative to its source (nesting allowed). Sources, highest precedence first
(a key found in an earlier source hides the same key in a later one):

* ``project``: ``<workspace>/.kirocrew/skills`` of the calling session's workspace;
* ``crew``: the owner's ``<crew home>/skills`` (where ``kirocrew skills install`` writes);
* ``extra``: each folder of the ``skills.extra_paths`` config key;
* ``kiro``: kiro-cli's own folders, ``<workspace>/.kiro/skills`` and ``<kiro home>/skills``.
  kiro-cli lists these to its sessions itself, so they are searchable here but never repeated in
  what the rendered agent tells every session (:mod:`.context`).

A ``SKILL.md`` whose front matter is malformed is listed as *broken* with why; a hostile entry
(a link, a FIFO, a huge or non-UTF-8 file) is *skipped* with why. Neither is ever loaded.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

SKILL_FILE = "SKILL.md"
#: A SKILL.md larger than this is skipped as hostile (a 2 GB file must not be read).
MAX_SKILL_BYTES = 1024 * 1024
#: How deep skill folders may nest below a source, and how many entries one source may hold.
MAX_DEPTH = 4
MAX_ENTRIES = 5000
#: A description longer than this is cut in listings.
SUMMARY_CHARS = 200

SourceKind = Literal["project", "crew", "extra", "kiro"]


@dataclass(frozen=True)
class Source:
    kind: SourceKind
    root: Path


@dataclass(frozen=True)
class Skill:
    """One parsed skill. ``body`` is the Markdown after the front matter."""

    key: str
    name: str
    description: str
    always: bool
    triggers: tuple[str, ...]
    body: str
    source: Source
    path: Path
    size: int


@dataclass(frozen=True)
class Problem:
    """A skill that is not loaded: ``broken`` (malformed front matter) or ``skipped`` (a hostile entry)."""

    key: str
    state: Literal["broken", "skipped"]
    reason: str
    source: Source


@dataclass
class Catalog:
    """Every skill in scope, by precedence (``skills``), and those not loaded (``problems``)."""

    skills: list[Skill] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    hidden: list[Skill] = field(default_factory=list)

    def get(self, key: str) -> Skill | None:
        return next((s for s in self.skills if s.key == key), None)


class SkillFileError(ValueError):
    """Why a SKILL.md cannot be loaded; ``hostile`` when it was never read."""

    def __init__(self, reason: str, *, hostile: bool = False) -> None:
        super().__init__(reason)
        self.hostile = hostile


def crew_skills_dir() -> Path:
    from kirocrew_core import home

    return home.crew_home() / "skills"


def configured_extra_paths() -> list[str]:
    """``skills.extra_paths``; without a ``config.toml`` every key is at its default, read without the config module.

    The agentSpawn hook runs this at every session start, and importing the config module (tomlkit) would be
    most of its cost.
    """
    from kirocrew_core import home

    if not home.config_file().exists():
        return []  # the key's default
    from kirocrew_core.config import get_value

    return list(get_value("skills.extra_paths"))


def sources(workspace: str | None, extra_paths: list[str] | None = None) -> list[Source]:
    """The sources in precedence order; ``workspace`` None (the owner) has no project folders."""
    from kirocrew_core import home

    if extra_paths is None:
        extra_paths = configured_extra_paths()
    found: list[Source] = []
    if workspace:
        found.append(Source("project", Path(workspace) / ".kirocrew" / "skills"))
    found.append(Source("crew", crew_skills_dir()))
    found += [Source("extra", Path(p).expanduser()) for p in extra_paths]
    if workspace:
        found.append(Source("kiro", Path(workspace) / ".kiro" / "skills"))
    found.append(Source("kiro", home.kiro_home() / "skills"))
    return found


def read_skill_file(path: Path) -> str:
    """The text of a SKILL.md: a regular file (no link, no FIFO) under the size cap, valid UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if os.path.islink(path):
            raise SkillFileError("SKILL.md is a symbolic link; links are never followed", hostile=True) from exc
        raise SkillFileError(f"SKILL.md cannot be opened ({exc.strerror})", hostile=True) from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SkillFileError("SKILL.md is not a regular file", hostile=True)
        if info.st_size > MAX_SKILL_BYTES:
            raise SkillFileError(f"SKILL.md is {info.st_size} bytes, over the {MAX_SKILL_BYTES}-byte limit",
                                 hostile=True)
        data = handle.read(MAX_SKILL_BYTES + 1)
    if len(data) > MAX_SKILL_BYTES:
        raise SkillFileError(f"SKILL.md grew over the {MAX_SKILL_BYTES}-byte limit while read", hostile=True)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillFileError(f"SKILL.md is not valid UTF-8 (byte {exc.start})", hostile=True) from exc


def parse_skill(text: str, default_name: str) -> tuple[dict[str, Any], str]:
    """The front matter (a mapping with a ``name`` and a non-empty ``description``) and the body."""
    import yaml

    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillFileError("no YAML front matter: SKILL.md must start with a '---' line")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise SkillFileError("the front matter has no closing '---' line")
    try:
        meta = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (SKILL.md line {mark.line + 2})" if mark is not None else ""
        raise SkillFileError(f"the front matter is not valid YAML{where}") from exc
    if not isinstance(meta, dict):
        raise SkillFileError("the front matter is not a mapping of keys to values")
    name = meta.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise SkillFileError("'name' must be a non-empty string")
    description = meta.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillFileError("'description' is required and must be a non-empty string")
    always = meta.get("always", False)
    if not isinstance(always, bool):
        raise SkillFileError("'always' must be true or false")
    triggers = meta.get("triggers", [])
    if isinstance(triggers, str):
        triggers = [t.strip() for t in triggers.split(",") if t.strip()]
    if not isinstance(triggers, list) or not all(isinstance(t, str) for t in triggers):
        raise SkillFileError("'triggers' must be a list of words or a comma-separated string")
    meta = {**meta, "name": name.strip(), "description": " ".join(description.split()), "always": always,
            "triggers": tuple(triggers)}
    return meta, "".join(lines[end + 1:]).lstrip("\n")


def load(source: Source, key: str, folder: Path) -> Skill:
    """Read and parse the skill in ``folder`` (:class:`SkillFileError` when it cannot be loaded)."""
    path = folder / SKILL_FILE
    text = read_skill_file(path)
    meta, body = parse_skill(text, folder.name)
    return Skill(key, meta["name"], meta["description"], meta["always"], meta["triggers"], body, source, path,
                 len(text.encode("utf-8")))


def scan(source: Source) -> tuple[list[Skill], list[Problem]]:
    """The skills of one source; a missing source holds none. Links and special files are never entered."""
    skills: list[Skill] = []
    problems: list[Problem] = []
    try:
        root_info = os.lstat(source.root)
    except OSError:
        return skills, problems
    if not stat.S_ISDIR(root_info.st_mode):
        problems.append(Problem(".", "skipped", "the source is not a folder (links are not followed)", source))
        return skills, problems
    budget = [MAX_ENTRIES]

    def walk(folder: Path, key: str, depth: int) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            problems.append(Problem(key or ".", "skipped", f"the folder cannot be read ({exc.strerror})", source))
            return
        names = {e.name: e for e in entries}
        if key and SKILL_FILE in names:
            try:
                skills.append(load(source, key, folder))
            except SkillFileError as exc:
                problems.append(Problem(key, "skipped" if exc.hostile else "broken", str(exc), source))
            return
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                problems.append(Problem(key or ".", "skipped", f"over {MAX_ENTRIES} entries; the rest not read",
                                        source))
                return
            if entry.name.startswith("."):
                continue
            child = f"{key}/{entry.name}" if key else entry.name
            if entry.is_symlink():
                if (Path(entry.path) / SKILL_FILE).exists() or entry.is_dir():
                    problems.append(Problem(child, "skipped", "a symbolic link; links are never followed", source))
                continue
            if entry.is_dir(follow_symlinks=False) and depth < MAX_DEPTH:
                walk(Path(entry.path), child, depth + 1)

    walk(source.root, "", 0)
    return skills, problems


def catalog(workspace: str | None, extra_paths: list[str] | None = None) -> Catalog:
    """Every source scanned in precedence order; a key already found hides later ones (kept in ``hidden``)."""
    result = Catalog()
    seen: set[str] = set()
    for source in sources(workspace, extra_paths):
        skills, problems = scan(source)
        result.problems += problems
        for skill in skills:
            if skill.key in seen:
                result.hidden.append(skill)
            else:
                seen.add(skill.key)
                result.skills.append(skill)
    return result


def short_description(skill: Skill) -> str:
    """The description cut at :data:`SUMMARY_CHARS`, as listings show it."""
    text = skill.description
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + "…"


def summary(skill: Skill) -> str:
    """One line: ``key — description`` (cut), the line a session sees for a skill it has not read."""
    return f"{skill.key} — {short_description(skill)}"
