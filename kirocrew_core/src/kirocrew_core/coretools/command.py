"""``kirocrew mcp-core``: the kirocrew-core MCP server on stdio, always a relay to the host.

The ``kirocrew`` launcher relays the bare form before click is imported; this command sees
it only through the full CLI (``python -m kirocrew_core.cli mcp-core``). There is no
standalone mode: the tools act on sessions the host runs, so without a host there is
nothing for them to act on; the relay's own errors (``host_unavailable``…) apply.
"""

from __future__ import annotations

import sys

import click

from kirocrew_core.errors import KirocrewError


@click.command("mcp-core")
def mcp_core() -> None:
    """Serve the kirocrew-core MCP server on stdin/stdout (a relay to the kirocrew host).

    Meant to be launched by kiro-cli from the rendered agent file, not typed at a terminal.

    \b
    An MCP client's entry for it:
      {"command": "kirocrew", "args": ["mcp-core"]}
    """
    from kirocrew_core import relay

    status = relay.run("mcp-core")
    if status == relay.NOT_HOSTED:
        raise KirocrewError("the running kirocrew host serves no kirocrew-core (it runs older code); stop it with "
                            "`kirocrew host stop` and retry", code="unknown_server")
    sys.exit(status)
