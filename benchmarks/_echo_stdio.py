#!/usr/bin/env python3
"""The echo test server (``kirocrew_testing.servers.hosted_echo``) run in this process over stdio, without a host.

Not a benchmark itself: ``relay_start.py`` and ``relay_roundtrip.py`` spawn it
(``python benchmarks/_echo_stdio.py``) as the in-process counterpart of ``kirocrew mcp-echo``
through a relay, so the difference between the two is what the relay and the host add. The
server object is the one the host serves (its ``host_mcp_servers()`` factory); only the
transport differs: the SDK's ``stdio_server`` here, the host socket there.
"""

from __future__ import annotations

import anyio
from mcp.server.stdio import stdio_server

from kirocrew_testing.servers.hosted_echo import host_mcp_servers


async def main() -> None:
    server = host_mcp_servers()[0].server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
