"""A PDF's text, page by page, extracted by pypdf in a child process held to hard limits.

A PDF is a program for a parser: a small file can decompress to gigabytes, nest objects without
end or send the parser round in circles. So the host never parses one itself. Each extraction runs
``python -I -m kirocrew_core.knowledge.pdf LIMITS`` with the opened file as its standard input
(the parent owns the numbers and passes them as JSON). Before it imports pypdf the child caps its
own address space (:data:`MEMORY_BYTES`), CPU time (:data:`CPU_SECONDS`), core dumps and file
writes, and proves the memory cap holds by failing to allocate past it; the parent kills it after
:data:`WALL_SECONDS`. pypdf's own limits (``pypdf.Configuration``: decompressed stream sizes,
parsing work, page-tree depth) are lowered too, so a bomb usually ends as a clean refusal long
before the rlimits bite; the rlimits hold where pypdf's limits miss a case. Where they cannot be
applied, no PDF is parsed (fail closed).

Every way it ends is a :class:`~kirocrew_core.knowledge.files.Skipped` with a stable reason, or the
pages' text. A refusal is remembered by content hash (and limits) for this process, so an unchanged
hostile PDF costs one hash per pass, not one child.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import OrderedDict
from typing import Any

from kirocrew_core.knowledge.chunks import PAGE_BREAK
from kirocrew_core.knowledge.files import Skipped

#: The child's address space: the interpreter and pypdf take about 55 MiB of it.
MEMORY_BYTES = 512 * 1024 * 1024
#: The child's CPU time (SIGXCPU past it), and the wall time the parent waits before killing it.
CPU_SECONDS = 10
WALL_SECONDS = 20.0
#: pypdf's cap on any one stream's decompressed bytes (its default is 75 MB).
STREAM_BYTES = 64 * 1024 * 1024
#: A PDF with more pages, or more text (characters), is skipped whole rather than cut silently.
MAX_PAGES = 2000
MAX_TEXT_CHARS = 5 * 1024 * 1024

TOO_LARGE = "pdf too large when decompressed"
TIMED_OUT = "pdf text extraction timed out"
ENCRYPTED = "encrypted pdf"
NO_TEXT = "pdf has no text layer"
TOO_DEEP = "pdf nested too deeply"
NO_LIMITS = "pdf text extraction needs memory and CPU limits this platform cannot apply"
NOT_INSTALLED = "pdf text extraction not installed"

_REMEMBERED = 512
_refused: OrderedDict[str, str] = OrderedDict()


def extract(fd: int, sha256: str) -> str:
    """The text of the PDF open on ``fd`` (read from its start), pages joined by a form feed (``PAGE_BREAK``).

    ``sha256`` is its content's hash: a PDF refused before is refused again without a child.
    """
    limits = _limits()
    key = f"{sha256} {json.dumps(limits, sort_keys=True)}"  # a verdict holds for these bytes under these limits
    if (reason := _refused.get(key)) is not None:
        raise Skipped(reason)
    try:
        pages = _run_child(fd, limits)
    except Skipped as skip:
        if not skip.unknowable:
            _refused[key] = skip.reason
            while len(_refused) > _REMEMBERED:
                _refused.popitem(last=False)
        raise
    return PAGE_BREAK.join(page.replace(PAGE_BREAK, "\n") for page in pages)


def _run_child(fd: int, limits: dict[str, int]) -> list[str]:
    import subprocess

    from kirocrew_core import proc
    from kirocrew_core.errors import KirocrewError

    os.lseek(fd, 0, os.SEEK_SET)
    try:
        # -I: no PYTHONPATH, user site or current folder; the environment is the child's whole one.
        done = proc.run([sys.executable, "-I", "-m", __name__, json.dumps(limits)], env={"LC_ALL": "C.UTF-8"},
                        stdin=fd, timeout=WALL_SECONDS, reason="a pdf text extraction")
    except subprocess.TimeoutExpired:
        # the machine may just be busy (the CPU cap did not fire): not a verdict on the file
        raise Skipped(TIMED_OUT, unknowable=True) from None
    except KirocrewError as exc:
        raise Skipped(f"pdf text extraction could not start: {exc.message}", unknowable=True) from exc
    if done.returncode in (-signal.SIGXCPU, -signal.SIGKILL):  # past the CPU cap (soft, then hard)
        raise Skipped(TIMED_OUT)
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = None
    if done.returncode != 0 or not isinstance(answer, dict):
        raise Skipped(f"pdf text extraction failed (exit {done.returncode})")
    if "skip" in answer:
        raise Skipped(str(answer["skip"]), unknowable=bool(answer.get("unknowable")))
    return [str(page) for page in answer["pages"]]


def _limits() -> dict[str, int]:
    return {"memory": MEMORY_BYTES, "cpu": CPU_SECONDS, "stream": STREAM_BYTES, "pages": MAX_PAGES,
            "text": MAX_TEXT_CHARS}


# --- the child ---------------------------------------------------------------------------------


def _limit(limits: dict[str, int]) -> str | None:
    """Cap this process (see the module docstring); None when the caps hold, else why not."""
    try:
        import resource

        for which, value in ((resource.RLIMIT_AS, limits["memory"]), (resource.RLIMIT_CPU, limits["cpu"]),
                             (resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, 0)):
            _, hard = resource.getrlimit(which)
            soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
            # CPU: SIGXCPU at the soft limit, SIGKILL a second later should it be caught
            top = soft + 1 if which == resource.RLIMIT_CPU and hard == resource.RLIM_INFINITY else soft
            resource.setrlimit(which, (soft, top))
    except (ImportError, AttributeError, ValueError, OSError) as exc:
        return f"{NO_LIMITS} ({exc})"
    try:
        bytearray(limits["memory"])  # must fail: some platforms accept RLIMIT_AS and ignore it
    except MemoryError:
        return None
    return NO_LIMITS


def _pages(source: Any, limits: dict[str, int]) -> list[str]:
    import logging

    import pypdf
    from pypdf.errors import FileNotDecryptedError, LimitReachedError, PdfReadError

    logging.disable(logging.WARNING)  # pypdf warns per damaged object; only the verdict matters
    stream = limits["stream"]
    pypdf.overwrite_configuration(
        zlib_maximum_output_length=stream, lzw_maximum_output_length=stream, run_length_maximum_output_length=stream,
        brotli_maximum_output_length=stream, array_based_stream_maximum_output_length=stream,
        maximum_declared_stream_length=stream, stream_decoding_work_maximum_length=max(stream, 300_000_000),
        jbig2dec_binary=None, disable_legacy_handling=True)  # never run an outside decoder
    try:
        reader = pypdf.PdfReader(source)
        if reader.is_encrypted:
            try:  # an owner password alone (printing, copying limits) opens with an empty user password
                opened = reader.decrypt("")
            except (NotImplementedError, PdfReadError, pypdf.errors.DependencyError):
                raise Skipped(ENCRYPTED) from None
            if not opened:
                raise Skipped(ENCRYPTED)
        if len(reader.pages) > limits["pages"]:
            raise Skipped(f"pdf has more than {limits['pages']} pages")
        pages: list[str] = []
        size = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            size += len(text)
            if size > limits["text"]:
                raise Skipped(f"pdf text larger than {limits['text'] // (1024 * 1024)} MiB")
            pages.append(text)
    except FileNotDecryptedError:
        raise Skipped(ENCRYPTED) from None
    except LimitReachedError as exc:
        raise Skipped(TOO_LARGE if _about_size(str(exc)) else f"pdf exceeds a parser limit: {_line(exc)}") from None
    except RecursionError:
        raise Skipped(TOO_DEEP) from None
    except (PdfReadError, ValueError, TypeError, KeyError, IndexError, AttributeError, AssertionError,
            UnicodeError, ArithmeticError, OSError, EOFError) as exc:
        # pypdf lets a damaged file surface as almost any of these
        raise Skipped(f"corrupt pdf: {_line(exc)}") from None
    if not any(text.strip() for text in pages):
        raise Skipped(NO_TEXT)
    return pages


def _about_size(message: str) -> bool:
    return any(word in message.lower() for word in ("decompress", "length", "size", "buffer", "output"))


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]


def main() -> int:
    """The child: limits first (``argv[1]``), then the PDF on standard input; one JSON answer on standard output."""
    limits = json.loads(sys.argv[1])
    problem = _limit(limits)
    answer: dict[str, Any]
    if problem is not None:
        answer = {"skip": problem, "unknowable": True}
    else:
        answer = {"skip": TOO_LARGE}  # what is left when even the answer could not be built
        try:
            answer = {"pages": _pages(os.fdopen(0, "rb", closefd=False), limits)}
        except Skipped as skip:
            answer = {"skip": skip.reason}
        except ImportError:
            answer = {"skip": NOT_INSTALLED, "unknowable": True}
        except MemoryError:
            pass  # the frames that held the memory are gone once the handler ends
    sys.stdout.buffer.write(json.dumps(answer).encode("utf-8"))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
