"""PDF text in the knowledge library: real PDFs written on the spot, read by pypdf in a child process
held to hard limits; hostile ones (encrypted, no text, a decompression bomb, truncated, nested without
end, too slow) skipped with their reasons, never parsed in the test's own process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kirocrew_core.knowledge import files, pdf
from kirocrew_core.knowledge.store import Library

from kirocrew_testing.pdf_files import blank_pdf, bomb_pdf, content_pdf, text_pdf, truncated_pdf

PAGES = ["Annual report\nthe harbour opened in spring", "Second page\nthe zebra crossing was painted",
         "Third page\nnothing else happened"]


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Library]:
    opened = Library(tmp_path / "state" / "library.sqlite3")
    yield opened
    opened.close()


def test_a_pdfs_pages_are_found_by_their_words_with_the_page_as_section(library: Library, tmp_path: Path) -> None:
    root = tmp_path / "papers"
    root.mkdir()
    report_pdf = text_pdf(root / "report.pdf", PAGES)
    ref = str(library.add(root).id)
    assert library.reindex(ref).rechunked == 1
    [hit] = library.search("zebra", 5)
    assert (hit.name, hit.title, hit.section) == ("report.pdf", "report.pdf", "page 2")
    assert "the zebra crossing was painted" in hit.text
    long_page = "\n".join(" ".join(f"w{line}x{i}" for i in range(10)) for line in range(60))  # 600 words
    text_pdf(root / "long.pdf", ["short first page", long_page, long_page])
    library.reindex(ref)
    hits = library.search("w0x0", 5)  # a chunk never spans two pages
    assert sorted((h.section, h.line_start, h.line_end) for h in hits) == [("page 2", 2, 61), ("page 3", 62, 121)]

    os.utime(report_pdf, ns=(1, 1))  # a new mtime, the same bytes: hashed, neither parsed nor chunked again
    again = library.reindex(ref)
    assert (again.rechunked, again.unchanged) == (0, 2)
    text_pdf(report_pdf, [PAGES[0], "Second page\nthe giraffe crossing now"])
    changed = library.reindex(ref)
    assert (changed.rechunked, changed.skipped) == (1, {})
    assert library.search("zebra", 5) == [] and [h.section for h in library.search("giraffe", 5)] == ["page 2"]


def test_hostile_pdfs_are_skipped_with_their_reasons(library: Library, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "hostile"
    root.mkdir()
    text_pdf(root / "locked.pdf", PAGES, password="s3cret")
    blank_pdf(root / "scan.pdf")
    bomb_pdf(root / "bomb.pdf", gibibytes=4)
    truncated_pdf(root / "cut.pdf", PAGES)
    content_pdf(root / "deep.pdf", b"BT /F1 11 Tf " + b"[" * 100_000 + b"]" * 100_000 + b" TJ ET")
    (root / "fine.md").write_text("# Fine\nplain words\n")
    assert (root / "bomb.pdf").stat().st_size < 5 * 1024 * 1024  # 4 GiB once inflated
    ref = str(library.add(root).id)
    report = library.reindex(ref)
    assert report.skipped == {
        "locked.pdf": "encrypted pdf",
        "scan.pdf": "pdf has no text layer",
        "bomb.pdf": "pdf too large when decompressed",
        "cut.pdf": "corrupt pdf: Stream has ended unexpectedly",
        "deep.pdf": "pdf nested too deeply",
    }
    assert report.rechunked == 1 and library.skipped(ref) == report.skipped

    # A refused PDF is remembered by its hash: unchanged, it is not handed to a child again (none could start).
    monkeypatch.setattr("sys.executable", str(tmp_path / "no-python"))
    assert library.reindex(ref).skipped == report.skipped
    os.utime(root / "cut.pdf", ns=(1, 1))
    assert library.reindex(ref).skipped["cut.pdf"] == "corrupt pdf: Stream has ended unexpectedly"
    text_pdf(root / "new.pdf", PAGES)
    fresh = library.reindex(ref).skipped["new.pdf"]
    assert fresh.startswith("pdf text extraction could not start: cannot start")


def test_the_memory_cap_holds_where_pypdfs_own_stream_limit_is_lifted(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdf, "STREAM_BYTES", 16 * 1024 ** 3)
    monkeypatch.setattr(pdf, "MEMORY_BYTES", 256 * 1024 ** 2)
    assert _skip_reason(bomb_pdf(tmp_path / "bomb.pdf", gibibytes=4)) == (pdf.TOO_LARGE, False)


def test_a_parse_past_the_cpu_cap_or_the_wall_clock_ends_as_timed_out(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    slow = content_pdf(tmp_path / "slow.pdf", b"BT /F1 11 Tf " + b"(a) Tj 1 0 Td " * 150_000 + b"ET")  # ~6 s of CPU
    monkeypatch.setattr(pdf, "CPU_SECONDS", 1)
    assert _skip_reason(slow) == (pdf.TIMED_OUT, False)
    monkeypatch.setattr(pdf, "CPU_SECONDS", 10)
    monkeypatch.setattr(pdf, "WALL_SECONDS", 0.3)
    assert _skip_reason(slow) == (pdf.TIMED_OUT, True)  # a busy machine, maybe: not a verdict on the file


def test_pages_past_the_cap_are_refused_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdf, "MAX_PAGES", 2)
    assert _skip_reason(text_pdf(tmp_path / "three.pdf", PAGES)) == ("pdf has more than 2 pages", False)
    monkeypatch.setattr(pdf, "MAX_PAGES", 2000)
    monkeypatch.setattr(pdf, "MAX_TEXT_CHARS", 1024 * 1024)
    big = text_pdf(tmp_path / "big.pdf", ["word " * 60_000] * 4)
    assert _skip_reason(big) == ("pdf text larger than 1 MiB", False)


def _skip_reason(path: Path) -> tuple[str, bool]:
    entry = next(iter(files.walk(path).entries))
    with pytest.raises(files.Skipped) as skipped, files.opened(entry) as content:
        content.text()
    return skipped.value.reason, skipped.value.unknowable
