"""The ``kirocrew`` console script: a bare ``kirocrew mcp-<server>`` relays to the host, anything else is the CLI.

MCP clients start ``kirocrew mcp-conversations`` (and the other servers) for every session,
so that form must start in a few tens of milliseconds: it goes straight to the relay
(:mod:`kirocrew_core.relay`, standard library only) without importing click or any plugin.
``kirocrew learn context`` and ``kirocrew skills context`` (run by the agent's ``agentSpawn`` hooks at every
session start) skip click and the plugins too. Every other command line, and a server the host does not
serve, goes to :func:`kirocrew_core.cli.main` unchanged. Standard library only.
"""

from __future__ import annotations

import sys

RELAY_PREFIX = "mcp-"
#: What the rendered agent's ``agentSpawn`` hook runs at every session start: as cheap as the relay.
LESSONS_CONTEXT = ["learn", "context"]
SKILLS_CONTEXT = ["skills", "context"]


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``kirocrew`` and ``python -m kirocrew_core``)."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) == 1 and _server_command(args[0]):
        from kirocrew_core import relay

        status = relay.run(args[0])
        if status != relay.NOT_HOSTED:
            sys.exit(status)
    if args == LESSONS_CONTEXT:
        from kirocrew_core.lessons.context import print_context

        print_context()
        return
    if args == SKILLS_CONTEXT:
        from kirocrew_core.skills.context import print_context as print_skills

        print_skills()
        return
    from kirocrew_core.cli import main as cli_main

    cli_main(args)


def _server_command(arg: str) -> bool:
    """``mcp-<name>`` with a plain name (letters, digits, ``-``, ``_``): an MCP server's relay form."""
    name = arg[len(RELAY_PREFIX):]
    return arg.startswith(RELAY_PREFIX) and name[:1].isalnum() and name.replace("-", "_").isidentifier()
