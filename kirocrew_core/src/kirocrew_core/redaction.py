"""What counts as a secret, in one place: the names that mark a value as one, secret-shaped text,
and the secret values themselves.

The audit log redacts fields by these names, kirocrew-mcp keeps credential-named variables out of
headers and error messages, the conversations server and the computer-use tree redact
``name=value`` text: all read this vocabulary, so a new kind of credential is added once. Each
caller keeps its own marker (``[redacted]``, ``<redacted>``) and its own policy on top.

:func:`redact_secrets` is the one redactor of every result kirocrew stores or shows (cron history,
run replies and events, notifications, the pages and tools that show them). Besides names and
shapes it knows the **values**: kirocrew's own (the files plugins name through the
``secret_files()`` hook — core's gateway token and security-event-log key, kirocrew-connections'
OAuth client secrets), the values of this process's environment variables with a secret's name
(:func:`is_secret_name`), and the session keys the host issues (by their shape). A value is
removed as written and in the encodings a command prints it in (hex, also spaced as ``od`` and
``xxd`` print it; base64; base32), and so is any run of :data:`FRAGMENT_CHARS` characters of
those, so a value printed in parts (wrapped, cut) does not come back either. Values are read from
their files when the files change (size, time, inode), never logged, and kept only in memory.

What it cannot promise: a value transformed in a way not listed here (reversed, XOR-ed, one
character per line) passes. Redaction keeps secrets out of results; it does not stop a process
that can read a secret from sending it elsewhere (that is the authority's job).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import re
import stat
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from kirocrew_core.contributions import SecretFile

log = logging.getLogger(__name__)

# Words that make a name (a field key, a variable, the key of ``key=value``) a secret's name,
# matched anywhere in the normalised name (lower case, "-" and " " as "_").
SECRET_NAME_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "authorization",
    "cookie",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "code_verifier",
    "refresh",
    "bearer",
)

#: The words as a regex alternation for text: ``api_key`` also matches ``api-key`` and ``apikey``.
SECRET_NAME_PATTERN = "|".join(word.replace("_", "[_-]?") for word in SECRET_NAME_WORDS)

# Names that only hint at a credential (AUTH_URL, SESSION_ID, a bare KEY or PAT) and kirocrew's own
# variables: not redacted from text, but their values never leave the machine (an HTTP header).
_CREDENTIAL_HINT = re.compile(r"auth|session|private|(?:^|_)key(?:$|_)|(?:^|_)pat(?:$|_)|^kirocrew_")

# Credential-shaped values, whatever they are called.
SECRET_VALUE_PATTERNS = tuple(re.compile(pattern) for pattern in (
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bgh[pousr]_[A-Za-z0-9]{20,}\b",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}\b",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b",
    r"\bsk-[A-Za-z0-9_-]{16,}\b",
    r"\bAIza[0-9A-Za-z_-]{30,}\b",
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b",  # JWTs
    r"\bkcs1-[0-9a-f]{32}\b",  # the session keys a kirocrew host issues (coretools.identity.KEY_PATTERN)
))


_URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s@]+@")
_SECRET_ASSIGNMENT = re.compile(
    rf"(?i)\b([\w.-]*(?:{SECRET_NAME_PATTERN})[\w.-]*)(\s*[=:]\s*)(?:bearer\s+)?[^\s'\",;]+")
_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+")


def redact_secrets(text: str, marker: str = "<redacted>") -> str:
    """``text`` with secrets replaced by ``marker``: the known secret values (module docstring), URL
    credentials, ``token=...``, bearer tokens and the credential shapes above. Paths are kept (a command
    or a reply the owner must still be able to read)."""
    text = known_secrets().redact(text, marker)
    text = _URL_CREDENTIALS.sub(marker + "@", text)
    text = _SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + m.group(2) + marker, text)
    text = _BEARER.sub("Bearer " + marker, text)
    for pattern in SECRET_VALUE_PATTERNS:
        text = pattern.sub(marker, text)
    return text


def normalise_name(name: str) -> str:
    """``name`` in lower case with "-" and " " as "_", the form :data:`SECRET_NAME_WORDS` are in."""
    return name.lower().replace("-", "_").replace(" ", "_")


def is_secret_name(name: str) -> bool:
    """Whether a value under ``name`` is a secret (``client_secret``, ``X-Api-Key``, ``GITHUB_TOKEN``...)."""
    normal = normalise_name(name)
    return any(word in normal for word in SECRET_NAME_WORDS)


def is_credential_name(name: str) -> bool:
    """Whether a variable's value must never leave the machine: a secret's name, or one hinting at it."""
    return is_secret_name(name) or _CREDENTIAL_HINT.search(normalise_name(name)) is not None


# -- known secret values ------------------------------------------------------------------------

#: A value shorter than this is not redacted as a known value: a ``1`` or ``yes`` under a secret's name
#: would otherwise vanish from every text.
KNOWN_VALUE_MIN_CHARS = 8
#: Any run of this many characters of a known value's printable forms is redacted on its own, so a value
#: printed in parts (``xxd -p`` wraps a 32-byte key's 64 hex digits at 60, ``cut -c1-20``) does not come back.
FRAGMENT_CHARS = 16
#: Of a binary value, any run of this many bytes (raw output, :func:`redact_secret_bytes`).
FRAGMENT_BYTES = 8
#: A secret file larger than this holds no single secret value: it is not read.
SECRET_FILE_MAX_BYTES = 64 * 1024

_FRAGMENT_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")
_FRAGMENT_RUN = re.compile(rf"[A-Za-z0-9+/=_-]{{{FRAGMENT_CHARS},}}")
# Hex in pairs with single separators, as od -tx1, xxd and hexdump -C print bytes.
_SPACED_HEX = re.compile(rf"(?:[0-9A-Fa-f]{{2}}[ :]?){{{FRAGMENT_CHARS // 2},}}")
_SEPARATORS = re.compile(r"[ :]")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


@dataclass(frozen=True)
class KnownSecrets:
    """The secret values :func:`redact_secrets` removes, in every form it looks for (never logged, never shown)."""

    #: Whole forms (the value, its encodings), longest first.
    exact: tuple[str, ...] = ()
    #: Every :data:`FRAGMENT_CHARS`-long piece of the forms made only of letters, digits and ``+/=_-``.
    fragments: frozenset[str] = frozenset()
    #: The pieces of the hex forms, lower case (for hex printed with separators).
    hex_fragments: frozenset[str] = frozenset()
    #: The binary values as bytes, and their :data:`FRAGMENT_BYTES`-long pieces.
    raw: tuple[bytes, ...] = ()
    raw_fragments: frozenset[bytes] = frozenset()

    def __repr__(self) -> str:  # a repr in a traceback or a log must not carry the values
        return f"KnownSecrets({len(self.exact)} forms)"

    @classmethod
    def of(cls, texts: Iterable[str], binaries: Iterable[bytes] = ()) -> KnownSecrets:
        """The forms of ``texts`` (tokens, passwords) and ``binaries`` (keys); values too short are left out."""
        exact: set[str] = set()
        printable: set[str] = set()
        hex_forms: set[str] = set()
        raw: set[bytes] = set()
        for text in texts:
            if len(text) < KNOWN_VALUE_MIN_CHARS:
                continue
            exact.add(text)
            printable.add(text)
            data = text.encode("utf-8", "surrogateescape")
            for content in (data, data + b"\n"):  # a file printed as a whole ends with its newline
                hex_forms |= _hex_forms(content)
                printable |= _encoded_forms(content)
        for data in binaries:
            if len(data) < KNOWN_VALUE_MIN_CHARS:
                continue
            raw.add(data)
            hex_forms |= _hex_forms(data)
            printable |= _encoded_forms(data)
            # Decoded as UTF-8 with replacement, its ends depend on the bytes around it: keep the middle.
            middle = data.decode("utf-8", "replace")[3:-3]
            if len(middle) >= KNOWN_VALUE_MIN_CHARS:
                exact.add(middle)
            exact |= _dump_columns(data)
        printable |= hex_forms
        exact |= printable
        return cls(
            exact=tuple(sorted(exact, key=len, reverse=True)),
            fragments=frozenset(piece for form in printable if _FRAGMENT_ALPHABET.issuperset(form)
                                for piece in _pieces(form, FRAGMENT_CHARS)),
            hex_fragments=frozenset(piece.lower() for form in hex_forms for piece in _pieces(form, FRAGMENT_CHARS)),
            raw=tuple(sorted(raw, key=len, reverse=True)),
            raw_fragments=frozenset(piece for data in raw for piece in _pieces(data, FRAGMENT_BYTES)),
        )

    def redact(self, text: str, marker: str) -> str:
        """``text`` with every form and fragment of the values replaced by ``marker``."""
        if not self.exact or not text:
            return text
        for form in self.exact:
            if form in text:
                text = text.replace(form, marker)
        if len(text) >= FRAGMENT_CHARS:
            text = _FRAGMENT_RUN.sub(lambda m: self._cut(m.group(), marker), text)
            if self.hex_fragments:
                text = _SPACED_HEX.sub(lambda m: marker if self._spaced_hex_hit(m.group()) else m.group(), text)
        return text

    def redact_bytes(self, data: bytes, marker: bytes) -> bytes:
        """Raw output with the binary values and their fragments replaced (text forms are left to :meth:`redact`)."""
        for value in self.raw:
            data = data.replace(value, marker)
        for piece in self.raw_fragments:
            if piece in data:
                data = data.replace(piece, marker)
        return data

    def _cut(self, run: str, marker: str) -> str:
        """``run`` with the spans covered by known fragments replaced by one ``marker`` each."""
        spans: list[list[int]] = []
        for start in range(len(run) - FRAGMENT_CHARS + 1):
            if run[start:start + FRAGMENT_CHARS] in self.fragments:
                end = start + FRAGMENT_CHARS
                if spans and start <= spans[-1][1]:
                    spans[-1][1] = end
                else:
                    spans.append([start, end])
        if not spans:
            return run
        out, kept = [], 0
        for start, end in spans:
            out += [run[kept:start], marker]
            kept = end
        out.append(run[kept:])
        return "".join(out)

    def _spaced_hex_hit(self, run: str) -> bool:
        digits = _SEPARATORS.sub("", run).lower()
        return any(piece in self.hex_fragments for piece in _pieces(digits, FRAGMENT_CHARS))


def _pieces(value: Any, size: int) -> Iterable[Any]:
    return (value[i:i + size] for i in range(len(value) - size + 1))


def _hex_forms(data: bytes) -> set[str]:
    return {data.hex(), data.hex().upper()}


def _dump_columns(data: bytes) -> set[str]:
    """The text column ``xxd`` and ``hexdump -C`` print beside the hex (printable bytes, ``.`` for the rest),
    in pieces of one line (16 bytes); a piece that is mostly dots says nothing and would match any dump."""
    column = "".join(chr(byte) if 0x20 <= byte < 0x7F else "." for byte in data)
    return {piece for piece in _pieces(column, 16) if len(piece) - piece.count(".") >= KNOWN_VALUE_MIN_CHARS}


def _encoded_forms(data: bytes) -> set[str]:
    forms = set()
    for encoded in (base64.b64encode(data), base64.urlsafe_b64encode(data), base64.b32encode(data)):
        text = encoded.decode("ascii")
        forms |= {text, text.rstrip("=")}
    return forms


def redact_secret_bytes(data: bytes, marker: bytes = b"<redacted>") -> bytes:
    """Raw output (a command's, before it is decoded) with the known binary values replaced (the SEL key
    as ``cat`` prints it); decode the result and pass it through :func:`redact_secrets` for the rest."""
    return known_secrets().redact_bytes(data, marker)


# -- where the values come from ---------------------------------------------------------------------


@dataclass
class _Cache:
    sources_key: tuple[Any, ...] | None = None
    sources: tuple[SecretFile, ...] = ()
    signature: tuple[Any, ...] | None = None
    known: KnownSecrets = KnownSecrets()


_CACHE = _Cache()
_CACHE_LOCK = threading.Lock()


def known_secrets() -> KnownSecrets:
    """The values :func:`redact_secrets` removes now: read again when a secret file or the environment changed.

    Never raises: a source that cannot be read is left out (and logged, by label), the rest still count.
    """
    with _CACHE_LOCK:
        try:
            sources = _secret_files()
            signature = (tuple(_signature(source.path) for source in sources), _environment_signature())
            if signature != _CACHE.signature:
                _CACHE.known = KnownSecrets.of([*_environment_values(), *_texts(sources)], _binaries(sources))
                _CACHE.signature = signature
        except Exception as exc:  # noqa: BLE001 - redaction goes on with what it has; its type only, never a value
            log.warning("the known secret values could not be refreshed (%s); the last ones are used",
                        type(exc).__name__)
        return _CACHE.known


def _environment_signature() -> int:
    """Changes when the environment does; the raw mapping when CPython exposes it (decoding costs 10 µs)."""
    raw = getattr(os.environ, "_data", None)
    return hash(frozenset(raw.items())) if isinstance(raw, dict) else hash(frozenset(os.environ.items()))


def _environment_values() -> list[str]:
    """Values of this process's variables with a secret's name; a path names where a secret is, not one."""
    return [value for name, value in os.environ.items()
            if is_secret_name(name) and not value.startswith(("/", "~/"))]


def _secret_files() -> tuple[SecretFile, ...]:
    """Every plugin's ``secret_files()``; core's own alone when the plugins cannot be asked."""
    from kirocrew_core import home
    from kirocrew_core.builtin.secrets import core_secret_files

    try:
        from kirocrew_core.plugins import get_plugin_manager, ordered_hookimpls

        pm = get_plugin_manager()
        impls = tuple(impl.function for impl in ordered_hookimpls(pm, "secret_files"))
    except Exception:  # noqa: BLE001 - a broken plugin set must not leave kirocrew's own secrets unredacted
        log.warning("the plugins' secret files are unknown (the plugin manager failed); core's own are used")
        return tuple(core_secret_files())
    key = (pm, impls, str(home.crew_home()))
    if key != _CACHE.sources_key:
        from kirocrew_core.contributions import SecretFile
        from kirocrew_core.plugins import call_hook

        def check(value: Any) -> str | None:
            ok = value is None or (isinstance(value, (list, tuple))
                                   and all(isinstance(item, SecretFile) for item in value))
            return None if ok else "did not return a list of SecretFile"

        # A failing plugin is logged by call_hook (named) and skipped; core's own are always there.
        call = call_hook(pm, "secret_files", on_error="skip", check=check)
        found = [*core_secret_files(), *(item for result in call.contributions for item in result.value)]
        _CACHE.sources = tuple(dict.fromkeys(found))
        _CACHE.sources_key = key
    return _CACHE.sources


def _signature(path: Path) -> tuple[Any, ...]:
    """What changes when the file (or a folder's files) changes; an absent or unreadable path is ``()``."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return ()
    own = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if not stat.S_ISDIR(st.st_mode):
        return own
    return (own, tuple(sorted((entry, _signature(path / entry)) for entry in _listdir(path))))


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _files(source: SecretFile) -> list[Path]:
    path = source.path
    try:
        if stat.S_ISDIR(os.stat(path, follow_symlinks=False).st_mode):
            return [path / entry for entry in sorted(_listdir(path))]
    except OSError:
        return []
    return [path]


def _read(path: Path) -> bytes | None:
    """The file's bytes: a regular file (not a symlink) no larger than :data:`SECRET_FILE_MAX_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with contextlib.closing(os.fdopen(fd, "rb")) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > SECRET_FILE_MAX_BYTES:
            return None
        return fh.read(SECRET_FILE_MAX_BYTES + 1)[:SECRET_FILE_MAX_BYTES]


def _texts(sources: Sequence[SecretFile]) -> list[str]:
    found = []
    for source in sources:
        if not source.binary:
            for path in _files(source):
                data = _read(path)
                if data is not None:
                    found.append(data.decode("utf-8", "surrogateescape").strip())
    return found


def _binaries(sources: Sequence[SecretFile]) -> list[bytes]:
    return [data for source in sources if source.binary for path in _files(source)
            if (data := _read(path)) is not None]
