"""Paged dashboard lists: the page number a query string asks for, and links to other pages.

The History and Artifacts pages (and any later list page) read ``?page=N`` the same way: a
missing or malformed number is the first page, and a number is clamped to ``1..MAX_PAGE``, so a
hostile query string can neither fail the page nor ask the store for an absurd offset. The
``pager`` macro in ``core/pager.html`` draws the Newer / Older links from :func:`page_query`.
"""

from __future__ import annotations

from typing import Any

#: The largest page number a query string may ask for (larger ones are read as this one).
MAX_PAGE = 100_000


def page_number(value: str | None, default: int = 1) -> int:
    """``value`` as a page (or version) number in ``1..MAX_PAGE``; ``default`` when missing or malformed."""
    try:
        number = int(value) if value else default
    except ValueError:
        return default
    return min(max(number, 1), MAX_PAGE)


def page_query(params: dict[str, str], **changes: Any) -> str:
    """The query string of this page with ``changes`` applied (empty values dropped), for a link."""
    from urllib.parse import urlencode

    merged = {**params, **{k: str(v) for k, v in changes.items()}}
    return "?" + urlencode({k: v for k, v in merged.items() if v})
