"""The library: sources, their documents and chunks in one SQLite database with an FTS5 (BM25) index.

Kept in ``<crew home>/state/knowledge/library.sqlite3`` (owner-only, WAL, through
:mod:`kirocrew_core.sqlite_db`). :meth:`Library.reindex` re-reads a source: a file whose size and
mtime are unchanged is not opened, one whose content hash is unchanged is not re-chunked, a file
gone is dropped; an artifact or the lessons (one document each) is chunked again when its content
hash changes. A document the owner removed from a folder source (:meth:`Library.exclude`) is kept
as an exclusion of that source, so no reindex reads it in again until the owner includes it again.
Every database failure of a public method is :class:`KnowledgeError` ``knowledge_library_unusable``.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from kirocrew_core import home, sqlite_db
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.knowledge import chunks as chunks_
from kirocrew_core.knowledge import files

_F = TypeVar("_F", bound=Callable[..., Any])
STATE = "knowledge"
DATABASE = "library.sqlite3"
Kind = Literal["folder", "file", "artifact", "lessons"]
#: Which copy of a duplicate document is kept: the more persistent source's (higher wins).
PERSISTENCE: dict[str, int] = {"folder": 3, "file": 2, "artifact": 1, "lessons": 1}
#: The location of the lessons source, and the prefix of an artifact source's (``artifact:<slug>``).
LESSONS_LOCATION = "lessons:global"
ARTIFACT_PREFIX = "artifact:"
#: Keyword hits a search fuses (before the vector leg's, when a plugin gives one).
CANDIDATES = 50
#: A query matching more chunks than this ranks only the first this many it finds (oldest chunks first): a
#: word most chunks hold would otherwise have BM25 score every chunk (60 ms over 100,000; benchmarks/knowledge.py).
MATCHES_RANKED = 5000
RRF_K = 60

MIGRATIONS: list[list[str]] = [[
    # AUTOINCREMENT: an id is never reused, so a removed source's id or a re-chunked file's old chunk ids
    # (which a knowledge_vector_search plugin may have stored) never name something else.
    """CREATE TABLE sources (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL CHECK (kind IN ('folder', 'file', 'artifact', 'lessons')),
        location TEXT NOT NULL UNIQUE,
        added TEXT NOT NULL,
        indexed TEXT NOT NULL DEFAULT '',
        problem TEXT NOT NULL DEFAULT ''
    )""",
    """CREATE TABLE documents (
        id INTEGER PRIMARY KEY,
        source INTEGER NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        title TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        duplicate_of INTEGER REFERENCES documents (id) ON DELETE SET NULL,
        UNIQUE (source, name)
    )""",
    "CREATE INDEX documents_by_hash ON documents (sha256)",
    """CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        document INTEGER NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        section TEXT NOT NULL,
        line_start INTEGER NOT NULL,
        line_end INTEGER NOT NULL,
        text TEXT NOT NULL
    )""",
    "CREATE INDEX chunks_by_document ON chunks (document, seq)",
    """CREATE TABLE skipped (
        source INTEGER NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        reason TEXT NOT NULL,
        PRIMARY KEY (source, name)
    )""",
    "CREATE VIRTUAL TABLE chunks_fts USING fts5(title, section, text, "
    "tokenize='unicode61 remove_diacritics 2')",
], [
    # A folder source's file the owner removed: never read in again until included again.
    """CREATE TABLE excluded (
        source INTEGER NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        since TEXT NOT NULL,
        PRIMARY KEY (source, name)
    )""",
]]
#: A document name an owner may give: a path relative to its source (what the library stores).
NAME_MAX_CHARS = 4096


class KnowledgeError(KirocrewError):
    """The library cannot be used (``knowledge_library_unusable``, ``knowledge_library_too_new``)."""


def _usable(method: _F) -> _F:
    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            raise KnowledgeError(f"the knowledge library cannot be used now ({exc})",
                                 code="knowledge_library_unusable") from exc

    return cast(_F, wrapped)


@dataclass(frozen=True)
class Source:
    id: int
    kind: str
    location: str
    added: str
    indexed: str
    problem: str
    documents: int
    chunks: int
    skipped: int
    excluded: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Document:
    """One document of a source: its name (relative to the source), title, size and chunk count."""

    id: int
    name: str
    title: str
    size: int
    chunks: int
    duplicate: bool


@dataclass(frozen=True)
class Hit:
    """One chunk found: where it is (source, document, section, lines) and its text."""

    chunk: int
    title: str
    kind: str
    location: str
    name: str
    section: str
    line_start: int
    line_end: int
    text: str
    score: float


@dataclass
class Report:
    """What one reindex of a source did; ``rechunked`` counts the files chunked again."""

    files: int = 0
    rechunked: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Duplicate:
    loser: int
    loser_name: str
    chunks: int
    winner_name: str
    reason: str


def database_path() -> Path:
    return home.state_dir(STATE) / DATABASE


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Library:
    """The library database, open; one per process (:func:`shared`), or one per test."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or database_path()
        self.lock = threading.RLock()
        #: One reindex at a time (the host's pass and an owner's command): two would both add a new file.
        #: Reentrant, so an owner's add holds it from adding a source to its first read (the report is that read's).
        self.reindexing = threading.RLock()
        self.conn = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            sqlite_db.ensure_private_file(self.path)
            conn = sqlite_db.connect(self.path)
            try:
                sqlite_db.migrate(conn, MIGRATIONS)
            except BaseException:
                conn.close()
                raise
        except OSError as exc:
            raise KnowledgeError(f"cannot create the knowledge library {self.path}: {exc.strerror or exc}",
                                 code="knowledge_library_unusable") from exc
        except sqlite_db.DatabaseProblem as exc:
            raise KnowledgeError(str(exc), code=f"knowledge_library_{exc.kind}") from exc
        except sqlite3.DatabaseError as exc:
            raise KnowledgeError(f"{self.path}: {exc}", code="knowledge_library_unusable") from exc
        return conn

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    # --- sources -----------------------------------------------------------------------------

    @_usable
    def add(self, path: str | os.PathLike[str]) -> Source:
        """Add a folder or file (by its absolute, resolved path) as a source; not read yet (:meth:`reindex`)."""
        location = Path(os.path.abspath(path))
        try:
            info = location.stat()
        except OSError as exc:
            raise BadInputError(f"{location} cannot be read: {exc.strerror}", code="source_unreadable") from exc
        import stat

        if stat.S_ISDIR(info.st_mode):
            kind: Kind = "folder"
        elif stat.S_ISREG(info.st_mode):
            kind = "file"
        else:
            raise BadInputError(f"{location} is neither a folder nor a regular file", code="source_unreadable")
        return self._insert(kind, str(location.resolve()))

    def add_artifact(self, slug: str) -> Source:
        """Add an artifact (by slug) as a source: its live content, re-read when it changes."""
        from kirocrew_core.artifacts import store as artifacts
        from kirocrew_core.artifacts.access import OWNER

        artifacts.get(slug, OWNER)  # artifact_not_found (or a bad slug) before anything is added
        return self._insert("artifact", ARTIFACT_PREFIX + slug)

    def add_lessons(self) -> Source:
        """Add the global lessons (the rules every session follows) as one document, re-read when they change."""
        return self._insert("lessons", LESSONS_LOCATION)

    @_usable
    def _insert(self, kind: Kind, location: str) -> Source:
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            if conn.execute("SELECT 1 FROM sources WHERE location = ?", (location,)).fetchone():
                raise BadInputError(f"{location} is already a source", code="source_exists")
            conn.execute("INSERT INTO sources (kind, location, added) VALUES (?, ?, ?)", (kind, location, _now()))
        found = self.source(location)
        assert found is not None
        return found

    @_usable
    def empty(self) -> bool:
        """True while the library has no source (cheap: the search's "not configured" answer)."""
        with self.lock:
            return self.conn.execute("SELECT 1 FROM sources LIMIT 1").fetchone() is None

    @_usable
    def sources(self) -> list[Source]:
        with self.lock:
            rows = self.conn.execute(
                """SELECT s.*, (SELECT count(*) FROM documents d WHERE d.source = s.id) AS documents,
                          (SELECT count(*) FROM chunks c JOIN documents d ON c.document = d.id
                           WHERE d.source = s.id) AS chunks,
                          (SELECT count(*) FROM skipped k WHERE k.source = s.id) AS skipped,
                          (SELECT count(*) FROM excluded x WHERE x.source = s.id) AS excluded
                   FROM sources s ORDER BY s.id""").fetchall()
        return [Source(r["id"], r["kind"], r["location"], r["added"], r["indexed"], r["problem"], r["documents"],
                       r["chunks"], r["skipped"], r["excluded"]) for r in rows]

    def source(self, ref: str) -> Source | None:
        """The source with this id (as text) or location (a path, made absolute); None when there is none."""
        wanted = os.path.abspath(ref) if not ref.isdigit() and ":" not in ref else ref
        for source in self.sources():
            if str(source.id) == ref or source.location in (ref, wanted, str(Path(wanted).resolve())):
                return source
        return None

    def need(self, ref: str) -> Source:
        found = self.source(ref)
        if found is None:
            raise BadInputError(f"no knowledge source is {ref[:200]!r}; `kirocrew knowledge list` shows them",
                                code="source_not_found")
        return found

    @_usable
    def remove(self, ref: str) -> Source:
        """Remove a source with its documents and chunks (the files themselves are untouched)."""
        source = self.need(ref)
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            for (document,) in conn.execute("SELECT id FROM documents WHERE source = ?", (source.id,)).fetchall():
                self._drop_chunks(conn, document)
            conn.execute("DELETE FROM sources WHERE id = ?", (source.id,))
        return source

    @_usable
    def skipped(self, ref: str) -> dict[str, str]:
        source = self.need(ref)
        with self.lock:
            rows = self.conn.execute("SELECT name, reason FROM skipped WHERE source = ? ORDER BY name",
                                     (source.id,)).fetchall()
        return {r["name"]: r["reason"] for r in rows}

    @_usable
    def documents(self, ref: str, *, offset: int = 0, limit: int = 100, named: str = "") -> tuple[list[Document], int]:
        """A page of the source's documents by name (those whose name holds ``named``, ASCII case ignored), and how
        many there are."""
        source = self.need(ref)
        pattern = "%" + named.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where = "d.source = ? AND d.name LIKE ? ESCAPE '\\'"
        with self.lock:
            rows = self.conn.execute(
                f"""SELECT d.id, d.name, d.title, d.size, d.duplicate_of IS NOT NULL AS duplicate,
                          (SELECT count(*) FROM chunks c WHERE c.document = d.id) AS chunks
                   FROM documents d WHERE {where} ORDER BY d.name LIMIT ? OFFSET ?""",
                (source.id, pattern, limit, offset)).fetchall()
            total = source.documents if not named else self.conn.execute(
                f"SELECT count(*) FROM documents d WHERE {where}", (source.id, pattern)).fetchone()[0]
        return [Document(r["id"], r["name"], r["title"], r["size"], r["chunks"], bool(r["duplicate"]))
                for r in rows], total

    @_usable
    def excluded(self, ref: str) -> dict[str, str]:
        """The source's excluded document names, each with when it was excluded."""
        source = self.need(ref)
        with self.lock:
            rows = self.conn.execute("SELECT name, since FROM excluded WHERE source = ? ORDER BY name",
                                     (source.id,)).fetchall()
        return {r["name"]: r["since"] for r in rows}

    @_usable
    def exclude(self, ref: str, name: str) -> Source:
        """Remove one document (or a skipped file) of a folder source and keep it out of every later reindex.

        Refused: a source of one document (``source_single_document``: remove the source), a name the
        source neither holds nor skipped (``document_not_found``); nothing changes then.
        """
        source = self.need(ref)
        if source.kind != "folder":
            raise BadInputError(f"source {source.id} is one {source.kind}: remove the source instead",
                                code="source_single_document")
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            document = conn.execute("SELECT id FROM documents WHERE source = ? AND name = ?",
                                    (source.id, name)).fetchone()
            skipped = conn.execute("SELECT 1 FROM skipped WHERE source = ? AND name = ?", (source.id, name)).fetchone()
            if document is None and skipped is None:
                raise BadInputError(f"source {source.id} holds no document {name[:200]!r}", code="document_not_found")
            if document is not None:
                self._drop_chunks(conn, document["id"])
                conn.execute("DELETE FROM documents WHERE id = ?", (document["id"],))
            conn.execute("DELETE FROM skipped WHERE source = ? AND name = ?", (source.id, name))
            conn.execute("INSERT OR IGNORE INTO excluded (source, name, since) VALUES (?, ?, ?)",
                         (source.id, name, _now()))
        return source

    @_usable
    def include(self, ref: str, name: str) -> Source:
        """Lift an exclusion: the next reindex reads the file again (``excluded_not_found`` if it was not excluded)."""
        source = self.need(ref)
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            gone = conn.execute("DELETE FROM excluded WHERE source = ? AND name = ?", (source.id, name)).rowcount
            if not gone:
                raise BadInputError(f"source {source.id} excludes no document {name[:200]!r}",
                                    code="excluded_not_found")
        return source

    # --- reading sources in ---------------------------------------------------------------------

    @_usable
    def reindex(self, ref: str, stop: threading.Event | None = None,
                progress: Callable[[int, int], None] | None = None) -> Report:
        """Re-read one source (see the module docstring); ``stop`` set ends it between two files."""
        with self.reindexing:
            return self._reindex(self.need(ref), stop, progress)

    def _reindex(self, source: Source, stop: threading.Event | None,
                 progress: Callable[[int, int], None] | None) -> Report:
        report = Report()
        if source.kind in ("artifact", "lessons"):
            return self._reindex_text(source, report)
        root = Path(source.location)
        try:
            walk = files.walk(root)
        except files.Skipped as skip:
            self._set_problem(source.id, skip.reason)  # what was read of it is kept
            return report
        with self.lock:
            excluded = {r[0] for r in self.conn.execute("SELECT name FROM excluded WHERE source = ?", (source.id,))}
        entries = [entry for entry in walk.entries if entry.name not in excluded]
        report.skipped = {name: reason for name, reason in walk.skipped.items() if name not in excluded}
        with self.lock:
            known = {r["name"]: r for r in self.conn.execute(
                "SELECT id, name, size, mtime_ns, sha256 FROM documents WHERE source = ?", (source.id,))}
        for done, entry in enumerate(entries):
            if stop is not None and stop.is_set():
                return report
            if progress is not None:
                progress(done, len(entries))
            report.files += 1
            old = known.pop(entry.name, None)
            if old is not None and (old["size"], old["mtime_ns"]) == (entry.size, entry.mtime_ns):
                report.unchanged += 1
                continue
            try:
                with files.opened(entry) as content:
                    sha = content.sha256
                    if old is not None and old["sha256"] == sha:  # its text (a PDF's parse) is not needed
                        report.unchanged += 1
                        with sqlite_db.immediate(self.conn, self.lock) as conn:
                            conn.execute("UPDATE documents SET size = ?, mtime_ns = ? WHERE id = ?",
                                         (entry.size, entry.mtime_ns, old["id"]))
                        continue
                    text = content.text()
            except files.Skipped as skip:
                report.skipped[entry.name] = skip.reason
                if old is not None and not skip.unknowable:
                    known[entry.name] = old  # dropped below: what it held is no longer what the file holds
                continue
            self._store(source.id, entry, sha, text, old["id"] if old is not None else None)
            report.rechunked += 1
        if not walk.complete:
            known.clear()  # a file not seen in an unfinished walk may still be there: kept
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            for old in known.values():
                self._drop_chunks(conn, old["id"])
                conn.execute("DELETE FROM documents WHERE id = ?", (old["id"],))
                report.removed += 1
            conn.execute("DELETE FROM skipped WHERE source = ?", (source.id,))
            conn.executemany("INSERT INTO skipped (source, name, reason) VALUES (?, ?, ?)",
                             [(source.id, name, reason) for name, reason in report.skipped.items()])
            conn.execute("UPDATE sources SET indexed = ?, problem = '' WHERE id = ?", (_now(), source.id))
        if progress is not None:
            progress(len(entries), len(entries))
        return report

    def _reindex_text(self, source: Source, report: Report) -> Report:
        """An artifact's or the lessons' one document, chunked again only when its content hash changed."""
        try:
            name, title, text = _stored_text(source)
        except KirocrewError as exc:
            self._set_problem(source.id, exc.message)
            return report
        data = text.encode("utf-8")
        sha = files.digest(data)
        with self.lock:
            old = self.conn.execute("SELECT id, sha256 FROM documents WHERE source = ?", (source.id,)).fetchone()
        report.files = 1
        if old is not None and old["sha256"] == sha:
            report.unchanged = 1
        else:
            entry = files.Entry(Path(name), name, len(data), 0)
            self._store(source.id, entry, sha, text, old["id"] if old is not None else None, title=title)
            report.rechunked = 1
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            conn.execute("UPDATE sources SET indexed = ?, problem = '' WHERE id = ?", (_now(), source.id))
        return report

    def _set_problem(self, source: int, problem: str) -> None:
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            conn.execute("UPDATE sources SET indexed = ?, problem = ? WHERE id = ?", (_now(), problem, source))

    def _store(self, source: int, entry: files.Entry, sha: str, text: str, document: int | None, *,
               title: str = "") -> None:
        title = title or chunks_.title_of(text, entry.path.name)
        parts = chunks_.split(text)
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            if conn.execute("SELECT 1 FROM excluded WHERE source = ? AND name = ?", (source, entry.name)).fetchone():
                return  # excluded by the owner while this reindex was under way
            if document is None:
                document = conn.execute(
                    "INSERT INTO documents (source, name, title, size, mtime_ns, sha256) VALUES (?, ?, ?, ?, ?, ?)",
                    (source, entry.name, title, entry.size, entry.mtime_ns, sha)).lastrowid
            else:
                self._drop_chunks(conn, document)
                conn.execute("UPDATE documents SET title = ?, size = ?, mtime_ns = ?, sha256 = ?, duplicate_of = NULL "
                             "WHERE id = ?", (title, entry.size, entry.mtime_ns, sha, document))
            for seq, part in enumerate(parts):
                chunk = conn.execute(
                    "INSERT INTO chunks (document, seq, section, line_start, line_end, text) VALUES (?, ?, ?, ?, ?, ?)",
                    (document, seq, part.section, part.line_start, part.line_end, part.text)).lastrowid
                conn.execute("INSERT INTO chunks_fts (rowid, title, section, text) VALUES (?, ?, ?, ?)",
                             (chunk, title, part.section, part.text))

    @staticmethod
    def _drop_chunks(conn: sqlite3.Connection, document: int) -> None:
        conn.execute("DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE document = ?)", (document,))
        conn.execute("DELETE FROM chunks WHERE document = ?", (document,))

    # --- searching ------------------------------------------------------------------------------

    @_usable
    def keyword_ranking(self, query: str, limit: int = CANDIDATES) -> list[int]:
        """Chunk ids matching every word of ``query`` (quoted: no FTS5 syntax gets through), best BM25 first."""
        from kirocrew_core.history.index import fts_query

        expression, _ = fts_query(query)
        with self.lock:
            rows = self.conn.execute("SELECT id FROM (SELECT rowid AS id, bm25(chunks_fts, 2.0, 1.5, 1.0) AS score "
                                     "FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?) ORDER BY score LIMIT ?",
                                     (expression, MATCHES_RANKED, limit))
            return [int(r[0]) for r in rows]

    @_usable
    def search(self, query: str, limit: int, extra: list[list[int]] | None = None) -> list[Hit]:
        """The best ``limit`` chunks: the keyword ranking fused with each ``extra`` ranking by reciprocal rank.

        The keyword ranking's first chunk is always kept (appended when fusion left it out, as the reference
        does): an exact match the vector legs did not see stays in the answer.
        """
        keyword = self.keyword_ranking(query)
        scores: dict[int, float] = {}
        for ranking in [keyword, *(extra or [])]:
            for rank, chunk in enumerate(ranking[:CANDIDATES]):
                scores[chunk] = scores.get(chunk, 0.0) + 1.0 / (RRF_K + rank + 1)
        best = sorted(scores, key=lambda c: -scores[c])
        hits: list[Hit] = []
        with self.lock:
            for chunk in best:
                hits += self._hits([chunk], scores)
                if len(hits) == limit:
                    break
            if keyword and keyword[0] not in {hit.chunk for hit in hits}:
                hits += self._hits([keyword[0]], scores)
        return hits

    def _hits(self, chunks: list[int], scores: dict[int, float]) -> list[Hit]:
        found = []
        for chunk in chunks:
            row = self.conn.execute(
                """SELECT c.id AS chunk, d.title, s.kind, s.location, d.name, c.section, c.line_start, c.line_end,
                          c.text
                   FROM chunks c JOIN documents d ON c.document = d.id JOIN sources s ON d.source = s.id
                   WHERE c.id = ?""", (chunk,)).fetchone()
            if row is not None:  # a plugin's id that names no chunk (any more) is passed over
                found.append(Hit(**dict(row), score=scores[chunk]))
        return found

    # --- duplicates -----------------------------------------------------------------------------

    @_usable
    def duplicates(self) -> list[Duplicate]:
        """Each document whose content another holds too, and the copy kept: the more persistent source's."""
        with self.lock:
            rows = self.conn.execute(
                """SELECT d.id, d.name, d.sha256, s.kind, s.location, s.id AS source,
                          (SELECT count(*) FROM chunks c WHERE c.document = d.id) AS chunks
                   FROM documents d JOIN sources s ON d.source = s.id
                   WHERE d.duplicate_of IS NULL AND d.sha256 IN (
                       SELECT sha256 FROM documents WHERE duplicate_of IS NULL GROUP BY sha256 HAVING count(*) > 1)
                   """).fetchall()
        groups: dict[str, list[sqlite3.Row]] = {}
        for row in rows:
            groups.setdefault(row["sha256"], []).append(row)
        found: list[Duplicate] = []
        for group in groups.values():
            group.sort(key=lambda r: (-PERSISTENCE.get(r["kind"], 0), r["source"], r["id"]))
            winner = group[0]
            for loser in group[1:]:
                reason = (f"{winner['kind']} source outlasts {loser['kind']}"
                          if PERSISTENCE[winner["kind"]] > PERSISTENCE[loser["kind"]] else "older source")
                found.append(Duplicate(loser["id"], _label(loser), loser["chunks"], _label(winner), reason))
        return found

    @_usable
    def drop_duplicates(self) -> list[Duplicate]:
        """Remove the chunks of every duplicate :meth:`duplicates` finds; the document stays, marked, so a reindex
        does not read it in again while its file is unchanged."""
        found = self.duplicates()
        with sqlite_db.immediate(self.conn, self.lock) as conn:
            for duplicate in found:
                kept = conn.execute(
                    "SELECT w.id FROM documents w, documents l WHERE l.id = ? AND w.sha256 = l.sha256 "
                    "AND w.id != l.id AND w.duplicate_of IS NULL", (duplicate.loser,)).fetchall()
                self._drop_chunks(conn, duplicate.loser)
                winner = next((r[0] for r in kept if r[0] not in {d.loser for d in found}), None)
                conn.execute("UPDATE documents SET duplicate_of = ? WHERE id = ?", (winner, duplicate.loser))
        return found


def _label(row: sqlite3.Row) -> str:
    return row["location"] if row["kind"] != "folder" else f"{row['location']}/{row['name']}"


def _stored_text(source: Source) -> tuple[str, str, str]:
    """``(document name, title, text)`` of an artifact or the lessons source; a :class:`KirocrewError` if gone."""
    if source.kind == "lessons":
        from kirocrew_core.lessons.store import all_lessons, global_text

        return "lessons.md", "Lessons kept by kirocrew", global_text(all_lessons())
    from kirocrew_core.artifacts import store as artifacts
    from kirocrew_core.artifacts.access import OWNER

    slug = source.location.removeprefix(ARTIFACT_PREFIX)
    meta, content = artifacts.get(slug, OWNER)
    return slug, str(meta.get("name") or slug), content


_shared: sqlite_db.PerHome[Library] = sqlite_db.PerHome(lambda: Library(), lambda: database_path())


def shared() -> Library:
    """This process's library on the crew home's database (reopened when the crew home moved: tests)."""
    return _shared.get()
