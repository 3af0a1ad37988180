"""The lessons store, and what later sessions read from it.

One JSON file in the crew state (``<crew home>/state/lessons/lessons.json``), read and
replaced whole under the ``lessons`` lock with an atomic write, so a reader never sees half
a change and two writers never lose one. It is bounded (:data:`MAX_LESSONS` lessons of at
most :data:`RULE_MAX_CHARS` characters each) and every lesson keeps the id it was given
(``L<number>``, never reused). Bad input raises :class:`~kirocrew_core.errors.BadInputError`
with a stable code and changes nothing; a malformed store is reported
(``lessons_store_malformed``), never overwritten.

How a later session sees them (kiro-cli reads its agent file only when it starts):

* **global lessons** are written, after every change, to a Markdown file next to the store
  (:func:`global_file`) that the rendered ``kirocrew`` agent names in its ``resources``
  (``file://…``): only that file changes, so adding a lesson needs no agent rebuild;
* **workspace lessons** cannot ride on a static resource (the global agent has one
  ``resources`` list for every workspace), so the agent's ``agentSpawn`` hook runs
  ``kirocrew learn context``, which kiro-cli starts in the session's working directory and
  whose output it adds to the session's context: it prints :func:`context_text` for that
  directory (the lessons whose workspace is it or one of its parents).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, ConflictError, MalformedFileError
from kirocrew_core.jsonfile import read_json, write_bytes_atomic, write_json_atomic
from kirocrew_core.locks import named_lock

LOCK = "lessons"
RULE_MAX_CHARS = 500
NEGATIVE_MAX_CHARS = 500
QUERY_MAX_CHARS = 500
WORKSPACE_MAX_CHARS = 4096
#: The store's bound: a session that keeps adding is refused (``lessons_full``), never truncated.
MAX_LESSONS = 500
#: A removal matching more lessons than this is refused (``query_too_broad``): a short query
#: such as ``"a"`` would otherwise wipe the store.
MAX_REMOVE_AT_ONCE = 10
CATEGORIES = ("tool", "preference", "knowledge")
SCOPES = ("global", "workspace")
DEFAULT_CATEGORY = "knowledge"
STORE_VERSION = 1


@dataclass(frozen=True)
class Lesson:
    """One saved rule. ``workspace`` is set exactly when ``scope`` is ``workspace``."""

    id: str
    rule: str
    category: str
    scope: str
    negative: str = ""
    workspace: str | None = None
    created: float = 0.0

    def line(self) -> str:
        """How ``learn_list`` shows it: ``[{category}] {rule}``, and what not to do when there is one."""
        text = f"[{self.category}] {self.rule}"
        return f"{text} (not: {self.negative})" if self.negative else text

    def applies_to(self, directory: str | None) -> bool:
        """Whether a session working in ``directory`` sees it (global ones: always)."""
        if self.scope == "global":
            return True
        if directory is None or self.workspace is None:
            return False
        return within(directory, self.workspace)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def within(directory: str, workspace: str) -> bool:
    """Whether ``directory`` is ``workspace`` or a folder inside it (symlinks resolved on both sides).

    A folder of a linked git worktree also counts as the same folder of its main checkout: a
    conversation started with a worktree works there, and its repository's lessons are its.
    """
    root = Path(os.path.realpath(workspace))
    for here in {Path(os.path.realpath(directory)), Path(checkout_of(directory))}:
        if here == root or here.is_relative_to(root):
            return True
    return False


#: How far up a directory :func:`checkout_of` looks for a worktree's ``.git`` file.
_GIT_SEARCH_DEPTH = 32


def checkout_of(directory: str) -> str:
    """The same folder in the main checkout when ``directory`` is inside a linked git worktree, else itself.

    Reads the worktree's ``.git`` file (``gitdir: <repo>/.git/worktrees/<name>``) and that
    folder's ``commondir``; no git process (this runs at every session start). Anything
    unexpected answers ``directory`` unchanged.
    """
    here = Path(os.path.realpath(directory))
    for top in [here, *here.parents][:_GIT_SEARCH_DEPTH]:
        marker = top / ".git"
        if marker.is_dir():
            return str(here)  # a main checkout (or a plain repository)
        if not marker.is_file():
            continue
        try:
            line = marker.read_text(encoding="utf-8", errors="replace")[:4096].strip()
            gitdir = Path(top, line.removeprefix("gitdir:").strip()) if line.startswith("gitdir:") else None
            common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve() if gitdir else None
        except OSError:
            return str(here)
        if common is None or common.name != ".git":
            return str(here)
        return str(common.parent / here.relative_to(top))
    return str(here)


def store_dir() -> Path:
    return home.state_dir("lessons")


def store_file() -> Path:
    """The store itself."""
    return store_dir() / "lessons.json"


def global_file() -> Path:
    """The Markdown file of global lessons the rendered agent loads as a ``file://`` resource."""
    return store_dir() / "lessons.md"


# -- validation -----------------------------------------------------------------------------------


def _text(value: Any, name: str, limit: int, *, required: bool) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise BadInputError(f"{name} must be a string", code=f"bad_{name}")
    text = value.strip()
    if required and not text:
        raise BadInputError(f"{name} is required and must not be blank", code=f"{name}_required")
    if len(text) > limit:
        # Rejected, not truncated: half a rule is a different rule.
        raise BadInputError(f"{name} is {len(text)} characters; the limit is {limit} (rejected, not truncated)",
                            code=f"{name}_too_long")
    if "\x00" in text:
        raise BadInputError(f"{name} must not contain NUL characters", code=f"bad_{name}")
    return text


def normalize_workspace(value: str) -> str:
    """An absolute workspace path, normalised (``..`` and doubled slashes folded, symlinks kept)."""
    text = _text(value, "workspace", WORKSPACE_MAX_CHARS, required=True)
    if not os.path.isabs(text):
        raise BadInputError(f"workspace must be an absolute path, got {text!r}", code="workspace_not_absolute")
    return os.path.normpath(text)


@dataclass(frozen=True)
class NewLesson:
    """A validated ``learn_add``: what :func:`add` stores."""

    rule: str
    category: str
    scope: str
    negative: str
    workspace: str | None


def validate_new(rule: Any, *, category: Any = DEFAULT_CATEGORY, negative: Any = "", scope: Any = "global",
                 workspace: Any = None) -> NewLesson:
    """Check a new lesson; :class:`BadInputError` with a stable code names the first problem."""
    text = _text(rule, "rule", RULE_MAX_CHARS, required=True)
    if category not in CATEGORIES:
        raise BadInputError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}", code="bad_category")
    if scope not in SCOPES:
        raise BadInputError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}", code="bad_scope")
    where: str | None = None
    if scope == "workspace":
        if workspace in (None, ""):
            raise BadInputError("workspace is required when scope='workspace' (an absolute path)",
                                code="workspace_required")
        where = normalize_workspace(workspace)
    elif workspace not in (None, ""):
        raise BadInputError("workspace is only for scope='workspace'", code="workspace_without_scope")
    return NewLesson(text, category, scope, _text(negative, "negative", NEGATIVE_MAX_CHARS, required=False), where)


# -- the file -------------------------------------------------------------------------------------


def _lesson(raw: Any) -> Lesson | None:
    if not isinstance(raw, dict):
        return None
    try:
        lesson = Lesson(id=str(raw["id"]), rule=str(raw["rule"]), category=str(raw["category"]),
                        scope=str(raw["scope"]), negative=str(raw.get("negative") or ""),
                        workspace=raw.get("workspace") if isinstance(raw.get("workspace"), str) else None,
                        created=float(raw.get("created") or 0.0))
    except (KeyError, TypeError, ValueError):
        return None
    ok = lesson.category in CATEGORIES and lesson.scope in SCOPES and (lesson.scope == "global") == (
        lesson.workspace is None)
    return lesson if ok else None


def _read() -> tuple[list[Lesson], int]:
    """Every lesson and the next id number; ``lessons_store_malformed`` when the file is not ours."""
    try:
        document = read_json(store_file()).object_or_empty()
    except MalformedFileError as exc:
        raise MalformedFileError(store_file(), f"{exc.detail} (left as it is)",
                                 code="lessons_store_malformed") from exc
    if not document:
        return [], 1
    raw = document.get("lessons")
    next_id = document.get("next_id")
    lessons = [_lesson(item) for item in raw] if isinstance(raw, list) else None
    if lessons is None or any(item is None for item in lessons) or not isinstance(next_id, int) or next_id < 1:
        raise MalformedFileError(store_file(), "not a kirocrew lessons store (left as it is)",
                                 code="lessons_store_malformed")
    return [item for item in lessons if item is not None], next_id


def _write(lessons: list[Lesson], next_id: int) -> None:
    home.ensure_crew_home()
    store_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
    write_json_atomic(store_file(), {"version": STORE_VERSION, "next_id": next_id,
                                     "lessons": [lesson.as_dict() for lesson in lessons]}, secret=True)
    _write_global_file(lessons)


def global_text(lessons: Iterable[Lesson]) -> str:
    """The global lessons file's Markdown (it says so when there are none, so the resource always loads)."""
    rules = [lesson for lesson in lessons if lesson.scope == "global"]
    lines = ["# Lessons kept by kirocrew", "",
             "Durable rules saved with learn_add (or `kirocrew learn add`) for every kirocrew session. "
             "Follow them unless the user says otherwise.", ""]
    if not rules:
        lines.append("No lessons saved.")
    lines += [f"- {lesson.line()}" for lesson in rules]
    return "\n".join(lines) + "\n"


def _write_global_file(lessons: list[Lesson]) -> None:
    write_bytes_atomic(global_file(), global_text(lessons).encode("utf-8"), mode=0o600)


def ensure_global_file() -> Path:
    """The global lessons file, written from the store when it is missing (the agent names it as a resource)."""
    path = global_file()
    if path.is_file():
        return path
    with named_lock(LOCK):
        if not path.is_file():
            try:
                lessons, _ = _read()
            except (MalformedFileError, OSError):
                lessons = []
            home.ensure_crew_home()
            store_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
            _write_global_file(lessons)
    return path


# -- operations -----------------------------------------------------------------------------------


def all_lessons() -> list[Lesson]:
    """Every lesson, oldest first."""
    with named_lock(LOCK):
        return _read()[0]


def add(new: NewLesson) -> tuple[Lesson, bool]:
    """Save ``new``; ``(lesson, True)``, or ``(the existing one, False)`` when the same rule is already kept there.

    The same rule (case-insensitively) in the same scope and workspace is not stored twice.
    :class:`ConflictError` ``lessons_full`` when the store holds :data:`MAX_LESSONS`.
    """
    with named_lock(LOCK):
        lessons, next_id = _read()
        for lesson in lessons:
            if (lesson.scope, lesson.workspace) == (new.scope, new.workspace) and \
                    lesson.rule.casefold() == new.rule.casefold():
                return lesson, False
        if len(lessons) >= MAX_LESSONS:
            raise ConflictError(f"the lessons store is full ({MAX_LESSONS} lessons): remove some first",
                                code="lessons_full")
        lesson = Lesson(id=f"L{next_id}", rule=new.rule, category=new.category, scope=new.scope,
                        negative=new.negative, workspace=new.workspace, created=time.time())
        _write([*lessons, lesson], next_id + 1)
    return lesson, True


def visible(lessons: Iterable[Lesson], workspace: str | None) -> list[Lesson]:
    """The lessons a session in ``workspace`` sees: the global ones, then its workspace's."""
    items = list(lessons)
    return [x for x in items if x.scope == "global"] + [x for x in items if x.scope == "workspace"
                                                           and x.applies_to(workspace)]


def validate_query(query: Any) -> str:
    return _text(query, "query", QUERY_MAX_CHARS, required=True)


def matches(lesson: Lesson, query: str) -> bool:
    """``query`` is the lesson's id (``L3``) or a case-insensitive substring of its rule."""
    return query.casefold() == lesson.id.casefold() or query.casefold() in lesson.rule.casefold()


def remove(query: str, *, workspace: str | None = None, everywhere: bool = False) -> list[Lesson]:
    """Remove the lessons matching ``query`` (:func:`matches`) and return them (none: ``[]``).

    A session removes among what it sees (``workspace``: the global lessons and its
    workspace's); the owner (``everywhere``) among all. More than :data:`MAX_REMOVE_AT_ONCE`
    matches is refused (``query_too_broad``) and removes nothing.
    """
    text = validate_query(query)
    with named_lock(LOCK):
        lessons, next_id = _read()
        pool = lessons if everywhere else visible(lessons, workspace)
        gone = [lesson for lesson in pool if matches(lesson, text)]
        if len(gone) > MAX_REMOVE_AT_ONCE:
            raise BadInputError(f"{len(gone)} lessons match {text!r}; the limit for one removal is "
                                f"{MAX_REMOVE_AT_ONCE}: use a longer query or a lesson id", code="query_too_broad")
        if gone:
            ids = {lesson.id for lesson in gone}
            _write([lesson for lesson in lessons if lesson.id not in ids], next_id)
    return gone


def context_text(directory: str) -> str:
    """What the ``agentSpawn`` hook prints for a session in ``directory``: its workspace lessons, or ``""``."""
    try:
        lessons, _ = _read()
    except (MalformedFileError, OSError):
        return ""  # a broken store must not break every session's start; `kirocrew learn list` reports it
    mine = [lesson for lesson in lessons if lesson.scope == "workspace" and lesson.applies_to(directory)]
    if not mine:
        return ""
    lines = ["Lessons kirocrew keeps for this workspace (follow them unless the user says otherwise):"]
    lines += [f"- {lesson.line()}" for lesson in mine]
    return "\n".join(lines) + "\n"
