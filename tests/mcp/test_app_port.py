"""The backend's live port: counted only while something accepts a connection on it (real sockets on 127.0.0.1)."""

from __future__ import annotations

import json
import socket

import pytest

from kirocrew_core import home
from kirocrew_mcp.app_manifest import load_manifest
from kirocrew_mcp.app_port import live_port


def manifest_with(backend: dict[str, object], url: str = "http://127.0.0.1:{port}/mcp"):
    folder = home.apps_dir() / "notes"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({
        "manifestVersion": 1, "name": "notes", "mcpServers": {"web": {"url": url}}, "backend": backend}))
    return load_manifest("notes")


def port_file(text: str) -> None:
    path = home.user_home() / ".notes" / "port"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_port_file_naming_a_listening_backend_gives_its_port():
    with socket.socket() as backend:
        backend.bind(("127.0.0.1", 0))
        backend.listen()
        port = backend.getsockname()[1]
        port_file(f" {port}\n")
        assert live_port(manifest_with({"portFile": "~/.notes/port"})).port == port


def test_a_port_file_a_crashed_backend_left_behind_gives_no_port():
    with socket.socket() as gone:
        gone.bind(("127.0.0.1", 0))
        port = gone.getsockname()[1]  # never listened, now closed
    port_file(str(port))
    lookup = live_port(manifest_with({"portFile": "~/.notes/port"}))
    assert lookup.port is None and f"nothing listens on 127.0.0.1:{port}" in lookup.reason


@pytest.mark.parametrize("content", ["", "http", "0", "70000", "1" * 100])
def test_a_port_file_without_a_port_number_gives_no_port(content):
    port_file(content)
    lookup = live_port(manifest_with({"portFile": "~/.notes/port"}))
    assert lookup.port is None and "does not hold a port number" in lookup.reason


def test_a_port_file_that_is_a_fifo_is_never_waited_on():
    import os

    path = home.user_home() / ".notes" / "port"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    lookup = live_port(manifest_with({"portFile": "~/.notes/port"}))
    assert lookup.port is None and "not a regular file" in lookup.reason
