#!/usr/bin/env python3
"""``send_message`` through its real handler as a verified session, to the feed, to a webhook on 127.0.0.1,
and to an SMTP server that accepts and never answers (the timeout's bound).

    .venv/bin/python benchmarks/messages_send.py [--runs 30] [--timeout 1]

Under a throwaway crew home: each call plans (attribution, mute, channel), delivers, publishes the feed card
and records the message, every file written atomically with its fsync. The hanging server's row is how long
the tool call took with ``timeout_secs = --timeout``: it should sit just above the timeout, never at a hang.
Median/p90/min in ms, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from _bench import machine_load, row


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--timeout", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        os.environ.update(HOME=root, KIRO_HOME=f"{root}/.kiro", KIROCREW_HOME=f"{root}/crew")
        from kirocrew_core.config import set_entry
        from kirocrew_core.coretools.contract import CrewSession, ToolCall
        from kirocrew_core.messages import settings, store
        from kirocrew_core.messages.tools import send_message

        server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        hanging = socket.socket()
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(64)
        set_entry("channels", "hook", {"kind": "webhook"})
        settings.write_secret("hook", f"http://127.0.0.1:{server.server_port}/hook")
        set_entry("channels", "slow", {"kind": "email", "smtp_host": "127.0.0.1", "security": "plain",
                                       "smtp_port": hanging.getsockname()[1], "from_addr": "a@example.org",
                                       "to": ["b@example.org"], "timeout_secs": args.timeout})
        who = CrewSession("kcs1-" + "1" * 32, "conversation", "bench", agent="kirocrew")

        def send(channel: str) -> float:
            call = ToolCall("send_message", who, None, "strict", "session")
            start = time.perf_counter()
            asyncio.run(send_message({"text": "Build green.", "channel": channel}, call))
            return (time.perf_counter() - start) * 1000

        send("feed")
        feed = [send("feed") for _ in range(args.runs)]
        hook = [send("hook") for _ in range(args.runs)]
        slow = [send("slow") for _ in range(min(args.runs, 5))]
        outcomes = {m.outcome for m in store.all_messages()}
        server.shutdown()
        hanging.close()
    print(f"send_message, {args.runs} runs ({machine_load()}); outcomes seen: {', '.join(sorted(outcomes))}")
    print(row("feed only", feed))
    print(row("webhook on 127.0.0.1", hook))
    print(row(f"hanging SMTP, timeout {args.timeout}s", slow))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
