"""A stopping gateway takes the MCP page's probes with it: no probe child outlives a real `kirocrew serve`."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import httpx

from kirocrew_core import home, proc
from kirocrew_testing.mcp_fixtures import stdio_server_argv
from kirocrew_testing.processes import processes_running

WAIT_SECS = 60.0  # a bound on waiting for a process to appear or go, never a timing assertion


def hanging_server() -> dict[str, Any]:
    """A stdio server that never answers and keeps running after its stdin closes."""
    argv = stdio_server_argv("--hang", "--ignore-eof")
    return {"command": argv[0], "args": argv[1:]}


def wait_for(condition: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT_SECS
    while not (found := condition()):
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)
    return found


def test_a_gateway_stopped_mid_probe_leaves_no_probe_child_running(served_gateway, owner_client):
    home.kiro_global_mcp_file().parent.mkdir(parents=True, exist_ok=True)
    home.kiro_global_mcp_file().write_text(json.dumps({"mcpServers": {"slow": hanging_server()}}))
    crew_home = os.environ["KIROCREW_HOME"]
    answers: list[Any] = []

    def probe() -> None:
        try:
            answers.append(owner_client.post("/api/mcp/probe", json={"name": "slow"}, timeout=WAIT_SECS))
        except httpx.HTTPError as exc:  # the gateway went away under the request
            answers.append(exc)

    asker = threading.Thread(target=probe)
    asker.start()
    started = wait_for(lambda: processes_running(b"--hang", crew_home), "the probe started the server")

    proc.terminate(served_gateway.process, reason="test stops the gateway mid-probe")
    asker.join(WAIT_SECS)

    assert [pid for pid in started if processes_running(b"--hang", crew_home)] == [], \
        "the probe's server outlived the gateway"
    assert answers, "the probe request never returned"
