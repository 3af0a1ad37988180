"""Text a person reads and a later model is told: which characters change what it says.

Stored words written by a crew session (a lesson's rule, a cron job's name or message) reach
the owner's screen and later sessions' context. Some characters make those two readers see
different things, or make one line become several:

* a **line break** (:data:`LINE_BREAKS`) starts a new line, where Markdown may read a heading;
* a **bidirectional control** (:data:`BIDI_CONTROLS`) reorders what a person is shown, not what a
  model reads;
* any other **control or invisible format character** (an escape sequence, NUL, Unicode tag
  characters that smuggle ASCII past the eye, a lone surrogate) hides or rewrites text.

Those are refused by the callers (each with its own stable code). **Noise** (:data:`NOISE`:
zero-width space, word joiner, byte-order mark, soft hyphen) changes nothing a reader should
notice and is dropped. The zero-width joiner and non-joiner are kept: emoji sequences and
several scripts need them.
"""

from __future__ import annotations

import unicodedata

#: Characters that end a line (Python's ``str.splitlines`` set).
LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
#: Bidirectional controls: embeddings, overrides, isolates and the marks.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
#: Invisible characters dropped as noise.
NOISE = frozenset("\u00ad\u180e\u200b\u2060\ufeff")
#: Format characters real text needs: zero-width non-joiner and joiner.
KEPT_FORMAT = frozenset("\u200c\u200d")


def without_noise(text: str) -> str:
    """``text`` without the :data:`NOISE` characters."""
    return "".join(ch for ch in text if ch not in NOISE) if any(ch in NOISE for ch in text) else text


def unsafe_character(text: str, *, allowed: str = "") -> str | None:
    """The first character of ``text`` that changes what it says or how it shows, unless it is in ``allowed``.

    A line break, a bidirectional control, any other control character (C0, DEL, C1), an
    invisible format character other than :data:`KEPT_FORMAT` (the :data:`NOISE` ones included:
    drop them first with :func:`without_noise`), or a lone surrogate; None when there is none.
    """
    for ch in text:
        if ch in allowed:
            continue
        if ch.isascii():
            if not ch.isprintable():
                return ch
            continue
        category = unicodedata.category(ch)
        if ch in LINE_BREAKS or ch in BIDI_CONTROLS or category in ("Cc", "Cs") or (
                category == "Cf" and ch not in KEPT_FORMAT):
            return ch
    return None


def named(ch: str) -> str:
    """How a refusal names ``ch``: ``a line break (U+000A)``, ``a bidirectional control (U+202E)``…"""
    if ch in LINE_BREAKS:
        kind = "a line break"
    elif ch in BIDI_CONTROLS:
        kind = "a bidirectional control"
    else:
        kind = "a control or invisible character"
    return f"{kind} (U+{ord(ch):04X})"
