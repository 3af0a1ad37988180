"""Core builtin plugin: crews (``select_crew``, ``route_crew`` and ``kirocrew crew``).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CoreMcpTool


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("crew", "kirocrew_core.crews.cli:crew",
                         "List, add and remove crews: named bindings for spawn_run(crew=NAME).")


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.crews.tools import crew_tools

    return crew_tools()
