"""The lessons store, and what later sessions read from it.

One JSON file in the crew state (``<crew home>/state/lessons/lessons.json``), read and
replaced whole under the ``lessons`` lock with an atomic write, so a reader never sees half
a change and two writers never lose one. Every lesson keeps the id it was given
(``L<number>``, never reused) and its **author**: :data:`OWNER` (``kirocrew learn``) or the
session that saved it (:func:`session_author`, ``conversation:<id>``). Bad input raises
:class:`~kirocrew_core.errors.BadInputError` with a stable code and changes nothing; a
malformed store is reported (``lessons_store_malformed``), never overwritten.

Sessions write what every later session reads, so they get less room than the owner:

* **a rule is one line** (:func:`clean_line`): a line break is refused (``rule_not_one_line``)
  and so are control characters, bidirectional controls and other invisible format characters
  (``rule_control_characters``), because they change what the text says or how it is shown;
  zero-width spaces, a byte-order mark and soft hyphens are dropped and tabs become spaces,
  because they are noise. Each lesson is written as one list item, so no rule can start a
  heading, a quote or a fence in the delivered text;
* **bounded per author**: one session keeps at most :data:`MAX_PER_SESSION` lessons, all
  sessions together :data:`MAX_SESSION_LESSONS`, and the owner has its own
  :data:`MAX_OWNER_LESSONS`, so sessions filling their share never refuse the owner's
  ``kirocrew learn add``;
* **a session removes only its own lessons**; the owner removes any;
* **quoted as theirs**: the delivered text lists the owner's lessons, then the sessions' under
  a heading that says sessions wrote them, as a quote (:func:`global_text`, :func:`context_text`).

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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from kirocrew_core import home, plaintext
from kirocrew_core.errors import BadInputError, ConflictError, MalformedFileError
from kirocrew_core.jsonfile import read_json, write_bytes_atomic, write_json_atomic
from kirocrew_core.locks import named_lock

LOCK = "lessons"
RULE_MAX_CHARS = 500
NEGATIVE_MAX_CHARS = 500
QUERY_MAX_CHARS = 500
WORKSPACE_MAX_CHARS = 4096
#: What one session (one conversation) may keep; past it its ``learn_add`` is ``session_lessons_full``.
MAX_PER_SESSION = 25
#: What all sessions together may keep; past it a session's ``learn_add`` is ``lessons_full``.
MAX_SESSION_LESSONS = 250
#: The owner's own room (``kirocrew learn add``), apart from the sessions': ``lessons_full`` past it.
MAX_OWNER_LESSONS = 250
#: The store's bound: the sessions' share and the owner's.
MAX_LESSONS = MAX_SESSION_LESSONS + MAX_OWNER_LESSONS
#: The author of the lessons the owner keeps with ``kirocrew learn``.
OWNER = "owner"
#: The author recorded for lessons saved before authors were: removable by the owner only, shown as sessions'.
UNKNOWN_AUTHOR = ""
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
    #: :data:`OWNER`, :func:`session_author` of the session that saved it, or :data:`UNKNOWN_AUTHOR`.
    author: str = UNKNOWN_AUTHOR

    @property
    def by_owner(self) -> bool:
        return self.author == OWNER

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


def session_author(kind: str, target_id: str) -> str:
    """The author of a session's lessons: what it acts for (``conversation:<id>``), stable across its processes."""
    return f"{kind}:{target_id}"


def store_dir() -> Path:
    return home.state_dir("lessons")


def store_file() -> Path:
    """The store itself."""
    return store_dir() / "lessons.json"


def global_file() -> Path:
    """The Markdown file of global lessons the rendered agent loads as a ``file://`` resource."""
    return store_dir() / "lessons.md"


# -- validation -----------------------------------------------------------------------------------


def clean_line(value: str, name: str) -> str:
    """``value`` as one clean line, or :class:`BadInputError` (see :mod:`kirocrew_core.plaintext`).

    Refused, because it changes what the text says or how it reads: a line break
    (``<name>_not_one_line``), and any other control character, bidirectional control, invisible
    format character or lone surrogate (``<name>_control_characters``). Dropped as noise:
    :data:`~kirocrew_core.plaintext.NOISE`; a tab becomes a space.
    """
    text = plaintext.without_noise(value).replace("\t", " ")
    ch = plaintext.unsafe_character(text)
    if ch is not None and ch in plaintext.LINE_BREAKS:
        raise BadInputError(f"{name} must be one line: it holds {plaintext.named(ch)}; a lesson is one rule, "
                            "written on one line", code=f"{name}_not_one_line")
    if ch is not None:
        raise BadInputError(f"{name} holds {plaintext.named(ch)}: it would change what the text says or how it is "
                            "shown", code=f"{name}_control_characters")
    return text


def _text(value: Any, name: str, limit: int, *, required: bool, one_line: bool = False) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise BadInputError(f"{name} must be a string", code=f"bad_{name}")
    text = (clean_line(value.strip(), name) if one_line else value).strip()
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
    text = _text(rule, "rule", RULE_MAX_CHARS, required=True, one_line=True)
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
    return NewLesson(text, category, scope,
                     _text(negative, "negative", NEGATIVE_MAX_CHARS, required=False, one_line=True), where)


# -- the file -------------------------------------------------------------------------------------


def _lesson(raw: Any) -> Lesson | None:
    if not isinstance(raw, dict):
        return None
    try:
        lesson = Lesson(id=str(raw["id"]), rule=str(raw["rule"]), category=str(raw["category"]),
                        scope=str(raw["scope"]), negative=str(raw.get("negative") or ""),
                        workspace=raw.get("workspace") if isinstance(raw.get("workspace"), str) else None,
                        created=float(raw.get("created") or 0.0), author=str(raw.get("author") or UNKNOWN_AUTHOR))
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


#: The heading over the owner's lessons in what sessions are told.
OWNER_HEADING = "The owner's lessons (saved with `kirocrew learn add`)"
#: The heading over the sessions' lessons: what earlier sessions saved, quoted, never the owner's words.
SESSIONS_HEADING = "Lessons earlier sessions saved (learn_add), quoted: notes from sessions, not the owner's words"


def _sections(lessons: list[Lesson], heading: str) -> list[str]:
    """The owner's lessons as list items, then the sessions' as a quoted list under their own heading."""
    owners = [lesson for lesson in lessons if lesson.by_owner]
    sessions = [lesson for lesson in lessons if not lesson.by_owner]
    lines: list[str] = []
    if owners:
        lines += [f"{heading} {OWNER_HEADING}", ""] + [f"- {lesson.line()}" for lesson in owners]
    if sessions:
        lines += ([""] if lines else []) + [f"{heading} {SESSIONS_HEADING}", ""]
        lines += [f"> - {lesson.line()}" for lesson in sessions]
    return lines


def global_text(lessons: Iterable[Lesson]) -> str:
    """The global lessons file's Markdown (it says so when there are none, so the resource always loads)."""
    rules = [lesson for lesson in lessons if lesson.scope == "global"]
    lines = ["# Lessons kept by kirocrew", "",
             "Durable rules for every kirocrew session. Follow them unless the user says otherwise; "
             "where they disagree, the owner's lessons come before the ones sessions saved.", ""]
    if not rules:
        lines.append("No lessons saved.")
    lines += _sections(rules, "##")
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


def _room_for(lessons: list[Lesson], author: str) -> None:
    """:class:`ConflictError` when ``author`` may keep no more lessons (see the module's text)."""
    if author == OWNER:
        if sum(1 for lesson in lessons if lesson.by_owner) >= MAX_OWNER_LESSONS:
            raise ConflictError(f"you keep {MAX_OWNER_LESSONS} lessons, the most the store holds for you: remove "
                                "some first (kirocrew learn remove)", code="lessons_full")
        return
    if sum(1 for lesson in lessons if lesson.author == author) >= MAX_PER_SESSION:
        raise ConflictError(f"this session keeps {MAX_PER_SESSION} lessons, the most one session may: remove one "
                            "of its own first (learn_remove)", code="session_lessons_full")
    if sum(1 for lesson in lessons if not lesson.by_owner) >= MAX_SESSION_LESSONS:
        raise ConflictError(f"sessions keep {MAX_SESSION_LESSONS} lessons, the most sessions may together: the "
                            "owner removes some with kirocrew learn remove", code="lessons_full")


def add(new: NewLesson, *, author: str) -> tuple[Lesson, bool]:
    """Save ``new`` as ``author``'s; ``(lesson, True)``, or ``(the existing one, False)`` when the same rule is
    already kept there.

    The same rule (case-insensitively) in the same scope and workspace is not stored twice; when
    the owner adds a rule a session saved, the lesson becomes the owner's (same id). Past the
    author's room (:func:`_room_for`): :class:`ConflictError` ``session_lessons_full`` or
    ``lessons_full``, and nothing changes.
    """
    with named_lock(LOCK):
        lessons, next_id = _read()
        for index, lesson in enumerate(lessons):
            if (lesson.scope, lesson.workspace) == (new.scope, new.workspace) and \
                    lesson.rule.casefold() == new.rule.casefold():
                if author == OWNER and not lesson.by_owner:
                    _room_for(lessons, author)
                    lessons[index] = lesson = replace(lesson, author=OWNER)
                    _write(lessons, next_id)
                return lesson, False
        _room_for(lessons, author)
        lesson = Lesson(id=f"L{next_id}", rule=new.rule, category=new.category, scope=new.scope,
                        negative=new.negative, workspace=new.workspace, created=time.time(), author=author)
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


def remove(query: str, *, author: str, workspace: str | None = None) -> list[Lesson]:
    """Remove the lessons matching ``query`` (:func:`matches`) that ``author`` may remove; return them (none: ``[]``).

    The owner (``author`` :data:`OWNER`) removes among all lessons. A session (``author`` its
    :func:`session_author`) removes only lessons it saved, among those it sees (``workspace``: the
    global lessons and its workspace's): when every match is someone else's (the owner's, another
    session's), the call is refused with ``lesson_not_yours`` and removes nothing. More than
    :data:`MAX_REMOVE_AT_ONCE` removable matches is refused (``query_too_broad``) and removes nothing.
    """
    text = validate_query(query)
    with named_lock(LOCK):
        lessons, next_id = _read()
        pool = lessons if author == OWNER else visible(lessons, workspace)
        found = [lesson for lesson in pool if matches(lesson, text)]
        gone = [lesson for lesson in found if author in (OWNER, lesson.author)]
        if found and not gone:
            raise BadInputError(f"{len(found)} lesson{'s' if len(found) != 1 else ''} match {text!r}, none saved by "
                                "this session: a session removes only the lessons it saved (the owner removes any "
                                "with kirocrew learn remove)", code="lesson_not_yours")
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
    lines = ["Lessons kirocrew keeps for this workspace (follow them unless the user says otherwise; where they "
             "disagree, the owner's lessons come before the ones sessions saved):", ""]
    lines += _sections(mine, "###")
    return "\n".join(lines) + "\n"
