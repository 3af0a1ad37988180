"""IANA time zones by name (zoneinfo; the system's database, else the tzdata package)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from kirocrew_cron.model import TIMEZONE_MAX, TIMEZONE_PATTERN

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

_NAME = re.compile(TIMEZONE_PATTERN)


def zone_problem(name: object) -> str | None:
    """Why ``name`` is not a usable zone name, or None."""
    if not isinstance(name, str) or not name or len(name) > TIMEZONE_MAX or not _NAME.match(name):
        return f"must be an IANA time zone name such as Europe/Paris (letters, digits, _ / + -, at most {TIMEZONE_MAX})"
    if ".." in name or name.startswith("/"):
        return "must be an IANA time zone name, not a path"
    try:
        zone(name)
    except (KeyError, ValueError, OSError):
        return f"unknown time zone {name!r}"
    return None


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The zone ``name`` (``UTC`` for empty); KeyError (ZoneInfoNotFoundError) when unknown."""
    from zoneinfo import ZoneInfo

    return ZoneInfo(name or "UTC")
