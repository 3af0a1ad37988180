"""Which rendered server entries the render took from the scopes, so later edits there reach the agent file.

The render merges onto the existing agent file, and a server the base already has
wins over the scopes' copy. Without a record, ``kiro-cli mcp remove X`` or an
``args`` change in ``~/.kiro/settings/mcp.json`` would never reach sessions: last
render's copy in the base would win forever. So every render records, per rendered
key, the fields it wrote from the scopes (their values as written), in the render's
state file, like the ``toolAliases`` it writes.

On the next render, a base entry with a record is the render's own where it still
holds the recorded values: it is taken out of the base and derived again from the
scopes as they are now (gone, if no scope declares it any more). What the user
changed in it by hand stays:

- the launch fields (:data:`LAUNCH_KEYS`) move as one unit: if the user changed any
  of them, the whole entry is the user's from then on and is left as it is;
- any other field the user added or changed (``autoApprove``, ``timeout``…) is laid
  back over the re-derived entry, unless the crew store sets that field (Apply's
  preferences win, as they always did);
- ``disabled`` is never the user's here: tightest-wins over the scopes decides it.

A base entry without a record (a server added by hand, or one a build before this
record wrote) is the user's, except when its launch fields equal what the scopes
declare under that key now: then it is indistinguishable from the render's own and
is treated as such, which also brings agent files written before the record under it.
When some scope cannot be read, nothing is taken back (its servers may be the ones
that look removed) and last render's record is kept for the entries the base keeps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kirocrew_mcp.aliases import mcp_server_alias
from kirocrew_mcp.playwright import CANONICAL_KEY, is_playwright

#: The fields that say how a server is started; they belong together (one source's command never gets
#: another's arguments), so the user owns them all or none.
LAUNCH_KEYS = ("command", "args", "env", "url", "headers", "type")
#: Fields the scopes decide on every render whatever the base says.
_SCOPE_DECIDED = frozenset({"disabled"})


def _launch(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The launch unit of ``entry``; empty ``args``/``env`` count as absent."""
    return {k: entry[k] for k in LAUNCH_KEYS if k in entry and not (k in ("args", "env") and not entry[k])}


@dataclass
class Reclaimed:
    """What :func:`reclaim` took out of the base: the keys, and the user's own fields to lay back."""

    keys: set[str] = field(default_factory=set)
    overlays: dict[str, dict[str, Any]] = field(default_factory=dict)


def rendered_key(name: str, spec: Any) -> str:
    """The key the render gives a scope's ``name``: its kiro-safe alias, or the one Playwright key."""
    return CANONICAL_KEY if is_playwright(spec) else mcp_server_alias(name)


def scope_view(reads: Iterable[Mapping[str, Any]], crew: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the scopes alone declare under each rendered key: shared scopes fill gaps, the crew store updates.

    ``reads`` are the shared scopes' server maps, highest priority first; ``crew`` the crew store's.
    Keys are the ones the render gives them (:func:`rendered_key`).
    """
    view: dict[str, dict[str, Any]] = {}
    for servers in reads:
        for name, spec in servers.items():
            if isinstance(spec, dict):
                view.setdefault(rendered_key(name, spec), dict(spec))
    for servers in crew:
        for name, spec in servers.items():
            if isinstance(spec, dict):
                view.setdefault(rendered_key(name, spec), {}).update(spec)
    return view


def crew_fields(crew: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """The fields the crew store sets, by rendered key."""
    out: dict[str, set[str]] = {}
    for servers in crew:
        for name, spec in servers.items():
            if isinstance(spec, dict):
                out.setdefault(rendered_key(name, spec), set()).update(spec)
    return out


def reclaim(base_servers: dict[str, Any], records: Mapping[str, Any], view: Mapping[str, dict[str, Any]],
            reserved: set[str]) -> Reclaimed:
    """Take the render's own entries out of ``base_servers`` (in place); see the module docstring."""
    out = Reclaimed()
    for key, entry in list(base_servers.items()):
        if key in reserved or not isinstance(entry, dict):
            continue
        record = records.get(key)
        if isinstance(record, dict):
            if _launch(entry) != _launch(record):
                continue  # the user changed how it starts: their entry now
            ours = record
        elif key in view and _launch(view[key]) and _launch(entry) == _launch(view[key]):
            ours = {k: v for k, v in entry.items() if k in LAUNCH_KEYS or view[key].get(k) == v}
        else:
            continue
        user = {k: v for k, v in entry.items()
                if k not in LAUNCH_KEYS and k not in _SCOPE_DECIDED and (k not in ours or ours[k] != v)}
        del base_servers[key]
        out.keys.add(key)
        if user:
            out.overlays[key] = user
    return out


def lay_back(servers: dict[str, dict[str, Any]], reclaimed: Reclaimed, crew: Mapping[str, set[str]]) -> list[str]:
    """Put the user's own fields back on the re-derived entries; answer the reclaimed keys no scope declares now.

    ``reclaimed.overlays`` is narrowed to the fields actually laid back (a field the crew store sets is
    the crew store's), so the record of this render knows exactly which fields are the user's.
    """
    for key, user in list(reclaimed.overlays.items()):
        entry = servers.get(key)
        kept = {k: v for k, v in user.items() if k not in crew.get(key, ())} if isinstance(entry, dict) else {}
        if isinstance(entry, dict):
            entry.update(kept)
        reclaimed.overlays[key] = kept
    return sorted(k for k in reclaimed.keys if k not in servers)


def records_for(servers: Mapping[str, Any], *, user_owned: set[str], not_scoped: set[str], reclaimed: Reclaimed,
                previous: Mapping[str, Any], keep_previous: bool) -> dict[str, dict[str, Any]]:
    """The record of this render: every written entry the scopes gave, minus the user's laid-back fields.

    ``not_scoped`` (managed and app servers) are never recorded. ``user_owned`` are base keys
    left in the base (the user's entries): not recorded, except
    that, when ``keep_previous`` (a scope could not be read, so nothing was taken back), their
    previous record is kept.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, entry in servers.items():
        if not isinstance(entry, dict) or key in not_scoped:
            continue
        if key in user_owned:
            if keep_previous and isinstance(previous.get(key), dict):
                out[key] = previous[key]
            continue
        user = reclaimed.overlays.get(key, {})
        out[key] = {k: v for k, v in entry.items() if k not in _SCOPE_DECIDED and k not in user}
    return out


__all__ = ["LAUNCH_KEYS", "Reclaimed", "crew_fields", "lay_back", "reclaim", "records_for", "scope_view"]
