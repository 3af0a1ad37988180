"""Reading crew bindings from ``config.toml``: the one place a crew's fields are given their meaning.

The file's table is validated by :mod:`kirocrew_core.config` (``[crews.NAME]``, names, field types);
this module turns its entries into :class:`Crew` values. A field a crew leaves out is ``None``:
whoever spawns with it uses what it would use without a crew (the spawning session's agent,
model, workspace and authority).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_core.config import CREWS, load_config, remove_entry, set_entry
from kirocrew_core.errors import BadInputError


@dataclass(frozen=True)
class Crew:
    """One ``[crews.NAME]`` entry: each field as the owner wrote it, ``None`` (or no triggers) when left out."""

    name: str
    kiro_agent: str | None = None
    model: str | None = None
    workspace: str | None = None
    authority: str | None = None
    triggers: tuple[str, ...] = field(default=())

    @property
    def workspace_path(self) -> str | None:
        """The workspace with ``~`` expanded (the file may say ``~/src/app``)."""
        return str(Path(self.workspace).expanduser()) if self.workspace else None

    def bound(self) -> dict[str, str | None]:
        """The binding as ``select_crew`` reports it; ``None`` is "the spawning session's"."""
        return {"kiro_agent": self.kiro_agent, "workspace": self.workspace, "model": self.model,
                "authority": self.authority}

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, **self.bound(), "triggers": list(self.triggers)}


def _crew(name: str, fields: dict[str, Any]) -> Crew:
    return Crew(name, fields.get("kiro_agent"), fields.get("model"), fields.get("workspace"),
                fields.get("authority"), tuple(fields.get("triggers", ())))


def all_crews(path: str | Path | None = None) -> list[Crew]:
    """Every crew, sorted by name. A malformed or invalid file raises (``config_malformed``/``config_invalid``)."""
    entries = load_config(path).entries(CREWS.name)
    return [_crew(name, fields) for name, fields in sorted(entries.items())]


def find_crew(name: str, path: str | Path | None = None) -> Crew:
    """The crew ``name``, or ``unknown_crew`` naming the crews there are."""
    crews = all_crews(path)
    for crew in crews:
        if crew.name == name:
            return crew
    raise BadInputError(f"unknown crew {name!r}; available crews: {', '.join(c.name for c in crews) or 'none'}",
                        code="unknown_crew")


def add_crew(crew: Crew, path: str | Path | None = None, *, replace: bool = False) -> Crew:
    """Write ``crew`` into ``config.toml`` (``crew_exists`` unless ``replace``); comments are kept."""
    fields = {"kiro_agent": crew.kiro_agent, "model": crew.model, "workspace": crew.workspace,
              "authority": crew.authority, "triggers": list(crew.triggers) or None}
    return _crew(crew.name, set_entry(CREWS.name, crew.name, fields, path, replace=replace))


def remove_crew(name: str, path: str | Path | None = None) -> Crew:
    """Remove the crew ``name`` from ``config.toml``; what it was. ``unknown_crew`` if there is none."""
    return _crew(name, remove_entry(CREWS.name, name, path))
