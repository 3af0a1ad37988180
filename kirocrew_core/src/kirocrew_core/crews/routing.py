"""``route_crew``'s ranking: which crews' triggers a task names, best first.

Deterministic and explainable, so a model (and the owner reading its reasons) can predict it:

- A trigger matches when the task contains it as whole words, case-insensitively: ``review``
  matches "Please Review this" but not "reviewer"; a phrase (``code review``) matches with any
  whitespace between its words. Punctuation in a trigger is literal (``c++``).
- Each matching trigger scores its number of words, so a specific phrase outweighs a single
  generic word; a trigger counts once however often it appears.
- Crews are ranked by score, highest first, ties broken by name; a crew with no match is left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from kirocrew_core.crews.bindings import Crew


@dataclass(frozen=True)
class Ranked:
    crew: Crew
    score: int
    matched: tuple[str, ...]


@lru_cache(maxsize=512)
def _pattern(trigger: str) -> re.Pattern[str]:
    words = trigger.split()
    return re.compile(r"(?<!\w)" + r"\s+".join(re.escape(word) for word in words) + r"(?!\w)", re.IGNORECASE)


def matched_triggers(task: str, triggers: Iterable[str]) -> tuple[str, ...]:
    """The triggers ``task`` names as whole words (case-insensitive), in the crew's order."""
    return tuple(trigger for trigger in dict.fromkeys(triggers) if _pattern(trigger).search(task))


def rank(task: str, crews: Iterable[Crew]) -> list[Ranked]:
    """The crews whose triggers ``task`` names, best first (score, then name)."""
    found = []
    for crew in crews:
        matched = matched_triggers(task, crew.triggers)
        if matched:
            found.append(Ranked(crew, sum(len(trigger.split()) for trigger in matched), matched))
    return sorted(found, key=lambda ranked: (-ranked.score, ranked.crew.name))
