"""A stdio MCP fixture server on the mcp SDK, with the misbehaviours real servers show.

``python -m kirocrew_testing.servers.stdio_server [--tools N | --names a,b] [variant]``

Variants (at most one):

``--hang``
    Reads every line it is sent and never answers, not even ``initialize``. It
    exits when its stdin closes, unless ``--ignore-eof`` is also given (then only
    a signal ends it), so a client's teardown path can be exercised either way.
    With ``--until PATH`` it also exits (status 1, before answering anything) once
    ``PATH`` exists, so a test ends the hang when it has seen what it waited for
    instead of waiting for the client's deadline.
``--exit-during-handshake``
    Reads the ``initialize`` request, writes a line to stderr, exits 1.
``--banner N``
    Prints N non-JSON lines to stdout before speaking JSON-RPC, as some servers
    do (npm wrappers, ``dotenv`` notices). The mcp SDK's stdio client logs each
    such line as a parse error, hands the session an exception value for it (the
    session logs it and carries on) and then completes the handshake normally,
    so a tolerant client lists the tools.
"""

from __future__ import annotations

import argparse
import os
import sys

from kirocrew_core.sdk_models import prepare as prepare_sdk_models
from kirocrew_testing.servers._common import add_tool_options, build_mcp_server


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stdio_server", description=__doc__.splitlines()[0])
    add_tool_options(parser)
    variant = parser.add_mutually_exclusive_group()
    variant.add_argument("--hang", action="store_true", help="never answer anything")
    variant.add_argument("--exit-during-handshake", action="store_true",
                         help="read initialize, then exit 1")
    variant.add_argument("--banner", type=int, default=0, metavar="N",
                         help="print N non-JSON lines to stdout first")
    parser.add_argument("--ignore-eof", action="store_true",
                        help="with --hang: keep hanging after stdin closes")
    parser.add_argument("--until", metavar="PATH",
                        help="with --hang: exit 1 once PATH exists")
    return parser.parse_args(argv)


def _hang(ignore_eof: bool) -> None:
    import time

    for _ in sys.stdin.buffer:
        pass  # swallow requests without a word
    while ignore_eof:
        time.sleep(3600)


def _hang_until(path: str, ignore_eof: bool) -> None:
    """:func:`_hang`, but exit 1 (before answering anything) once ``path`` exists."""
    import threading
    import time
    from pathlib import Path

    reader = threading.Thread(target=_hang, args=(False,), daemon=True)
    reader.start()
    while not Path(path).exists():
        if not (ignore_eof or reader.is_alive()):
            return
        time.sleep(0.05)
    sys.stderr.write("fixture: released from the hang\n")
    sys.stderr.flush()
    # Not SystemExit: interpreter shutdown with the reader thread blocked on stdin aborts (SIGABRT, not 1).
    os._exit(1)


def _exit_during_handshake() -> None:
    sys.stdin.buffer.readline()  # the initialize request
    sys.stderr.write("fixture: exiting during the handshake\n")
    sys.stderr.flush()
    raise SystemExit(1)


def main(argv: list[str] | None = None) -> None:
    prepare_sdk_models()
    args = parse_args(argv)
    if args.hang:
        if args.until:
            _hang_until(args.until, args.ignore_eof)
        else:
            _hang(args.ignore_eof)
        return
    if args.exit_during_handshake:
        _exit_during_handshake()
    server = build_mcp_server(args)  # validates the tool options before anything is printed
    for i in range(1, args.banner + 1):
        sys.stdout.write(f"fixture banner line {i}: starting {args.label}...\n")
    sys.stdout.flush()
    server.run()  # stdio; returns when the client closes stdin


if __name__ == "__main__":
    main()
