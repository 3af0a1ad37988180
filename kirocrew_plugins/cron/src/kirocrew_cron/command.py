"""``kirocrew mcp-cron``: the kirocrew-cron MCP server on stdio, always a relay to the host.

The ``kirocrew`` launcher relays the bare form before click is imported; this command sees
it only through the full CLI. There is no standalone mode: jobs fire in the host's
scheduler, so without a host nothing would run them.
"""

from __future__ import annotations

import click


@click.command("mcp-cron")
def mcp_cron() -> None:
    """Serve the kirocrew-cron MCP server on stdin/stdout (a relay to the kirocrew host).

    Meant to be launched by kiro-cli (or another MCP client) from its config, not typed at a terminal.

    \b
    An MCP client's entry for it:
      {"command": "kirocrew", "args": ["mcp-cron"]}
    """
    from kirocrew_core.coretools.command import run_host_relay

    run_host_relay("mcp-cron", "kirocrew-cron")
