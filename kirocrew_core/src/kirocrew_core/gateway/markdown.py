"""Untrusted Markdown (Kiro's replies, notification bodies) as safe HTML: CommonMark, no raw HTML, web links only.

A reply is written by a model, so it is untrusted text. markdown-it-py renders it with
``html`` disabled (any ``<tag>`` in the reply is shown as text), links and images keep
only ``http``, ``https`` and ``mailto`` targets (anything else, ``javascript:`` and
``data:`` included, renders as plain text), and images are never loaded: an image
becomes a link to its address, because the page's policy allows no third-party image
and a model must not make the browser fetch anything. Links open with
``rel="noopener noreferrer nofollow"``. markdown-it-py is imported on first use.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

#: The link schemes a reply may use; everything else renders as text.
ALLOWED_SCHEMES = frozenset({"http", "https", "mailto"})


def allowed_link(url: str) -> bool:
    """Whether ``url`` (already normalised by markdown-it) is an absolute http(s) or mailto address."""
    try:
        scheme = urlsplit(url.strip()).scheme.lower()
    except ValueError:
        return False
    return scheme in ALLOWED_SCHEMES


@lru_cache(maxsize=1)
def _renderer() -> MarkdownIt:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.validateLink = allowed_link  # type: ignore[method-assign]

    def link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        return str(renderer.renderToken(tokens, idx, options, env))

    def image(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        from markdown_it.common.utils import escapeHtml

        token = tokens[idx]
        alt = escapeHtml(renderer.renderInlineAsText(token.children or [], options, env)) or "image"
        src = escapeHtml(str(token.attrGet("src") or ""))
        return f'<a href="{src}" rel="noopener noreferrer nofollow">[image: {alt}]</a>'

    md.add_render_rule("link_open", link_open)
    md.add_render_rule("image", image)
    return md


def render_markdown(text: str, *, heading_offset: int = 0) -> str:
    """``text`` as HTML that is safe to put in a page unescaped (see the module docstring).

    ``heading_offset`` demotes the reply's headings (``#`` becomes ``h1 + offset``, at most
    ``h6``), so a reply shown under the page's own headings does not outrank them.
    """
    md = _renderer()
    env: dict[str, Any] = {}
    tokens = md.parse(text, env)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1]) + heading_offset)}"
    return str(md.renderer.render(tokens, md.options, env))
