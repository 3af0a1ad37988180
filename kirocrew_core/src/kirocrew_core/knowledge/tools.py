"""``local_knowledge_search`` and ``knowledge_dedup``: sessions read the owner's library.

Both are ``lenient``: a verified session and the person (the owner's own process, by ancestry)
read; anyone else is refused ``caller_unverified``. Removing duplicates changes the library, so
``knowledge_dedup`` with ``apply`` is the owner's alone: a session (and a command run from its
shell, which is that session) is refused ``owner_only``. Every text shown passes the secrets
redactor (:func:`kirocrew_core.history.text.shown`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import ToolCall
    from kirocrew_core.knowledge.store import Duplicate, Hit, Library

log = logging.getLogger(__name__)
SEARCH_DEFAULT, SEARCH_MAX = 3, 5
HEADER = "📚 Knowledge Library (supplementary reference — extract only what's relevant to the question):"
NOTHING = "No relevant knowledge found."
NOT_CONFIGURED = ("Knowledge Library is not configured. The owner adds folders and files with "
                  "`kirocrew knowledge add PATH`.")

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 500,
                  "description": "Words to find (every word must appear in one chunk; case-insensitive)."},
        "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_MAX, "default": SEARCH_DEFAULT},
    },
    "required": ["query"],
    "additionalProperties": False,
}
DEDUP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"apply": {"type": "boolean", "default": False,
                             "description": "Remove the duplicates (the owner only); without it, only list them."}},
    "additionalProperties": False,
}


def vector_rankings(query: str, limit: int) -> list[list[int]]:
    """Each ``knowledge_vector_search`` plugin's chunk ids, best first (none ships with kirocrew)."""
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    rankings: list[list[int]] = []
    call = call_hook(get_plugin_manager(), "knowledge_vector_search", on_error="skip", query=query, limit=limit)
    for contribution in call.contributions:
        value = contribution.value
        if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            rankings.append(value[:limit])
        else:
            log.warning("knowledge_vector_search: %s did not return a list of chunk ids", contribution.plugin)
    return rankings


def render_hits(hits: list[Hit]) -> str:
    """The reference's result form: a header, then per chunk its title, source, section, lines and text."""
    from kirocrew_core.history.text import shown

    if not hits:
        return NOTHING
    blocks = [HEADER]
    for hit in hits:
        where = {"folder": f"**File:** {hit.location}/{hit.name}", "file": f"**File:** {hit.location}",
                 "artifact": f"**Artifact:** {hit.name}"}.get(hit.kind, "**Lessons:** the global lessons")
        section = f" — {shown(hit.section)}" if hit.section else ""
        blocks.append(f"## {shown(hit.title)}\n"
                      f"**Source:** [{hit.kind}] {shown(hit.name)}{section} (lines {hit.line_start}-{hit.line_end})\n"
                      f"{shown(where)}\n\n{shown(hit.text)}")
    return "\n\n".join(blocks)


def search_text(library: Library, query: str, limit: int) -> str:
    if library.empty():
        return NOT_CONFIGURED
    return render_hits(library.search(query, limit, vector_rankings(query, limit)))


def render_duplicates(found: list[Duplicate], applied: bool) -> str:
    from kirocrew_core.history.text import shown

    if not found:
        return "No duplicate documents found."
    head = (f"Deleted — {len(found)} duplicate document(s):" if applied
            else f"Would delete (dry run; set apply=true to delete) — {len(found)} duplicate document(s):")
    return "\n".join([head, *(f"- {shown(d.loser_name)} ({d.chunks} chunks) -> kept {shown(d.winner_name)} "
                              f"[{d.reason}]" for d in found)])


def _library() -> Library:
    from kirocrew_core.knowledge.store import shared

    return shared()


async def local_knowledge_search(args: dict[str, Any], call: ToolCall) -> str:
    call.acting_session("reads the knowledge library")
    query, limit = str(args["query"]), int(args.get("limit", SEARCH_DEFAULT))
    return await asyncio.to_thread(lambda: search_text(_library(), query, limit))


async def knowledge_dedup(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_core.coretools.contract import ToolRefused

    session = call.acting_session("reads the knowledge library")
    apply = bool(args.get("apply", False))
    if apply and session is not None:
        raise ToolRefused("knowledge_dedup: only the owner removes documents from the knowledge library; a session "
                          "may list the duplicates (apply=false)", code="owner_only")
    library = await asyncio.to_thread(_library)
    found = await asyncio.to_thread(library.drop_duplicates if apply else library.duplicates)
    return render_duplicates(found, apply)


def knowledge_tools() -> list[CoreMcpTool]:
    return [
        CoreMcpTool("local_knowledge_search", "Search the owner's local knowledge library (documents, notes, code "
                    "they added) by keywords: the best chunks, each with its title, source, section and line range.",
                    SEARCH_SCHEMA, local_knowledge_search, read_only=True, identity="lenient"),
        CoreMcpTool("knowledge_dedup", "List documents the knowledge library holds twice and which copy is kept "
                    "(the more persistent source's); with apply=true (the owner only), remove the others.",
                    DEDUP_SCHEMA, knowledge_dedup, identity="lenient"),
    ]
