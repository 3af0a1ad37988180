"""``kirocrew dashboard`` and ``kirocrew host status|stop`` against real hosts."""

from __future__ import annotations

import json
from typing import Any

import httpx
from kirocrew_testing.fixtures import run_kirocrew


def test_with_no_host_status_says_so_and_dashboard_no_start_refuses(isolated_homes: Any) -> None:
    status = run_kirocrew("host", "status")
    assert status.returncode == 1 and "no kirocrew host runs" in status.stdout
    assert json.loads(run_kirocrew("host", "status", "--json").stdout) is None
    refused = run_kirocrew("dashboard", "--no-start")
    assert refused.returncode == 1 and "error[host_unavailable]" in refused.stderr
    stopped = run_kirocrew("host", "stop")
    assert stopped.returncode == 0 and "no kirocrew host runs" in stopped.stdout


def test_dashboard_starts_a_host_whose_sign_in_url_works_and_host_stop_ends_it(isolated_homes: Any) -> None:
    shown = run_kirocrew("dashboard")
    assert shown.returncode == 0, shown.stderr
    url = shown.stdout.strip()
    token = (isolated_homes.crew_home / "gateway.token").read_text().strip()
    assert url.startswith("http://127.0.0.1:") and url.endswith(f"/?token={token}")
    with httpx.Client(follow_redirects=True, timeout=30) as browser:
        page = browser.get(url)
        assert page.status_code == 200 and "kirocrew" in page.text.lower()
        assert browser.get(url.split("?")[0] + "api/health").json()["ok"] is True  # signed in by the cookie

    status = json.loads(run_kirocrew("host", "status", "--json").stdout)
    assert status["background"] is True and status["url"] == url.split("?")[0]
    text = run_kirocrew("host", "status")
    assert text.returncode == 0 and f"host pid {status['pid']} (started on demand" in text.stdout
    assert token not in text.stdout  # status never shows the token

    again = run_kirocrew("dashboard", "--no-start")
    assert again.stdout.strip() == url  # the same host answers
    foreground = run_kirocrew("serve", "--port", "0")
    assert foreground.returncode == 1 and f"pid {status['pid']}" in foreground.stderr

    stopped = run_kirocrew("host", "stop")
    assert stopped.returncode == 0 and f"stopped the kirocrew host (pid {status['pid']})" in stopped.stdout
    assert run_kirocrew("host", "status").returncode == 1
