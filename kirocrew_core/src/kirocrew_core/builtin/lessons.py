"""Core builtin plugin: lessons (the ``learn_*`` tools, ``kirocrew learn``, and how later sessions see them).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation.
The two agent hooks are kirocrew-mcp's (``optionalhook``: a manager without that
plugin simply never calls them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CoreMcpTool


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("learn", "kirocrew_core.lessons.cli:learn",
                         "Keep, list and remove durable lessons every later kirocrew session is told.")


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.lessons.tools import lesson_tools

    return lesson_tools()


@hookimpl(optionalhook=True)
def agent_resources() -> list[str]:
    """The global lessons file, so every session starts with the global lessons in its context."""
    from kirocrew_core.lessons.store import ensure_global_file

    return [ensure_global_file().as_uri()]


@hookimpl(optionalhook=True)
def agent_spawn_hooks() -> list[list[str]]:
    """``kirocrew learn context``: kiro-cli runs it in the session's directory; it prints that workspace's lessons."""
    return [["kirocrew", "learn", "context"]]
