"""Tool aliases for connected providers: same-named tools of different providers must not collide.

kiro-cli exposes an MCP tool to the model under its bare name, so GitHub's,
Linear's and GitLab's ``list_issues`` mounted together would shadow each other.
The registry declares, per provider, the tools that are known to collide
(``tool_aliases``: ``{tool: "<slug>_<tool>"}``). Among the providers actually
mounted, a declared tool that more than one of them claims is renamed for
*every* claimant (none keeps the bare name: which one would be arbitrary); a
declared tool only one mounted provider claims keeps its name.

kiro-cli's ``toolAliases`` keys a tool as ``@<server key>/<tool>``, and a spec
mounts a provider under :func:`kirocrew_connections.mint.server_alias` of its
slug, so :func:`connections_tool_aliases` keys each rename by that mounted
alias, split on the *last* ``/`` (a tool name never holds one). Registry slugs
hold no ``/`` today, so the re-keying is the identity: it holds the shape of the
spec we write, not a live defect.

Two writers use it: the agent file (kirocrew-mcp's ``agent_tool_aliases()``
hook, :func:`mounted_tool_aliases` over the entries the file mounts), and a
spec mounting several providers at once. A single-server mint spec never
needs one: one server cannot collide with itself, so it carries no
``toolAliases``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kirocrew_connections.registry import Provider


def resolve_tool_aliases(providers: Iterable[Provider]) -> dict[str, str]:
    """``{"@<slug>/<tool>": alias}`` for every declared tool two or more of ``providers`` claim."""
    claimants: dict[str, list[Provider]] = defaultdict(list)
    for provider in providers:
        for tool in provider.tool_aliases:
            claimants[tool].append(provider)
    return {f"@{provider.slug}/{tool}": provider.tool_aliases[tool]
            for tool, owners in claimants.items() if len({p.slug for p in owners}) > 1
            for provider in owners}


def connections_tool_aliases(providers: Iterable[Provider],
                             server_alias: Callable[[str], str] | None = None) -> dict[str, str]:
    """The ``toolAliases`` a spec mounting ``providers`` needs, keyed by the mounted server alias, sorted."""
    alias_of: Callable[[str], str]
    if server_alias is None:
        from kirocrew_connections.mint import server_alias as alias_of
    else:
        alias_of = server_alias
    renamed: dict[str, str] = {}
    for key, alias in resolve_tool_aliases(providers).items():
        slug, _, tool = key[1:].rpartition("/")
        renamed[f"@{alias_of(slug)}/{tool}"] = alias
    return dict(sorted(renamed.items()))


def mounted_tool_aliases(providers: Iterable[Provider], servers: Mapping[str, Mapping[str, Any]],
                         server_alias: Callable[[str], str] | None = None) -> dict[str, str]:
    """The renames an agent mounting ``servers`` needs, among ``providers`` whose entry it mounts.

    A provider's entry is the one under its mounted alias at its endpoint (a
    user's same-named server elsewhere is not it, as on the card), and not
    ``disabled``: kiro-cli loads no tools from a disabled server, so it collides
    with nothing.
    """
    from kirocrew_connections.cards import is_provider_entry

    alias_of: Callable[[str], str]
    if server_alias is None:
        from kirocrew_connections.mint import server_alias as alias_of
    else:
        alias_of = server_alias
    mounted = []
    for provider in providers:
        key = alias_of(provider.slug)
        entry = servers.get(key)
        if entry is None or entry.get("disabled", False) is not False:
            continue
        if is_provider_entry(provider, provider.slug, entry.get("url")):
            mounted.append(provider)
    return connections_tool_aliases(mounted, alias_of)


def aliases_by_server(aliases: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``{server alias: {tool: alias}}``: the renames grouped by the server they apply to."""
    grouped: dict[str, dict[str, str]] = defaultdict(dict)
    for key, alias in aliases.items():
        server, _, tool = key[1:].rpartition("/")
        grouped[server][tool] = alias
    return dict(grouped)
