#!/usr/bin/env python3
"""The knowledge library: ingest files/s and peak RSS, search latency over many chunks, one touched file.

    .venv/bin/python benchmarks/knowledge.py [--files 2000] [--pdfs 40] [--writes 20] [--chunks 100000]
                                             [--searches 200]

* ingests a folder of ``--files`` Markdown files (about 1,500 words each, three headings; words
  from a 5,000-word vocabulary with a Zipf-like skew): ``add`` + ``reindex`` (files/s, chunks,
  this process's peak RSS);
* touches one file and reindexes (the time, and how many files were chunked again: 1 is the target),
  and reindexes with nothing changed;
* ingests ``--pdfs`` PDFs of 10 pages of about 300 words each (written with pypdf): pages/s, each
  PDF's text extracted in its own limited child process (:mod:`kirocrew_core.knowledge.pdf`);
* runs the host's ingestion service in this process (its watcher, its worker thread) on a folder
  source and times ``--writes`` file writes to the moment a search finds the word written
  (median/p90/max), with no reindex asked for;
* fills a second library with ``--chunks`` chunks of 100 words (written straight into its tables,
  as a reindex would, to keep the set-up short) and searches it for a rare word, two words and a
  common word (``Library.search``, and ``search_text``: the tool's whole answer with redaction;
  median/p99; target ≤ 20 ms median).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import time
from pathlib import Path

from _bench import machine_load, row, text, vocabulary, write_notes


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ingest(root: Path, files: int) -> None:
    from kirocrew_core.knowledge.store import Library

    folder = root / "notes"
    write_notes(folder, files)
    library = Library(root / "ingest.sqlite3")
    before = peak_rss_mib()
    start = time.perf_counter()
    source = library.add(folder)
    report = library.reindex(str(source.id))
    took = time.perf_counter() - start
    chunks = library.sources()[0].chunks
    print(f"ingest: {report.rechunked} files, {chunks} chunks in {took:.1f} s = {report.rechunked / took:.0f} files/s; "
          f"peak RSS {before:.0f} -> {peak_rss_mib():.0f} MiB")
    touched = folder / "d07" / "note00007.md"
    touched.write_text(touched.read_text() + "appended words\n")
    start = time.perf_counter()
    again = library.reindex(str(source.id))
    print(f"reindex after touching one file: {(time.perf_counter() - start) * 1000:.0f} ms, "
          f"{again.rechunked} file(s) chunked again, {again.unchanged} unchanged")
    start = time.perf_counter()
    library.reindex(str(source.id))
    print(f"reindex with nothing changed: {(time.perf_counter() - start) * 1000:.0f} ms")
    library.close()


def ingest_pdfs(root: Path, pdfs: int) -> None:
    from kirocrew_core.knowledge.store import Library

    from kirocrew_testing.pdf_files import text_pdf

    words, weights = vocabulary()
    rng = random.Random(3)
    folder = root / "papers"
    folder.mkdir()
    pages = 10
    for index in range(pdfs):
        text_pdf(folder / f"paper{index:03d}.pdf",
                 ["\n".join(text(rng, words, weights, 12) for _ in range(25)) for _ in range(pages)])
    library = Library(root / "pdfs.sqlite3")
    start = time.perf_counter()
    report = library.reindex(str(library.add(folder).id))
    took = time.perf_counter() - start
    print(f"pdf ingest: {report.rechunked} PDFs of {pages} pages ({len(report.skipped)} skipped), "
          f"{library.sources()[0].chunks} chunks in {took:.1f} s = {report.rechunked * pages / took:.0f} pages/s, "
          f"{took / max(1, report.rechunked) * 1000:.0f} ms a PDF")
    for path in folder.iterdir():
        os.utime(path, ns=(1, 1))
    start = time.perf_counter()
    again = library.reindex(str(library.sources()[0].id))
    print(f"pdf reindex, every mtime changed and no content: {(time.perf_counter() - start) * 1000:.0f} ms, "
          f"{again.rechunked} parsed again")
    library.close()


def write_to_search(root: Path, writes: int) -> None:
    """The real ingestion service and its watcher, in this process: a write until a search finds it."""
    import asyncio

    from kirocrew_core.knowledge import service
    from kirocrew_core.knowledge.store import shared

    folder = root / "watched"
    folder.mkdir()
    for index in range(200):
        (folder / f"n{index:03d}.md").write_text(f"# Note {index}\nsome words here\n")
    library = shared()
    library.add(folder)
    asyncio.run(service.ingestor.start())
    try:
        deadline = time.monotonic() + 30
        while library.sources()[0].documents < 200:
            assert time.monotonic() < deadline, "the first pass never ended"
            time.sleep(0.01)
        time.sleep(0.5)  # the pass's own aftermath settles before the first write
        samples = []
        for index in range(writes):
            word = f"zq{index:04d}marker"
            start = time.perf_counter()
            (folder / f"n{index % 200:03d}.md").write_text(f"# Note\n{word}\n")
            while not library.search(word, 1):
                assert time.perf_counter() - start < 30, f"{word} never became searchable"
                time.sleep(0.005)
            samples.append((time.perf_counter() - start) * 1000)
        print(row("write -> searchable (watched)", samples, extremes=("max",), fmt="7.0f"))
    finally:
        asyncio.run(service.ingestor.stop())


def fill(root: Path, chunks: int) -> object:
    from kirocrew_core.knowledge.store import Library

    words, weights = vocabulary()
    rng = random.Random(2)
    library = Library(root / "search.sqlite3")
    source = library.add(root)
    start = time.perf_counter()
    with library.lock:
        conn = library.conn
        conn.execute("BEGIN")
        per_document = 50
        for document in range(chunks // per_document):
            doc = conn.execute("INSERT INTO documents (source, name, title, size, mtime_ns, sha256) "
                               "VALUES (?, ?, ?, 0, 0, ?)",
                               (source.id, f"doc{document}.md", f"Document {document}", f"{document:064x}")).lastrowid
            for seq in range(per_document):
                body = text(rng, words, weights, 100)
                chunk = conn.execute("INSERT INTO chunks (document, seq, section, line_start, line_end, text) "
                                     "VALUES (?, ?, ?, ?, ?, ?)",
                                     (doc, seq, f"Part {seq}", seq * 10 + 1, seq * 10 + 10, body)).lastrowid
                conn.execute("INSERT INTO chunks_fts (rowid, title, section, text) VALUES (?, ?, ?, ?)",
                             (chunk, f"Document {document}", f"Part {seq}", body))
        conn.execute("COMMIT")
    print(f"filled {chunks} chunks in {time.perf_counter() - start:.1f} s; peak RSS {peak_rss_mib():.0f} MiB")
    return library


def search(library: object, searches: int) -> None:
    from kirocrew_core.knowledge.tools import search_text

    words, _ = vocabulary()
    queries = {"rare word": words[4000], "two words": f"{words[40]} {words[300]}", "common word": words[0]}
    for label, query in queries.items():
        for name, fn in (("search", lambda q: library.search(q, 5)),  # type: ignore[attr-defined]
                         ("search_text", lambda q: search_text(library, q, 5))):  # type: ignore[arg-type]
            samples = []
            for _ in range(searches):
                start = time.perf_counter()
                fn(query)
                samples.append((time.perf_counter() - start) * 1000)
            p99 = sorted(samples)[int(0.99 * (len(samples) - 1))]
            print(row(f"{name} {label}", samples, extremes=("max",)) + f"   p99 {p99:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--pdfs", type=int, default=40)
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--searches", type=int, default=200)
    args = parser.parse_args()
    print(f"machine: {machine_load()}")
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        os.environ["KIROCREW_HOME"] = str(root / "crew")
        ingest(root, args.files)
        ingest_pdfs(root, args.pdfs)
        write_to_search(root, args.writes)
        library = fill(root, args.chunks)
        search(library, args.searches)


if __name__ == "__main__":
    main()
