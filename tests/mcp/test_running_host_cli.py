"""Command lines that reach a running host: ``config set`` offering the session restart, ``doctor``'s probe results.

A real ``kirocrew serve`` runs in the test's own homes; the commands are the real console command in a
subprocess, and they reach the host the way a dashboard page does (its owner-only HTTP API).
"""

from __future__ import annotations

import json
import os
from typing import Any

from kirocrew_core import audit, home
from kirocrew_core.gateway.owner_client import call, running_host_url
from kirocrew_testing.fixtures import run_kirocrew
from kirocrew_testing.host_lines import running_host
from kirocrew_testing.mcp_fixtures import stdio_server_argv
from kirocrew_testing.policy import write_policy


def write_crew_store(servers: dict[str, Any]) -> None:
    path = home.crew_mcp_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))


def grants_of(name: str) -> list[str]:
    return json.loads(home.rendered_agent_file().read_text())["mcpServers"][name].get("autoApprove", [])


def restarts() -> list[dict[str, Any]]:
    return [r["fields"] for r in audit.tail(200) if r.get("event") == "sessions_restart"]


def host_settled() -> None:
    """The host's startup render has written the agent file (it runs in the background)."""
    from kirocrew_testing.host_lines import wait_for

    wait_for(home.rendered_agent_file().exists, 60)


def test_config_set_of_a_key_sessions_load_restarts_them_like_apply_and_restart(isolated_homes) -> None:
    argv = stdio_server_argv()
    write_crew_store({"echo": {"command": argv[0], "args": argv[1:], "autoApprove": ["tool_1"]}})
    write_policy(rules=[{"decision": "allow", "tool": "*"}])
    with running_host(dict(os.environ)):
        host_settled()
        assert grants_of("echo") == ["tool_1"]

        kept = run_kirocrew("config", "set", "governance.ceiling", "@echo", "--no-restart")
        assert kept.returncode == 0, kept.stderr
        assert "changes what kiro-cli sessions load" in kept.stdout and "Not restarted" in kept.stdout
        assert "Apply & Restart" in kept.stdout
        assert grants_of("echo") == ["tool_1"] and restarts() == []  # nothing rendered, nothing restarted

        done = run_kirocrew("config", "set", "governance.ceiling", "@echo", "--restart")
        assert done.returncode == 0, done.stderr
        assert "Restarted: 0 kiro-cli sessions closed or replaced" in done.stdout
        assert grants_of("echo") == []  # the restart rendered the agent under the new ceiling first
        assert [(r["reason"], r["mcp_sync_ok"]) for r in restarts()] == [("config_set", True)]


def test_config_set_without_a_terminal_or_a_host_says_what_to_do(isolated_homes) -> None:
    asked = run_kirocrew("config", "set", "governance.ceiling", "@x")  # stdin is not a terminal: no prompt
    assert asked.returncode == 0 and "Not restarted" in asked.stdout
    none = run_kirocrew("config", "set", "governance.ceiling", "@y", "--restart")
    assert none.returncode == 0, none.stderr
    assert "No kirocrew host is running" in none.stdout
    quiet = run_kirocrew("config", "set", "gateway.port", "7400", "--restart")
    assert quiet.returncode == 0 and quiet.stdout.strip() == "gateway.port = 7400"  # not a key sessions load


def probe_status(done: Any) -> dict[str, Any]:
    assert done.returncode in (0, 1), done.stderr
    return next(c for c in json.loads(done.stdout) if c["check"] == "mcp.probe-status")


def test_doctor_reports_the_running_hosts_live_probe_results(isolated_homes) -> None:
    argv = stdio_server_argv()
    write_crew_store({"echo": {"command": argv[0], "args": argv[1:]}, "broken": {"command": "/nonexistent/server"}})
    with running_host(dict(os.environ)):
        host_settled()
        before = probe_status(run_kirocrew("doctor", "--json"))
        assert "no probe results in the running host" in before["summary"]
        assert call("GET", "/api/mcp/probe")["servers"]  # reading the results starts no probe ...
        assert "no probe results" in probe_status(run_kirocrew("doctor", "--json"))["summary"]
        probed = {r["name"]: r["status"] for r in call("POST", "/api/mcp/probe", {"all": True})["servers"]}
        assert (probed["echo"], probed["broken"]) == ("ok", "error")
        after = probe_status(run_kirocrew("doctor", "--json"))
        assert after["status"] == "warn"
        failed = f"1 of {len(probed)} MCP servers failed their last probe in the running host"
        assert after["summary"].startswith(failed)
        assert "broken: error: command not found" in after["detail"]
    assert running_host_url() is None


def test_in_a_terminal_config_set_asks_before_restarting(isolated_homes) -> None:
    import subprocess

    from kirocrew_testing.fixtures import kirocrew_argv

    primary, terminal = os.openpty()
    try:
        process = subprocess.Popen(kirocrew_argv("config", "set", "governance.ceiling", "@z"), stdin=terminal,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.write(primary, b"y\n")
        out, err = process.communicate(timeout=60)
    finally:
        os.close(primary)
        os.close(terminal)
    assert process.returncode == 0, err
    assert "Restart kirocrew's sessions now (what Apply & Restart" in out
    assert "No kirocrew host is running" in out  # it was asked, and said yes
