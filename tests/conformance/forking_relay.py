"""A stdio "relay" whose host connection was opened by another process that then exits: the pid-reuse attack's shape.

The process the client starts (the relay) forks an *opener*, which connects to the host like
``kirocrew mcp-core`` (its own pid in the caller block, checked against the socket's kernel
credentials) and hands the connected socket back (``SCM_RIGHTS``). The relay relays the client's
lines on it; once it has relayed the answer to the client's ``tools/list``, the opener exits and is
reaped, so the process the host pinned is gone while the connection lives on. Every request after
that is answered ``caller_gone``; a client must show a ``tools/call`` so refused as an ordinary tool
error. The relay exits when the client closes stdin.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from kirocrew_core.host import client, protocol
from kirocrew_core.host.fingerprint import code_fingerprint


def open_elsewhere() -> tuple[socket.socket, int, socket.socket]:
    """A host connection opened (and welcomed) by a forked opener: (the socket, the opener's pid, its control line)."""
    client.ensure_host()
    ours, theirs = socket.socketpair()
    opener = os.fork()
    if opener == 0:
        ours.close()
        block = protocol.caller_block("", protocol.SESSION_TYPE_RELAY, os.getpid(), os.getppid(), None)
        hello = protocol.hello(protocol.KIND_MCP, server="mcp-core", fingerprint=code_fingerprint(), caller=block)
        sock, _, leftover = client.open_mcp(hello, 30)
        assert not leftover
        socket.send_fds(theirs, [b"connected"], [sock.fileno()])
        theirs.recv(16)  # until the relay says "exit"
        os._exit(0)
    theirs.close()
    _, [fd], _, _ = socket.recv_fds(ours, 16, 1)
    return socket.socket(fileno=fd), opener, ours


def main() -> None:
    sock, opener, control = open_elsewhere()
    sock.settimeout(60)
    buffer = bytearray()
    out = sys.stdout.buffer
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        message = json.loads(raw)
        sock.sendall(raw if raw.endswith(b"\n") else raw + b"\n")
        if not protocol.is_request(message):
            continue
        while True:  # relay the host's lines up to the answer to this request
            line = client.read_line(sock, buffer, protocol.MAX_REPLY_LINE_BYTES)
            out.write(line + b"\n")
            out.flush()
            answer = json.loads(line)
            if answer.get("id") == message["id"] and "method" not in answer:
                break
        if message["method"] == "tools/list" and opener:
            control.sendall(b"exit")
            os.waitpid(opener, 0)  # gone and reaped: its pid is free for any later process
            opener = 0


if __name__ == "__main__":
    main()
