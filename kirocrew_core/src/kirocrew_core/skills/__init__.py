"""Agent Skills: folders with a ``SKILL.md`` that sessions find with ``skill_search`` (issue 31).

:mod:`.discovery` finds and parses them, :mod:`.tools` serves ``skill_search``, :mod:`.context`
writes what every session is told, :mod:`.browse` holds the browse text transforms.
"""
