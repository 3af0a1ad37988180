"""Real PDF files made on the spot for tests and benchmarks: text pages, encrypted, imageless-and-textless,
a decompression bomb, a truncated one. Written with pypdf's writer (kirocrew-core depends on it).
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Sequence
from pathlib import Path


def _writer_with_pages(pages: Sequence[str]) -> object:
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = writer._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica")}))
    for text in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject({
            NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
        content = DecodedStreamObject()
        shown = "".join(f"({_escaped(line)}) Tj 0 -14 Td " for line in text.split("\n"))
        content.set_data(f"BT /F1 11 Tf 72 740 Td {shown}ET".encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(content)
    return writer


def _escaped(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _bytes(writer: object) -> bytes:
    out = io.BytesIO()
    writer.write(out)  # type: ignore[attr-defined]
    return out.getvalue()


def text_pdf(path: Path, pages: Sequence[str], *, password: str = "") -> Path:
    """A PDF with one page per item of ``pages`` (lines split on newlines); encrypted when ``password``."""
    writer = _writer_with_pages(pages)
    if password:
        writer.encrypt(password, algorithm="RC4-128")  # type: ignore[attr-defined]
    path.write_bytes(_bytes(writer))
    return path


def blank_pdf(path: Path, pages: int = 2) -> Path:
    """Pages without a text layer (as a scan without OCR is)."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(612, 792)
    path.write_bytes(_bytes(writer))
    return path


def bomb_pdf(path: Path, gibibytes: int = 4) -> Path:
    """One page whose FlateDecode content stream inflates to ``gibibytes`` GiB of zeros from a file of a few MiB.

    Made without compressing gigabytes: a block of zeros deflated and fully flushed (byte-aligned, no
    history) is repeated, then closed by an empty final block and the right Adler-32.
    """
    from pypdf.generic import NameObject, NumberObject, StreamObject

    piece = 16 * 1024 * 1024
    count = gibibytes * 1024 * 1024 * 1024 // piece
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflate.compress(bytes(piece)) + deflate.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()
    adler = ((count * piece) % 65521) << 16 | 1  # zeros leave Adler-32's a at 1 and add 1 to b per byte
    data = b"\x78\xda" + block * count + final + adler.to_bytes(4, "big")
    writer = _writer_with_pages([""])
    stream = StreamObject()
    stream._data = data
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    stream[NameObject("/Length")] = NumberObject(len(data))
    writer.pages[0][NameObject("/Contents")] = writer._add_object(stream)  # type: ignore[attr-defined]
    path.write_bytes(_bytes(writer))
    return path


def truncated_pdf(path: Path, pages: Sequence[str]) -> Path:
    """A text PDF cut off before its end: no cross-reference table, no trailer."""
    data = _bytes(_writer_with_pages(pages))
    path.write_bytes(data[: len(data) // 2])
    return path


def content_pdf(path: Path, content: bytes) -> Path:
    """One page whose content stream is ``content`` as given (a hostile operator sequence, say)."""
    from pypdf.generic import DecodedStreamObject, NameObject

    writer = _writer_with_pages([""])
    stream = DecodedStreamObject()
    stream.set_data(content)
    writer.pages[0][NameObject("/Contents")] = writer._add_object(stream)  # type: ignore[attr-defined]
    path.write_bytes(_bytes(writer))
    return path
