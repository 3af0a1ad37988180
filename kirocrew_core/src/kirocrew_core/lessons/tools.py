"""The ``learn_*`` tools of ``kirocrew-core``: keep, list and remove durable lessons.

``learn_add`` and ``learn_remove`` change what every later session is told, so they are
``strict`` (a caller the host cannot tie to a session it started is refused before the
handler runs) and gated by ``governance.memory_writes``. A session's lessons are its own
(author ``conversation:<id>``): bounded by its quota, removable only by it and the owner.
``learn_list`` only reads, so it is ``lenient``: a verified session sees the global lessons
and its workspace's, any other caller (a plain MCP client) the global ones.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.lessons import store

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import CrewSession, ToolCall

LIST_MAX = store.MAX_LESSONS

LEARN_ADD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "rule": {"type": "string", "minLength": 1, "maxLength": store.RULE_MAX_CHARS,
                 "description": f"The rule, one sentence on one line. HARD LIMIT {store.RULE_MAX_CHARS} characters: "
                                "a longer rule is REJECTED (not truncated), and so is a line break or a control "
                                "character."},
        "category": {"type": "string", "enum": list(store.CATEGORIES), "default": store.DEFAULT_CATEGORY,
                     "description": "tool (how to use a tool), preference (how the user likes things), "
                                    "knowledge (a fact about the work)."},
        "negative": {"type": "string", "maxLength": store.NEGATIVE_MAX_CHARS,
                     "description": "Optional: what NOT to do (the mistake this lesson prevents)."},
        "scope": {"type": "string", "enum": list(store.SCOPES), "default": "global",
                  "description": "global (every session) or workspace (only sessions in one workspace)."},
        "workspace": {"type": "string", "maxLength": store.WORKSPACE_MAX_CHARS,
                      "description": "For scope=workspace: the workspace's absolute path; defaults to this "
                                     "session's workspace."},
    },
    "required": ["rule"],
    "additionalProperties": False,
}
LEARN_LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX},
        "offset": {"type": "integer", "minimum": 0},
    },
    "additionalProperties": False,
}
LEARN_REMOVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": store.QUERY_MAX_CHARS,
                  "description": "A lesson id (L3) or text the rule contains (case-insensitive); at most "
                                 f"{store.MAX_REMOVE_AT_ONCE} lessons may match. Only lessons this session saved "
                                 "are removed."},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def _gate() -> None:
    from kirocrew_core.governance import require_capability

    require_capability("memory_writes", "durable memory writes")


def _author(session: CrewSession) -> str:
    return store.session_author(session.kind, session.target_id)


def _workspace_for(session: CrewSession, scope: str, given: str | None) -> str | None:
    """The workspace a session's ``learn_add`` names: its own unless it gives one inside it."""
    from kirocrew_core.coretools.contract import ToolRefused

    if scope != "workspace":
        return given
    if not given:
        if not session.workspace:
            raise ToolRefused("workspace is required when scope='workspace': this session has no workspace, "
                              "so name one (an absolute path)", code="workspace_required")
        return store.checkout_of(session.workspace)  # a worktree's lessons are its repository's
    wanted = store.normalize_workspace(given)
    if session.workspace and not (store.within(wanted, session.workspace)
                                  or store.within(wanted, store.checkout_of(session.workspace))):
        # A session shapes its own workspace's sessions, never another workspace's.
        raise ToolRefused(f"a session in {session.workspace} may keep workspace lessons only for that workspace "
                          f"(or a folder inside it), not {wanted}", code="workspace_mismatch")
    return wanted


async def learn_add(args: dict[str, Any], call: ToolCall) -> str:
    session = call.require_session()
    _gate()
    scope = args.get("scope", "global")
    new = store.validate_new(args.get("rule"), category=args.get("category", store.DEFAULT_CATEGORY),
                             negative=args.get("negative", ""), scope=scope,
                             workspace=_workspace_for(session, scope, args.get("workspace")))
    lesson, created = await asyncio.to_thread(store.add, new, author=_author(session))
    if not created:
        return f"Lesson already saved ({lesson.scope}, {lesson.id}): {lesson.rule}"
    return f"Saved lesson ({lesson.scope}, {lesson.id}): {lesson.rule}"


async def learn_list(args: dict[str, Any], call: ToolCall) -> str:
    workspace = call.session.workspace if call.session is not None else None
    lessons = store.visible(await asyncio.to_thread(store.all_lessons), workspace)
    offset = int(args.get("offset", 0))
    page = lessons[offset:offset + int(args.get("limit", LIST_MAX))]
    if not page:
        return "No lessons saved." if not lessons else f"No lessons past offset {offset} ({len(lessons)} saved)."
    return "\n".join(lesson.line() for lesson in page)


async def learn_remove(args: dict[str, Any], call: ToolCall) -> str:
    session = call.require_session()
    _gate()
    query = store.validate_query(args.get("query"))
    gone = await asyncio.to_thread(store.remove, query, author=_author(session), workspace=session.workspace)
    if not gone:
        return f"No lessons matched: {query}"
    lines = "\n".join(f"- {lesson.line()}" for lesson in gone)
    return f"Removed {len(gone)} lesson{'s' if len(gone) != 1 else ''} matching: {query}\n{lines}"


def lesson_tools() -> list[CoreMcpTool]:
    return [
        CoreMcpTool("learn_add", "Keep a durable lesson (a rule) that every later kirocrew session is told, "
                    "globally or for one workspace. Use for a correction the user would otherwise repeat.",
                    LEARN_ADD_SCHEMA, learn_add, identity="strict"),
        CoreMcpTool("learn_list", "List the lessons this session is told: the global ones and its workspace's, "
                    "one per line as [category] rule.", LEARN_LIST_SCHEMA, learn_list, read_only=True,
                    identity="lenient"),
        CoreMcpTool("learn_remove", "Remove the lessons this session saved whose id is the query or whose rule "
                    "contains it (case-insensitive); says how many. The owner's lessons and other sessions' are not "
                    "this session's to remove.", LEARN_REMOVE_SCHEMA, learn_remove, identity="strict"),
    ]
