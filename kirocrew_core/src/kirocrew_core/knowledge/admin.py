"""The owner's library changes: add, remove and reindex sources, and list them with their state.

These are no model's to make, so they are not ``kirocrew-core`` tools: they are the tools of a
separate host server, ``kirocrew-knowledge-admin``, that no agent config names, and each refuses
any caller but the person's own ``kirocrew`` command (decided by process ancestry: the same command
run from a session's shell is that session, refused ``person_only_command``; the one check is
:func:`kirocrew_core.coretools.person_tools.require_person`). ``kirocrew knowledge add|remove|reindex|list``
call them; with ``KIROCREW_NO_HOST=1`` the same handlers run in that process as the person.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from kirocrew_core.artifacts import names
from kirocrew_core.coretools.person_tools import object_schema as _schema

if TYPE_CHECKING:
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer
    from kirocrew_core.knowledge.store import Report

ADMIN_SERVER = "kirocrew-knowledge-admin"
ADMIN_COMMAND = "mcp-knowledge-admin"
INSTRUCTIONS = "The owner's knowledge library changes (sources and their documents); not for models."
_REF = {"type": "string", "minLength": 1, "maxLength": 4096}
#: ``kirocrew knowledge show`` lists at most this many documents (``--named`` narrows them).
SHOWN_DOCUMENTS = 500
_NAME = {"type": "string", "minLength": 1, "maxLength": 4096, "description": "The document's path in its source."}


def report_text(location: str, report: Report) -> str:
    lines = [f"{location}: {report.files} file(s), {report.rechunked} read and chunked, {report.unchanged} unchanged, "
             f"{report.removed} gone, {len(report.skipped)} skipped"]
    lines += [f"  skipped {name}: {reason}" for name, reason in sorted(report.skipped.items())]
    return "\n".join(lines)


def add(args: dict[str, Any]) -> str:
    """Add the source (a path, an artifact or the lessons) and read it in now (the owner sees what was read)."""
    from kirocrew_core.errors import BadInputError
    from kirocrew_core.knowledge.service import wake
    from kirocrew_core.knowledge.store import shared

    library = shared()
    chosen = [name for name in ("path", "artifact", "lessons") if args.get(name)]
    if len(chosen) != 1:
        raise BadInputError("name one source: a path, an artifact's slug, or the lessons", code="invalid_arguments")
    with library.reindexing:  # the host's pass cannot read the new source first: this read is the one reported
        if args.get("artifact"):
            source = library.add_artifact(args["artifact"])
        elif args.get("lessons"):
            source = library.add_lessons()
        else:
            source = library.add(args["path"])
        report = library.reindex(str(source.id))
    wake()  # the host's ingestion watches the new source from now on
    return f"Added {source.kind} source {source.id}.\n" + report_text(source.location, report)


def remove(args: dict[str, Any]) -> str:
    from kirocrew_core.knowledge.store import shared

    source = shared().remove(args["source"])
    return f"Removed source {source.id} ({source.location}) and its {source.chunks} chunk(s); its files are untouched."


def documents(args: dict[str, Any]) -> str:
    """One source's documents (those whose name holds ``named``), skipped files with why, and removed ones."""
    from kirocrew_core.knowledge.store import shared

    library = shared()
    source = library.need(args["source"])
    named = str(args.get("named", ""))
    found, total = library.documents(str(source.id), limit=SHOWN_DOCUMENTS, named=named)
    lines = [f"Source {source.id} ({source.location}): {total} document(s)" + (f" named *{named}*" if named else "")
             + (f", the first {len(found)} shown" if total > len(found) else "")]
    lines += [f"  {d.name}  ({d.chunks} chunk(s), {d.size} bytes){'  [duplicate]' if d.duplicate else ''}"
              for d in found]
    lines += [f"skipped {name}: {reason}" for name, reason in library.skipped(str(source.id)).items()]
    lines += [f"removed {name} (since {since})" for name, since in library.excluded(str(source.id)).items()]
    return "\n".join(lines)


def exclude(args: dict[str, Any]) -> str:
    from kirocrew_core.knowledge.store import shared

    source = shared().exclude(args["source"], args["document"])
    return (f"Removed {args['document']} from source {source.id}; it stays out at every reindex "
            f"(`kirocrew knowledge include {source.id} DOCUMENT` reads it in again).")


def include(args: dict[str, Any]) -> str:
    from kirocrew_core.knowledge.service import wake
    from kirocrew_core.knowledge.store import shared

    source = shared().include(args["source"], args["document"])
    wake()
    return f"Included {args['document']} in source {source.id} again; the next reindex reads it."


def reindex(args: dict[str, Any]) -> str:
    from kirocrew_core.knowledge.store import shared

    library = shared()
    chosen = [library.need(args["source"])] if args.get("source") else library.sources()
    if not chosen:
        return "The knowledge library has no sources."
    return "\n".join(report_text(s.location, library.reindex(str(s.id))) for s in chosen)


def sources(args: dict[str, Any]) -> str:
    from kirocrew_core.knowledge.service import source_states

    states = source_states()
    if args.get("json"):
        return json.dumps(states, indent=2)
    if not states:
        return "The knowledge library has no sources (`kirocrew knowledge add PATH`)."
    lines = []
    for s in states:
        progress = s["progress"]
        state = progress["state"] + (f" {progress['done']}/{progress['total']}" if progress["state"] == "indexing"
                                     else "")
        lines.append(f"{s['id']:>3}  {s['kind']:<6} {s['documents']:>5} docs {s['chunks']:>6} chunks "
                     f"{s['skipped']:>4} skipped {s['excluded']:>4} excluded  {state:<10} {s['location']}"
                     + (f"  ({s['problem']})" if s["problem"] else ""))
    return "\n".join(lines)


def admin_tools() -> dict[str, CoreMcpTool]:
    from kirocrew_core.coretools.person_tools import person_tool as tool

    found = [
        tool("knowledge_add", "add a folder, a file, an artifact or the lessons to the knowledge library",
             _schema({"path": _REF, "artifact": {"type": "string", "pattern": names.SLUG_PATTERN},
                      "lessons": {"type": "boolean"}}), add),
        tool("knowledge_remove", "remove a knowledge source", _schema({"source": _REF}, ("source",)), remove),
        tool("knowledge_documents", "list one source's documents, skipped files and removed documents",
             _schema({"source": _REF, "named": {"type": "string", "maxLength": 4096}}, ("source",)), documents,
             read_only=True),
        tool("knowledge_exclude", "remove one document of a folder source and keep it out",
             _schema({"source": _REF, "document": _NAME}, ("source", "document")), exclude),
        tool("knowledge_include", "read an excluded document of a folder source in again",
             _schema({"source": _REF, "document": _NAME}, ("source", "document")), include),
        tool("knowledge_reindex", "re-read knowledge sources", _schema({"source": _REF}), reindex),
        tool("knowledge_sources", "list the knowledge sources and their state",
             _schema({"json": {"type": "boolean"}}), sources, read_only=True),
    ]
    return {t.name: t for t in found}


def hosted_server() -> HostedMcpServer:
    from kirocrew_core.coretools.person_tools import admin_server

    return admin_server(ADMIN_SERVER, ADMIN_COMMAND, admin_tools, INSTRUCTIONS,
                        "The owner's knowledge library changes (add, remove, reindex); no agent config names it.")


def call(tool: str, arguments: dict[str, Any]) -> str:
    """One admin tool call through the host, or in this process as the person without one; a refusal raised."""
    from kirocrew_core.coretools.person_tools import person_call

    return person_call(ADMIN_SERVER, admin_tools, tool, arguments)
