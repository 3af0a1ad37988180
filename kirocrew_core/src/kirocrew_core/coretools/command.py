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
    run_host_relay("mcp-core", "kirocrew-core")


def run_host_relay(command: str, server: str) -> None:
    """Relay stdio to the host's ``server`` (started on demand) and exit with the relay's status.

    For servers with no standalone mode (``kirocrew mcp-core``, ``kirocrew mcp-cron``): a host
    that serves no ``server`` runs older code, which the error says how to replace.
    """
    from kirocrew_core import relay

    status = relay.run(command)
    if status == relay.NOT_HOSTED:
        raise KirocrewError(f"the running kirocrew host serves no {server} (it runs older code); stop it with "
                            "`kirocrew host stop` and retry", code="unknown_server")
    sys.exit(status)
