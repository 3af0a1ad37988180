"""``skill_search``: a session finds, lists and reads the Agent Skills in its scope.

Reading changes nothing, so the tool is ``lenient``: a verified session sees its own workspace's
project skills and every shared source; the owner's own process (no workspace) sees the shared
sources only; anyone else is refused (``caller_unverified``). Ranking matches the query's words
against name and description first, and reads bodies only when nothing matched there (no
embeddings). A read pages by lines; a ``SKILL.md`` over :data:`READ_CAP_BYTES` is refused
``over_capacity`` rather than cut mid-instruction. Every answer is redacted before it is shown.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import ToolCall
    from kirocrew_core.skills.discovery import Catalog, Skill

SEARCH_DEFAULT, SEARCH_MAX = 20, 50
#: A read returns at most this many bytes of SKILL.md; a bigger file is refused ``over_capacity``.
READ_CAP_BYTES = 99_000
KEY_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127}){0,7}$")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["search", "list", "read"], "default": "search",
                   "description": "search (needs query), list (every skill in scope), read (needs key)."},
        "query": {"type": "string", "minLength": 1, "maxLength": 500,
                  "description": "Words to find in a skill's name and description (its body only when none match)."},
        "key": {"type": "string", "minLength": 1, "maxLength": 500,
                "description": "The skill to read, as search or list gave it (e.g. pdf or team/review)."},
        "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_MAX, "default": SEARCH_DEFAULT,
                  "description": "How many skills (search, list), or lines (read)."},
        "offset": {"type": "integer", "minimum": 0, "default": 0,
                   "description": "Skip this many skills (search, list) or lines (read): the next page."},
    },
    "additionalProperties": False,
}


def _refused(message: str, code: str) -> Exception:
    from kirocrew_core.coretools.contract import ToolRefused

    return ToolRefused(message, code=code)


def _words(query: str) -> list[str]:
    return [w for w in re.split(r"\W+", query.casefold()) if w]


def rank(skills: list[Skill], query: str) -> list[Skill]:
    """Skills whose name or description holds a query word, most words first; else those whose body does."""
    words = _words(query)
    if not words:
        return []

    def score(text: str) -> int:
        folded = text.casefold()
        return sum(1 for w in words if w in folded)

    head = [(score(f"{s.key} {s.name} {s.description}"), i, s) for i, s in enumerate(skills)]
    hits = [(-n, i, s) for n, i, s in head if n]
    if not hits:
        hits = [(-n, i, s) for n, i, s in ((score(s.body), i, s) for i, s in enumerate(skills)) if n]
    return [s for _, _, s in sorted(hits, key=lambda t: (t[0], t[1]))]


def _line(skill: Skill) -> str:
    from kirocrew_core.skills.discovery import summary

    flags = " · always" if skill.always else ""
    return f"- `{skill.key}` ({skill.source.kind}{flags}): {summary(skill).split(' — ', 1)[1]}"


def _page(skills: list[Skill], offset: int, limit: int, header: str) -> str:
    shown = skills[offset:offset + limit]
    lines = [f"{header} ({len(skills)}; {offset + 1}–{offset + len(shown)} shown):" if shown else
             f"{header} ({len(skills)}; none at offset {offset})."]
    lines += [_line(s) for s in shown]
    if offset + len(shown) < len(skills):
        lines.append(f"More: offset={offset + len(shown)}. Read one with action=read and its key.")
    return "\n".join(lines)


def list_text(catalog: Catalog, offset: int, limit: int) -> str:
    if not catalog.skills and not catalog.problems:
        return "No skills found."
    text = _page(catalog.skills, offset, limit, "Skills")
    if catalog.problems:
        text += "\n\nNot loaded:\n" + "\n".join(f"- `{p.key}` ({p.source.kind}, {p.state}): {p.reason}"
                                                 for p in catalog.problems)
    return text


def search_text(catalog: Catalog, query: str, offset: int, limit: int) -> str:
    found = rank(catalog.skills, query)
    if not found:
        return f"No skills match '{query}'. Try action=list."
    return _page(found, offset, limit, f"Skills matching '{query}'")


def read_text(catalog: Catalog, key: str, offset: int, limit: int) -> str:
    """Lines ``offset``… of the skill's SKILL.md, re-read now (it may have changed since it was listed)."""
    from kirocrew_core.redaction import redact_secrets
    from kirocrew_core.skills.discovery import SkillFileError, load

    if not KEY_PATTERN.match(key) or any(part in (".", "..") for part in key.split("/")):
        raise _refused("skill_search: that key names no skill (keys are paths inside a skills folder, "
                       "as search or list gave them)", "outside_scope")
    skill = catalog.get(key)
    if skill is None:
        problem = next((p for p in catalog.problems if p.key == key), None)
        if problem is not None:
            raise _refused(f"skill_search: skill {key} is {problem.state}: {problem.reason}", "unreadable")
        raise _refused(f"skill_search: no skill {key} in this session's scope", "outside_scope")
    if skill.size > READ_CAP_BYTES:
        raise _refused(f"skill_search: skill {key}'s SKILL.md is {skill.size} bytes, over the {READ_CAP_BYTES}-byte "
                       "read cap", "over_capacity")
    try:
        fresh = load(skill.source, skill.key, skill.path.parent)
    except SkillFileError as exc:
        raise _refused(f"skill_search: skill {key} cannot be read now: {exc}", "unreadable") from exc
    if fresh.size > READ_CAP_BYTES:  # it grew since it was listed
        raise _refused(f"skill_search: skill {key}'s SKILL.md is {fresh.size} bytes, over the {READ_CAP_BYTES}-byte "
                       "read cap", "over_capacity")
    lines = fresh.body.splitlines()
    shown = lines[offset:offset + limit]
    head = (f"# {fresh.name} (`{fresh.key}`, {fresh.source.kind})\n{fresh.description}\n"
            f"Lines {offset + 1}–{offset + len(shown)} of {len(lines)}:" if shown else
            f"# {fresh.name} (`{fresh.key}`): no lines at offset {offset} (it has {len(lines)}).")
    text = head + ("\n" + "\n".join(shown) if shown else "")
    if offset + len(shown) < len(lines):
        text += f"\n…more: offset={offset + len(shown)}"
    return redact_secrets(text)


def answer(args: dict[str, Any], workspace: str | None) -> str:
    """What ``skill_search`` returns for ``args`` in ``workspace``'s scope (also the CLI's view)."""
    from kirocrew_core.skills.discovery import catalog as catalog_of

    action = str(args.get("action", "search"))
    offset = int(args.get("offset", 0))
    limit = int(args.get("limit", SEARCH_DEFAULT))
    if action == "read":
        if not args.get("key"):
            raise _refused("skill_search: action=read needs key", "invalid_arguments")
        return read_text(catalog_of(workspace), str(args["key"]), offset, limit)
    from kirocrew_core.redaction import redact_secrets

    if action == "list":
        return redact_secrets(list_text(catalog_of(workspace), offset, limit))
    if not args.get("query"):
        raise _refused("skill_search: action=search needs query", "invalid_arguments")
    return redact_secrets(search_text(catalog_of(workspace), str(args["query"]), offset, limit))


async def skill_search(args: dict[str, Any], call: ToolCall) -> str:
    session = call.acting_session("reads skills")
    workspace = session.workspace if session is not None else None
    return await asyncio.to_thread(answer, args, workspace)


def skill_tools() -> list[CoreMcpTool]:
    from kirocrew_core.skills.browse import browse_tools
    from kirocrew_core.skills.registry import registry_tools

    return [
        CoreMcpTool("skill_search", "Find, list and read Agent Skills (folders with a SKILL.md) installed for this "
                    "workspace: search matches name and description first; read a skill by its key, paged by lines.",
                    SCHEMA, skill_search, read_only=True, identity="lenient"),
        *registry_tools(),
        *browse_tools(),
    ]
