"""The dashboard in a real headless Chromium against a real `kirocrew serve` on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kirocrew_core import proc
from kirocrew_testing.requirements import executable

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


@pytest.fixture
def chromium() -> str:
    return executable("chromium", apt="chromium", also=("chromium-browser",))


@pytest.fixture
def sign_in_url(isolated_homes, chromium: str) -> Iterator[str]:
    exe = Path(sys.executable).with_name("kirocrew")
    server = proc.spawn([str(exe), "serve", "--port", "0"], env=dict(os.environ), stdin=proc.DEVNULL,
                        text=True)
    assert server.stdout is not None
    try:
        line = server.stdout.readline().strip()
        assert line.startswith("kirocrew gateway: http://127.0.0.1:"), line
        yield line.removeprefix("kirocrew gateway: ")
    finally:
        proc.terminate(server)


def _dump_dom(chromium: str, url: str, profile: Path) -> str:
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_opening_the_printed_url_signs_the_owner_in_and_shows_plugins_and_doctor(sign_in_url, chromium, tmp_path):
    dom = _dump_dom(chromium, sign_in_url, tmp_path / "profile")
    assert "<h2" in dom and "Doctor" in dom and "Plugins" in dom
    assert "kirocrew-mcp" in dom and "core.homes" in dom


def test_the_bare_address_without_the_token_gets_the_sign_in_page(sign_in_url, chromium, tmp_path):
    bare = sign_in_url.split("?")[0]
    dom = _dump_dom(chromium, bare, tmp_path / "profile")
    assert "kirocrew serve" in dom  # tells the owner how to sign in
    assert "kirocrew-mcp" not in dom
