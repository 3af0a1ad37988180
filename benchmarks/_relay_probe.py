#!/usr/bin/env python3
"""Where a relay's start goes: the phases of ``kirocrew mcp-<server>`` timed inside one fresh process.

Not a benchmark itself: ``relay_start.py`` runs ``python benchmarks/_relay_probe.py mcp-echo``
with a host up and reads one line of ``phase=ms`` pairs: the relay's imports, building the
relay (its code fingerprint and caller block), connecting and the host's welcome, then the
``initialize`` and ``tools/list`` round trips over the relay's own host socket. Only ``time``
(a built-in module) is imported before the clock starts, so ``import`` is what the relay pays.
"""

import time

_start = time.perf_counter()

import sys  # noqa: E402  (built in, already loaded: costs nothing)

from kirocrew_core import relay  # noqa: E402

_imported = time.perf_counter()


def main() -> None:
    from kirocrew_core.host import client, protocol

    command = sys.argv[1] if len(sys.argv) > 1 else "mcp-echo"
    built_at = time.perf_counter()
    hop = relay.Relay(command)
    built = time.perf_counter()
    if not hop.open(first=True) or hop.sock is None:
        raise SystemExit(f"the host does not serve {command}")
    opened = time.perf_counter()
    sock = hop.sock
    sock.setblocking(True)
    buffer = bytearray(hop.from_host)
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}
    sock.sendall(protocol.encode({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}))
    client.read_line(sock, buffer, protocol.MAX_LINE_BYTES)
    initialized = time.perf_counter()
    sock.sendall(protocol.encode({"jsonrpc": "2.0", "method": "notifications/initialized"})
                 + protocol.encode({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
    client.read_line(sock, buffer, protocol.MAX_LINE_BYTES)
    listed = time.perf_counter()
    hop.close()
    phases = {"import": _imported - _start, "fingerprint+block": built - built_at, "connect+welcome": opened - built,
              "initialize": initialized - opened, "tools/list": listed - initialized}
    print(" ".join(f"{name}={seconds * 1000:.3f}" for name, seconds in phases.items()))


if __name__ == "__main__":
    main()
