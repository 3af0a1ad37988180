"""A document split into overlapping chunks of words, each located by section heading and line range.

Words, not characters, are counted (the reference's 800 with 200 overlap), and each chunk keeps its
lines: the words of one line are joined by spaces, lines by newlines, so a chunk reads like its source.
A text with form feeds (a PDF's pages, as :mod:`.pdf` joins them) is located by page instead of heading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHUNK_WORDS = 800
#: Separates a paged text's pages (pdftotext's convention, kept by :mod:`.pdf`).
PAGE_BREAK = "\f"
OVERLAP_WORDS = 200
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Chunk:
    """One chunk: its text, the section heading it starts under (``""`` before any), its 1-based lines."""

    text: str
    section: str
    line_start: int
    line_end: int


def title_of(text: str, fallback: str) -> str:
    """The first Markdown heading of ``text``, else ``fallback`` (the file's name)."""
    for line in text.splitlines()[:200]:
        found = _HEADING.match(line)
        if found:
            return found.group(2)[:200]
    return fallback


def split(text: str, *, size: int = CHUNK_WORDS, overlap: int = OVERLAP_WORDS) -> list[Chunk]:
    """``text`` as chunks of at most ``size`` words, each starting ``size - overlap`` words after the last.

    A paged text is split page by page, so a chunk never spans two pages and its section is its page
    (``page 3``): what a reader looks up in a PDF.
    """
    if not 0 <= overlap < size:
        raise ValueError("overlap must be smaller than size")
    pages = text.split(PAGE_BREAK)
    if len(pages) == 1:
        return _split_lines(text.splitlines(), 0, None, size, overlap)
    chunks: list[Chunk] = []
    first_line = 0
    for page, page_text in enumerate(pages, 1):
        lines = page_text.splitlines()
        chunks += _split_lines(lines, first_line, f"page {page}", size, overlap)
        first_line += len(lines)
    return chunks


def _split_lines(lines: list[str], first_line: int, section: str | None, size: int, overlap: int) -> list[Chunk]:
    """Chunks of ``lines`` (numbered from ``first_line``), under ``section`` or else their Markdown headings."""
    words: list[tuple[int, str]] = []  # (0-based line, word)
    sections: list[str] = []  # the heading in force at each line
    heading = section or ""
    for number, line in enumerate(lines, first_line):
        if section is None and (found := _HEADING.match(line)):
            heading = found.group(2)[:200]
        sections.append(heading)
        words.extend((number, word) for word in line.split())
    chunks: list[Chunk] = []
    step = size - overlap
    start = 0
    while start < len(words):
        part = words[start:start + size]
        by_line: dict[int, list[str]] = {}
        for number, word in part:
            by_line.setdefault(number, []).append(word)
        first, last = part[0][0], part[-1][0]
        chunks.append(Chunk("\n".join(" ".join(ws) for ws in by_line.values()), sections[first - first_line],
                            first + 1, last + 1))
        if start + size >= len(words):
            break
        start += step
    return chunks
