"""``kirocrew mcp-computer``: registered lazily, so ``kirocrew --help`` never imports the mcp SDK."""

from __future__ import annotations

import logging
import sys

import click


@click.command("mcp-computer")
def mcp_computer() -> None:
    """Serve the kirocrew-computer MCP on stdin/stdout.

    A stdio MCP server meant to be launched by an MCP client (kiro-cli via the
    rendered agent), never auto-approved. It lists no tools until the owner
    turns the keystone on (`kirocrew computer keystone enable`).
    """
    import asyncio

    from kirocrew_computer.server import serve_stdio

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="kirocrew mcp-computer: %(levelname)s: %(name)s: %(message)s")
    if sys.stdin.isatty():
        click.echo("kirocrew mcp-computer speaks MCP on stdin/stdout and is meant to be launched by an MCP "
                   "client; press Ctrl-D to stop.", err=True)
    asyncio.run(serve_stdio())
