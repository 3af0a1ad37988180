"""Core builtin plugin: Agent Skills (``skill_search``, ``skill_discover``, ``skill_fetch``, the browse
transforms, ``kirocrew skills``, and the ``agentSpawn`` hook that tells every session its skills).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("skills", "kirocrew_core.skills.cli:skills",
                         "List, read and search the Agent Skills sessions see; install one from a registry.")


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.skills.tools import skill_tools

    return skill_tools()


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    """``kirocrew-skills-admin``: the owner's install, for a page to call."""
    from kirocrew_core.skills.admin import hosted_server

    return [hosted_server()]


@hookimpl(optionalhook=True)
def agent_spawn_hooks() -> list[list[str]]:
    """``kirocrew skills context``: kiro-cli runs it in the session's directory; it prints the skills in scope."""
    return [["kirocrew", "skills", "context"]]
