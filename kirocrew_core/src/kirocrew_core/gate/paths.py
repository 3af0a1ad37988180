"""Path and domain patterns, and the three-valued answer a match gives.

**Paths.** A rule's path glob is anchored before it is matched: ``/abs/...`` as written,
``~`` and ``~/...`` at the home directory, ``./x`` and ``x/y`` at the session's workspace.
A glob without a ``/`` (``*.pem``, ``.env``) matches that name in any directory. ``*`` and
``?`` stay within one path segment, ``**`` crosses segments, ``[...]`` is a character class.
As in gitignore, a pattern that matches a directory covers everything below it.

A call's path is checked in two forms: as written (made absolute against the workspace,
``..`` folded) and resolved (symlinks followed). A ``deny`` or ``ask`` rule matches when
**either** form matches, an ``allow`` rule only when **both** do, so a symlink can neither
dodge a protection nor borrow a permission.

**Domains.** ``example.com`` matches that host, ``*.example.com`` any of its subdomains (not
the name itself), ``*`` every host. Case and a trailing dot do not matter; the port does not
count.

**Unknown input.** When a value cannot be known before the call runs (a shell word built from
a variable, a URL that does not parse), a match is :data:`MAYBE`: enough for a ``deny`` or
``ask`` rule to ask, never enough for an ``allow``.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit


class Match(Enum):
    """Whether a rule covers a call: ``YES``, ``NO``, or ``MAYBE`` (the input is not known)."""

    NO = 0
    MAYBE = 1
    YES = 2


NO, MAYBE, YES = Match.NO, Match.MAYBE, Match.YES


def best(matches: list[Match]) -> Match:
    """Any YES wins, else any MAYBE, else NO (a rule's alternatives)."""
    if YES in matches:
        return YES
    return MAYBE if MAYBE in matches else NO


@dataclass(frozen=True)
class PathValue:
    """A path a call touches: ``literal`` as written (absolute, folded) and ``resolved``; None when unknown."""

    literal: str | None
    resolved: str | None

    @property
    def known(self) -> bool:
        return self.literal is not None

    @classmethod
    def unknown(cls) -> PathValue:
        return cls(None, None)

    @classmethod
    def of(cls, path: str, cwd: str) -> PathValue:
        """``path`` (``~`` expanded, relative to ``cwd``) in both forms."""
        expanded = os.path.expanduser(path)
        absolute = os.path.normpath(os.path.join(cwd, expanded)) if cwd else os.path.normpath(expanded)
        if not os.path.isabs(absolute):
            return cls.unknown()
        try:
            resolved = os.path.realpath(absolute)
        except (OSError, ValueError):
            resolved = absolute
        return cls(absolute, resolved)


def _translate(glob: str) -> str:
    """A glob (already absolute) as a regular expression over absolute POSIX paths."""
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        ch = glob[i]
        if glob.startswith("/**/", i):
            out.append("(?:/.*)?/")
            i += 4
        elif glob.startswith("/**", i) and i + 3 == n:
            out.append("(?:/.*)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif ch == "*":
            out.append("[^/]*")
            i += 1
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            end = glob.find("]", i + 2 if glob.startswith("[!", i) or glob.startswith("[]", i) else i + 1)
            if end == -1:
                out.append(re.escape(ch))
                i += 1
                continue
            body = glob[i + 1:end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\").replace("/", "") + "]")
            i = end + 1
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


def anchored(pattern: str, workspace: str, home: str) -> str:
    """The absolute glob ``pattern`` stands for in ``workspace`` (see the module docstring)."""
    text = pattern.rstrip("/") + ("/**" if pattern.endswith("/") and pattern.strip("/") else "")
    if text in ("", "/"):
        return "/**"
    if text == "~" or text.startswith("~/"):
        return home.rstrip("/") + text[1:]
    if text.startswith("/"):
        return text
    if "/" not in text:
        return "/**/" + text
    rel = text[2:] if text.startswith("./") else text
    return workspace.rstrip("/") + "/" + rel


@functools.lru_cache(maxsize=4096)
def _compiled(glob: str) -> re.Pattern[str]:
    return re.compile(_translate(glob))


def _fixed_prefix(glob: str) -> str:
    """What every path a glob covers starts with: its text before the first wildcard, without a final ``/``
    (``/w/src/**`` also matches ``/w/src`` itself)."""
    cut = min((i for i in (glob.find(c) for c in "*?[") if i >= 0), default=len(glob))
    return glob[:cut].rstrip("/")


def start_directory(glob: str) -> str:
    """The deepest path every match of ``glob`` (or a directory above the match) lies in or is: its text up
    to the first wildcard, cut back to a whole segment (``/w/src/*.py`` → ``/w/src``); "" for the root."""
    cut = min((i for i in (glob.find(c) for c in "*?[") if i >= 0), default=-1)
    if cut < 0:
        return glob.rstrip("/")
    text = glob[:cut]
    return text.rstrip("/") if text.endswith("/") else text[:text.rfind("/")]


Globs = tuple[tuple[str, str, "re.Pattern[str]"], ...]


def roots(workspace: str, home: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The forms of the workspace and of the home a relative or ``~`` glob is anchored at: as given, resolved."""
    return tuple(_bases(workspace)), tuple(_bases(home))


def anchored_globs(patterns: tuple[str, ...], workspace: str, home: str,
                   at: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> Globs:
    """``(glob, fixed prefix, regex)`` for each pattern anchored at each form of the workspace and the home.

    ``at`` is :func:`roots` when the caller already has it (one decision resolves them once);
    the compiled globs are cached per rule and roots, since a policy meets the same rules in the
    same workspace again and again.
    """
    return _anchored_globs(patterns, *(at if at is not None else roots(workspace, home)))


@functools.lru_cache(maxsize=4096)
def _anchored_globs(patterns: tuple[str, ...], workspaces: tuple[str, ...], homes: tuple[str, ...]) -> Globs:
    found: dict[str, tuple[str, str, re.Pattern[str]]] = {}
    for pattern in patterns:
        for ws in workspaces:
            for hm in homes:
                glob = anchored(pattern, ws, hm)
                if glob not in found:
                    found[glob] = (glob, _fixed_prefix(glob), _compiled(glob))
    return tuple(found.values())


def _covered(globs: Globs, path: str) -> bool:
    """True when ``path`` or a directory above it matches one of ``globs``."""
    regexes = [rx for _, prefix, rx in globs if path.startswith(prefix)]
    if not regexes:
        return False
    current = path
    while True:
        if any(rx.fullmatch(current) for rx in regexes):
            return True
        cut = current.rfind("/")
        if cut <= 0:
            return current != "/" and any(rx.fullmatch("/") for rx in regexes)
        current = current[:cut]


def _bases(path: str) -> list[str]:
    real = os.path.realpath(path) if path else path
    return [path] if real == path else [path, real]


def path_match(patterns: tuple[str, ...], value: PathValue, *, workspace: str, home: str, for_allow: bool,
               at: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> Match:
    """Whether any of ``patterns`` covers ``value`` (both forms for an allow, either for deny/ask)."""
    if not value.known:
        return MAYBE
    globs = anchored_globs(patterns, workspace, home, at)
    forms = [value.literal, value.resolved or value.literal]
    hits = [_covered(globs, form) for form in forms if form is not None]
    ok = all(hits) if for_allow else any(hits)
    return YES if ok else NO


_HOST = re.compile(r"^[a-z0-9.-]+$")
_UNSAFE_IN_URL = re.compile(r"[\\\s\x00-\x1f\x7f]")


def host_of(url: str) -> str | None:
    """The lower-case host of ``url`` (``None`` when it has none, does not parse, or could be read differently).

    Python's parser and kiro's (a WHATWG one) disagree on some URLs: a backslash is a slash to
    kiro (``https://evil.com\\@example.com`` goes to evil.com), a percent-encoded or non-ASCII host
    is decoded or converted to punycode. Such a host is not known, so no rule trusts either reading.
    """
    text = url.strip()
    if _UNSAFE_IN_URL.search(text):
        return None
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return None
    if not host:
        return None
    host = host.rstrip(".").lower()
    if ":" in host:  # an IPv6 literal
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            return None
    return host if _HOST.match(host) else None


def domain_match(patterns: tuple[str, ...], host: str | None) -> Match:
    """Whether any domain pattern covers ``host`` (MAYBE for an unknown host)."""
    if host is None:
        return MAYBE
    for pattern in patterns:
        if pattern == "*" or host == pattern:
            return YES
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return YES
    return NO
