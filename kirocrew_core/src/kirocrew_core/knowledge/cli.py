"""``kirocrew knowledge …``: the owner fills the library sessions search, and searches it too.

``add``, ``remove`` (a source, or one document of a folder source), ``include``, ``reindex``,
``list`` and ``show`` call the owner-only ``kirocrew-knowledge-admin`` server (:mod:`.admin`: refused from a
session's shell); ``search`` reads the library directly, as
``local_knowledge_search`` does (with up to 50 results). Registered lazily by
:mod:`kirocrew_core.builtin.knowledge`.
"""

from __future__ import annotations

import os

import click


def _admin(tool: str, arguments: dict[str, object]) -> None:
    from kirocrew_core.knowledge.admin import call

    click.echo(call(tool, arguments).rstrip("\n"))


def _ref(source: str) -> str:
    """A source as the library names it: an id, ``artifact:<slug>``, ``lessons:global``, or a path made absolute."""
    from kirocrew_core.knowledge.store import ARTIFACT_PREFIX, LESSONS_LOCATION

    if source.isdigit() or source.startswith(ARTIFACT_PREFIX) or source == LESSONS_LOCATION:
        return source
    return os.path.abspath(source)


@click.group()
def knowledge() -> None:
    """The knowledge library: folders, files, artifacts and lessons sessions search with local_knowledge_search."""


@knowledge.command("add")
@click.argument("path", required=False, type=click.Path(exists=True, file_okay=True, dir_okay=True))
@click.option("--artifact", "slug", default=None, help="Add this artifact (by slug) instead of a path.")
@click.option("--lessons", is_flag=True, help="Add the global lessons instead of a path.")
def add(path: str | None, slug: str | None, lessons: bool) -> None:
    """Add a folder, a file, an artifact or the lessons and read it in (re-read as it changes)."""
    if sum((path is not None, slug is not None, lessons)) != 1:
        raise click.UsageError("give one of PATH, --artifact SLUG or --lessons")
    _admin("knowledge_add", {"path": os.path.abspath(path)} if path else {"artifact": slug} if slug
           else {"lessons": True})


@knowledge.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the sources and their state as JSON.")
def list_(as_json: bool) -> None:
    """List the sources: kind, documents, chunks, skipped files, state."""
    _admin("knowledge_sources", {"json": as_json})


@knowledge.command("show")
@click.argument("source")
@click.option("--named", default="", metavar="TEXT", help="Only the documents whose path holds TEXT.")
def show(source: str, named: str) -> None:
    """One source's documents (their names are what `remove --document` takes), skipped files and removed ones."""
    _admin("knowledge_documents", {"source": _ref(source), "named": named})


@knowledge.command("remove")
@click.argument("source")
@click.option("--document", default=None, metavar="NAME",
              help="Remove only this document of a folder source (its path in the folder); it stays out at reindex.")
def remove(source: str, document: str | None) -> None:
    """Remove a source (its id from `list`, its path, artifact:SLUG or lessons:global) and what was read from it."""
    if document is None:
        _admin("knowledge_remove", {"source": _ref(source)})
    else:
        _admin("knowledge_exclude", {"source": _ref(source), "document": document})


@knowledge.command("include")
@click.argument("source")
@click.argument("document")
def include(source: str, document: str) -> None:
    """Read a document removed with `remove SOURCE --document NAME` in again (at the next reindex)."""
    _admin("knowledge_include", {"source": _ref(source), "document": document})


@knowledge.command("reindex")
@click.argument("source", required=False)
def reindex(source: str | None) -> None:
    """Re-read one source, or every one: only files that changed are read and chunked again."""
    _admin("knowledge_reindex", {"source": _ref(source)} if source else {})


@knowledge.command("search")
@click.argument("query")
@click.option("--limit", type=click.IntRange(1, 50), default=5, show_default=True)
def search(query: str, limit: int) -> None:
    """Search the library as local_knowledge_search does (redacted)."""
    from kirocrew_core.knowledge.store import shared
    from kirocrew_core.knowledge.tools import search_text

    if len(query) > 500:
        raise click.BadParameter("at most 500 characters", param_hint="QUERY")
    click.echo(search_text(shared(), query, limit))
