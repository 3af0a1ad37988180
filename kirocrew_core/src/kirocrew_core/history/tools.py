"""``list_sessions``, ``get_chat_session`` and ``search_chat_history``: a session reads past sessions.

All three only read, so they are ``lenient``, and **workspace scoping fails closed**:

* a verified kirocrew session sees the sessions of its own workspace (and of folders inside
  it; a session with no workspace sees only sessions that have none). ``all_workspaces`` is
  refused to it (``scope_denied``): one session does not read another project's history;
* the owner's own process (origin ``person``: the dashboard's or a terminal's MCP client) sees
  every workspace, but only when it asks with ``all_workspaces``: it has no workspace of its own,
  so without it the call is refused (``workspace_unknown``);
* anyone else (a process the host started for nobody, an unverifiable caller) is refused
  (``caller_unverified``).

Sessions are named by the index's opaque keys; ``get_chat_session`` takes only such a key and
never echoes it (an unknown one is named by a fingerprint). Texts are redacted before snippets
are marked (:mod:`.text`).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.history import summaries as summaries_
from kirocrew_core.history import text
from kirocrew_core.history.index import KEY_PATTERN, Scope

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import ToolCall
    from kirocrew_core.history.index import HistoryIndex, SessionRow
    from kirocrew_core.history.summaries import Outcome

LIST_DEFAULT, LIST_MAX = 20, 100
SEARCH_DEFAULT, SEARCH_MAX = 10, 50
MESSAGES_DEFAULT, MESSAGES_MAX = 50, 200
#: One message's text in ``get_chat_session`` beyond this is cut (the whole result is capped at 100,000).
MESSAGE_CHARS = 20_000

_ALL = {"type": "boolean", "default": False,
        "description": "Every workspace's sessions, not only this session's workspace. Refused to a kirocrew "
                       "session (it reads only its own workspace's history)."}
_DAY = r"^\d{4}-\d{2}-\d{2}$"

LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": LIST_MAX, "default": LIST_DEFAULT},
                   "all_workspaces": _ALL,
                   "summarize": {"type": "boolean", "default": False,
                                 "description": "Add a short summary a model wrote of each session (cached; at most "
                                                f"{summaries_.PER_CALL} new ones per call, waiting at most "
                                                f"{summaries_.BUDGET_SECS:g} s; best effort)."}},
    "additionalProperties": False,
}
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 500,
                  "description": "Words to find (every word must appear in one message; case-insensitive)."},
        "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_MAX, "default": SEARCH_DEFAULT},
        "after": {"type": "string", "pattern": _DAY, "description": "Only sessions last active on or after this "
                                                                    "day (YYYY-MM-DD, UTC)."},
        "before": {"type": "string", "pattern": _DAY, "description": "Only sessions last active before this day "
                                                                     "(YYYY-MM-DD, UTC)."},
        "all_workspaces": _ALL,
    },
    "required": ["query"],
    "additionalProperties": False,
}
GET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_key": {"type": "string", "minLength": 1, "maxLength": 500,
                        "description": "A key list_sessions or search_chat_history gave (h1-…)."},
        "max_messages": {"type": "integer", "minimum": 1, "maximum": MESSAGES_MAX, "default": MESSAGES_DEFAULT},
        "all_workspaces": _ALL,
    },
    "required": ["session_key"],
    "additionalProperties": False,
}


def scope_of(call: ToolCall, all_workspaces: bool) -> Scope:
    """The sessions this caller may read (see the module docstring); :class:`ToolRefused` when none."""
    from kirocrew_core.coretools.contract import ToolRefused

    session = call.acting_session("reads past sessions")
    if session is not None:
        if all_workspaces:
            raise ToolRefused(f"{call.tool}: all_workspaces is not available to a kirocrew session: it reads only "
                              "its own workspace's history", code="scope_denied")
        return session_scope(session.workspace)
    if not all_workspaces:
        raise ToolRefused(f"{call.tool}: this caller is no kirocrew session, so it has no workspace to read; "
                          "pass all_workspaces=true to read every workspace's history", code="workspace_unknown")
    return Scope.everything()


def session_scope(workspace: str | None) -> Scope:
    """A session's own workspace, and its repository's main checkout when it works in a linked worktree."""
    if not workspace:
        return Scope(("",))
    from kirocrew_core.lessons.store import checkout_of

    return Scope(tuple(dict.fromkeys([workspace, checkout_of(workspace)])))


def _index() -> HistoryIndex:
    from kirocrew_core.history.index import shared

    index = shared()
    index.refresh()
    return index


def list_text(index: HistoryIndex, scope: Scope, limit: int) -> str:
    return render_list(index.sessions(scope, limit=limit), scope)


def render_list(rows: list[SessionRow], scope: Scope, summaries: Outcome | None = None) -> str:
    """The sessions, newest first; with ``summaries``, each one's summary and then the notes on what is missing."""
    if not rows:
        return "No sessions found in this workspace yet." if scope.workspaces is not None else "No sessions found."
    where = "in this workspace" if scope.workspaces is not None else "in every workspace"
    blocks = [f"🗂️ Sessions {where} ({len(rows)}, newest first):"]
    for row in rows:
        block = (f"**{text.shown(row.title) or 'untitled'}**  ·  `{row.key}`\n"
                 f"_source={row.source}  ·  ~{row.messages} msgs  ·  created {text.short_time(row.created)}_")
        if summaries is not None and row.key in summaries.texts:
            block += f"\nSummary: {text.shown(summaries.texts[row.key])}"
        blocks.append(block)
    if summaries is not None:
        blocks += [f"_{note}_" for note in summaries.notes]
    return "\n\n".join(blocks)


async def summarized_list(index: HistoryIndex, scope: Scope, limit: int, *,
                          budget: float = summaries_.BUDGET_SECS) -> str:
    """:func:`render_list` with summaries: the cached ones, and new ones written within ``budget`` seconds."""
    rows = await asyncio.to_thread(index.sessions, scope, limit=limit)
    outcome, wanted = await asyncio.to_thread(summaries_.cached, index, rows)
    await summaries_.write(index, wanted, outcome, budget=budget)
    return render_list(rows, scope, outcome)


async def list_sessions(args: dict[str, Any], call: ToolCall) -> str:
    scope = scope_of(call, bool(args.get("all_workspaces", False)))
    limit = int(args.get("limit", LIST_DEFAULT))
    if args.get("summarize", False):
        index = await asyncio.to_thread(_index)
        return await summarized_list(index, scope, limit)
    return await asyncio.to_thread(lambda: list_text(_index(), scope, limit))


def search_text(index: HistoryIndex, scope: Scope, query: str, limit: int, after: str, before: str) -> str:
    from kirocrew_core.history.index import fts_query

    _, words = fts_query(query)
    blocks = []
    for hit in index.search(query, scope, limit=limit, after=after, before=before):
        found = next((s for s in (text.snippet(t, words) for t in hit.texts) if s), None)
        if found is None:
            continue  # only a redacted secret matched: neither the match nor that it exists is shown
        row = hit.session
        blocks.append(f"**{text.shown(row.title) or 'untitled'}**  ·  `{row.key}`  ·  {text.short_time(row.updated)}"
                      f"\n> {found}")
    if not blocks:
        return "No matching conversations found. Try different keywords."
    header = "🔎 Chat history matches (snippets only — use get_chat_session to read a full thread):"
    return "\n\n".join([header, *blocks])


async def search_chat_history(args: dict[str, Any], call: ToolCall) -> str:
    scope = scope_of(call, bool(args.get("all_workspaces", False)))
    after = text.day_bound(args.get("after"), "after")
    before = text.day_bound(args.get("before"), "before")
    limit = int(args.get("limit", SEARCH_DEFAULT))
    return await asyncio.to_thread(lambda: search_text(_index(), scope, str(args["query"]), limit, after, before))


def key_fingerprint(key: str) -> str:
    return "fp:" + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:12]


def visible(row: SessionRow, scope: Scope) -> bool:
    if scope.workspaces is None:
        return True
    for root in scope.workspaces:
        if row.workspace == root or (root and row.workspace.startswith(root.rstrip("/") + "/")):
            return True
    return False


def session_text(index: HistoryIndex, scope: Scope, key: str, limit: int) -> str:
    from kirocrew_core.coretools.contract import ToolRefused

    row = index.session(key) if KEY_PATTERN.match(key) else None
    if row is None:
        raise ToolRefused(f"No conversation found for that session_key ({key_fingerprint(key)}).",
                          code="session_not_found")
    if not visible(row, scope):
        raise ToolRefused("Access denied: that conversation belongs to a different workspace.", code="scope_denied")
    newest = list(reversed(index.messages(key, limit=limit)))
    lines = [f"**{text.shown(row.title) or 'untitled'}**  ·  newest {len(newest)} of {row.messages} messages, "
             "oldest first"]
    for message in newest:
        body = message.text if len(message.text) <= MESSAGE_CHARS else message.text[:MESSAGE_CHARS] + "\n…[cut]"
        lines.append(f"**{message.role.capitalize()}:** {text.shown(body)}")
    return "\n\n".join(lines)


async def get_chat_session(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_core.coretools.contract import ToolRefused

    key = str(args["session_key"])
    if "/" in key or "\\" in key or key in (".", ".."):
        raise ToolRefused("Invalid session_key.", code="invalid_arguments")
    scope = scope_of(call, bool(args.get("all_workspaces", False)))
    limit = int(args.get("max_messages", MESSAGES_DEFAULT))
    return await asyncio.to_thread(lambda: session_text(_index(), scope, key, limit))


def history_tools() -> list[CoreMcpTool]:
    return [
        CoreMcpTool("list_sessions", "List past sessions of this workspace (kiro-cli's own and kirocrew's "
                    "conversations), newest first: title, key (for get_chat_session), source, message count; with "
                    "summarize, a short summary of each.",
                    LIST_SCHEMA, list_sessions, read_only=True, identity="lenient"),
        CoreMcpTool("search_chat_history", "Search every past session of this workspace for words; each match "
                    "comes as a short snippet with the match marked <<<like this>>> and the session's key.",
                    SEARCH_SCHEMA, search_chat_history, read_only=True, identity="lenient"),
        CoreMcpTool("get_chat_session", "Read a past session by the key list_sessions or search_chat_history gave: "
                    "its newest messages, oldest first, as **Role:** text (secrets redacted).",
                    GET_SCHEMA, get_chat_session, read_only=True, identity="lenient"),
    ]
