"""Kiro-safe server keys: kiro-cli splits tool references on ``/``, so a key may not hold one.

Stable API:

- ``mcp_server_alias(name) -> str``: the kiro-safe alias of a server key. A
  name without ``/`` is returned unchanged; otherwise everything up to the first
  ``:`` is dropped (``npm:``), leading ``@`` stripped, ``/`` and ``@`` become
  ``-``, any other character outside ``[A-Za-z0-9_.-]`` becomes ``-``, and
  ``-`` is trimmed from both ends (``"mcp-server"`` if nothing is left). So
  ``npm:@playwright/mcp`` is ``playwright-mcp``. Many names share one alias.
- ``normalize_server_keys(config, *, reserved=()) -> dict[str, str]``: renames
  every slash-containing key of ``config["mcpServers"]`` in place to its alias,
  rewrites ``@old`` / ``@old/tool`` references in ``tools``, ``allowedTools``
  and the keys of ``toolAliases`` / ``toolsSettings``, and returns
  ``{old key: new key}``. Idempotent: a second pass changes nothing.
- ``specs_equivalent(a, b) -> bool``: the comparison used to decide that two
  keys name the same server (empty ``env``/``args`` do not count).

Collisions never lose data: a distinct spec whose alias is taken gets the
lowest free ``-N`` suffix (from ``-2``), while an equivalent spec reuses the
family member it matches. ``reserved`` names (managed servers) are never
taken by an alias, so ``kirocrew/core`` cannot impersonate ``kirocrew-core``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

FALLBACK_ALIAS = "mcp-server"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Reference lists whose entries are "@server" or "@server/tool" strings.
_REF_LISTS = ("tools", "allowedTools")
# Maps whose keys are references.
_REF_KEYED = ("toolAliases", "toolsSettings")


def mcp_server_alias(name: str) -> str:
    """The kiro-safe alias of ``name``; unchanged when it holds no ``/``."""
    if "/" not in name:
        return name
    _, colon, rest = name.partition(":")
    body = rest if colon else name
    body = body.lstrip("@").replace("/", "-").replace("@", "-")
    body = _UNSAFE.sub("-", body).strip("-")
    return body or FALLBACK_ALIAS


def _normalized(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    return {k: v for k, v in spec.items() if not (k in ("env", "args") and not v)}


def specs_equivalent(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` launch the same server (empty ``env``/``args`` ignored)."""
    return _normalized(a) == _normalized(b)


def _family(base: str, keys: Iterable[str]) -> list[str]:
    """``base`` and its ``base-N`` siblings present in ``keys``, lowest suffix first."""
    sibling = re.compile(re.escape(base) + r"-([0-9]+)")
    members: list[tuple[int, str]] = []
    for key in keys:
        if key == base:
            members.append((1, key))
        else:
            match = sibling.fullmatch(key)
            if match and int(match.group(1)) >= 2:
                members.append((int(match.group(1)), key))
    return [key for _, key in sorted(members)]


def _free_name(base: str, taken: Collection[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def _rewrite_ref(ref: Any, renames: dict[str, str]) -> Any:
    if not isinstance(ref, str) or not ref.startswith("@"):
        return ref
    body = ref[1:]
    # Longest old key first: "@a/b/tool" belongs to "a/b" rather than "a".
    for old in sorted(renames, key=len, reverse=True):
        if body == old:
            return "@" + renames[old]
        if body.startswith(old + "/"):
            return "@" + renames[old] + body[len(old):]
    return ref


def _dedup(items: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for item in items:
        marker = item if isinstance(item, str) else id(item)
        if marker in seen:
            continue
        seen.add(marker)
        out.append(item)
    return out


def rewrite_refs(config: dict[str, Any], renames: dict[str, str]) -> None:
    """Rewrite ``@old`` references to ``@new`` everywhere a kiro agent holds them (in place)."""
    if not renames:
        return
    for key in _REF_LISTS:
        value = config.get(key)
        if isinstance(value, list):
            config[key] = _dedup([_rewrite_ref(ref, renames) for ref in value])
    for key in _REF_KEYED:
        value = config.get(key)
        if isinstance(value, dict):
            rewritten: dict[str, Any] = {}
            for ref, item in value.items():
                rewritten.setdefault(_rewrite_ref(ref, renames), item)
            config[key] = rewritten


def normalize_server_keys(config: dict[str, Any], *, reserved: Collection[str] = ()) -> dict[str, str]:
    """Give every slash-containing server key its alias, in place; return ``{old: new}``.

    Equivalent specs converge on one key (including equivalent ``-N`` siblings
    already present from an earlier run); distinct specs get ``-N`` suffixes.
    A config without ``mcpServers`` or without slash keys is left untouched.
    """
    servers = config.get("mcpServers")
    if not isinstance(servers, dict) or not any("/" in key for key in servers):
        return {}
    reserved = set(reserved)
    renames: dict[str, str] = {}
    result: dict[str, Any] = {key: spec for key, spec in servers.items() if "/" not in key}
    position: dict[str, str] = {}  # slash key -> the new key that takes its place
    touched: set[str] = set()
    for key, spec in servers.items():
        if "/" not in key:
            continue
        base = mcp_server_alias(key)
        touched.add(base)
        target = next(
            (m for m in _family(base, result) if m not in reserved and specs_equivalent(result[m], spec)),
            None,
        )
        if target is None:
            target = _free_name(base, set(result) | reserved)
            result[target] = spec
            position[key] = target
        renames[key] = target
    # Fold equivalent siblings left by older builds, but only in families this pass touched:
    # a slash-free config (and a user's own "x" / "x-2") is never rewritten.
    for base in sorted(touched):
        kept: list[str] = []
        for member in _family(base, result):
            if member in reserved:
                continue
            twin = next((k for k in kept if specs_equivalent(result[k], result[member])), None)
            if twin is None:
                kept.append(member)
                continue
            renames[member] = twin
            for old, new in renames.items():
                if new == member:
                    renames[old] = twin
            del result[member]
    # Each key keeps the place of the entry it came from, so the user's ordering survives.
    ordered = [position.get(key, key) for key in servers]
    servers.clear()
    servers.update((key, result[key]) for key in ordered if key in result)
    rewrite_refs(config, renames)
    return renames
