#!/usr/bin/env python3
"""Where a relay's start goes: the steps of ``kirocrew mcp-<server>`` timed inside one fresh process.

Not a benchmark itself: ``relay_start.py`` runs ``python benchmarks/_relay_probe.py mcp-echo``
with a host up and reads one line of ``step=ms`` pairs. The steps are the relay's, made with the
same public pieces it uses: its imports (``kirocrew_core.relay``), the code fingerprint, the
connection (the socket directory and the peer checked), the hello and the host's welcome, then
the ``initialize`` and ``tools/list`` round trips on that connection. Only ``time`` (a built-in
module) is imported before the clock starts, so ``import`` is what the relay pays.
"""

import time

_start = time.perf_counter()

import os  # noqa: E402  (already loaded by the interpreter's start: costs nothing)
import sys  # noqa: E402

from kirocrew_core import relay  # noqa: E402, F401  (what the relay imports, timed)

_imported = time.perf_counter()


def main() -> None:
    from kirocrew_core.host import client, protocol
    from kirocrew_core.host.fingerprint import code_fingerprint

    command = sys.argv[1] if len(sys.argv) > 1 else "mcp-echo"
    began = time.perf_counter()
    fingerprint = code_fingerprint()
    fingerprinted = time.perf_counter()
    sock = client.connect(None)
    connected = time.perf_counter()
    block = protocol.caller_block("", protocol.SESSION_TYPE_RELAY, os.getpid(), os.getppid())
    sock.sendall(protocol.hello(protocol.KIND_MCP, server=command, fingerprint=fingerprint, caller=block))
    buffer = bytearray()
    client.parse_answer(client.read_line(sock, buffer), protocol.WELCOME)
    welcomed = time.perf_counter()
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}
    sock.sendall(protocol.encode({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
    client.read_line(sock, buffer, protocol.MAX_LINE_BYTES)
    initialized = time.perf_counter()
    sock.sendall(protocol.encode({"jsonrpc": "2.0", "method": "notifications/initialized"})
                 + protocol.encode({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    client.read_line(sock, buffer, protocol.MAX_LINE_BYTES)
    listed = time.perf_counter()
    sock.close()
    steps = {"import": _imported - _start, "fingerprint": fingerprinted - began, "connect": connected - fingerprinted,
             "hello+welcome": welcomed - connected, "initialize": initialized - welcomed,
             "tools/list": listed - initialized}
    print(" ".join(f"{name}={seconds * 1000:.3f}" for name, seconds in steps.items()))


if __name__ == "__main__":
    main()
