"""Run one conformance client the way a crew session would: from a shell its kiro-cli started.

    python in_session_client.py typescript|python PLAN.json REPORT.json

A session's fake kiro-cli runs this with ``!shell``, so the client and the ``kirocrew
mcp-conversations`` relay it starts descend from that kiro-cli and inherit its environment (its
session key): the host resolves the relay to the session, as it would any client the session's
model started. PLAN.json is ``{"calls": [...]}`` as the runners take them; the runner's report is
written to REPORT.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_clients import StdioServer, run_python_client, run_typescript_client
from kirocrew_testing.fixtures import kirocrew_argv


def main(which: str, plan: Path, report: Path) -> None:
    calls = json.loads(plan.read_text())["calls"]
    server = StdioServer(kirocrew_argv("mcp-conversations"), dict(os.environ), report.parent,
                         report.parent / f"{which}-in-session.stderr")
    runner = run_typescript_client if which == "typescript" else run_python_client
    report.write_text(json.dumps(runner(server, calls)))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
