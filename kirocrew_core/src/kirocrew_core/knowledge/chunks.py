"""A document split into overlapping chunks of words, each located by section heading and line range.

Words, not characters, are counted (the reference's 800 with 200 overlap), and each chunk keeps its
lines: the words of one line are joined by spaces, lines by newlines, so a chunk reads like its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHUNK_WORDS = 800
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
    """``text`` as chunks of at most ``size`` words, each starting ``size - overlap`` words after the last."""
    if not 0 <= overlap < size:
        raise ValueError("overlap must be smaller than size")
    words: list[tuple[int, str]] = []  # (0-based line, word)
    sections: list[str] = []  # the heading in force at each line
    heading = ""
    for number, line in enumerate(text.splitlines()):
        found = _HEADING.match(line)
        if found:
            heading = found.group(2)[:200]
        sections.append(heading)
        words.extend((number, word) for word in line.split())
    chunks: list[Chunk] = []
    step = size - overlap
    start = 0
    while start < len(words):
        part = words[start:start + size]
        lines: dict[int, list[str]] = {}
        for number, word in part:
            lines.setdefault(number, []).append(word)
        first, last = part[0][0], part[-1][0]
        chunks.append(Chunk("\n".join(" ".join(ws) for ws in lines.values()), sections[first], first + 1, last + 1))
        if start + size >= len(words):
            break
        start += step
    return chunks
