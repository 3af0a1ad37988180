"""``kirocrew history …``: the owner's view of every past session, on the same index as the tools.

The owner may read every workspace's sessions, so these commands see all of them unless
``--workspace`` narrows them; they refresh the index first, like the tools. Session keys
are the index's (``h1-…``). Registered lazily by :mod:`kirocrew_core.builtin.history`.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import click

from kirocrew_core.errors import BadInputError
from kirocrew_core.history import text
from kirocrew_core.history.index import KEY_PATTERN, HistoryIndex, Scope, SessionRow


def _index() -> HistoryIndex:
    from kirocrew_core.history.index import shared

    index = shared()
    report = index.refresh()
    for problem in report.problems:
        click.echo(f"warning: {problem}", err=True)
    return index


def _scope(workspace: str | None) -> Scope:
    return Scope((os.path.abspath(workspace),)) if workspace else Scope.everything()


def _key(index: HistoryIndex, key: str) -> None:
    if not KEY_PATTERN.match(key) or index.session(key) is None:
        raise BadInputError(f"no past session has the key {key[:40]!r}; `kirocrew history list` shows them",
                            code="session_not_found")


@click.group()
def history() -> None:
    """Every past session: kiro-cli's own (all three of its stores) and kirocrew's conversations."""


@history.command("list")
@click.option("--workspace", default=None, help="Only sessions of this folder (and folders inside it).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the sessions as JSON.")
@click.option("--summarize", is_flag=True,
              help="Add a short summary a model wrote of each session (cached; best effort, as list_sessions).")
def list_(workspace: str | None, limit: int, as_json: bool, summarize: bool) -> None:
    """List past sessions, newest first."""
    index = _index()
    rows = index.sessions(_scope(workspace), limit=limit)
    written = _summaries(index, rows) if summarize else {}
    if as_json:
        click.echo(json.dumps([row.as_dict() | {"title": text.shown(row.title)}
                               | ({"summary": text.shown(written[row.key])} if row.key in written else {})
                               for row in rows], indent=2))
        return
    if not rows:
        click.echo("No sessions found.")
        return
    for row in rows:
        click.echo(f"{row.key}  {text.short_time(row.updated)}  {row.source:<9} {row.messages:>5} msgs  "
                   f"{text.shown(row.title) or 'untitled'}  ({row.workspace or 'no workspace'})")
        if row.key in written:
            click.echo(f"    {text.shown(written[row.key])}")


def _summaries(index: HistoryIndex, rows: list[SessionRow]) -> dict[str, str]:
    """Each row's summary (cached, or written now: :mod:`.summaries`); why some are missing, on stderr."""
    import asyncio

    from kirocrew_core.history import summaries

    outcome, wanted = summaries.cached(index, rows)
    asyncio.run(summaries.write(index, wanted, outcome))
    for note in outcome.notes:
        click.echo(f"warning: {note}", err=True)
    return outcome.texts


@history.command("show")
@click.argument("key")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True, help="Messages to skip, newest first.")
def show(key: str, limit: int, offset: int) -> None:
    """Print one session's messages, newest first (redacted); the resume command when there is one."""
    index = _index()
    _key(index, key)
    row = index.session(key)
    assert row is not None
    click.echo(f"{text.shown(row.title) or 'untitled'}  ·  {row.source}  ·  {row.messages} messages  ·  "
               f"{row.workspace or 'no workspace'}")
    if row.resume:
        click.echo(f"resume: {row.resume}")
    for message in index.messages(key, limit=limit, offset=offset):
        click.echo(f"\n[{message.number}] {message.role} {text.short_time(message.at) if message.at else ''}".rstrip())
        click.echo(text.shown(message.text))


@history.command("search")
@click.argument("query")
@click.option("--workspace", default=None, help="Only sessions of this folder (and folders inside it).")
@click.option("--after", default=None, help="Only sessions last active on or after this day (YYYY-MM-DD, UTC).")
@click.option("--before", default=None, help="Only sessions last active before this day (YYYY-MM-DD, UTC).")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
def search(query: str, workspace: str | None, after: str | None, before: str | None, limit: int) -> None:
    """Find the sessions whose messages hold every word of QUERY; a snippet of each, the match marked."""
    from kirocrew_core.history.tools import search_text

    click.echo(search_text(_index(), _scope(workspace), query, limit, text.day_bound(after, "after"),
                           text.day_bound(before, "before")))


@history.command("export")
@click.argument("key")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this new file (an existing file is never replaced); default: print.")
def export(key: str, output: Path | None) -> None:
    """Write one session as Markdown (redacted), oldest message first."""
    index = _index()
    _key(index, key)
    document = export_markdown(index, key)
    if output is None:
        click.echo(document)
        return
    write_new(output, document.encode())
    click.echo(f"Wrote {output}")


def export_markdown(index: HistoryIndex, key: str) -> str:
    """One session (by key) as a redacted Markdown document: the CLI's and the History page's export."""
    row = index.session(key)
    if row is None:
        raise BadInputError("no past session has that key", code="session_not_found")
    messages = index.messages(key, limit=max(1, row.messages), newest_first=False)
    return text.markdown(row.title, row.source, row.workspace, row.created, row.updated,
                         [(m.role, m.at, m.text) for m in messages])


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data`` whole (a temp file, linked in place), or refuse if anything is there."""
    path = path.absolute()
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise BadInputError(f"cannot write in {path.parent}: {exc.strerror or exc}", code="export_unwritable") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(temp, path)
    except FileExistsError as exc:
        raise BadInputError(f"{path} exists: kirocrew never replaces a file; choose another name",
                            code="export_exists") from exc
    finally:
        os.unlink(temp)
