"""``kirocrew serve --override-origin``: development-only routing, refused off loopback, announced while active."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from kirocrew_core import home
from kirocrew_core.errors import BadInputError
from kirocrew_core.origin_overrides import (
    CODE_BACKGROUND,
    CODE_INVALID,
    CODE_NOT_LOOPBACK,
    CODE_REMOTE_GATEWAY,
    OriginOverrides,
    parse_overrides,
    require_development,
)

READY_TIMEOUT_SECS = 60


def _env() -> dict[str, str]:
    return {**os.environ, "KIROCREW_LOAD_PLUGINS": ""}


@pytest.mark.parametrize("value", [
    "https://mcp.notion.com",                      # no target
    "https://mcp.notion.com/mcp=http://127.0.0.1:1",  # a path, not an origin
    "ftp://mcp.notion.com=http://127.0.0.1:1",
    "https://mcp.notion.com=http://user@127.0.0.1:1",
    "https://mcp.notion.com=http://127.0.0.1:99999",
])
def test_a_malformed_override_is_refused_with_a_stable_code(value: str) -> None:
    with pytest.raises(BadInputError) as refused:
        parse_overrides([value])
    assert refused.value.code == CODE_INVALID


def test_an_override_routes_only_its_own_origin_keeping_path_and_query() -> None:
    overrides = parse_overrides(["https://MCP.notion.com/=http://127.0.0.1:8123"])
    assert overrides.apply("https://mcp.notion.com/mcp?x=1") == "http://127.0.0.1:8123/mcp?x=1"
    assert overrides.apply("https://mcp.linear.app/mcp") == "https://mcp.linear.app/mcp"


@pytest.mark.parametrize(("target", "loopback", "background", "code"), [
    ("http://10.0.0.5:8000", True, False, CODE_NOT_LOOPBACK),
    ("https://mirror.example", True, False, CODE_NOT_LOOPBACK),
    ("http://127.0.0.1:8000", False, False, CODE_REMOTE_GATEWAY),
    ("http://127.0.0.1:8000", True, True, CODE_BACKGROUND),
])
def test_serve_accepts_overrides_only_for_a_loopback_development_gateway(target: str, loopback: bool,
                                                                         background: bool, code: str) -> None:
    overrides = OriginOverrides({"https://mcp.notion.com": target})
    with pytest.raises(BadInputError) as refused:
        require_development(overrides, gateway_loopback=loopback, background=background)
    assert refused.value.code == code
    for fine in ("http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"):
        require_development(OriginOverrides({"https://a.test": fine}), gateway_loopback=True, background=False)


@pytest.mark.parametrize(("args", "code"), [
    (["--override-origin", "https://mcp.notion.com=http://192.0.2.1:80"], CODE_NOT_LOOPBACK),
    (["--override-origin", "nonsense"], CODE_INVALID),
    (["--host", "0.0.0.0", "--allow-remote", "--override-origin", "https://mcp.notion.com=http://127.0.0.1:1"],
     CODE_REMOTE_GATEWAY),
    (["--background", "--override-origin", "https://mcp.notion.com=http://127.0.0.1:1"], CODE_BACKGROUND),
])
def test_serve_refuses_a_bad_override_with_exit_2_before_setting_anything_up(kirocrew: Any, args: list[str],
                                                                             code: str) -> None:
    result = kirocrew("serve", "--port", "0", *args, env=_env())
    assert result.returncode == 2, result.stderr
    assert f"error[{code}]" in result.stderr
    assert result.stdout == ""
    assert not home.gateway_token_file().exists()


def test_an_active_override_is_announced_on_stderr_and_in_every_page_header(isolated_homes: Any,
                                                                           tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("kirocrew")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core"]
    stderr_path = tmp_path / "serve.stderr"
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen([*argv, "serve", "--port", "0", "--override-origin",
                                 "https://mcp.notion.com=http://127.0.0.1:8123"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True, env=_env())
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_SECS)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("kirocrew gateway: http://127.0.0.1:"), stderr_path.read_text()
        assert ("kirocrew: DEVELOPMENT: --override-origin: requests for https://mcp.notion.com go to "
                "http://127.0.0.1:8123") in stderr_path.read_text()
        url = line.removeprefix("kirocrew gateway: ").strip()
        with httpx.Client(follow_redirects=True, timeout=30) as client:
            page = client.get(url)
        assert page.status_code == 200
        assert 'class="override-banner" role="status"' in page.text
        assert "Requests for <code>https://mcp.notion.com</code> go to <code>http://127.0.0.1:8123</code>" in page.text
    finally:
        proc.terminate()
        proc.communicate(timeout=60)  # reaps it and closes its stdout pipe
