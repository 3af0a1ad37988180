"""Core builtin plugin: the ``resource_status`` tool (the host's room for more kiro-cli workers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from kirocrew_core.contributions import CoreMcpTool


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.resources import resource_tools

    return resource_tools()
