"""Who owns each ``kirocrew-core`` tool name: every plugin's ``core_mcp_tools()``, clashes decided.

A tool's name is all a session calls it by, so a plugin that took a core name would take the call,
and could serve a ``strict`` tool with no identity at all. The rule:

* a name contributed by kirocrew-core or an open-edition member keeps that tool, whatever else
  contributes it; the others are refused;
* two plugins outside the open edition: the first in call order (``tryfirst``, plain, ``trylast``,
  then plugin name; never load order) keeps it and the later one is refused;
* two open-edition contributions of one name are our bug: :class:`ToolNameClash`, loudly.

A refusal is recorded on the refused plugin as a :class:`~kirocrew_core.plugins.PluginProblem`
(``tool_name_taken``), which ``kirocrew plugins`` and ``kirocrew doctor`` show, and logged once.
The refused plugin's other tools are still served.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kirocrew_core.plugins import PluginLoadError, PluginProblem

if TYPE_CHECKING:
    from kirocrew_core.contributions import CoreMcpTool
    from kirocrew_core.plugins import KirocrewPluginManager

log = logging.getLogger(__name__)

TOOL_NAME_TAKEN = "tool_name_taken"


class ToolNameClash(PluginLoadError):
    """Two open-edition contributions share a ``kirocrew-core`` tool name: a bug in kirocrew, never served."""

    code = "tool_name_clash"


def tool_prefix(plugin: str) -> str:
    """The prefix the docs ask a third-party plugin's tool names to start with: ``acme-tools`` → ``acme_tools_``."""
    return plugin.replace("-", "_").replace(".", "_") + "_"


def collect_tools(pm: KirocrewPluginManager) -> dict[str, CoreMcpTool]:
    """Every served tool by name, clashes decided as the module docstring says; refusals recorded on ``pm``.

    Raises :class:`ToolNameClash` when two open-edition contributions share a name.
    """
    from kirocrew_core.contributions import CoreMcpTool, flatten
    from kirocrew_core.plugins import call_hook

    call = call_hook(pm, "core_mcp_tools", on_error="skip")
    offers: dict[str, list[tuple[str, CoreMcpTool]]] = {}
    for contribution in flatten(call.contributions):
        tool = contribution.value
        if not isinstance(tool, CoreMcpTool):
            log.error("plugin %r returned %r from core_mcp_tools(); expected a CoreMcpTool", contribution.plugin, tool)
            continue
        offers.setdefault(tool.name, []).append((contribution.plugin, tool))
    tools: dict[str, CoreMcpTool] = {}
    for name, contributed in offers.items():
        ours = [plugin for plugin, _ in contributed if pm.is_open_edition(plugin)]
        if len(ours) > 1:
            raise ToolNameClash(f"kirocrew-core tool {name!r} is contributed by open-edition plugins "
                                f"{' and '.join(map(repr, ours))}; each name must have one owner")
        winner = next((i for i, (plugin, _) in enumerate(contributed) if pm.is_open_edition(plugin)), 0)
        owner, tools[name] = contributed[winner]
        for index, (plugin, _) in enumerate(contributed):
            if index != winner:
                _refuse(pm, name, plugin, owner)
    return tools


def _refuse(pm: KirocrewPluginManager, name: str, plugin: str, owner: str) -> None:
    if plugin == owner:
        why = "the plugin contributes that name twice; its first tool of that name is kept"
    elif pm.is_open_edition(owner):
        why = (f"the name belongs to {owner!r} ({pm.distribution_of(owner)}), and the open edition's tool names "
               "always win")
    else:
        why = (f"plugin {owner!r} ({pm.distribution_of(owner)}) contributes it too and comes first in call order "
               "(tryfirst, plain, trylast, then plugin name), so it keeps the name")
    message = (f"kirocrew-core tool {name!r} from plugin {plugin!r} was refused: {why}. Name third-party tools "
               f"with the plugin's prefix ({tool_prefix(plugin)}…)")
    if pm.add_problem(plugin, PluginProblem(TOOL_NAME_TAKEN, message)):
        log.error("%s", message)
