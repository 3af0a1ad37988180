"""``kirocrew mcp-computer``: the computer-use MCP server on stdio.

Bare, it is a relay to the host (:mod:`kirocrew_core.relay`), whose one chokepoint serves every
client (:mod:`kirocrew_computer.hosted`). The ``kirocrew`` launcher takes that path before click
is even imported; this command only sees the bare form when it is reached through the full CLI
(``python -m kirocrew_core.cli``). ``--standalone`` is the in-process server of before the host,
with a chokepoint (and a desktop driver) of its own.

Registered lazily, so ``kirocrew --help`` never imports the mcp SDK.
"""

from __future__ import annotations

import logging
import sys

import click

from kirocrew_core.errors import KirocrewError

from kirocrew_computer.plugin import SERVER_COMMAND, SERVER_NAME


@click.command(SERVER_COMMAND)
@click.option("--standalone", is_flag=True,
              help="Serve in this process instead of relaying to the host: a chokepoint and desktop driver of "
                   "its own, ending with it. For environments where no background process may run.")
def mcp_computer(standalone: bool) -> None:
    """Serve the kirocrew-computer MCP on stdin/stdout.

    A stdio MCP server meant to be launched by an MCP client (kiro-cli via the
    rendered agent), never auto-approved. It lists no tools until the owner
    turns the keystone on (`kirocrew computer keystone enable`).

    Without options it relays to the kirocrew host (started in the background if
    none runs), whose one chokepoint acts on the desktop of the host's environment
    (DISPLAY and the session bus it inherited from the command that started it).
    With --standalone it serves in this process instead.

    \b
    An MCP client's entry for it:
      {"command": "kirocrew", "args": ["mcp-computer"]}
    """
    if not standalone:
        _relay()
        return
    import asyncio

    from kirocrew_core.sdk_models import prepare as prepare_sdk_models

    prepare_sdk_models()

    from kirocrew_computer.server import serve_stdio

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="kirocrew mcp-computer: %(levelname)s: %(name)s: %(message)s")
    if sys.stdin.isatty():
        click.echo("kirocrew mcp-computer --standalone speaks MCP on stdin/stdout and is meant to be launched by "
                   "an MCP client; press Ctrl-D to stop.", err=True)
    asyncio.run(serve_stdio())


def _relay() -> None:
    """Bare ``mcp-computer`` reached through click: the same relay the launcher runs."""
    from kirocrew_core import relay

    status = relay.run(SERVER_COMMAND)
    if status == relay.NOT_HOSTED:
        raise KirocrewError(f"the kirocrew host serves no {SERVER_NAME} (is the computer plugin disabled in the "
                            "host's environment?); run `kirocrew mcp-computer --standalone` to serve in this process",
                            code="not_hosted")
    sys.exit(status)
